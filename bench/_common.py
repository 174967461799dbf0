"""What every bench script shares: the repository root on ``sys.path`` and one way to open a session.

The test/bench harness (``testkit/``: the real models, rendered OCR lines, speech, MiniLM) lives at
the repository root, outside the installed package, so that the wheel never carries it. Scripts run
as ``python bench/<name>.py`` (``bench/`` is then first on the path); importing this module first puts
the root there too.

Sessions: every script opens its onnxruntime sessions through :func:`session`, a thin front of the
library's one session helper (:func:`onnxptq.sessions.open_session`), so a bench figure runs the
same session options the library does unless the script names a difference (threads, optimization
level, profiling).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from onnxptq.sessions import open_session  # noqa: E402


def session(model: Any, threads: int | None = None, *, inter_op_threads: int | None = None, optimization: str = "all",
            profile: str | os.PathLike | None = None, **options: Any) -> Any:
    """An ``InferenceSession`` on ``model`` (a ``ModelProto`` or a path) on the CPU provider.

    ``threads`` / ``inter_op_threads``: onnxruntime's defaults when None. ``profile``: a file prefix
    for onnxruntime's per-node profile (``session.end_profiling()`` writes it; the library never
    profiles, so these sessions alone set their options here, the rest as
    :func:`onnxptq.sessions.open_session` does). Other keyword arguments go to ``open_session``.
    """
    if profile is None:
        return open_session(model, threads=threads, inter_op_threads=inter_op_threads, optimization=optimization, **options)
    import onnx
    import onnxruntime as ort

    from onnxptq.sessions import optimization_level

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = optimization_level(optimization)
    if threads:
        so.intra_op_num_threads = threads
    if inter_op_threads:
        so.inter_op_num_threads = inter_op_threads
    so.enable_profiling = True
    so.profile_file_prefix = str(profile)
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def cli_value(text: str) -> object:
    """A command-line ``key=value`` value: True / False / None, a number, or the string itself."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return float(text) if any(c in text for c in ".e") else int(text)
    except ValueError:
        return text


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmHWM``: this process's peak RSS; ``VmRSS``: now)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def cpu_s() -> float:
    """User + system CPU seconds of this process, all threads (onnxruntime runs a thread pool)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def profile_events(sess: Any, feeds: list[dict], runs: int) -> list[dict]:
    """onnxruntime's profile events of ``sess`` (opened with profiling on) over ``runs`` passes
    of ``feeds``; the profile file is removed."""
    import json

    for _ in range(runs):
        for feed in feeds:
            sess.run(None, feed)
    file = sess.end_profiling()
    with open(file) as f:
        events = json.load(f)
    os.remove(file)
    return events


def profile_ops(sess: Any, feeds: list[dict], runs: int) -> tuple[list[tuple[str, float, int]], int]:
    """``(op type, µs per feed, nodes)`` from onnxruntime's profile of ``sess`` (a session opened
    with ``profile=``) over ``runs`` passes of ``feeds``, most costly first; and the number of
    nodes executed (functions inlined)."""
    import collections

    events = profile_events(sess, feeds, runs)
    total: dict[str, float] = collections.defaultdict(float)
    nodes: dict[str, set] = collections.defaultdict(set)
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        op = e.get("args", {}).get("op_name", "?")
        total[op] += e["dur"] / (runs * len(feeds))
        nodes[op].add(e["name"])
    executed = len(set().union(*nodes.values())) if nodes else 0
    return sorted(((op, us, len(nodes[op])) for op, us in total.items()), key=lambda r: -r[1]), executed


def cpu_round_robin(sessions: dict[str, Any], feeds: list[dict], runs: int) -> dict[str, list[float]]:
    """Per session, the CPU ms per feed of each of ``runs`` rounds, the sessions taken in turn
    within a round (so load changes hit every variant alike; the bench compares medians of ratios)."""
    import time

    cpu: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(runs):
        for k, sess in sessions.items():
            c0 = time.thread_time()
            for feed in feeds:
                sess.run(None, feed)
            cpu[k].append((time.thread_time() - c0) * 1e3 / len(feeds))
    return cpu


def interleaved_ratio(ref, test, feeds, passes: int, repeats: int = 1) -> float:
    """Test / reference wall time over ``feeds``, the two timed feed by feed in turn (so a load
    change hits both alike), each pass running the feeds ``repeats`` times; the best of ``passes``
    for each side."""
    import time

    best_ref = best_test = float("inf")
    for _ in range(passes):
        t_ref = t_test = 0.0
        for _ in range(repeats):
            for feed in feeds:
                t0 = time.perf_counter()
                ref(feed)
                t1 = time.perf_counter()
                test(feed)
                t2 = time.perf_counter()
                t_ref, t_test = t_ref + t1 - t0, t_test + t2 - t1
        best_ref, best_test = min(best_ref, t_ref), min(best_test, t_test)
    return best_test / best_ref


def print_op_profile(title: str, rows: list[tuple[str, float, int]], top: int = 12) -> None:
    """Print ``title`` and the ``top`` most costly op types of a :func:`profile_ops` table, each
    with its ms per feed and share of the kernel time."""
    total = sum(us for _, us, _ in rows)
    print(f"\n{title}: {total / 1e3:.3f} ms of kernel time per feed (profile)")
    for op, us, n in rows[:top]:
        print(f"  {op:<28} {us / 1e3:8.3f} ms  {100 * us / total:5.1f}%  ({n} nodes)")


#: every local ONNX model a structure scan reads: the outside models (bench/fetch_newmodels.py),
#: the shipped ones and the zoo cache (testkit/models.py)
LOCAL_MODELS = ("/work/cache/newmodels*/src/**/*.onnx", "/work/shared/models/*.onnx",
                os.path.expanduser("~/.cache/onnxptq/**/*.onnx"))


def local_models(max_mb: float) -> Iterator[tuple[str, Any]]:
    """``(path, model)`` of every :data:`LOCAL_MODELS` file up to ``max_mb``, its graph only (no
    external data), in path order; a file onnx cannot read is passed over (a scan lists where a rule
    can act, and such a file is no model it judges)."""
    import glob

    import onnx

    for path in sorted({f for root in LOCAL_MODELS for f in glob.glob(root, recursive=True)}):
        if os.path.getsize(path) > max_mb * 1e6:
            continue
        try:
            model = onnx.load(path, load_external_data=False)
        except Exception:  # noqa: BLE001 - see the docstring
            continue
        yield path, model


def print_profile(stats: dict, top: int, builtins: bool = False) -> None:
    """A cProfile's ``pstats.Stats(...).stats`` printed as the quantize benches read it: onnxruntime's session
    runs and creations (cumulative), our functions by self time (``top`` of them), and with ``builtins`` the
    built-ins (NumPy's, onnxruntime's, protobuf's) by self time."""
    import collections

    ort: collections.Counter[str] = collections.Counter()
    for (path, _, name), (_, _, _, cum, _) in stats.items():
        if "onnxruntime" in path and name in ("run", "run_with_iobinding", "_create_inference_session"):
            ort[name] += cum
    for name, cum in ort.most_common():
        print(f"  {cum:7.3f} s cumulative  onnxruntime {name}")
    ours = sorted(((tt, ct, nc, path.split("src/onnxptq/")[-1], line, name)
                   for (path, line, name), (_, nc, tt, ct, _) in stats.items() if "src/onnxptq/" in path), reverse=True)
    print(f"  {'self s':>7} {'cum s':>7} {'calls':>7}  function (ours, by self time)")
    for tt, ct, nc, path, line, name in ours[:top]:
        print(f"  {tt:7.3f} {ct:7.3f} {nc:7d}  {path}:{line}({name})")
    if builtins:
        rest = sorted(((tt, nc, name) for (path, _, name), (_, nc, tt, _, _) in stats.items() if path == "~"), reverse=True)
        print(f"  {'self s':>7} {'calls':>7}  built-in (by self time)")
        for tt, nc, name in rest[:top // 2]:
            print(f"  {tt:7.3f} {nc:7d}  {name}")
