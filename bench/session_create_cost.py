"""What a delivered block-format file's onnxruntime session costs to open, and what would make it cheaper (issue 26 item 1).

The largest part of a block format's quantize time over BF16's is the one session finish opens on the
delivered file (``create:finish`` of ``bench/quantize_stages.py --where``). This script reads delivered
files (``--files DIR``: ``<model>.<preset>.onnx``, e.g. written by ``quantize_stages``'s presets or
``onnxptq.quantize``), counts what onnxruntime sees (main-graph nodes, function calls, the nodes those
calls inline, the ``Constant`` nodes among them, ``If`` nodes), and times the session's creation (CPU
seconds, best of ``--reps``, variants alternating) under finish's options and under variants:

* ``user``: a user's default session (functions inlined before the level-1 optimisers);
* ``finish``: finish's options (:func:`onnxptq.pipeline.finish._options`);
* ``none`` / ``basic`` / ``extended``: finish's options at a lower graph level (what each level costs);
* ``loop0`` / ``loop2``: ``session.graph_optimizations_loop_level``;
* ``idle``: finish's, with every graph transformer that modified none of the ``--files`` graphs
  (read off onnxruntime's verbose log) disabled: what transformers that find nothing cost;
* ``lifted``: finish's, on a copy whose functions' top-level ``Constant`` nodes are function inputs
  fed by main-graph initializers (one per distinct value), as ``share_functions`` does for the
  values that differ between members: whether the inlined constants drive the cost.

Every variant's outputs on ``--feeds`` random feeds are compared with the ``user`` session's, bit for
bit (``same`` column): a variant that changes them cannot serve the verification, whatever it saves.

    PYTHONPATH=src OMP_NUM_THREADS=1 python bench/session_create_cost.py --files DIR \\
        --variants user,finish,none,basic,extended,idle,lifted --reps 5
"""

from __future__ import annotations

import argparse
import collections
import glob
import hashlib
import os
import re
import subprocess
import sys
import time
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

LEVELS = {"none": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED"}


def options(variant: str) -> tuple[Any, list[str]]:
    """``(SessionOptions, disabled optimizers)`` of ``variant`` (``idle:<a>+<b>``: finish's with those disabled)."""
    import onnxruntime as ort

    from onnxptq.pipeline.finish import _options
    from onnxptq.sessions import session_options

    if variant == "user":
        return session_options(threads=1, spinning=False, log_severity=3), []
    o = session_options(**{**_options(), "threads": 1, "log_severity": 3})
    if variant in LEVELS:
        o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[variant])
    elif variant.startswith("loop"):
        o.add_session_config_entry("session.graph_optimizations_loop_level", variant[4:])
    elif variant.startswith("idle:"):
        return o, variant[5:].split("+")
    return o, []


def counts(model: onnx.ModelProto) -> dict[str, int]:
    """Main-graph nodes, local-function calls, the nodes the calls inline, Constants and Ifs among them."""
    fns = {(f.domain, f.name): f for f in model.functions}
    calls = [fns[(n.domain, n.op_type)] for n in model.graph.node if (n.domain, n.op_type) in fns]
    return {"main": len(model.graph.node), "calls": len(calls), "inlined": sum(len(f.node) for f in calls),
            "consts": sum(n.op_type == "Constant" for f in calls for n in f.node),
            "ifs": sum(n.op_type == "If" for f in calls for n in f.node)}


def lifted(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose functions' top-level liftable ``Constant`` nodes are function inputs,
    each call fed the main-graph initializer of that value (functions called from inside a function
    are left alone: a call there cannot read an initializer)."""
    from onnxptq.graph.passes.share_functions import _constant_value, _is_constant, _value_key
    from onnxptq.graph.walk import model_nodes

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph_nodes, fn_nodes = model_nodes(out)
    inside = {(n.domain, n.op_type) for n in fn_nodes}
    taken = {t.name for t in out.graph.initializer} | {i for n in graph_nodes for i in list(n.input) + list(n.output)}
    values: dict[tuple, str] = {}
    extra: dict[tuple[str, str], list[str]] = {}
    for fn in out.functions:
        if (fn.domain, fn.name) in inside:
            continue
        keep, names = [], []
        for node in fn.node:
            value = _constant_value(node) if _is_constant(node) else None
            if value is None:
                keep.append(node)
                continue
            key = _value_key(value)
            if key not in values:
                name = f"lifted{len(values)}"
                while name in taken:
                    name += "_"
                taken.add(name)
                values[key] = name
                out.graph.initializer.append(numpy_helper.from_array(value, name))
            fn.input.append(node.output[0])
            names.append(values[key])
        del fn.node[:]
        fn.node.extend(keep)
        extra[(fn.domain, fn.name)] = names
    declared = {(f.domain, f.name): len(f.input) for f in out.functions}
    for node in graph_nodes:
        names = extra.get((node.domain, node.op_type))
        if names:
            node.input.extend([""] * (declared[(node.domain, node.op_type)] - len(names) - len(node.input)))
            node.input.extend(names)
    return out


def idle_transformers(paths: list[str]) -> list[str]:
    """The graph transformers onnxruntime's verbose log shows modifying none of ``paths``' graphs
    under finish's options (a subprocess each: the log goes to stderr)."""
    code = ("import sys, onnxruntime as ort\n"
            "from onnxptq.pipeline.finish import _options\n"
            "from onnxptq.sessions import session_options\n"
            "o = session_options(**{**_options(), 'threads': 1, 'log_severity': 0}); o.log_verbosity_level = 1\n"
            "ort.InferenceSession(sys.argv[1], o, providers=['CPUExecutionProvider'])\n")
    seen: set[str] = set()
    used: set[str] = set()
    for path in paths:
        err = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=os.environ).stderr
        for name, modified in re.findall(r"GraphTransformer (\S+) modified: (\d)", err):
            seen.add(name)
            if modified != "0":
                used.add(name)
    return sorted(seen - used)


