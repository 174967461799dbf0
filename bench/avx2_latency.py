"""What the U8S8 saturation guard costs in 1-thread inference time: the same A8W8 bytes with int8 and uint8 weights.

Why: the guard (graph/passes/unsigned_gemm_weights.py) moves onnxruntime from its U8S8 to its U8U8 integer
kernels on x86 without VNNI, which widen both operands to 16 bits; bench/avx2_zoo.py's latency column is
measured under a shared machine's load and moves by 2× between runs. Here one A8W8 build per model (guard
off, repair off) is timed three ways in one process, alternating feed by feed so a load change hits all
alike, in CPU seconds (``time.process_time``), best of ``--passes``: float, guard off (int8 weights), and
the same bytes with the pass applied (what "auto" delivers here).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/avx2_latency.py --models magika,orinet,...
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402,F401

from avx2_zoo import _runner, load_case  # noqa: E402


def cpu_times(runners: list, feeds: list, passes: int) -> list[float]:
    """Best-of-``passes`` CPU seconds of each runner over ``feeds``, the runners alternating per feed."""
    best = [float("inf")] * len(runners)
    for run in runners:  # warm-up: first-run allocations and prepacking out of the timing
        run(feeds[0])
    for _ in range(passes):
        spent = [0.0] * len(runners)
        for feed in feeds:
            for i, run in enumerate(runners):
                t = time.process_time()
                run(feed)
                spent[i] += time.process_time() - t
        best = [min(b, s) for b, s in zip(best, spent)]
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--feeds", type=int, default=4)
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    import onnxptq
    from onnxptq.config.presets import get_preset
    from onnxptq.graph.passes.unsigned_gemm_weights import unsigned_gemm_weights

    print("| model | weights stored u8 | float CPU s | A8W8 int8 weights ÷ float | A8W8 uint8 weights (guard) ÷ float | guard ÷ no guard | load |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        case = load_case(name, 12, args.feeds)
        cfg = dataclasses.replace(get_preset("A8W8"), saturation_guard="off", repair=False)
        off = onnxptq.quantize(str(case.path), cfg, data=list(case.calib)).model
        on = copy.deepcopy(off)
        n = unsigned_gemm_weights(on)
        f, a, b = cpu_times([_runner(case.path), _runner(off), _runner(on)], case.held[: args.feeds], args.passes)
        print(f"| {name} | {n} | {f:.3f} | {a / f:.2f} | {b / f:.2f} | {b / a:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
