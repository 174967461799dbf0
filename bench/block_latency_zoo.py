"""One-thread latency ÷ float of the block and BF16 formats on every zoo member and shipped model
(issue 26 item 3), measured so that a figure means the same thing on a loaded shared machine.

The zoo's latency column (bench/zoo.py) takes wall time of two passes over a few feeds; on a
machine at load 20 that reads a preset 0.02× or 47× float. Here:

* **files** (``quantize``): every model × preset quantized by ``onnxptq.quantize`` in a child
  process of the source tree ``--src`` (so two trees' files can be made side by side), with the
  preset's defaults but ``repair=False`` (repair keeps nodes float, which only speeds a file up;
  its verdict is the zoo's job), on ``--calibration`` of the model's own calibration feeds; saved
  as ``OUT/<tag>/<model>_<preset>.onnx`` and reused when present.
* **timing** (``time``): the float model and each file (of one or two ``--tags``) opened by stock
  onnxruntime with ``intra_op_num_threads = inter_op_num_threads = 1`` and sequential execution
  (the default graph optimisation; no option of the library), warmed up, then ``--rounds`` rounds in
  which every session runs the same ``--feeds`` held-out feeds (the model's real shapes: a seq2seq
  decoder with its state, a streaming VAD with its own states) in turn, repeated until the float
  model's pass takes ``--round-ms`` of CPU (a 1 ms model is not timed on one scheduler slice); the **CPU seconds of the
  process** (``time.process_time``) around each ``session.run``. Printed per model × preset: float
  ms, the file's ms, **best ÷ best** (best of the rounds on each side) and the **median of the
  rounds' ratios** (each round's file ÷ float of that round), the load average beside every model.
  With two tags: whether the two trees' files give bit-identical outputs on ``--same-feeds`` feeds.
* **ablate**: per body function of one file, what its calls cost inside the model (made ``Identity``
  alone, or all others made ``Identity``), timed in turn like ``time``.
* **profile** (``--profile N``): onnxruntime's profiler on each file (``N`` runs of the feeds), the
  kernel time summed by op type and split into what the model's own nodes cost and what the
  format's function bodies cost (onnxruntime inlines an unnamed call's nodes as ``<OpType>_<n>``, so a
  node is a body's when its name has that form and is no name of the file's own graphs). The
  profiler's durations are wall time, so each node's fastest run is taken: a preempted node would
  read 10-100x its work on a loaded machine.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/block_latency_zoo.py quantize --src src --tag new \
        [--models all|m1,m2] [--presets BF16,BFP16,MX9,MXINT8,MXFP8_E4M3] [--out /work/cache/blocklat20/files]
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/block_latency_zoo.py time --tags base,new \
        [--models ...] [--presets ...] [--rounds 7] [--feeds 2] [--profile 0] [--json FILE]
    python bench/block_latency_zoo.py table RUN1.json RUN2.json ... [--tags base]
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/block_latency_zoo.py ablate MODEL PRESET [--tag base]
"""

from __future__ import annotations

