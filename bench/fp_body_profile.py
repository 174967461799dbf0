"""Where the OCP FP element body (MXFP8/MXFP6/MXFP4, onnx_ops/mx.py) spends its kernel time.

Builds a one-node model ``x → MXQuantizeDequantize_<elem>`` on one activation shape (the body
onnx_ops.mx.build emits for it: float32 input, the static view), runs it under onnxruntime's
profiler (one thread) and prints per body node the median kernel time with its input shapes, so a
slow ``Mul`` shows whether it is a broadcast (tensor × per-block scale) or a scalar product.
``--isolated`` also times single ``Mul`` nodes on the same element count: flat × scalar,
view × scalar, view × per-block scale — the cost of broadcasting a per-block value over short
spans. ``--tree`` picks the source tree (main's archive vs this branch) for a before/after.

    python bench/fp_body_profile.py [--shape 21000,32,1] [--axis 1] [--elem fp8_e4m3] [--runs 30] [--isolated]
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import collections
import json
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def one_node_model(shape: list[int], axis: int, elem: str) -> onnx.ModelProto:
    """``y = MX(x)`` with the body onnx_ops.mx.build emits for a float32 ``x`` of ``shape``."""
    from onnxptq.onnx_ops import mx

    q = mx.build("mx", "x", "y", name="q", opset=18, element_dtype=elem, axis=axis, block_size=32,
                 shape=shape, dtype="float32")
    g = helper.make_graph(q.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], q.initializers)
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in q.opset_imports.items()],
                             functions=q.functions, ir_version=10)


def profile(model: onnx.ModelProto, feed: dict[str, np.ndarray], runs: int) -> list[tuple[str, str, str, float]]:
    """(op type, node name, input shapes, median µs) per executed kernel."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="fpbody_"), "p")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        sess.run(None, feed)
    events = json.load(open(sess.end_profiling()))
    times: dict[str, list[float]] = collections.defaultdict(list)
    meta: dict[str, tuple[str, str]] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][: -len("_kernel_time")]
            times[node].append(e["dur"])
            args = e.get("args", {})
            shapes = json.dumps([list(d.values())[0] for d in args.get("input_type_shape", [])])
            meta[node] = (args.get("op_name", "?"), shapes)
    return [(meta[n][0], n, meta[n][1], statistics.median(v)) for n, v in times.items()]


def cpu_per_call(model: onnx.ModelProto, feed: dict[str, np.ndarray], runs: int) -> float:
    """Median CPU ms of one ``run`` (one thread)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    sess.run(None, feed)
    out = []
    for _ in range(runs):
        t = time.process_time()
        sess.run(None, feed)
        out.append((time.process_time() - t) * 1e3)
    return statistics.median(out)


def isolated(n: int, runs: int) -> None:
    """One Mul on n·32 elements: flat × scalar, (n,32,1) × scalar, (n,32,1) × (n,1,1), (1,32,n) × (1,1,n)."""
    rng = np.random.default_rng(0)
    cases = {
        "flat x scalar": ([n * 32], []),
        "(n,32,1) x scalar": ([n, 32, 1], []),
        "(n,32) x (n,1)": ([n, 32], [n, 1]),
        "(n,32,1) x (n,1,1)": ([n, 32, 1], [n, 1, 1]),
        "(1,32,n) x (1,1,n)": ([1, 32, n], [1, 1, n]),
    }
    for label, (xs, ss) in cases.items():
        node = helper.make_node("Mul", ["x", "s"], ["y"])
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs),
                                            helper.make_tensor_value_info("s", TensorProto.FLOAT, ss)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
        feed = {"x": rng.standard_normal(xs).astype(np.float32), "s": np.full(ss, 0.5, np.float32)}
        print(f"  Mul {label:<22} {cpu_per_call(m, feed, runs):8.3f} ms CPU per call")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="21000,32,1")
    ap.add_argument("--axis", type=int, default=1)
    ap.add_argument("--elem", default="fp8_e4m3")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--isolated", action="store_true")
    args = ap.parse_args()
    shape = [int(s) for s in args.shape.split(",")]
    model = one_node_model(shape, args.axis, args.elem)
    feed = {"x": (np.random.default_rng(1).standard_normal(shape) * 3).astype(np.float32)}
    rows = profile(model, feed, args.runs)
    total = sum(r[3] for r in rows)
    print(f"{model.functions[0].name}: {len(model.functions[0].node)} body nodes, kernel total {total:.0f} µs, "
          f"CPU per call {cpu_per_call(model, feed, args.runs):.3f} ms")
    by_op: dict[str, float] = collections.defaultdict(float)
    for op, _, _, us in rows:
        by_op[op] += us
    for op, us in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:<14} {us:8.0f} µs  {100 * us / total:5.1f} %")
    for op, name, shapes, us in sorted(rows, key=lambda r: -r[3])[:12]:
        print(f"    {us:7.0f} µs  {op:<12} {shapes}")
    if args.isolated:
        isolated(int(np.prod(shape)) // 32, args.runs)


if __name__ == "__main__":
    main()
