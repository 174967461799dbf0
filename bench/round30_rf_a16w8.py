"""Reproduce round 30's raw exception: RetinaFace (retinaface 1.1.1, tf2onnx) under A16W8 fails in quantize's own
verification (RESULTS.md, newmodels30, section 3): the quantized graph's `RetinaFaceModel/tf_op_layer_mul_12/mul_12`
(prior widths/heights x exp(box regression)) broadcasts 19950 by 20218 rows. Calibrating on photos of one size only
(608 x 800, as RetinaFace.predict pads them) fails the same way, so no second input size is needed.

    NEWMODELS30_SRC=/work/cache/newmodels30/src PYTHONPATH=src:.:bench python bench/round30_rf_a16w8.py
"""
from __future__ import annotations

import collections

import newmodels as nm
import onnxptq


def main() -> None:
    feeds = nm.retinaface_feeds(24, 1)
    shapes = collections.Counter(f["x:0"].shape for f in feeds)
    one = shapes.most_common(1)[0][0]
    print("calibration shapes", dict(shapes), "- using", one)
    try:
        onnxptq.quantize(nm.MODELS["retinaface_mbv2"][0], "A16W8", data=[f for f in feeds if f["x:0"].shape == one],
                         output="/tmp/retinaface_a16w8.onnx")
        print("quantized without error")
    except Exception as exc:  # noqa: BLE001 - the finding is the exception
        print(f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:400]}")


if __name__ == "__main__":
    main()
