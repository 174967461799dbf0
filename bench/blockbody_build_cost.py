"""What building a model's activation-quantizer bodies costs, cold and cached (issue 26 item 1, blockq19).

emit asks ``onnx_ops.build_qdq`` for one function per block-quantized activation; each distinct body is built
once per process (``onnx_ops.bfp._function_once``, ``onnx_ops.mx``), so a quantize in a fresh process (the CLI, and
each preset of ``bench/quantize_stages.py --rounds 1``) pays every body's construction: the ``bodies`` column of
``quantize_stages.py --where``. This script quantizes ``MODEL`` once with ``PRESET`` (repair off), records emit's
``build_qdq`` calls, and replays them ``--reps`` times: **cold** (the body caches cleared first: what a process
pays) and **cached** (the same calls again: the per-call part), CPU seconds; ``--prof`` adds a cProfile of one
cold replay.

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/blockbody_build_cost.py cls MX9 --samples 8
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import cProfile
import logging
import pstats
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("preset")
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prof", action="store_true")
    args = ap.parse_args()

    import quantize_stages

    import onnxptq.pipeline.emit as emit
    from onnxptq import quantize
    from onnxptq.onnx_ops import bfp, mx

    logging.disable(logging.WARNING)
    path, data = quantize_stages._data(args.model, args.samples)
    calls: list[tuple[tuple, dict[str, Any]]] = []
    build = emit.build_qdq

    def recorded(*a: Any, **k: Any) -> Any:
        calls.append((a, k))
        return build(*a, **k)

    emit.build_qdq = recorded
    try:
        quantize(path, quantize_stages.quiet_config(args.preset, repair=False), data)
    finally:
        emit.build_qdq = build

    def clear() -> None:
        bfp._cached_function.cache_clear()
        mx._cached_function.cache_clear()

    def replay() -> float:
        t = time.process_time()
        for a, k in calls:
            build(*a, **k)
        return time.process_time() - t

    cold, cached = [], []
    for _ in range(args.reps):
        clear()
        cold.append(replay())
        cached.append(replay())
    distinct = bfp._cached_function.cache_info().currsize + mx._cached_function.cache_info().currsize
    print(f"{args.model} {args.preset}: {len(calls)} calls, {distinct} distinct bodies; CPU s best of {args.reps}: "
          f"cold {min(cold):.4f}, cached {min(cached):.4f}")
    if args.prof:
        clear()
        pr = cProfile.Profile()
        pr.enable()
        replay()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
