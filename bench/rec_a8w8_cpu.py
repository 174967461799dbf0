"""Where the CPU of PP-OCRv4 rec A8W8's ``quantize`` goes (issue 26 item 4: ≤ 0.5× ``quantize_static``).

One quantize of PP-OCRv4 rec A8W8 on rendered lines (bench/quantize.py's ``.npz``, ``--lines`` of
them: calibration, the floor's held-out feeds and repair as the CLI runs them) in this process,
timed three ways:

* **stages** — ``time.process_time`` (all threads) around each stage function, nested as they are
  called (``enforce_floor`` holds repair's builds and judgements; ``collect_statistics`` the
  calibration runs and their folding), and every onnxruntime call apart: session creations
  (process time) and runs (``thread_time`` of the calling thread: a judged run goes on a thread
  of ``sessions.run_feeds`` with one intra-op thread, so its CPU is that thread's), each labelled
  by the first function of ours above it;
* **--prof N** — one more quantize under cProfile (process-time clock; cProfile inflates code
  of many small calls, ~1.5× here): the ``N`` functions of ours (``src/onnxptq``) with the most
  self time, and the cumulative time of onnxruntime's ``run`` / session creation beside them;
* the saved file's sha256 (first 16 hex digits) and the accuracy floor's verdict, so that two
  source trees can be checked for the same bytes and the same judgement.

    PYTHONPATH=<tree>/src:. OMP_NUM_THREADS=1 python bench/rec_a8w8_cpu.py --npz /work/cache/peak54/bq/rec_lines_64.npz \
        [--lines 64] [--rounds 2] [--prof 30]
    PYTHONPATH=<tree>/src:. OMP_NUM_THREADS=1 python bench/rec_a8w8_cpu.py --micro

``--rounds``: quantizes timed in turn (the best round's stages are printed: the load on a shared
machine only adds). The ``.npz`` is what ``python bench/quantize.py --only quantize --lines 64``
renders into its ``--workdir`` (``rec_lines_64.npz``).
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit); print_profile
import argparse
import collections
import cProfile
import dataclasses
import functools
import hashlib
import importlib
import logging
import os
import pstats
import sys
import tempfile
import threading
import time
from typing import Any

#: (module, function): the stages timed, where they are called from
STAGES = [("onnxptq.pipeline.calibrate", "prepare_for_quantization"), ("onnxptq.pipeline.calibrate", "collect_statistics"),
          ("onnxptq.pipeline.calibrate", "make_plan"),
          ("onnxptq.pipeline.build", "final_plan"), ("onnxptq.pipeline.build", "solve"), ("onnxptq.pipeline.build", "emit"),
          ("onnxptq.pipeline.final_plan", "apply_range_guard"), ("onnxptq.pipeline.guard", "shared_activation_params"),
          ("onnxptq.pipeline.complete", "build_model"), ("onnxptq.pipeline.complete", "_verify"),
          ("onnxptq.pipeline.complete", "finish"), ("onnxptq.pipeline.complete", "deliver"),
          ("onnxptq.algorithms.repair", "enforce_floor"), ("onnxptq.algorithms.repair", "build_model"),
          ("onnxptq.algorithms.repair", "judge_session"), ("onnxptq.algorithms.repair", "measure")]
#: calibration's own parts (methods of the runner and the collectors)
CALIBRATION = [("onnxptq.calibration.runner", "_Runs", "_build"), ("onnxptq.calibration.runner", "_Runs", "_fold"),
               ("onnxptq.calibration.collectors", "HistogramCollector", "update"),
               ("onnxptq.calibration.collectors", "TailCollector", "update_tails")]


class Clocks:
    """CPU seconds and calls per label, added to from any thread."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, label: str, seconds: float) -> None:
        with self._lock:
            self.seconds[label] += seconds
            self.calls[label] += 1

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def _timed(clocks: Clocks, label: str, f: Any, clock: Any = time.process_time) -> Any:
    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return f(*args, **kwargs)
        finally:
            clocks.add(label, clock() - t0)
    return wrapper


def _caller() -> str:
    """The first two functions of ours above an onnxruntime call (sessions.py's wrappers skipped;
    a run on one of ``sessions.run_feeds``' threads has none: "run_feeds' threads")."""
    frame, names = sys._getframe(2), []
    while frame is not None and len(names) < 2:
        path = frame.f_code.co_filename
        if "onnxptq" in path and not path.endswith("sessions.py"):
            names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "<".join(names) or "run_feeds' threads"


