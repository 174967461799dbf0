"""Peak suppression by equality: a map compared with its own local maximum stays float.

Why: detectors suppress non-peaks by exact equality, ``keep = (MaxPool(p) == p)`` (CenterNet-style
peak NMS; LEADER's minutiae quality is ``p · [p == MaxPool(p)]``). The comparison is only right if
neighbouring values of ``p`` stay distinct. Any rounding of ``p`` — one int8 grid shared by both
sides, bf16's 8 mantissa bits, an MX block's shared exponent — folds neighbours that differ by less
than one step onto one value: a plateau, and every point of a plateau equals its local maximum, so
each becomes a peak (and where the two sides pass through different quantizers, true peaks vanish
instead). Measured on leader_minutiae with repair off (bench/RESULTS.md, "More models outside the
zoo, eighth round"): minutiae F1 0.700 under BF16, 0.663 under A8W8; the floor caught it and
repair kept up to 822 of 939 nodes float to recover it. Sharing one quantizer between the two
sides would stop peaks vanishing but not plateaus forming, so the only rounding that keeps the
comparison is none.

The rule, by dataflow (no names): for every comparison (``Equal``, ``Greater(OrEqual)``,
``Less(OrEqual)``) of two computed tensors, walk each operand back through data movement
(:data:`MOVES`) to its source; where one side's source is an order-preserving selection
(:data:`SELECTIONS`: ``MaxPool``, ``ReduceMax``, ``Max``…) whose input, walked back the same way,
has the other side's source, every tensor from that source to the comparison on both sides (the
source itself, the moves, the selection's input and output) stays float, with the reason in the
plan.

Upstream too: a map that is a per-value function of a rounded map is as gridded as it. A
``Sigmoid`` of equal inputs gives equal outputs, and a filter that mixes no channels (a ``Conv``
whose weight reads one input channel: LEADER's 5×5 Gaussian blur before its ``MaxPool``; the test's
3×3 one) sums a few on-grid values with on-grid weights, so the result lies on a grid of its own
and neighbours tie (measured on the built test graph with only the source float: 34 to 108 extra
peaks in 6 maps of 11). So from the source the rule walks back through data movement, unary
elementwise ops (:data:`POINTWISE`, or arithmetic with a constant operand) and channel-wise filters
to the first op that mixes many values (a channel-mixing ``Conv``, ``MatMul``, ``Gemm``, or any op
with two computed inputs) and keeps every tensor on the way float, that op's output included: its
sum over channels of differently rounded values is fine-grained, so its operands stay quantized.
"""

from __future__ import annotations

import logging

import onnx

from ...graph.ops import RELAYOUTS
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["COMPARISONS", "MOVES", "POINTWISE", "SELECTIONS", "peak_suppressions", "peak_nms_float"]

#: comparisons that can test "this value is its neighbourhood's maximum (minimum)"
COMPARISONS = frozenset("Equal Greater GreaterOrEqual Less LessOrEqual".split())
#: ops that move values without changing any (a value and its copy stay equal)
MOVES = RELAYOUTS | {"Expand"}
#: order-preserving selections: each output value is one of the input's values
SELECTIONS = frozenset("MaxPool GlobalMaxPool ReduceMax ReduceMin Max Min".split())
#: unary elementwise ops: equal inputs give equal outputs (the walk upstream passes them)
POINTWISE = frozenset("""Sigmoid Tanh Relu LeakyRelu Elu Selu Softplus HardSigmoid HardSwish Exp Log Sqrt Neg Abs
    Clip Erf Gelu Cast""".split())
#: elementwise arithmetic the walk upstream passes where the other operand is a constant
_WITH_CONSTANT = frozenset("Add Sub Mul Div Pow".split())


def _source(name: str, g: _Graph) -> tuple[str, list[str]]:
    """``(source, path)``: ``name`` walked back through :data:`MOVES` (first inputs) to the first
    tensor a non-move op (or the graph) makes; ``path`` lists every tensor passed, source last."""
    path = [name]
    while (node := g.producer.get(name)) is not None and node.op_type in MOVES and node.input and node.input[0]:
        name = node.input[0]
        path.append(name)
    return name, path


def _computed(node: onnx.NodeProto, g: _Graph) -> list[str]:
    """``node``'s inputs that are not initializers."""
    return [x for x in node.input if x and x not in g.initializers]


def _channelwise_filter(node: onnx.NodeProto, g: _Graph) -> bool:
    """True for a ``Conv`` whose weight reads one input channel per output (a filter, no mixing)."""
    weight = g.initializers.get(node.input[1]) if node.op_type == "Conv" and len(node.input) > 1 else None
    return weight is not None and len(weight.dims) >= 2 and weight.dims[1] == 1


def _upstream(source: str, g: _Graph) -> list[str]:
    """The tensors from ``source`` back to the output of the first op that mixes many values
    (module docstring), ``source`` first, that op's output last."""
    path, seen = [source], {source}
    while (node := g.producer.get(path[-1])) is not None:
        inputs = _computed(node, g)
        if len(inputs) != 1 or inputs[0] in seen or not (
                node.op_type in MOVES or node.op_type in POINTWISE or node.op_type in _WITH_CONSTANT
                or _channelwise_filter(node, g)):
            break
        path.append(inputs[0])
        seen.add(inputs[0])
    return path


def peak_suppressions(g: _Graph) -> dict[str, list[str]]:
    """``{comparison node: tensors that must stay exact}`` for every comparison of a tensor with
    an order-preserving selection of that same tensor (module docstring)."""
    found: dict[str, list[str]] = {}
    for node in g.nodes:
        if node.op_type not in COMPARISONS or len(node.input) != 2:
            continue
        if any(not name or name in g.initializers for name in node.input):
            continue
        sides = [_source(name, g) for name in node.input]
        for i in (0, 1):
            (selected, near), (plain, far) = sides[i], sides[1 - i]
            selection = g.producer.get(selected)
            if selection is None or selection.op_type not in SELECTIONS:
                continue
            for operand in (x for x in selection.input if x and x not in g.initializers):
                root, inner = _source(operand, g)
                if root == plain:
                    found[node.name] = list(dict.fromkeys(near + inner + far + _upstream(plain, g)))
                    break
            if node.name in found:
                break
    return found


def peak_nms_float(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Remove the planned tensors of every peak suppression from ``tensors``; returns
    ``{tensor: reason}`` for ``Plan.float_tensors``."""
    why: dict[str, str] = {}
    for comparison, names in peak_suppressions(g).items():
        for name in names:
            if tensors.pop(name, None) is not None:
                why[name] = (f"read by {comparison}, which compares a map with its own local maximum (peak "
                             "suppression by equality): rounding makes plateaus of equal neighbours, each a peak "
                             "(plan/peak_nms.py), so it stays float")
    if why:
        log.info("plan: %d tensors of a peak suppression by equality stay float: %s", len(why), ", ".join(sorted(why)[:4]))
    return why