import _common  # the repository root on sys.path (testkit), the profile reader
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PRESETS = ("BF16", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3")
#: issue 26 item 3: BFP16/MX9/MXINT8 ≤ 3× float on the median model, ≤ 6× on every one; BF16 ≤ 1.2×
GOAL_MEDIAN, GOAL_EVERY, GOAL_BF16 = 3.0, 6.0, 1.2
SHIPPED = ("rec", "cls", "silero", "silero_ifless")
DEFAULT_OUT = Path("/work/cache/blocklat20/files")


def model_names(arg: str) -> list[str]:
    from testkit import zoo

    if arg == "all":
        return [m.name for m in zoo.ZOO] + list(SHIPPED)
    return arg.split(",")


def model_file(name: str) -> Path:
    if name in SHIPPED:
        from testkit.models import model_path

        return model_path(name)
    from testkit import zoo

    return zoo.get(name).path()


def feeds(name: str, kind: str, n: int) -> list[dict[str, np.ndarray]]:
    """``n`` feeds of model ``name`` as its package makes them; ``kind`` is calibration or heldout."""
    seed = 1 if kind == "calibration" else 2
    if name in ("rec", "cls"):
        import onnx

        from testkit import ocr

        path = model_file(name)
        if name == "rec":
            images = ocr.render_lines(n, seed=seed, characters=ocr.load_characters(onnx.load(str(path))))[0]
        else:
            images = ocr.render_cls(n, seed=seed)[0]
        images = np.asarray(images, np.float32)
        return [{"x": images[i:i + 1]} for i in range(len(images))]
    if name in ("silero", "silero_ifless"):
        from testkit.audio import speech_mix, vad_feeds

        audio, _ = speech_mix(seed=100 + seed, seconds=n * 512 / 16000 + 0.5)
        return vad_feeds(str(model_file(name)), audio, max_windows=n)[:n]
    from testkit import zoo

    model = zoo.get(name)
    out = model.make(model.root(), n, seed)
    return list(out)[:n]


# --------------------------------------------------------------------------- quantize

CHILD = r"""
import dataclasses, json, os, sys, time
sys.path[:0] = [{src!r}, {root!r}, {bench!r}]
import onnxptq
from onnxptq.config.presets import get_preset
import block_latency_zoo as blz
name, preset, out, n = {name!r}, {preset!r}, {out!r}, {n!r}
data = blz.feeds(name, "calibration", n)
cfg = dataclasses.replace(get_preset(preset), repair=False)
c0, w0 = time.process_time(), time.perf_counter()
part = f"{{out}}.{{os.getpid()}}.part.onnx"  # two runs making the same file each write their own
onnxptq.quantize(str(blz.model_file(name)), cfg, data, part)
os.replace(part, out)
print(json.dumps({{"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0, "library": onnxptq.__file__}}))
"""


def quantize(args: argparse.Namespace) -> None:
    out = Path(args.out) / args.tag
    out.mkdir(parents=True, exist_ok=True)
    src = str(Path(args.src).resolve())
    bench = str(Path(__file__).resolve().parent)
    for name in model_names(args.models):
        for preset in args.presets.split(","):
            file = out / f"{name}_{preset}.onnx"
            if file.is_file():
                continue
            code = CHILD.format(src=src, root=str(_common.ROOT), bench=bench, name=name, preset=preset,
                                out=str(file), n=args.calibration)
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=args.timeout)
            if proc.returncode:
                print(f"{name} {preset}: FAILED {proc.stderr.strip().splitlines()[-1:] }", flush=True)
                continue
            info = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{name} {preset}: {info['cpu_s']:.1f} CPU s ({info['wall_s']:.1f} s wall, load "
                  f"{os.getloadavg()[0]:.1f}) {info['library']}", flush=True)


# --------------------------------------------------------------------------- time

def open_session(path: str | Path, profile: str | None = None) -> Any:
    """Stock onnxruntime, one thread, sequential: what a user's 1-thread session is."""
    return open_session_bytes(str(path), profile)


