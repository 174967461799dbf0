"""The floor's post-NMS rows reading (analysis/nms_rows.py) of a RetinaFace file beside the bench's face F1.

What it shows: the output the structure finds (its NMS, box and score columns, the NMS's threshold), and on fresh
photos (bench/newmodels.py's ``retinaface_feeds``, seed 1000) the reading's F1 at the score column's thresholds,
its matched rows' cosine and the feeds whose row count moved, against ``retinaface_faces`` (package's predict:
score >= 0.95, F1 at IoU 0.5 per photo, mean) and the old reading (the rows as one vector: their cosine where the
shapes agree).

    NEWMODELS30_SRC=/work/cache/newmodels30/src PYTHONPATH=src:.:bench python bench/nms_rows_probe.py QUANTIZED.onnx [--n 16]
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx

import newmodels as nm
from onnxptq.analysis.nms_rows import judge_nms_rows, nms_row_outputs
from testkit import zoo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("quantized")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--needed", type=int, default=20)
    args = ap.parse_args()
    path = nm.MODELS["retinaface_mbv2"][0]
    found = nms_row_outputs(onnx.load(path, load_external_data=False))
    print("found:", found)
    feeds = nm.retinaface_feeds(args.n, 1000)
    ref, test = zoo.session_runner(path), zoo.session_runner(args.quantized)
    r, g = [ref(f)[0] for f in feeds], [test(f)[0] for f in feeds]
    reading = judge_nms_rows(r, g, found["Identity:0"], args.needed)
    print(reading.describe(), "| judged:", reading.judged)
    same = [(a, b) for a, b in zip(r, g) if a.shape == b.shape and a.size]
    vec = [float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in same]
    print(f"as one vector: {len(r) - len(same)} feeds of another shape or empty; cosine min {min(vec):.4f} over the rest")
    print("bench F1 (predict, >= 0.95):", round(nm.retinaface_faces(ref, test, feeds, None), 4))


if __name__ == "__main__":
    main()
