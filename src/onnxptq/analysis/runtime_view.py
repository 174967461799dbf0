"""What onnxruntime's CPU provider actually runs: per node of a quantized model, integer kernel or float.

A Q/DQ model only says where values are rounded; which nodes run on integers is decided by
onnxruntime's QDQ fusions at session creation. This module reads the graph onnxruntime writes
(``SessionOptions.optimized_model_filepath``) and tells, for every node of the model we emitted
(Q/DQ nodes aside), whether it became an integer kernel (QLinearConv, QLinearMatMul, QGemm,
QLinearAdd, ...), ran on the integer values (a Reshape/Transpose/MaxPool whose Q/DQ were
dropped), stayed a float op between DequantizeLinear and QuantizeLinear, or was removed (a Relu
folded into the quantizer after it).

The graph is written at the "extended" optimization level: that is where the QDQ fusions run and
where fused nodes keep the original node's name. The "all" level adds only layout changes
(NHWC QLinearConv, NCHWc float Conv) that rename nodes but change no kernel's number type.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..sessions import open_session

log = logging.getLogger(__name__)

#: Kernels onnxruntime computes on integer inputs.
INTEGER_KERNELS = frozenset(
    """QLinearConv QLinearMatMul MatMulInteger MatMulIntegerToFloat ConvInteger QGemm QLinearAdd QLinearMul
    QLinearConcat QLinearAveragePool QLinearGlobalAveragePool QLinearLeakyRelu QLinearSigmoid QLinearSoftmax
    QLinearWhere QLinearReduceMean QLinearConvTranspose QAttention DynamicQuantizeMatMul""".split()
)
#: Ops that move or select values: integer when their input is.
DATA_MOVEMENT = frozenset(
    "Expand Flatten Gather GatherElements MaxPool Reshape Resize Slice Split Squeeze Tile Transpose Unsqueeze ArgMax".split()
)
QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


@dataclass(frozen=True)
class NodeKernel:
    """How one node of the model ran: ``kind`` is "integer", "float" or "removed"."""

    name: str
    op_type: str
    kind: str
    kernel: str

    def describe(self) -> str:
        if self.kind == "removed":
            return f"{self.op_type:<20} removed   (folded by onnxruntime)  {self.name}"
        return f"{self.op_type:<20} {self.kind:<9} {self.kernel:<24} {self.name}"


def optimized_graph(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    """The graph onnxruntime's CPU provider builds from ``model`` (extended optimization level)."""
    with tempfile.TemporaryDirectory(prefix="onnxptq-runtime-") as folder:
        path = Path(folder) / "optimized.onnx"
        open_session(model, optimization="extended", optimized_model_path=path)
        return onnx.load(str(path))


def _integer_tensors(graph: onnx.GraphProto) -> set[str]:
    """Names of the tensors that hold integers in ``graph`` (quantized values, not indices)."""
    ints = {t.name for t in graph.initializer if t.data_type in (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)}
    found: set[str] = set(ints)
    for node in graph.node:
        if node.op_type == "QuantizeLinear" or (node.op_type in INTEGER_KERNELS and node.op_type not in
                                                 ("MatMulInteger", "MatMulIntegerToFloat", "ConvInteger", "DynamicQuantizeMatMul")):
            if node.op_type == "QGemm" and len(node.input) < 8:
                continue  # QGemm without y_scale outputs float
            found.update(o for o in node.output if o)
        elif node.op_type in DATA_MOVEMENT and node.op_type != "ArgMax" and node.input and node.input[0] in found:
            found.update(o for o in node.output if o)
    return found


def runtime_kernels(model: onnx.ModelProto | str | os.PathLike) -> list[NodeKernel]:
    """For every non-Q/DQ node of ``model``, in order: the kernel onnxruntime's CPU provider runs."""
    source = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    optimized = optimized_graph(model)
    ints = _integer_tensors(optimized.graph)
    by_name = {n.name: n for n in optimized.graph.node if n.name}
    by_output: dict[str, onnx.NodeProto] = {}
    for node in optimized.graph.node:
        for out in node.output:
            by_output[out] = node
    # A node's output reaches its readers through "<name>_QuantizeLinear_Output" after fusion.
    q_of = {n.input[0]: n.output[0] for n in source.graph.node if n.op_type == "QuantizeLinear"}
    rows: list[NodeKernel] = []
    for node in source.graph.node:
        if node.op_type in QDQ or not node.name:
            continue
        found = by_name.get(node.name)
        if found is None or found.op_type != node.op_type and not found.op_type.startswith("Q"):
            # Outputs keep their name, or gain "_pre_q" where onnxruntime moved a quantizer after them.
            candidates = [o for out in node.output for o in (out, q_of.get(out, ""), f"{out}_pre_q")]
            found = next((by_output[o] for o in candidates if o in by_output), found)
        if found is None:
            rows.append(NodeKernel(node.name, node.op_type, "removed", ""))
            continue
        if found.op_type in INTEGER_KERNELS:
            kind = "integer"
        elif found.op_type in DATA_MOVEMENT and found.input and found.input[0] in ints:
            kind = "integer"
        else:
            kind = "float"
        rows.append(NodeKernel(node.name, node.op_type, kind, found.op_type))
    return rows


def summary(rows: list[NodeKernel]) -> dict[str, dict[str, int]]:
    """{op type: {kind: count}}: how many nodes of each type ran as integer, float or were removed."""
    counts: dict[str, Counter] = {}
    for row in rows:
        counts.setdefault(row.op_type, Counter())[row.kind] += 1
    return {op: dict(c) for op, c in sorted(counts.items())}


def format_listing(rows: list[NodeKernel]) -> str:
    """The per-node listing and the per-op-type counts, as ``inspect --runtime`` prints them."""
    lines = [f"{'op type':<20} {'runs as':<9} {'kernel':<24} node"]
    lines += [row.describe() for row in rows]
    lines.append("")
    lines.append("per op type: integer / float / removed")
    for op, kinds in summary(rows).items():
        lines.append(f"  {op:<20} {kinds.get('integer', 0):4d} {kinds.get('float', 0):4d} {kinds.get('removed', 0):4d}")
    return "\n".join(lines)
