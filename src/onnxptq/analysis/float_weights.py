"""How many of the model's constant float bytes a quantization left float, by the op that reads them, and why.

Why: a user who asks for MXINT8 or A8W8 reads the summary's cosine and expects a small file. When
most of the weights sit in ops the plan cannot quantize (a scikit-learn forest converted by skl2onnx
keeps its trees in a ``TreeEnsembleClassifier``'s attributes; before fuzz17 an LSTM inside an ``If``
branch kept its weights as fp32), the file stays the size of the float one and only
``plan.skipped_nodes`` said so (round 27 of outside models, bench/RESULTS.md). The summary now says
how many weight bytes stayed float, which ops hold them and the plan's reason, and a warning says it
when most of them did.

What counts: the float constants of the prepared model (the names the plan uses), in every graph
(If branches, Loop/Scan bodies): initializers, ``Constant`` nodes' values, and float data held in a
node's attributes (``floats`` lists and tensors: tree thresholds and leaf weights, a linear
classifier's coefficients), which no quantizer can reach. A constant is left float when the plan
did not plan it; bytes are counted from dims and element type, so a model with external data is not
read for this.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import onnx

from ..graph.walk import all_graphs, dataflow

__all__ = ["ConstantBytes", "FloatShare", "constant_table", "float_share", "float_weight_line",
           "REPORT_SHARE", "WARN_SHARE"]

#: the summary names float weights when at least this share of the constant float bytes stayed float
REPORT_SHARE = 0.05
#: and a warning says so when at least this share did (most of the model's bytes: the file barely shrinks)
WARN_SHARE = 0.5
#: constants below this many bytes (shape-like scalars, epsilons, a LayerNorm's γ on a small model) are not counted
MIN_BYTES = 1024

_FLOAT_TYPES = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
                onnx.TensorProto.DOUBLE: 8}


@dataclass(frozen=True)
class ConstantBytes:
    """One float constant: its size and the ops that read it (an attribute's: the op that holds it)."""

    nbytes: int
    ops: tuple[str, ...]
    readers: tuple[str, ...]
    #: True for data inside a node's attributes: never plannable
    attribute: bool = False


@dataclass
class FloatShare:
    """The float constants' bytes, those left float, and those by reading op type."""

    total: int = 0
    left: int = 0
    #: op type → (constants, bytes) left float
    by_op: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: op type → the plan's reason for its first skipped reader (or why attribute data stays float)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.left / self.total if self.total else 0.0


def _tensor_bytes(t: onnx.TensorProto) -> int:
    width = _FLOAT_TYPES.get(t.data_type)
    return width * math.prod(t.dims) if width is not None else 0


def _attribute_bytes(attr: onnx.AttributeProto) -> int:
    if attr.type == onnx.AttributeProto.FLOATS:
        return 4 * len(attr.floats)
    if attr.type == onnx.AttributeProto.TENSOR:
        return _tensor_bytes(attr.t)
    if attr.type == onnx.AttributeProto.TENSORS:
        return sum(_tensor_bytes(t) for t in attr.tensors)
    return 0


def constant_table(model: onnx.ModelProto) -> dict[str, ConstantBytes]:
    """``{name: ConstantBytes}`` of ``model``'s float constants of at least :data:`MIN_BYTES`.

    Initializers and ``Constant`` outputs go by their tensor name (the plan's); attribute data by
    ``node/attribute`` (never a tensor name, so never planned)."""
    sizes: dict[str, int] = {}
    table: dict[str, ConstantBytes] = {}
    graphs = list(all_graphs(model.graph))
    for g in graphs:
        for t in g.initializer:
            sizes[t.name] = _tensor_bytes(t)
        for node in g.node:
            if node.op_type == "Constant" and node.output:
                sizes[node.output[0]] = sum(_attribute_bytes(a) for a in node.attribute)
                continue
            held = sum(_attribute_bytes(a) for a in node.attribute)
            if held >= MIN_BYTES:
                table[f"{node.name or node.op_type}/attributes"] = ConstantBytes(
                    held, (node.op_type,), (node.name,), attribute=True)
    readers = dataflow(n for g in graphs for n in g.node)[1]
    for name, nbytes in sizes.items():
        if nbytes < MIN_BYTES or name not in readers:
            continue
        nodes = readers[name]
        table[name] = ConstantBytes(nbytes, tuple(dict.fromkeys(n.op_type for n in nodes)),
                                    tuple(n.name for n in nodes))
    return table


def float_share(table: Mapping[str, ConstantBytes], planned: Collection[str],
                skipped: Mapping[str, str]) -> FloatShare:
    """What of ``table`` a plan (its ``planned`` tensor names, its ``skipped`` {node: reason}) left float."""
    share = FloatShare()
    for name, c in table.items():
        share.total += c.nbytes
        if not c.attribute and name in planned:
            continue
        share.left += c.nbytes
        op = c.ops[0]
        count, nbytes = share.by_op.get(op, (0, 0))
        share.by_op[op] = (count + 1, nbytes + c.nbytes)
        if op not in share.reasons:
            reason = next((skipped[r] for r in c.readers if r in skipped), None)
            if reason is None and c.attribute:
                reason = "data held in the op's attributes: no quantizer reaches it"
            if reason is not None:
                share.reasons[op] = reason
    return share


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KB"


def float_weight_line(share: FloatShare, most: int = 3) -> str | None:
    """The summary's line, or None when under :data:`REPORT_SHARE` of the weight bytes stayed float."""
    if share.total == 0 or share.share < REPORT_SHARE:
        return None
    ranked = sorted(share.by_op.items(), key=lambda kv: -kv[1][1])
    parts = []
    for op, (count, nbytes) in ranked[:most]:
        why = share.reasons.get(op)
        parts.append(f"{op} ×{count} {_size(nbytes)}" + (f" ({why})" if why else ""))
    if len(ranked) > most:
        parts.append(f"{len(ranked) - most} more op types {_size(sum(b for _, (_, b) in ranked[most:]))}")
    return (f"weights left float: {_size(share.left)} of {_size(share.total)} ({100 * share.share:.0f} %): "
            + "; ".join(parts))
