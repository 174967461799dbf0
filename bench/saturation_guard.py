"""A8W8 with and without the U8S8 saturation guard (QuantConfig.saturation_guard) on the shipped PP-OCR models.

    PYTHONPATH=src:. python bench/saturation_guard.py [--calib 64] [--eval 200]

Prints whether this machine's onnxruntime saturates (the probe), then for PP-OCRv4 rec (CER) and PP-OCR
cls (accuracy): float, guard "off" (full 8-bit weights) and "on" (7-bit weights of dense Conv/MatMul/Gemm),
each run with onnxruntime's default optimisations (its fused integer kernels) and with none (the Q/DQ
model computed in float: what a kernel that adds in int32 would give).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnxptq import get_preset, quantize  # noqa: E402
from onnxptq.pipeline.runtime import integer_gemm_saturates  # noqa: E402
from testkit import ocr  # noqa: E402
from testkit.models import model_path  # noqa: E402


def _session(path: Path, fused: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if fused
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--eval", type=int, default=200)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print(f"onnxruntime {ort.__version__}: integer GEMM saturates on this machine: {integer_gemm_saturates()}")
    rec = model_path("rec")
    chars = ocr.load_characters(onnx.load(rec))
    rec_calib, _ = ocr.render_lines(args.calib, seed=1, characters=chars)
    rec_images, rec_texts = ocr.render_lines(args.eval, seed=2, characters=chars)
    cls = model_path("cls")
    cls_calib, _ = ocr.render_cls(args.calib, seed=1)
    cls_images, cls_labels = ocr.render_cls(args.eval, seed=2)
    cases = [("PP-OCRv4 rec", "CER", rec, rec_calib, lambda s: ocr.rec_cer(s, rec_images, rec_texts, characters=chars)),
             ("PP-OCR cls", "accuracy", cls, cls_calib, lambda s: ocr.cls_accuracy(s, cls_images, cls_labels))]
    print("| model | metric | float | guard | fused kernels | float Q/DQ |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name, metric, path, calib, score in cases:
            base = score(str(path))
            for guard in ("off", "on"):
                out = Path(tmp) / f"{guard}.onnx"
                cfg = dataclasses.replace(get_preset("A8W8"), saturation_guard=guard)
                quantize(path, cfg, [{"x": calib[i : i + 1]} for i in range(len(calib))], output=out)
                fused, plain = score(_session(out, True)), score(_session(out, False))
                print(f"| {name} | {metric} | {base:.4f} | {guard} | {fused:.4f} | {plain:.4f} |", flush=True)


if __name__ == "__main__":
    main()
