"""Per-call cost of one block body from two source trees on conv-net activation shapes: thread CPU
of one 1-thread run, the trees' models interleaved in one process (median of ``--runs`` rounds),
and the CPU seconds of creating each session (best of the rounds' creations), issue 26 items 1 and 3.

Each tree builds, in a fresh process, a model ``Relu -> <preset's body for the static shape, float32>``
(``onnx_ops.build(shape=..., dtype="float32")``, the body the emitter picks for an activation of that
shape, axis ``--axis``, 1 by default); the outputs of both trees' models are compared bit for bit on the timed input (a
standard normal tensor; NaN equal to NaN) and on one holding ±0, subnormals, tiny blocks, ±Inf, NaN and values near
FLT_MAX.

    python bench/block_body_calls.py MX9 /work/cache/base /work/cache/new --shapes 1x16x384x384,1x48x96x96,1x64x48x48
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r'''
import sys
sys.path[:0] = [{root!r} + "/src"]
import onnx
from onnx import helper, TensorProto
from onnxptq.formats.bfp import PRESETS
from onnxptq.onnx_ops import build_qdq
shape = {shape!r}
preset = {preset!r}
if preset in PRESETS:
    fmt, attrs = "bfp", dict(PRESETS[preset], axis={axis})
else:
    fmt, attrs = "mx", dict(element_dtype={{"MXINT8": "int8", "MXFP8_E4M3": "fp8_e4m3"}}[preset], axis={axis}, block_size=32, rounding_mode=2)
frag = build_qdq(fmt, "r", "y", name="q", opset=17, shape=shape, dtype="float32", **attrs)
opset = max(17, frag.min_opset)
if opset != 17:
    frag = build_qdq(fmt, "r", "y", name="q", opset=opset, shape=shape, dtype="float32", **attrs)
g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), *frag.nodes], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=frag.initializers)
imports = {{"": opset, **{{d: v for d, v in frag.opset_imports.items() if d != ""}}}}
m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()], functions=frag.functions)
m.ir_version = 8
onnx.save(m, {out!r})
'''


def edge_tensor(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Standard normal values with, along axis 1 of the first positions: ±0, subnormals, a block of
    tiny normals among subnormals, ±Inf, NaN (first and second in a pair) and values near FLT_MAX.
    The model's Relu keeps the non-negative ones (and NaN), so signs are mixed in both halves."""
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(shape[0], shape[1], -1)
    c = shape[1]
    flat[0, :, 0] = 0.0
    flat[0, :, 1] = np.float32(2.0**-130) * np.arange(1, c + 1, dtype=np.float32)
    flat[0, :, 2] = np.float32(2.0**-120) * rng.random(c, dtype=np.float32)
    flat[0, 1::2, 2] = np.float32(2.0**-127)
    flat[0, 0, 3], flat[0, 1, 4] = np.inf, np.nan
    flat[0, 0, 5] = np.nan
    flat[0, :, 6] = np.float32(3.0e38)
    return x


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (the sign of zero included), NaN where the other is NaN (any payload)."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset")
    ap.add_argument("trees", nargs=2)
    ap.add_argument("--shapes", default="1x16x384x384,1x48x96x96,1x64x48x48")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--axis", type=int, default=1)
    args = ap.parse_args()
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    labels = [os.path.basename(t.rstrip("/")) for t in args.trees]
    tmp = tempfile.mkdtemp(prefix="block_body_calls_")
    print(f"| preset | shape | ms a call {labels[0]} | {labels[1]} | ratio | create ms {labels[0]} | {labels[1]} | same bits |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for spec in args.shapes.split(","):
        shape = tuple(int(v) for v in spec.split("x"))
        paths = []
        for root, label in zip(args.trees, labels):
            out = os.path.join(tmp, f"{label}.{spec}.onnx")
            res = subprocess.run([sys.executable, "-c", CHILD.format(root=root, shape=list(shape), preset=args.preset, out=out, axis=args.axis)],
                                 capture_output=True, text=True, cwd=root)
            if res.returncode:
                raise SystemExit(f"{label}: {res.stderr[-500:]}")
            paths.append(out)
        rng = np.random.default_rng(0)
        x, edge = rng.standard_normal(shape).astype(np.float32), edge_tensor(shape, rng)
        sessions, create = [], []
        for p in paths:
            t = time.process_time()
            sessions.append(ort.InferenceSession(p, so, providers=["CPUExecutionProvider"]))
            create.append(time.process_time() - t)
        same = all(_same_bits(*(s.run(None, {"x": feed})[0] for s in sessions)) for feed in (x, edge))
        times: list[list[float]] = [[], []]
        for _ in range(args.runs):
            for i, s in enumerate(sessions):
                t = time.thread_time()
                s.run(None, {"x": x})
                times[i].append(time.thread_time() - t)
        med = [statistics.median(t) * 1e3 for t in times]
        print(f"| {args.preset} | {spec} | {med[0]:.3f} | {med[1]:.3f} | {med[1] / med[0]:.3f} | {create[0] * 1e3:.1f} | "
              f"{create[1] * 1e3:.1f} | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