def instrument(clocks: Clocks) -> None:
    """Wrap the stage functions and onnxruntime's session calls with CPU clocks."""
    import onnxruntime as ort

    for module, name in STAGES:
        mod = importlib.import_module(module)
        setattr(mod, name, _timed(clocks, f"{module.split('.')[-1]}.{name}", getattr(mod, name)))
    for module, cls, name in CALIBRATION:
        klass = getattr(importlib.import_module(module), cls)
        setattr(klass, name, _timed(clocks, f"  calibration: {cls}.{name}", getattr(klass, name)))
    session = ort.InferenceSession
    for name in ("run", "run_with_iobinding"):
        def run(self: Any, *args: Any, _f: Any = getattr(session, name), _name: str = name, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return _f(self, *args, **kwargs)
            finally:
                clocks.add(f"  ort {_name} < {_caller()}", time.thread_time() - t0)
        setattr(session, name, run)
    create = session._create_inference_session

    def created(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        try:
            return create(self, *args, **kwargs)
        finally:
            clocks.add(f"  ort session creation < {_caller()}", time.process_time() - t0)
    session._create_inference_session = created


def quantize_once(npz: str, lines: int) -> tuple[float, str, str]:
    """(CPU s of the quantize call, sha256[:16] of the saved file, the floor's verdict)."""
    import quantize_stages
    from onnxptq.api import quantize
    from onnxptq.config.presets import get_preset

    cfg = get_preset("A8W8")
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    path, data = quantize_stages.model_and_data("rec", 0, npz, lines)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rec_a8w8.onnx")
        t0 = time.process_time()
        result = quantize(str(path), cfg, data, out)
        seconds = time.process_time() - t0
        with open(out, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()[:16]
    floor = getattr(result, "floor", None)
    return seconds, sha, floor.describe() if floor is not None else "(no floor)"


def profile(npz: str, lines: int, top: int) -> None:
    """One quantize under cProfile: our functions by self time, onnxruntime's calls beside them."""
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    seconds, sha, _ = quantize_once(npz, lines)
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    print(f"\ncProfile: {seconds:.2f} CPU s under the profiler, sha {sha}")
    _common.print_profile(stats, top)


def micro() -> None:
    """The pieces this branch changed, alone, best of 3 (``time.process_time``): a MinMSE histogram's
    folding (24 feeds of PP-OCRv4 rec's six residual-Add shapes, random values), one MinMSE
    search (uint8 and uint16 grids, on the histogram that folding leaves), and the graph walks on
    PP-OCRv4 rec (``all_graphs``, ``ScopeIndex``); with a digest of the results, equal across
    trees when the change keeps every value."""
    import numpy as np
    import onnx

    from onnxptq.calibration import methods
    from onnxptq.calibration.collectors import HistogramCollector
    from onnxptq.graph import walk
    from testkit.models import model_path

    def best(f: Any, n: int = 1) -> float:
        times = []
        for _ in range(3):
            t0 = time.process_time()
            for _ in range(n):
                f()
            times.append((time.process_time() - t0) / n)
        return min(times)

    rng = np.random.default_rng(0)
    shapes = [(1, 32, 24, 160), (1, 64, 24, 160), (1, 128, 12, 160), (1, 240, 12, 80), (1, 480, 6, 80), (1, 480, 3, 80)]
    feeds = [[(rng.standard_normal(s) * (1 + 0.1 * i)).astype(np.float32) for s in shapes] for i in range(24)]
    filled: list[HistogramCollector] = []

    def fold() -> None:
        filled[:] = [HistogramCollector(2048) for _ in shapes]
        for feed in feeds:
            for c, x in zip(filled, feed):
                c.update(x)

    fold_s = best(fold)

    def search() -> list[tuple[float, float]]:
        out = []
        for c in filled:
            for qmax in (255, 65535):
                c.__dict__.pop("_ranges", None)  # the search, not its memo
                c.__dict__.pop("_range_memo", None)
                out.append(methods.compute_range(c, "minmse", qmin=0, qmax=qmax, symmetric=False))
        return out

    search_s = best(search) / (2 * len(shapes))
    digest = hashlib.sha256(b"".join(c.hist.counts.tobytes() for c in filled) + repr(search()).encode()).hexdigest()[:16]
    model = onnx.load(str(model_path("rec")))
    walk_s = best(lambda: list(walk.all_graphs(model.graph)), 20)
    index_s = best(lambda: walk.ScopeIndex(model), 20)
    print(f"micro: histogram fold {fold_s:.3f} s (144 updates)  MinMSE search {search_s * 1e3:.2f} ms  "
          f"all_graphs {walk_s * 1e3:.2f} ms  ScopeIndex {index_s * 1e3:.2f} ms  digest {digest}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--npz", help="rendered rec lines (bench/quantize.py's rec_lines_<N>.npz)")
    ap.add_argument("--lines", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prof", type=int, default=0, metavar="N", help="cProfile one more quantize; print our top N by self time")
    ap.add_argument("--micro", action="store_true", help="time the pieces alone (micro) and stop")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    if args.micro:
        micro()
        return
    if not args.npz:
        ap.error("--npz is needed (or --micro)")
    from onnxptq.memory import share_malloc_arena

    share_malloc_arena()  # as the CLI (and bench/quantize.py's jobs) run it
    clocks = Clocks()
    instrument(clocks)
    best: tuple[float, dict[str, float], dict[str, int]] | None = None
    for r in range(args.rounds):
        clocks.clear()
        seconds, sha, verdict = quantize_once(args.npz, args.lines)
        print(f"round {r + 1}: {seconds:.3f} CPU s  sha {sha}  load {os.getloadavg()[0]:.1f}")
        if best is None or seconds < best[0]:
            best = (seconds, dict(clocks.seconds), dict(clocks.calls))
    assert best is not None
    print(f"verdict: {verdict}")
    print(f"\nbest round: {best[0]:.3f} CPU s; stages (nested; ort runs: thread CPU of the calling thread)")
    for label, sec in sorted(best[1].items(), key=lambda kv: -kv[1]):
        print(f"  {sec:7.3f} s {best[2][label]:5d}  {label}")
    if args.prof:
        profile(args.npz, args.lines, args.prof)


if __name__ == "__main__":
    main()