def feeds_for(model: onnx.ModelProto, n: int) -> list[dict[str, np.ndarray]]:
    """``n`` random feeds for ``model``'s graph inputs (unknown dims 1)."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        feed = {}
        for value in model.graph.input:
            if value.name in inits:
                continue
            t = value.type.tensor_type
            shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            feed[value.name] = ((rng.standard_normal(shape) * 2).astype(dtype) if dtype.kind == "f"
                                else rng.integers(0, 10, shape).astype(dtype))
        out.append(feed)
    return out


def digest(session: Any, feeds: list[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256()
    for feed in feeds:
        for value in session.run(None, feed):
            h.update(np.ascontiguousarray(value).tobytes())
    return h.hexdigest()[:12]


def main() -> None:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", required=True, help="folder of delivered files <model>.<preset>.onnx")
    ap.add_argument("--variants", default="user,finish,none,basic,extended,idle,lifted")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--feeds", type=int, default=3)
    args = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(args.files, "*.onnx")))
    variants = args.variants.split(",")
    if "idle" in variants:
        idle = idle_transformers([p for p in paths if not p.endswith(".BF16.onnx")])
        print(f"transformers that modified none of the block files ({len(idle)}): {', '.join(idle)}")
        variants = [f"idle:{'+'.join(idle)}" if v == "idle" else v for v in variants]
    print("| file | main | calls | inlined | consts | ifs | " + " | ".join(v.split(":")[0] for v in variants) + " | same |")
    print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(variants) + "---|")
    per_node: list[tuple[int, int, float]] = []
    for path in paths:
        model = onnx.load(path)
        data = {"plain": model.SerializeToString(), "lifted": lifted(model).SerializeToString() if "lifted" in variants else b""}
        feeds = feeds_for(model, args.feeds)
        best: dict[str, float] = collections.defaultdict(lambda: float("inf"))
        digests: dict[str, str] = {}
        for rep in range(args.reps):
            for v in variants:
                o, disabled = options("finish" if v == "lifted" else v)
                t = time.process_time()
                s = ort.InferenceSession(data["lifted" if v == "lifted" else "plain"], o, providers=["CPUExecutionProvider"],
                                         disabled_optimizers=disabled)
                best[v] = min(best[v], time.process_time() - t)
                if rep == 0:
                    digests[v] = digest(s, feeds)
                del s
        c = counts(model)
        differ = [v.split(":")[0] for v in variants if digests[v] != digests.get("user", digests[variants[0]])]
        print(f"| {os.path.basename(path)[:-5]} | {c['main']} | {c['calls']} | {c['inlined']} | {c['consts']} | {c['ifs']} | "
              + " | ".join(f"{best[v]:.3f}" for v in variants) + f" | {'all' if not differ else 'not ' + ','.join(differ)} |", flush=True)
        if "finish" in best:
            per_node.append((c["main"], c["inlined"], best["finish"]))
    if len(per_node) > 2:
        x = np.array([[m, i, 1.0] for m, i, _ in per_node])
        coef, *_ = np.linalg.lstsq(x, np.array([s for *_, s in per_node]), rcond=None)
        print(f"finish creation ≈ {coef[0] * 1e6:.0f} µs × main-graph node + {coef[1] * 1e6:.0f} µs × inlined node "
              f"{coef[2]:+.3f} s (least squares over {len(per_node)} files)")


if __name__ == "__main__":
    main()
