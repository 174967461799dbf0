"""Where a BFP body (BFP16 ``to_bfp``, MX4/MX6/MX9 ``to_bfp_prime``; onnx_ops/bfp.py) spends its time.

Builds a one-node model ``x → BFPQuantizeDequantize`` for a preset on one activation shape (the
body onnx_ops.bfp.build emits for a float32 input of that static shape), prints its CPU ms per
call (one thread, median of ``--runs``) and, with ``--profile``, the kernel time per op type and
the slowest nodes with their input shapes (onnxruntime's profiler), so a slow elementwise op shows
whether it reads a view tensor with trailing 1s against a rank-0 constant (the broadcast path
bench/fp_body_profile.py found). Run it with ``PYTHONPATH=<tree>:.`` for main's archive vs this
branch; several ``--shape`` values run in one process.

    python bench/bfp_body_profile.py --preset MX9 --shape 1,64,48,48 --shape 21000,32 [--axis 1] [--runs 30] [--profile]
"""

from __future__ import annotations

import _common  # noqa: F401  (repository root on sys.path)
import argparse
import collections

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="comma-separated dims (repeatable)")
    ap.add_argument("--axis", type=int, default=1)
    ap.add_argument("--preset", default="BFP16", help="BFP16, MX4, MX6 or MX9")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    for spec in args.shape or ["21000,32,1"]:
        shape = [int(s) for s in spec.split(",")]
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
