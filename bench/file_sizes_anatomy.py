"""Where the bytes of a quantized file go (issue 26 item 2, branch blocksize): initializers by
dtype, node records by op type, the bytes of names, function definitions and how many distinct
bodies they hold (byte-identical but for the name; identical but for constant values).

Why: bench/file_sizes.py's breakdown says "functions 56 KB" but not that 11 of 24 definitions
were the same body under another name; this one says what sharing would leave.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/file_sizes_anatomy.py --model shipped:cls --preset MXINT8 [--tree main-src]
    python bench/file_sizes_anatomy.py --file some.onnx
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import tempfile
from pathlib import Path

import _common  # noqa: F401 - the repository root on sys.path
import onnx

import file_sizes as fs


def _skeleton(fn: onnx.FunctionProto, blank_constants: bool) -> bytes:
    g = onnx.FunctionProto()
    g.CopyFrom(fn)
    g.name = ""
    if blank_constants:
        for node in g.node:
            if node.op_type == "Constant":
                del node.attribute[:]
    return g.SerializeToString(deterministic=True)


def anatomy(path: str, reference_bytes: int | None = None) -> list[str]:
    m = onnx.load(path)
    g = m.graph
    size = m.ByteSize()
    ref = reference_bytes or size
    out = [f"file {size} B" + (f" ({size / ref:.3f}x the fp32 file)" if reference_bytes else "")]
    by_type: dict[str, int] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    for t in g.initializer:
        k = onnx.TensorProto.DataType.Name(t.data_type)
        by_type[k] += t.ByteSize()
        count[k] += 1
    out.append("initializers: " + ", ".join(f"{k} {v} B ({count[k]})" for k, v in by_type.most_common())
               + f"; their names {sum(len(t.name) for t in g.initializer)} B")
    ops: dict[str, int] = collections.Counter()
    n_ops: dict[str, int] = collections.Counter()
    for n in g.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}"
        ops[key] += n.ByteSize()
        n_ops[key] += 1
    strings = sum(len(n.name) + sum(map(len, n.input)) + sum(map(len, n.output)) for n in g.node)
    out.append(f"nodes: {len(g.node)}, {sum(ops.values())} B, of which names {strings} B; by op: "
               + ", ".join(f"{k} {n_ops[k]}x {v} B" for k, v in ops.most_common(10)))
    fns = list(m.functions)
    total = sum(f.ByteSize() for f in fns)
    exact = {_skeleton(f, False) for f in fns}
    shapes = collections.defaultdict(list)
    for f in fns:
        shapes[_skeleton(f, True)].append(f)
    kept = sum(v[0].ByteSize() for v in shapes.values())
    out.append(f"functions: {len(fns)} definitions, {total} B; {len(exact)} distinct bodies; "
               f"{len(shapes)} distinct but for constant values ({kept} B, one of each)")
    out.append(f"value_info: {sum(v.ByteSize() for v in g.value_info)} B")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="zoo:NAME / nm:NAME / shipped:cls|rec (quantized here)")
    ap.add_argument("--preset", default="MXINT8")
    ap.add_argument("--file", help="an already quantized file instead")
    args = ap.parse_args(argv)
    if args.file:
        print("\n".join(anatomy(args.file)))
        return 0
    from onnxptq import quantize
    from onnxptq.config.presets import resolve_config

    path, feeds = fs.model_source(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "q.onnx")
        quantize(path, dataclasses.replace(resolve_config(args.preset), repair=False), data=feeds(4, 1), output=out)
        print(f"{args.model} {args.preset}")
        print("\n".join(anatomy(out, fs.total_bytes(path))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
