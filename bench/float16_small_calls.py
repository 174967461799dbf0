"""BF16 and FP16 latency ÷ float on the zoo's models with the smallest calls (issue 26 item 3, quantcpu16).

The zoo's worst BF16 cells are decoders whose call takes well under a millisecond, where a Cast pair
per quantized tensor is a large share of the call. This script

1. times every zoo model's float call (1 thread, the first 4 held-out feeds) and keeps the ``--count``
   smallest;
2. quantizes each with ``--presets`` (defaults, as the zoo does; files kept in ``--workdir``);
3. times float and each preset's file in turn, feed by feed, ``--rounds`` rounds of ``--runs`` passes,
   CPU seconds (``time.process_time``), and prints per model and preset the best round's µs per
   call and its ratio to float's best, the median of the per-round ratios, and the Cast nodes'
   share of the kernel time (onnxruntime's profile, ``--profile``: Casts to 16 bits, Casts from
   16 bits and the rest, µs per call).

``--trees base=DIR,new=DIR`` times files quantized beforehand (``DIR/<model>_<preset>.onnx``, e.g. by
two trees of the library) instead, all of them and float in turn within each round, so a before/after
pair is read in one run (bf16lat17). ``--round-ms`` bounds a round's passes on slow models.
``--newmodels``: the models are ``bench/newmodels.py`` keys (the source file and the first 4 of its own
feeds) rather than zoo names (bf16lat18: the float16 sources platedet, uvdoc, platerec).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/float16_small_calls.py --workdir /tmp/f16 --profile
    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/float16_small_calls.py --workdir /tmp/f16 \
        --models romanizer_decoder --trees base=/tmp/base_files,new=/tmp/new_files --profile
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


class _NewModel:
    """A ``bench/newmodels.py`` key seen as a zoo model: its source file and its own feeds."""

    def __init__(self, key: str) -> None:
        import newmodels

        self.name = key
        self._path, self._make = newmodels.MODELS[key][0], newmodels.MODELS[key][1]

    def path(self) -> str:
        return self._path

    def samples(self, split: str) -> list[dict[str, np.ndarray]]:
        return [dict(f) for f in self._make(4, 1 if split == "heldout" else 0)]


def _call_us(session: Any, feeds: list[dict[str, np.ndarray]], runs: int) -> float:
    t = time.process_time()
    for _ in range(runs):
        for f in feeds:
            session.run(None, f)
    return (time.process_time() - t) / runs / len(feeds) * 1e6


def cast_profile(sess: Any, feeds: list[dict[str, np.ndarray]], runs: int) -> dict[str, float]:
    """µs per call of the Casts to float16/bfloat16, the Casts from them and every other kernel
    (onnxruntime's profile of ``sess``, opened with ``profile=True``), and the nodes executed.
    Each node counts with the median of its durations per feed: the profile's clock is wall time,
    and on a shared machine a preempted kernel reads 10-100x its cost."""
    import _common as common

    events = common.profile_events(sess, feeds, runs)
    kinds: dict[str, str] = {}
    durations: dict[str, list[float]] = {}
    sixteen = ("float16", "bfloat16")
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        kind = "rest"
        if args.get("op_name") == "Cast":
            ins = [t for d in args.get("input_type_shape", []) for t in d]
            outs = [t for d in args.get("output_type_shape", []) for t in d]
            kind = "to16" if any(t in sixteen for t in outs) else "from16" if any(t in sixteen for t in ins) else "rest"
        kinds[e["name"]] = kind
        durations.setdefault(e["name"], []).append(e["dur"])
    out = {"to16": 0.0, "from16": 0.0, "rest": 0.0, "to16_nodes": 0.0, "from16_nodes": 0.0, "rest_nodes": 0.0}
    for node, kind in kinds.items():
        # a node runs once per feed: the median over runs × feeds is its typical µs per call
        out[kind] += float(np.median(durations[node]))
        out[f"{kind}_nodes"] += 1
    return out


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
    ap.add_argument("--trees", help="label=DIR,...: time DIR/<model>_<preset>.onnx of each (quantized beforehand)")
    ap.add_argument("--round-ms", type=float, default=400.0, help="fewer passes per round where float's would take longer")
    ap.add_argument("--newmodels", action="store_true", help="--models are bench/newmodels.py keys")
    args = ap.parse_args()
    import logging

    from onnxptq import quantize
    from onnxptq.config.presets import get_preset

    logging.disable(logging.WARNING)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    presets = args.presets.split(",")
    chosen = [(n, float("nan")) for n in args.models.split(",")] if args.models else smallest(args.count)
    print("load", " ".join(open("/proc/loadavg").read().split()[:3]))
    trees = dict(t.split("=", 1) for t in args.trees.split(",")) if args.trees else None
    for name, us in chosen:
        m = _NewModel(name) if args.newmodels else zoo.get(name)
        files = {"float": str(m.path())}
        for p in presets:
            if trees:
                for label, folder in trees.items():
                    path = Path(folder) / f"{name}_{p}.onnx"
                    if path.exists():
                        files[f"{p} {label}"] = str(path)
                continue
            out = work / f"{name}_{p}.onnx"
            if not out.exists():
                try:
                    quantize(m.path(), get_preset(p), m.samples("calibration"), str(out))
                except Exception as exc:  # noqa: BLE001 - said, and the other presets go on
                    print(f"{name} {p}: not quantized ({type(exc).__name__}: {exc})")
                    continue
            files[p] = str(out)
        sessions = {k: _session(v) for k, v in files.items()}
        feeds = _feeds(m, sessions["float"])
        for s in sessions.values():
            for f in feeds:
                s.run(None, f)
        runs = max(1, min(args.runs, int(args.round_ms * 1e3 / max(_call_us(sessions["float"], feeds, 1) * len(feeds), 1.0))))
        rounds: dict[str, list[float]] = {k: [] for k in sessions}
        for _ in range(args.rounds):
            for k, s in sessions.items():
                rounds[k].append(_call_us(s, feeds, runs))
        ref = np.array(rounds["float"])
        print(f"{name}: float {min(ref):.1f} µs per call (first pass {us:.1f}), {runs} passes a round, "
              f"load {open('/proc/loadavg').read().split()[0]}")
        if args.profile:
            base = cast_profile(_session(files["float"], profile=True), feeds, runs)
            print(f"  float  profile: kernels {base['rest'] + base['to16'] + base['from16']:.1f} µs", flush=True)
        for p in [k for k in files if k != "float"]:
            v = np.array(rounds[p])
            line = f"  {p:9s} {min(v):8.1f} µs  best ÷ float {min(v) / min(ref):.3f}  median of round ratios {np.median(v / ref):.3f}"
            if args.profile:
                c = cast_profile(_session(files[p], profile=True), feeds, runs)
                total = c["to16"] + c["from16"] + c["rest"]
                line += (f"  kernels {total:.1f} µs: Cast→16 {c['to16']:.1f} ({c['to16_nodes']:.0f} nodes), "
                         f"Cast←16 {c['from16']:.1f} ({c['from16_nodes']:.0f}), rest {c['rest']:.1f} ({c['rest_nodes']:.0f})")
            print(line, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
