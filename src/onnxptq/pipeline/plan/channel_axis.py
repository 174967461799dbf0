"""Which axis of a weight its per-channel integer quantizer keeps one scale along: the output channels
its reader computes (Conv's first axis, a 2-D MatMul's last, Gemm's by ``transB``, a recurrent layer's
gate rows). One place, because the plan (:mod:`.assign`) and a user's tensor override
(:func:`.rules._apply_tensor_overrides`) of a weight the plan kept float must agree on it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

from ...config.schema import ConfigError, TensorQuant
from ...graph.ops import RECURRENT

if TYPE_CHECKING:
    from .select import _Graph


def weight_channel_axis(node: onnx.NodeProto, index: int, rank: int) -> int | None:
    """Output-channel axis of a weight for per-channel integer quantization."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv" and index == 1:
        return 0
    if node.op_type == "ConvTranspose" and index == 1:
        return 1
    if node.op_type == "Gemm" and index == 1:
        return 0 if attrs.get("transB", 0) else 1
    if node.op_type == "MatMul" and index == 1 and rank == 2:
        return 1
    # A batched (rank > 2) MatMul weight (dynamo's broadcast matmul, an einsum's stacked heads) stays
    # per-tensor: onnxruntime fuses its Q/DQ into MatMulIntegerToFloat, which refuses a 1-D zero point
    # for a 3-D B ("b zero point is not valid") at run time.
    if node.op_type in RECURRENT and index in (1, 2):
        return 1  # [directions, gates x hidden, input or hidden]: one scale per gate row
    return None


def consumers_channel_axis(name: str, consumers: list[onnx.NodeProto], rank: int | None) -> int | None:
    """The channel axis every reader of weight ``name`` implies (:func:`weight_channel_axis`), or None
    where a reader implies none, the readers disagree, or the rank is unknown: one scale per tensor then."""
    if rank is None or not consumers:
        return None
    axes = {weight_channel_axis(n, index, rank) for n in consumers for index, i in enumerate(n.input) if i == name}
    return axes.pop() if len(axes) == 1 else None


def override_channel_axis(name: str, quant: TensorQuant, g: "_Graph") -> int | None:
    """The per-channel axis of an integer weight override: the user's ``axis`` where given, else the one
    the weight's readers imply (:func:`consumers_channel_axis`), as the plan would choose."""
    rank = g.rank.get(name)
    if rank is None and name in g.initializers:
        rank = len(g.initializers[name].dims)
    if quant.axis is not None and rank:
        if not -rank <= quant.axis < rank:
            raise ConfigError(f"tensor_overrides[{name!r}]: axis {quant.axis} is out of range for a weight of rank {rank}")
        return quant.axis % rank
    return consumers_channel_axis(name, g.consumers.get(name, []), rank)
