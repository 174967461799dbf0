"""Per-call CPU of one MX body from several source trees on ``[rows, C, 1]``-like activations.

The question (issue 26 item 3): does a block axis followed only by dims of 1 gain from the
transposed ``(1, bs, blocks)`` view of a last axis (onnx_ops.body.view_last), which the BFP bodies
took (branch bfpwide), over the ``(rows, bs, 1)`` / tiled / whole-axis views of onnx_ops/mx.py?
Each tree builds, in a subprocess, the body ``onnx_ops.mx.build`` emits for a float32 input of the
static shape (axis 1, blocks of 32, rounding mode 2); this process times the trees' sessions
round-robin (one call of each per round, thread CPU, median over ``--runs`` rounds, one intra-op
thread), so the ratios share the machine's load, and checks each tree's bits against
``onnxptq.formats.mx.fake_quantize`` (imported from the last tree) on data holding ±0, subnormals,
±Inf and NaN.

    PYTHONPATH=src:. python bench/mx_ones_after.py --trees /work/cache/base/src,src \
        --shape 21000,32,1 --shape 300,200,1 [--elem int8,fp8_e4m3,fp4_e2m1] [--runs 40]
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

CHILD = r'''
import sys
sys.path[:0] = [{tree!r}]
import onnx
from onnx import helper, TensorProto
from onnxptq.onnx_ops import mx
shape = {shape!r}
q = mx.build("mx", "x", "y", name="q", opset=18, element_dtype={elem!r}, axis=1, block_size=32,
             rounding_mode=2, shape=shape, dtype="float32")
g = helper.make_graph(q.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], q.initializers)
imports = {{"": 18, **{{d: v for d, v in q.opset_imports.items() if d != ""}}}}
m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()], functions=q.functions)
m.ir_version = 8
onnx.save(m, {out!r})
print(q.functions[0].name)
'''


def data(shape: list[int]) -> np.ndarray:
    """Standard normal values with subnormals, ±0, ±Inf and NaN sprinkled in."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::97] = np.float32(1e-40)
    for i, v in zip((5, 7, 9, 11), (np.inf, np.nan, -0.0, -np.inf)):
        if i < flat.size:
            flat[i] = v
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", required=True, help="comma-separated source trees (…/src), timed round-robin")
    ap.add_argument("--shape", action="append", required=True, help="comma-separated dims (repeatable)")
    ap.add_argument("--elem", default="int8,fp8_e4m3,fp4_e2m1")
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args()
    trees = args.trees.split(",")
    sys.path.insert(0, trees[-1])
    from onnxptq.formats import fake_quantize

    workdir = tempfile.mkdtemp(prefix="mx_ones_after_")
    print(f"<!-- {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; load {os.getloadavg()[0]:.1f}; "
          f"1 thread, median of {args.runs} rounds; trees {' | '.join(trees)} -->")
    print("| shape | element | " + " | ".join(f"ms ({t})" for t in trees) + " | last ÷ first | exact | last tree's body |")
    print("|---|---|" + "---:|" * len(trees) + "---:|---|---|")
    for shp in args.shape:
        shape = [int(v) for v in shp.split(",")]
        x = data(shape)
        for elem in args.elem.split(","):
            sessions, names = [], []
            for i, tree in enumerate(trees):
                out = os.path.join(workdir, f"{i}_{elem}_{shp.replace(',', 'x')}.onnx")
                code = CHILD.format(tree=tree, shape=shape, elem=elem, out=out)
                names.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout.strip())
                o = ort.SessionOptions()
                o.intra_op_num_threads = o.inter_op_num_threads = 1
                o.log_severity_level = 3
                sessions.append(ort.InferenceSession(out, o, providers=["CPUExecutionProvider"]))
            ref = fake_quantize(x, "mx", element_dtype=elem, axis=1, block_size=32, rounding_mode=2)
            exact = all(np.array_equal(s.run(None, {"x": x})[0].view(np.int32), ref.view(np.int32)) for s in sessions)
            cpu: list[list[float]] = [[] for _ in sessions]
            for _ in range(args.runs):
                for i, s in enumerate(sessions):
                    c0 = time.thread_time()
                    s.run(None, {"x": x})
                    cpu[i].append((time.thread_time() - c0) * 1e3)
            med = [statistics.median(c) for c in cpu]
            print(f"| {shp} | {elem} | " + " | ".join(f"{m:.3f}" for m in med)
                  + f" | {med[-1] / med[0]:.2f} | {'yes' if exact else 'NO'} | `{names[-1]}` |", flush=True)


if __name__ == "__main__":
    main()
