"""Detection F1 vs float per preset on mk8dx-table-reader 0.6.5's YOLO11n player detector (issue 20).

    python bench/yolo.py [--count 100] [--calib 32] [--presets A8W8 ...] [--no-guard]
                         [--quantize-postprocessing] [--ort]

Needs the export of ``bench/yolo_export.py`` (run once with a separate venv's python) in
``~/.cache/onnxptq/yolo/``: ``detectPlayers.onnx``, ``eval.npy``, ``calib.npy``; the main
environment needs neither ultralytics nor the package. Each quantized model's detections (the
package's confidence 0.6, Ultralytics' class-aware NMS at IoU 0.7, :mod:`testkit.detect`)
are matched against the float model's on the same tables (IoU ≥ 0.5, same class).
``--ort`` adds onnxruntime's ``quantize_static`` (QDQ, U8S8, per-channel weights, MinMax).
"""

from __future__ import annotations

import _common  # noqa: F401  (puts the repository root on sys.path: testkit)
import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.sessions import open_session
from testkit import detect

CACHE = Path(os.path.expanduser("~/.cache/onnxptq/yolo"))
PRESETS = ["A8W8", "A8W8_PT", "A16W8", "BF16", "BFP16", "MX9", "MXINT8"]


def config(name: str, guard: bool, tail: bool):
    """The preset (``A8W8_PT``: A8W8 with per-tensor weights, as the reference tool's A8W8)."""
    cfg = get_preset(name.removesuffix("_PT"))
    if name.endswith("_PT"):
        cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
    return cfg.replace(range_guard=guard, quantize_postprocessing=tail)


def detections(model, images: np.ndarray) -> list[detect.Detections]:
    session = open_session(model)
    name = session.get_inputs()[0].name
    return [detect.decode(session.run(None, {name: images[i:i + 1]})[0]) for i in range(len(images))]


def ort_quantize(model: str, calib: np.ndarray, out: str) -> None:
    """onnxruntime's own static quantization: QDQ, U8S8, per-channel weights, MinMax."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter([{"images": calib[i:i + 1]} for i in range(len(calib))])

        def get_next(self):
            return next(self.feeds, None)

    pre = out + ".pre.onnx"
    quant_pre_process(model, pre, skip_symbolic_shape=True)
    quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    os.remove(pre)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--calib", type=int, default=32)
    parser.add_argument("--presets", nargs="*", default=PRESETS)
    parser.add_argument("--no-guard", action="store_true", help="range guard off (to compare)")
    parser.add_argument("--quantize-postprocessing", action="store_true",
                        help="quantize the decode tail too (float by default), where the Concat mismatch lies")
    parser.add_argument("--ort", action="store_true", help="also onnxruntime quantize_static")
    args = parser.parse_args()
    model = str(CACHE / "detectPlayers.onnx")
    images = np.load(CACHE / "eval.npy", mmap_mode="r")[:args.count]
    calib = np.ascontiguousarray(np.load(CACHE / "calib.npy", mmap_mode="r")[:args.calib])
    images = np.ascontiguousarray(images)
    floats = detections(model, images)
    print(f"float: {sum(len(d) for d in floats) / len(floats):.1f} boxes per table on {len(floats)} tables")
    print("| quantizer | detection F1 vs float | guard actions | seconds |")
    print("|---|---|---|---|")
    data = [{"images": calib[i:i + 1]} for i in range(len(calib))]
    for preset in args.presets:
        start = time.perf_counter()
        result = quantize(model, config(preset, not args.no_guard, args.quantize_postprocessing), data=data)
        got = detections(result.model, images)
        actions: dict[str, int] = {}
        for decision in result.plan.guard.values():
            actions[decision["action"]] = actions.get(decision["action"], 0) + 1
        print(f"| {preset} | {detect.f1(floats, got):.3f} | {actions or '-'} | {time.perf_counter() - start:.0f} |",
              flush=True)
    if args.ort:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "ort.onnx")
            start = time.perf_counter()
            ort_quantize(model, calib, out)
            got = detections(out, images)
            print(f"| onnxruntime quantize_static QDQ U8S8 per-channel | {detect.f1(floats, got):.3f} | - | "
                  f"{time.perf_counter() - start:.0f} |", flush=True)


if __name__ == "__main__":
    main()
