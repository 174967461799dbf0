"""Wall time of the automatic BF16 + BFP16 mixed-precision search on PP-OCR cls.

    python bench/amp.py [--samples 16] [--target 0.01] [--workers N]

High precision BF16 everywhere, candidates Conv/ConvTranspose/Gemm/MatMul flipped to BFP16 while
the mean L2 of the output stays within --target. Data: rendered text lines (seed 1). The reference
tool's figure (157 s on the project machine) is the issue's; the goal is at most half.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

from onnxptq import get_preset
from onnxptq.algorithms.mixed_precision import L2Target, auto_mixed_precision
from onnxptq.testing import ocr
from onnxptq.testing.models import model_path

REFERENCE_S = 157.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--target", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    images, _ = ocr.render_cls(args.samples, seed=1)
    feeds = [{"x": images[i : i + 1]} for i in range(args.samples)]
    high = get_preset("BF16")
    high.calibration.progress = False
    t = time.perf_counter()
    result = auto_mixed_precision(str(model_path("cls")), high, "BFP16", feeds, L2Target(args.target), workers=args.workers)
    wall = time.perf_counter() - t
    r = result.report
    print(f"| model | search | samples | workers | evaluations | layers BFP16 | L2 all BF16 / all BFP16 / final (target) | wall s | vs reference 157 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| PP-OCR cls | BF16 -> BFP16, L2 | {r.samples} | {r.workers} | {r.evaluations} | {len(r.flipped)}/{len(r.layers)} | "
          f"{r.baseline:.5f} / {r.all_low:.5f} / {r.final_metric:.5f} ({args.target}) | {wall:.1f} | {wall / REFERENCE_S:.2f}x |")
    print("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in r.timings.items()) + f"; cores {os.cpu_count()}")


if __name__ == "__main__":
    main()
