"""Block quantizer bodies on tensors whose dims are only partly known, per source tree: executed
nodes, run time and session creation per call (issue 26 item 3, blocklat12).

A model's activation of ``[?, C, ?, ?]`` (PP-OCR cls: batch, height and width unknown to shape
inference) gets a body whose shape values cannot fold at build time; bench/blockbody_nodes.py
times whole models, whose run-to-run noise on a loaded machine (±10 %) hides a few nodes per
call. Here each tree (``--trees``, e.g. main's ``git archive`` and ``src``) builds, in a
subprocess, a model of ``--calls`` chained calls of one preset's activation quantizer (blocks
along axis 1, the emitter's ``shape`` = ``--dims``, float32), and the parent times the trees'
models round-robin in one process on one ``--shape`` feed: the CPU µs of a run per call (median
of ``--rounds``), the CPU ms of a session creation per call (best of ``--rounds``), the nodes
onnxruntime executed per call (its profile, ``If`` branches where taken), and whether the trees'
outputs are the same bits.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/block_latency_dims.py --trees /work/cache/base/src,src \
        --presets BFP16,MX9,MXINT8,MXFP8_E4M3 --dims n,16,h,w --shape 1,16,24,96 [--calls 20] [--rounds 15]
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r'''
import sys
sys.path[:0] = [{tree!r}]
import onnx
from onnx import helper, TensorProto
dims, preset, calls = {dims!r}, {preset!r}, {calls!r}
nodes, functions = [], {{}}
for k in range(calls):
    x, y = f"t{{k}}", "y" if k == calls - 1 else f"t{{k + 1}}"
    if preset.startswith("MX") and preset[2:3] in ("I", "F"):
        from onnxptq.onnx_ops import mx
        elem = {{"MXINT8": "int8", "MXFP8_E4M3": "fp8_e4m3", "MXFP8_E5M2": "fp8_e5m2", "MXFP4": "fp4_e2m1"}}[preset]
        q = mx.build("mx", x, y, name=f"q{{k}}", opset=18, element_dtype=elem, axis=1, block_size=32,
                     rounding_mode=2, shape=dims, dtype="float32")
    else:
        from onnxptq.formats.bfp import PRESETS
        from onnxptq.onnx_ops import bfp
        q = bfp.build("bfp", x, y, name=f"q{{k}}", opset=18, shape=dims, dtype="float32", **dict(PRESETS[preset], axis=1))
    nodes += q.nodes
    functions.update({{f.name: f for f in q.functions}})
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, dims)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("onnxptq", 1)],
                      functions=list(functions.values()))
m.ir_version = 10
onnx.save(m, {out!r})
print(",".join(functions))
'''


def _create(path: str):
    from onnxptq.sessions import open_session

    t = time.process_time()
    s = open_session(path, log_severity=3, inline_functions_first=False, spinning=False, threads=1)
    return s, time.process_time() - t


def _executed(path: str, feed: dict, calls: int, workdir: str) -> float:
    """Nodes onnxruntime executed per call in one run (profile events, If branches where taken)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(workdir, "prof")
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    s.run(None, feed)
    with open(s.end_profiling()) as f:
        events = json.load(f)
    return sum(1 for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")) / calls


def _bits(a: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default="src", help="comma-separated source trees (…/src)")
    ap.add_argument("--presets", default="BFP16,MX9,MXINT8,MXFP8_E4M3")
    ap.add_argument("--dims", required=True, help="the emitter's shape: ints, or names for unknown dims")
    ap.add_argument("--shape", required=True, help="the feed's concrete shape")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--runs", type=int, default=20, help="runs per round")
    args = ap.parse_args()
    trees = args.trees.split(",")
    dims = [int(d) if d.lstrip("-").isdigit() else d for d in args.dims.split(",")]
    shape = [int(d) for d in args.shape.split(",")]
    rng = np.random.default_rng(0)
    feed = {"t0": rng.standard_normal(shape).astype(np.float32)}
    workdir = tempfile.mkdtemp(prefix="block_latency_dims_")
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load {open('/proc/loadavg').read().split()[0]}; "
          f"dims {args.dims}, feed {args.shape}; {args.calls} calls a model, {args.rounds} rounds of {args.runs} runs -->")
    print("| preset | tree | body | executed nodes per call | µs per call | ÷ first tree | creation ms per call | same bits |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for preset in args.presets.split(","):
        paths, bodies = [], []
        for k, tree in enumerate(trees):
            out = os.path.join(workdir, f"{preset}_{k}.onnx")
            code = CHILD.format(tree=os.path.abspath(tree), dims=dims, preset=preset, calls=args.calls, out=out)
            bodies.append(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip())
            paths.append(out)
        outs = [_create(p)[0].run(None, feed)[0] for p in paths]
        same = [np.array_equal(_bits(o), _bits(outs[0])) for o in outs]
        run = [[] for _ in trees]
        made = [[] for _ in trees]
        for r in range(args.rounds):
            order = list(range(len(trees)))[:: 1 if r % 2 == 0 else -1]
            for k in order:
                s, dt = _create(paths[k])
                made[k].append(dt)
                s.run(None, feed)
                t = time.process_time()
                for _ in range(args.runs):
                    s.run(None, feed)
                run[k].append((time.process_time() - t) / args.runs / args.calls)
        first = statistics.median(run[0])
        for k, tree in enumerate(trees):
            us = statistics.median(run[k])
            print(f"| {preset} | {tree} | `{bodies[k]}` | {_executed(paths[k], feed, args.calls, workdir):.1f} | {us * 1e6:.1f} | "
                  f"{us / first:.3f} | {min(made[k]) * 1e3 / args.calls:.3f} | {'yes' if same[k] else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