def open_session_bytes(model: str | bytes, profile: str | None = None) -> Any:
    """:func:`open_session` on a path or a serialized model."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def fit(sess: Any, feed: dict) -> dict:
    names = {i.name for i in sess.get_inputs()}
    return {k: v for k, v in feed.items() if k in names}


def same_bits(a: list, b: list) -> bool:
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not np.array_equal(x.view(np.uint8) if x.dtype.kind == "f" else x,
                              y.view(np.uint8) if y.dtype.kind == "f" else y):
            return False
    return True


def rounds(sessions: dict[str, Any], fed: dict[str, list[dict]], n: int, repeats: int = 1) -> dict[str, list[float]]:
    """Per session, the CPU ms of one pass over its feeds (the mean of ``repeats`` passes) in each of
    ``n`` rounds, sessions in turn (the order rotated each round, so no variant always follows the same one)."""
    keys = list(sessions)
    cpu: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(n):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            sess, total = sessions[k], 0.0
            for _ in range(repeats):
                for feed in fed[k]:
                    c0 = time.process_time()
                    sess.run(None, feed)
                    total += time.process_time() - c0
            cpu[k].append(total * 1e3 / repeats)
    return cpu


def model_node_names(path: Path) -> set[str]:
    """Every node name of the file's graphs (subgraphs included), function bodies aside."""
    import onnx

    names: set[str] = set()

    def walk(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            names.add(n.name)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(onnx.load(str(path), load_external_data=False).graph)
    return names


#: onnxruntime names a function call's inlined nodes ``<OpType>_<counter>`` (the calls are unnamed)
_INLINED = re.compile(r"^([A-Za-z]+)_(\d+)$")


def profile(path: Path, fed: list[dict], runs: int, workdir: Path) -> dict:
    """Kernel µs per pass over the feeds by op type, split into the model's nodes and the bodies'
    (each node's fastest of the ``runs``)."""
    events = _common.profile_events(open_session(path, str(workdir / "prof")), fed, runs)
    own = model_node_names(path)
    # every node's smallest duration over the runs (a node runs once a feed: the feeds kept apart), summed:
    # the profiler times wall clock, and on a loaded machine a preempted node reads 10-100x its work
    per_node: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    op_of: dict[str, str] = {}
    seen: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        node = e["name"][: -len("_kernel_time")]
        op_of[node] = e.get("args", {}).get("op_name", "?")
        slot = seen[node] % len(fed)  # the runs pass the feeds in order
        seen[node] += 1
        per_node[(node, slot)].append(e["dur"])
    by_op: dict[str, float] = collections.defaultdict(float)
    body_by_op: dict[str, float] = collections.defaultdict(float)
    nodes, body_nodes = set(op_of), set()
    for (node, _), durations in per_node.items():
        op, us = op_of[node], min(durations)
        by_op[op] += us
        inlined = _INLINED.match(node)
        if node not in own and inlined and inlined.group(1) == op:
            body_by_op[op] += us
            body_nodes.add(node)
    total = sum(by_op.values())
    return {"total_us": total, "body_us": sum(body_by_op.values()), "executed": len(nodes), "body_executed": len(body_nodes),
            "ops": sorted(by_op.items(), key=lambda kv: -kv[1])[:10],
            "body_ops": sorted(body_by_op.items(), key=lambda kv: -kv[1])[:8]}


def time_models(args: argparse.Namespace) -> None:
    tags = args.tags.split(",")
    presets = args.presets.split(",")
    out = Path(args.out)
    rows: list[dict] = []
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, onnxruntime 1 thread sequential, "
          f"process CPU, {args.rounds} rounds × {args.feeds} feeds, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} -->")
    head = " | ".join(f"{t} ms | {t} best÷ | {t} med÷" for t in tags)
    print(f"| model | preset | load | float ms | {head} |" + (" same bits |" if len(tags) == 2 else ""))
    print("|---|---|---:|---:|" + "---:|---:|---:|" * len(tags) + ("---|" if len(tags) == 2 else ""), flush=True)
    for name in model_names(args.models):
        held = feeds(name, "heldout", max(args.feeds, args.same_feeds))
        files = {"float": model_file(name)}
        for p in presets:
            for t in tags:
                f = out / t / f"{name}_{p}.onnx"
                if f.is_file():
                    files[f"{p}@{t}"] = f
        sessions = {k: open_session(f) for k, f in files.items()}
        fed = {k: [fit(s, feed) for feed in held[: args.feeds]] for k, s in sessions.items()}
        for k, s in sessions.items():  # warm-up: allocations, first-run kernels
            for feed in fed[k]:
                s.run(None, feed)
        load = os.getloadavg()[0]
        once = min(rounds({"float": sessions["float"]}, fed, 3)["float"])
        repeats = max(1, min(50, int(np.ceil(args.round_ms / max(once, 1e-3)))))
        cpu = rounds(sessions, fed, args.rounds, repeats)
        base = min(cpu["float"])
        for p in presets:
            row = {"model": name, "preset": p, "load": round(load, 1), "float_ms": round(base, 3)}
            cells = []
            for t in tags:
                k = f"{p}@{t}"
                if k not in cpu:
                    cells.append("— | — | —")
                    continue
                best = min(cpu[k])
                med = statistics.median(a / b for a, b in zip(cpu[k], cpu["float"]))
                row[t] = {"ms": round(best, 3), "best_ratio": round(best / base, 3), "median_ratio": round(med, 3)}
                cells.append(f"{best:.2f} | {best / base:.2f} | {med:.2f}")
            same = ""
            if len(tags) == 2 and all(f"{p}@{t}" in sessions for t in tags):
                a, b = (sessions[f"{p}@{t}"] for t in tags)
                ok = all(same_bits(a.run(None, fit(a, f)), b.run(None, fit(b, f))) for f in held[: args.same_feeds])
                row["same_bits"] = ok
                same = f" {'yes' if ok else 'NO'} |"
            if args.profile:
                for t in tags:
                    k = f"{p}@{t}"
                    if k in files:
                        row.setdefault("profile", {})[t] = profile(files[k], fed[k], args.profile, out)
            rows.append(row)
            print(f"| {name} | {p} | {load:.1f} | {base:.2f} | {' | '.join(cells)} |{same}", flush=True)
        if args.profile:
            row = {"model": name, "preset": "float", "profile": {"float": profile(files["float"], fed["float"], args.profile, out)}}
            rows.append(row)
    print(f"\nload at end {os.getloadavg()[0]:.1f}")
    summary(rows, tags, presets)
    if args.profile:
        for r in rows:
            for t, pr in r.get("profile", {}).items():
                ops = ", ".join(f"{op} {us / 1e3:.2f}" for op, us in pr["ops"][:6])
                body = ", ".join(f"{op} {us / 1e3:.2f}" for op, us in pr["body_ops"][:5])
                print(f"- {r['model']} {r['preset']}@{t}: kernels {pr['total_us'] / 1e3:.2f} ms, bodies "
                      f"{pr['body_us'] / 1e3:.2f} ms, {pr['executed']} nodes ({pr['body_executed']} in bodies); top {ops}; in bodies {body}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def summary(rows: list[dict], tags: list[str], presets: list[str]) -> None:
    """Median per preset and the rows over the goals (best ÷ best)."""
    print("\n| tag | preset | models | median best÷ | max best÷ (model) | over goal |")
    print("|---|---|---:|---:|---|---|")
    for t in tags:
        for p in presets:
            vals = [(r[t]["best_ratio"], r["model"]) for r in rows if r["preset"] == p and t in r]
            if not vals:
                continue
            goal = GOAL_BF16 if p == "BF16" else GOAL_EVERY
            over = [f"{m} {v:.2f}" for v, m in sorted(vals, reverse=True) if v > goal]
            worst = max(vals)
            print(f"| {t} | {p} | {len(vals)} | {statistics.median(v for v, _ in vals):.2f} | {worst[0]:.2f} ({worst[1]}) | "
                  f"{', '.join(over) or '-'} |")


def table(args: argparse.Namespace) -> None:
    """One table (models × presets, best ÷ best and the median of the rounds' ratios) and the summary from
    ``time --json`` files of separate runs (one per model, say, run as the files came)."""
    rows = [r for f in args.files for r in json.loads(Path(f).read_text()) if r["preset"] != "float"]
    tags = [t for t in args.tags.split(",")]
    presets = list(dict.fromkeys(r["preset"] for r in rows))
    print("| model | load | float ms | " + " | ".join(f"{p} best÷ (med÷)" for p in presets) + " |")
    print("|---|---:|---:|" + "---:|" * len(presets))
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = {r["preset"]: r for r in rows if r["model"] == model}
        first = next(iter(mine.values()))
        cells = []
        for p in presets:
            r = mine.get(p, {}).get(tags[-1])
            cells.append("—" if r is None else f"{r['best_ratio']:.2f} ({r['median_ratio']:.2f})")
        print(f"| {model} | {first['load']:.1f} | {first['float_ms']:.2f} | {' | '.join(cells)} |")
    summary(rows, tags, presets)


def ablate(args: argparse.Namespace) -> None:
    """What each body costs inside the model: per function of the file, the model with that function's
    calls made ``Identity`` (``-f``: what removing it saves) and with every other function's calls made
    ``Identity`` (``+f``: what it costs alone), all sessions timed in turn as in ``time``."""
    import onnx

    path = Path(args.out) / args.tag / f"{args.model}_{args.preset}.onnx"
    model = onnx.load(str(path))
    functions = [f.name for f in model.functions]

    def without(keep) -> bytes:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)

        def walk(graph: onnx.GraphProto) -> None:
            for n in graph.node:
                if n.domain == "onnxptq" and not keep(n.op_type):
                    n.op_type, n.domain = "Identity", ""
                    del n.attribute[:]
                    del n.input[1:]  # a shared body's per-call constants
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        walk(a.g)

        walk(copy.graph)
        return copy.SerializeToString()

    sessions = {"float": open_session(model_file(args.model)), "file": open_session(path)}
    for f in functions:
        sessions[f"-{f}"] = open_session_bytes(without(lambda op, f=f: op != f))
        sessions[f"+{f}"] = open_session_bytes(without(lambda op, f=f: op == f))
    sessions["no calls"] = open_session_bytes(without(lambda op: False))
    held = feeds(args.model, "heldout", args.feeds)
    fed = {k: [fit(s, f) for f in held] for k, s in sessions.items()}
    calls: collections.Counter = collections.Counter()

    def count(graph: onnx.GraphProto) -> None:
        for n in graph.node:
            calls[n.op_type] += n.domain == "onnxptq"
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    count(a.g)

    count(model.graph)
    cpu = {k: min(v) for k, v in rounds(sessions, fed, args.rounds, args.repeats).items()}
    print(f"<!-- {args.model} {args.preset}: ms per pass of {args.feeds} feeds, best of {args.rounds} rounds; "
          f"load {os.getloadavg()[0]:.1f} -->")
    print(f"| function | calls | removing it saves ms | it alone costs ms |\n|---|---:|---:|---:|")
    for f in functions:
        print(f"| {f} | {calls[f]} | {cpu['file'] - cpu['-' + f]:.3f} | {cpu['+' + f] - cpu['no calls']:.3f} |")
    print(f"| all | {sum(calls[f] for f in functions)} | {cpu['file'] - cpu['no calls']:.3f} | |")
    print(f"\nfloat {cpu['float']:.3f} ms, the file {cpu['file']:.3f} ms, the file without calls {cpu['no calls']:.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quantize")
    q.add_argument("--src", default="src", help="the onnxptq source tree to quantize with")
    q.add_argument("--tag", required=True)
    q.add_argument("--calibration", type=int, default=8)
    q.add_argument("--timeout", type=int, default=1800)
    t = sub.add_parser("time")
    t.add_argument("--tags", required=True)
    t.add_argument("--rounds", type=int, default=7)
    t.add_argument("--feeds", type=int, default=2)
    t.add_argument("--round-ms", type=float, default=30.0,
                   help="a round passes the feeds as often as the float model needs to take this much CPU (at most 50)")
    t.add_argument("--same-feeds", type=int, default=16)
    t.add_argument("--profile", type=int, default=0, help="profiled runs per file (0: none)")
    t.add_argument("--json", default="")
    m = sub.add_parser("table")
    m.add_argument("files", nargs="+", help="time --json files")
    m.add_argument("--tags", default="base")
    a = sub.add_parser("ablate")
    a.add_argument("model")
    a.add_argument("preset")
    a.add_argument("--tag", default="base")
    a.add_argument("--out", default=str(DEFAULT_OUT))
    a.add_argument("--rounds", type=int, default=9)
    a.add_argument("--repeats", type=int, default=10)
    a.add_argument("--feeds", type=int, default=2)
    for s in (q, t):
        s.add_argument("--models", default="all")
        s.add_argument("--presets", default=",".join(PRESETS))
        s.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    {"quantize": quantize, "time": time_models, "table": table, "ablate": ablate}[args.cmd](args)


if __name__ == "__main__":
    main()
