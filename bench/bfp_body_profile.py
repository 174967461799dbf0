"""Where a BFP body (BFP16 ``to_bfp``, MX4/MX6/MX9 ``to_bfp_prime``; onnx_ops/bfp.py) spends its time.

Builds a one-node model ``x → BFPQuantizeDequantize`` for a preset on one activation shape (the
body onnx_ops.bfp.build emits for a float32 input of that static shape), prints its CPU ms per
call (one thread, median of ``--runs``) and, with ``--profile``, the kernel time per op type and
the slowest nodes with their input shapes (onnxruntime's profiler), so a slow elementwise op shows
whether it reads a view tensor with trailing 1s against a rank-0 constant (the broadcast path
bench/fp_body_profile.py found). Run it with ``PYTHONPATH=<tree>:.`` for main's archive vs this
branch; several ``--shape`` values run in one process.

    python bench/bfp_body_profile.py --preset MX9 --shape 1,64,48,48 --shape 21000,32 [--axis 1] [--runs 30] [--profile]

``--trees A,B,...`` (source trees, e.g. main's archive and ``src``): each tree builds the body in a
subprocess, and this process times the bodies round-robin (one call of each per round, CPU ms,
median over ``--runs`` rounds), so the ratios share the machine's load.
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

from fp_body_profile import cpu_per_call, profile


def one_node_model(shape: list[int], axis: int, preset: str) -> onnx.ModelProto:
    """``y = BFP(x)`` with the body onnx_ops.bfp.build emits for a float32 ``x`` of ``shape``."""
    from onnxptq.formats.bfp import PRESETS
    from onnxptq.onnx_ops import bfp

    q = bfp.build("bfp", "x", "y", name="q", opset=18, shape=shape, dtype="float32", **dict(PRESETS[preset], axis=axis))
    g = helper.make_graph(q.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]
                             + [helper.make_opsetid(d, v) for d, v in q.opset_imports.items()],
                             functions=q.functions, ir_version=10)


def interleaved(trees: list[str], preset: str, shape: list[int], axis: int, runs: int) -> list[tuple[str, int, float]]:
    """(function name, body nodes, median CPU ms per call) per tree, timed round-robin."""
    import onnxruntime as ort

    here = os.path.dirname(os.path.abspath(__file__))
    sessions = []
    for k, tree in enumerate(trees):
        path = os.path.join(tempfile.mkdtemp(prefix="bfpbody_"), f"{k}.onnx")
        code = (f"import sys; sys.path[:0] = [{tree!r}, {here!r}]; import onnx; from bfp_body_profile import one_node_model; "
                f"onnx.save(one_node_model({shape!r}, {axis}, {preset!r}), {path!r})")
        subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=tree))
        model = onnx.load(path)
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sessions.append((model.functions[0].name, len(model.functions[0].node),
                         ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])))
    feed = {"x": (np.random.default_rng(1).standard_normal(shape) * 3).astype(np.float32)}
    times: list[list[float]] = [[] for _ in sessions]
    for _, _, sess in sessions:
        sess.run(None, feed)
    for _ in range(runs):
        for k, (_, _, sess) in enumerate(sessions):
            t = time.process_time()
            sess.run(None, feed)
            times[k].append((time.process_time() - t) * 1e3)
    return [(name, nodes, statistics.median(ts)) for (name, nodes, _), ts in zip(sessions, times)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="comma-separated dims (repeatable)")
    ap.add_argument("--axis", type=int, default=1)
    ap.add_argument("--preset", default="BFP16", help="BFP16, MX4, MX6 or MX9")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--trees", default="", help="comma-separated source trees timed round-robin")
    args = ap.parse_args()
    for spec in args.shape or ["21000,32,1"]:
        shape = [int(s) for s in spec.split(",")]
        if args.trees:
            rows = interleaved(args.trees.split(","), args.preset, shape, args.axis, args.runs)
            print(f"{args.preset} {spec} axis {args.axis}: CPU ms per call " + " | ".join(
                f"{ms:.3f} ({nodes} nodes, {name.split('_k')[-1]})" for name, nodes, ms in rows), flush=True)
            continue
        model = one_node_model(shape, args.axis, args.preset)
        feed = {"x": (np.random.default_rng(1).standard_normal(shape) * 3).astype(np.float32)}
        fn = model.functions[0]
        print(f"{args.preset} {spec} axis {args.axis}: {fn.name}: {len(fn.node)} body nodes, "
              f"CPU per call {cpu_per_call(model, feed, args.runs):.3f} ms", flush=True)
        if not args.profile:
            continue
        rows = profile(model, feed, args.runs)
        total = sum(r[3] for r in rows)
        by_op: dict[str, float] = collections.defaultdict(float)
        for op, _, _, us in rows:
            by_op[op] += us
        print(f"  kernel total {total:.0f} µs")
        for op, us in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {op:<14} {us:8.0f} µs  {100 * us / total:5.1f} %")
        for op, _, shapes, us in sorted(rows, key=lambda r: -r[3])[:8]:
            print(f"    {us:7.0f} µs  {op:<12} {shapes}")


if __name__ == "__main__":
    main()
