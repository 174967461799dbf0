"""What a delivered file's constant folding holds at load, by op: the bytes of every node output whose
inputs are all initializers or constants (transitively), from ONNX shape inference (issue 26 items 2/4).

Why: onnxruntime's constant folding keeps each folded step's output until its pass ends, so a decode
chain's load peak follows the sum of its steps' outputs (packed20 → packed21: rec MX4 97.99 → 78.56 MB
folded, session peak 123.8 → 104.9 MB). Static and exact, so two forms compare without a noisy RSS
reading; ``--chain BYTES`` lists each folded output of at least BYTES, in graph order, with its inputs.

    python bench/file_sizes_folded.py FILE.onnx [FILE2.onnx ...] [--chain 1e6]
"""

from __future__ import annotations

import argparse
import collections

import numpy as np
import onnx
from onnx import helper, shape_inference


def folded(path: str, chain: float = 0.0) -> tuple[int, collections.Counter, collections.Counter]:
    """``(initializer bytes, folded bytes by 'Op->dtype', outputs by 'Op->dtype')`` of ``path``."""
    model = onnx.load(path)
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    info = {v.name: v.type.tensor_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    inits = {i.name: i for i in model.graph.initializer}
    const = set(inits)
    by: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    for node in model.graph.node:
        if node.op_type == "Constant" or all(x in const or x == "" for x in node.input):
            const.update(node.output)
        if node.op_type == "Constant" or not all(x in const or x == "" for x in node.input):
            continue
        for out in node.output:
            t = info.get(out)
            if t is None or any(not d.HasField("dim_value") for d in t.shape.dim):
                raise ValueError(f"{path}: {node.op_type} {out}: shape not inferred")
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            size = int(np.prod([d.dim_value for d in t.shape.dim], dtype=np.int64)) * dtype.itemsize
            by[f"{node.op_type}->{dtype.name}"] += size
            count[f"{node.op_type}->{dtype.name}"] += 1
            if chain and size >= chain:
                ins = [f"{x}{list(inits[x].dims)}" if x in inits else x for x in node.input]
                print(f"  {size / 1e6:7.2f} MB {node.op_type:10s} {dtype.name:8s} {[d.dim_value for d in t.shape.dim]} <- {ins}")
    stored = sum(int(np.prod(i.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(i.data_type).itemsize
                 for i in model.graph.initializer)
    return stored, by, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--chain", type=float, default=0.0, help="list folded outputs of at least this many bytes")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    for path in args.files:
        print(path)
        stored, by, count = folded(path, args.chain)
        print(f"  initializers {stored / 1e6:.2f} MB; folded outputs {sum(by.values()) / 1e6:.2f} MB")
        for key, size in by.most_common(args.top):
            print(f"    {key:24s} {count[key]:5d} {size / 1e6:8.2f} MB")


if __name__ == "__main__":
    main()
