"""Wall and CPU time of the automatic mixed-precision search on the PP-OCR models.

    python bench/amp.py [--samples 16] [--target 0.01] [--workers N]        # cls: BF16 -> BFP16
    python bench/amp.py --model rec [--samples 16] [--target T] [--eval-lines 200] [--whole-runs]

cls: high precision BF16 everywhere, candidates Conv/ConvTranspose/Gemm/MatMul flipped to BFP16
while the mean L2 of the output stays within --target (default 0.01). The reference tool's figure
(157 s on the project machine) is the issue's; the goal is at most half.

rec: PP-OCRv4 rec, A16W8 -> A8W8. Without --target the target is the geometric midpoint of the
all-A16W8 and all-A8W8 L2, measured first on models built by the normal pipeline (not timed). The
CER of the float, all-A16W8, final and all-A8W8 models on --eval-lines other lines (seed 3) comes
from the search's task_metric hook (timed separately: the "task metric" phase). --whole-runs runs
every candidate through the whole switch model (the search before incremental runs).

Data: rendered text lines (seed 1). The machine is shared: the load average is printed with the
wall and CPU times.
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the bench's session helper
import dataclasses
import argparse
import logging
import math
import os
import time

import numpy as np

from onnxptq import get_preset
from onnxptq.algorithms import mixed_precision
from onnxptq.algorithms.mixed_precision import L2Target, auto_mixed_precision
from testkit import ocr
from testkit.models import model_path

REFERENCE_S = 157.0
LAYER_OPS = mixed_precision.DEFAULT_OP_TYPES


def _cls(args) -> None:
    images, _ = ocr.render_cls(args.samples, seed=1)
    feeds = [{"x": images[i : i + 1]} for i in range(args.samples)]
    high = get_preset("BF16")
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    target = 0.01 if args.target is None else args.target
    t = time.perf_counter()
    result = auto_mixed_precision(str(model_path("cls")), high, "BFP16", feeds, L2Target(target), workers=args.workers)
    wall = time.perf_counter() - t
    r = result.report
    print(f"| model | search | samples | workers | evaluations | layers BFP16 | L2 all BF16 / all BFP16 / final (target) | wall s | vs reference 157 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| PP-OCR cls | BF16 -> BFP16, L2 | {r.samples} | {r.workers} | {r.evaluations} | {len(r.flipped)}/{len(r.layers)} | "
          f"{r.baseline:.5f} / {r.all_low:.5f} / {r.final_metric:.5f} ({target}) | {wall:.1f} | {wall / REFERENCE_S:.2f}x |")
    print("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in r.timings.items()) + f"; cores {os.cpu_count()}")


def _rec(args) -> None:
    import onnx
    from onnxptq.pipeline.build import build_model
    from onnxptq.pipeline.calibrate import calibrate_once

    path = str(model_path("rec"))
    chars = ocr.load_characters(onnx.load(path))
    lines, _ = ocr.render_lines(args.samples, seed=1, characters=chars)
    feeds = [{"x": lines[i : i + 1]} for i in range(args.samples)]
    images, texts = ocr.render_lines(args.eval_lines, seed=3, characters=chars)
    high = get_preset("A16W8")
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    low = get_preset("A8W8")
    pair = (low.activation, low.weight)

    def session(model, basic=False):
        return _common.session(model, 1, optimization="basic" if basic else "all")

    target = args.target
    if target is None:  # the geometric midpoint of the two extremes, measured on built models
        cal = calibrate_once(path, high, feeds, eval_samples=args.samples,
                             also_for=[high.replace(op_type_overrides={op: pair for op in LAYER_OPS})])
        ref = session(cal.prepared, True).run(None, {"x": lines})[0].astype(np.float64)

        def l2(cfg):
            got = session(build_model(cal, cfg)[2], True).run(None, {"x": lines})[0]
            return float(np.mean([np.linalg.norm((r - q).ravel()) for r, q in zip(ref, got)]))

        target = math.sqrt(l2(high) * l2(high.replace(op_type_overrides={op: pair for op in LAYER_OPS})))

    task_cpu = [0.0]

    def cer(model):
        c0 = time.process_time()
        score = ocr.rec_cer(session(model), images, texts, characters=chars)
        task_cpu[0] += time.process_time() - c0
        return score

    mixed_precision.INCREMENTAL = not args.whole_runs
    load = os.getloadavg()
    t, c = time.perf_counter(), time.process_time()
    result = auto_mixed_precision(path, high, low, feeds, L2Target(target), workers=args.workers, task_metric=cer)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    r = result.report
    task = r.timings.get("task metric", 0.0)
    e = r.task_metric
    print("| model | search | runs | samples | workers | evaluations | layers A8W8 | L2 all A16W8 / all A8W8 / final (target) | "
          f"CER float / A16W8 / final / A8W8 ({args.eval_lines} lines) | search wall s | search CPU s | load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    print(f"| PP-OCRv4 rec | A16W8 -> A8W8, L2 | {'whole' if args.whole_runs else 'incremental'} | {r.samples} | {r.workers} | "
          f"{r.evaluations} | {len(r.flipped)}/{len(r.layers)} | {r.baseline:.5f} / {r.all_low:.5f} / {r.final_metric:.5f} "
          f"({target:.5f}) | {e['float']:.4f} / {e['all_high']:.4f} / {e['final']:.4f} / {e['all_low']:.4f} | "
          f"{r.timings['total'] - task:.1f} | {r.timings['cpu'] - task_cpu[0]:.1f} | {load[0]:.1f} -> {os.getloadavg()[0]:.1f} |")
    print("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in r.timings.items())
          + f"; whole call {wall:.1f} s wall, {cpu:.1f} s CPU; task metric CPU {task_cpu[0]:.1f} s; cores {os.cpu_count()}")
    print("layers left in A16W8: " + ", ".join(layer.name for layer in r.layers if layer.precision == "high"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("cls", "rec"), default="cls")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--target", type=float, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--eval-lines", type=int, default=200, help="rec: lines the CER is measured on")
    parser.add_argument("--whole-runs", action="store_true", help="rec: no incremental candidate runs")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    (_rec if args.model == "rec" else _cls)(args)


if __name__ == "__main__":
    main()
