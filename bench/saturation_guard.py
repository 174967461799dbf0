"""A8W8 with and without the U8S8 saturation guard (QuantConfig.saturation_guard) on the shipped PP-OCR models.

    PYTHONPATH=src:. python bench/saturation_guard.py [--calib 64] [--eval 200]

Prints whether this machine's onnxruntime saturates (the probe), then for PP-OCRv4 rec (CER) and PP-OCR
cls (accuracy), repair off (the preset's model itself): float, and three weight forms of dense
Conv/MatMul/Gemm — ``int8`` (guard "off": onnxruntime's U8S8 kernels), ``uint8`` (guard "on": the same
values stored as uint8, U8U8 kernels) and ``int8 7-bit`` (onnxruntime's own advice, ``reduce_range``) — each scored as onnxruntime
runs it (fused integer kernels) and with no graph optimisation (the Q/DQ model computed in float: what a
kernel that adds in int32 gives), with the output cosine against float the floor reads, and the CPU time
of one-thread inference over the evaluation images relative to float (best of 3, alternating).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from onnxptq import get_preset, quantize  # noqa: E402
from onnxptq.pipeline.runtime import integer_gemm_saturates  # noqa: E402
from testkit import ocr  # noqa: E402
from testkit.models import model_path  # noqa: E402

FORMS = {"int8 (guard off)": {"saturation_guard": "off"},
         "uint8 (guard on)": {"saturation_guard": "on"},
         "int8 7-bit (reduce_range)": {"saturation_guard": "off", "reduce_range": True}}


def _session(model: onnx.ModelProto, fused: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if fused
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _cpu_seconds(session: ort.InferenceSession, images: np.ndarray) -> float:
    start = time.process_time()
    for i in range(0, len(images), 8):
        session.run(None, {"x": images[i : i + 8]})
    return time.process_time() - start


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
    cases = [("PP-OCRv4 rec", "CER", rec, rec_calib, rec_images,
              lambda s: ocr.rec_cer(s, rec_images, rec_texts, characters=chars)),
             ("PP-OCR cls", "accuracy", cls, cls_calib, cls_images, lambda s: ocr.cls_accuracy(s, cls_images, cls_labels))]
    print("| model | metric | weights | as run (fused kernels) | Q/DQ in float | output cosine (floor's) | CPU ÷ float, 1 thread |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, metric, path, calib, images, score in cases:
        float_model = onnx.load(path)
        models = {}
        cosines = {}
        for form, change in FORMS.items():
            cfg = get_preset("A8W8").replace(repair=False, saturation_guard=change["saturation_guard"])
            if change.get("reduce_range"):
                cfg = cfg.replace(weight=cfg.weight.with_(reduce_range=True))
            cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
            result = quantize(path, cfg, [{"x": calib[i : i + 8]} for i in range(0, len(calib), 8)])
            models[form] = result.model
            cosines[form] = min(o.cosine for o in result.floor.outputs.values()) if result.floor else float("nan")
        sessions = {"float": _session(float_model, True), **{f: _session(m, True) for f, m in models.items()}}
        best = {k: float("inf") for k in sessions}
        for _ in range(3):
            for key, session in sessions.items():
                best[key] = min(best[key], _cpu_seconds(session, images))
        print(f"| {name} | {metric} | float | {score(sessions['float']):.4f} | | | 1.00 |")
        for form, model in models.items():
            print(f"| {name} | {metric} | {form} | {score(sessions[form]):.4f} | {score(_session(model, False)):.4f} "
                  f"| {cosines[form]:.4f} | {best[form] / best['float']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
