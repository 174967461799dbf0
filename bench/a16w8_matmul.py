"""A16W8 on PP-OCRv4 rec with and without ``graph/passes/exact_int_weights`` (side by side, one process).

Why: onnxruntime 1.32 fuses an int8 weight ``DequantizeLinear`` into ``MatMulNBits`` beside 16-bit
activations and then computes on 8-bit activations; the pass stores such weights as int8 + ``Cast``
+ ``Mul``, which onnxruntime folds to float. This shows what a user of the default session gets:
the MatMulNBits count in the graph onnxruntime runs, the CER on 200 rendered lines (the suite's
``tests/test_quantize_ppocr.py`` data), the output's largest difference from the same file run
with no graph optimisation (what its Q/DQ say), and the 1-thread latency over float's (round-robin
rounds, median of per-round ratios, thread CPU time).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/a16w8_matmul.py [--runs 15]
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path)
import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import onnxptq.pipeline.build as build
from onnxptq import quantize
from onnxptq.config.presets import get_preset
from testkit import ocr, ocr_reference
from testkit.models import model_path


def _session(model: onnx.ModelProto | str, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL, threads: int = 0,
             runs_path: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = so.inter_op_num_threads = threads
    if runs_path:
        so.optimized_model_filepath = runs_path
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    path = str(model_path("rec"))
    ref = ocr_reference.rec_reference(path, 64, 1, 200, 3)
    calib = [{"x": ref["calib"][i:i + 8]} for i in range(0, len(ref["calib"]), 8)]
    config = get_preset("A16W8")
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    pass_on = build.exact_int_weights
    models: dict[str, onnx.ModelProto] = {}
    for label, fn in (("main (DQ -> MatMul)", lambda m: 0), ("exact_int_weights", pass_on)):
        build.exact_int_weights = fn
        models[label] = quantize(path, config, calib).model
    build.exact_int_weights = pass_on
    line = {"x": ref["images"][:1]}
    sessions = {"float": _session(path, threads=1)}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, model in models.items():
            runs = str(Path(tmp) / "runs.onnx")
            default = _session(model, runs_path=runs)
            nbits = sum(n.op_type == "MatMulNBits" for n in onnx.load(runs).graph.node)
            plain = _session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
            diff = max(float(np.abs(default.run(None, {"x": ref["images"][i:i + 8]})[0] - plain.run(None, {"x": ref["images"][i:i + 8]})[0]).max())
                       for i in range(0, 32, 8))
            cer = ocr.rec_cer(default, ref["images"], ref["texts"], characters=ref["chars"])
            rows[label] = [nbits, cer, diff]
            sessions[label] = _session(model, threads=1)
    ratios: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(a.runs):
        cpu = {}
        for label, s in sessions.items():
            s.run(None, line)
            t = time.thread_time()
            for _ in range(3):
                s.run(None, line)
            cpu[label] = time.thread_time() - t
        for label in models:
            ratios[label].append(cpu[label] / cpu["float"])
    print(f"float CER {ref['float']:.4f}")
    print("| A16W8 file | MatMulNBits run | CER (200 lines) | max |default − unoptimised| | latency × float (1 thread) |")
    print("|---|---:|---:|---:|---:|")
    for label, (nbits, cer, diff) in rows.items():
        print(f"| {label} | {nbits} | {cer:.4f} | {diff:.2e} | {np.median(ratios[label]):.2f} |")


if __name__ == "__main__":
    main()
