"""BF16 and FP16 latency ÷ float on the zoo's models with the smallest calls (issue 26 item 3, quantcpu16).

The zoo's worst BF16 cells are decoders whose call takes well under a millisecond, where a Cast pair
per quantized tensor is a large share of the call. This script

1. times every zoo model's float call (1 thread, the first 4 held-out feeds) and keeps the ``--count``
   smallest;
2. quantizes each with ``--presets`` (defaults, as the zoo does; files kept in ``--workdir``);
3. times float and each preset's file in turn, feed by feed, ``--rounds`` rounds of ``--runs`` passes,
   CPU seconds (``time.process_time``), and prints per model and preset the best round's µs per
   call and its ratio to float's best, the median of the per-round ratios, and the Cast nodes'
   share of the kernel time (onnxruntime's profile, ``--profile``).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/float16_small_calls.py --workdir /tmp/f16 --profile
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

import _common  # noqa: F401 - the repository root (testkit/) on sys.path

from testkit import zoo  # noqa: E402


def _session(path: str, profile: bool = False) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_profiling = profile
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _feeds(model: Any, session: Any) -> list[dict[str, np.ndarray]]:
    names = {i.name for i in session.get_inputs()}
    return [{k: v for k, v in f.items() if k in names} for f in model.samples("heldout")[:4]]


def _call_us(session: Any, feeds: list[dict[str, np.ndarray]], runs: int) -> float:
    t = time.process_time()
    for _ in range(runs):
        for f in feeds:
            session.run(None, f)
    return (time.process_time() - t) / runs / len(feeds) * 1e6


def smallest(count: int) -> list[tuple[str, float]]:
    """The ``count`` zoo models with the smallest float call (µs, best of 3 passes of 10)."""
    out = []
    for m in zoo.ZOO:
        try:
            s = _session(str(m.path()))
            feeds = _feeds(m, s)
            for f in feeds:
                s.run(None, f)
            out.append((m.name, min(_call_us(s, feeds, 10) for _ in range(3))))
        except Exception as exc:  # noqa: BLE001 - a model that cannot run here is left out, said so
            print(f"{m.name}: left out ({type(exc).__name__}: {exc})")
    return sorted(out, key=lambda r: r[1])[:count]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--presets", default="BF16,FP16")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--models", help="these zoo models instead of the smallest calls")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="the Cast nodes' share of kernel time per file")
    args = ap.parse_args()
    import logging

    import _common as common
    from onnxptq import quantize
    from onnxptq.config.presets import get_preset

    logging.disable(logging.WARNING)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    presets = args.presets.split(",")
    chosen = [(n, float("nan")) for n in args.models.split(",")] if args.models else smallest(args.count)
    print("load", " ".join(open("/proc/loadavg").read().split()[:3]))
    for name, us in chosen:
        m = zoo.get(name)
        files = {"float": str(m.path())}
        for p in presets:
            out = work / f"{name}_{p}.onnx"
            if not out.exists():
                quantize(m.path(), get_preset(p), m.samples("calibration"), str(out))
            files[p] = str(out)
        sessions = {k: _session(v) for k, v in files.items()}
        feeds = _feeds(m, sessions["float"])
        for s in sessions.values():
            for f in feeds:
                s.run(None, f)
        rounds: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(args.rounds):
            for k, s in sessions.items():
                rounds[k].append(_call_us(s, feeds, args.runs))
        ref = np.array(rounds["float"])
        print(f"{name}: float {min(ref):.1f} µs per call (first pass {us:.1f}), load {open('/proc/loadavg').read().split()[0]}")
        for p in presets:
            v = np.array(rounds[p])
            line = f"  {p:5s} {min(v):8.1f} µs  best ÷ float {min(v) / min(ref):.3f}  median of round ratios {np.median(v / ref):.3f}"
            if args.profile:
                rows, executed = common.profile_ops(_session(files[p], profile=True), feeds, 20)
                total = sum(t for _, t, _ in rows)
                cast = sum(t for op, t, _ in rows if op == "Cast")
                casts = sum(n for op, _, n in rows if op == "Cast")
                line += f"  Cast {100 * cast / total:.0f}% of kernel time ({casts} of {executed} nodes)"
            print(line, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
