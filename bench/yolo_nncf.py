"""NNCF's int8 post-training quantization of the YOLO11n player detector, for bench/RESULTS.md (issue 20).

Run with a SEPARATE venv's python, so NNCF cannot change our environment::

    python -m venv --system-site-packages /work/venv-nncf
    /work/venv-nncf/bin/pip install nncf
    PYTHONPATH=src /work/venv-nncf/bin/python bench/yolo_nncf.py [--count 30] [--calib 16]

Two runs on ``bench/yolo_export.py``'s model and images: ``nncf.quantize`` as a new user calls it
(defaults), and with the ignored scope of NNCF's own YOLOv8 example (the decode's Mul/Sub/Sigmoid
ops and the DFL sub-graph left float, ``preset=MIXED``). Detection F1 vs float as bench/yolo.py.
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import os
import time
from pathlib import Path

import numpy as np
import onnx

from onnxptq.sessions import open_session
from testkit import detect

CACHE = Path(os.path.expanduser("~/.cache/onnxptq/yolo"))


def detections(model, images: np.ndarray) -> list[detect.Detections]:
    session = open_session(model)
    name = session.get_inputs()[0].name
    return [detect.decode(session.run(None, {name: images[i:i + 1]})[0]) for i in range(len(images))]


def main() -> None:
    import nncf

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--calib", type=int, default=16)
    args = parser.parse_args()
    model = onnx.load(CACHE / "detectPlayers.onnx")
    images = np.ascontiguousarray(np.load(CACHE / "eval.npy", mmap_mode="r")[:args.count])
    calib = np.ascontiguousarray(np.load(CACHE / "calib.npy", mmap_mode="r")[:args.calib])
    floats = detections(model, images)
    dataset = nncf.Dataset([{"images": calib[i:i + 1]} for i in range(len(calib))])
    dfl = [n.name for n in model.graph.node if "/dfl/" in n.name or n.name.startswith("/model.23/") and
           n.op_type in ("Sub", "Add", "Div", "Mul", "Concat", "Slice", "Sigmoid")]
    runs = {
        "NNCF nncf.quantize, defaults": {},
        "NNCF, its YOLOv8 example's ignored scope (decode Mul/Sub/Sigmoid, DFL float), preset MIXED": {
            "preset": nncf.QuantizationPreset.MIXED,
            "ignored_scope": nncf.IgnoredScope(types=["Mul", "Sub", "Sigmoid"], names=dfl, validate=False)},
    }
    print("| quantizer | detection F1 vs float | seconds |")
    print("|---|---|---|")
    for label, kwargs in runs.items():
        start = time.perf_counter()
        try:
            quantized = nncf.quantize(model, dataset, subset_size=len(calib), **kwargs)
            score = f"{detect.f1(floats, detections(quantized, images)):.3f}"
        except Exception as exc:  # noqa: BLE001 - a failure is a result for the table
            score = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
        print(f"| {label} | {score} | {time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
