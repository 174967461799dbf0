"""A value output read only where its sibling confidence output says the model's decision stands.

Why: swift-f0 (a pitch detector) outputs ``pitch`` and ``confidence`` per 256-sample frame. Both
come from one arg-max over the frame's pitch-bin scores: the pitch is read around that bin, the
confidence is a sigmoid head's probability, set to 0 where the bin is out of range. The package
reads the pitch only where the confidence passes its cut; in the frames the model itself calls
unvoiced the scores are flat and the arg-max bin (so the pitch) jumps between bins under any
rounding. The floor judged ``pitch`` over every frame: cosine 0.84-0.94 under FP16/A8W8 while the
frames the package reads agreed 0.996-0.999 with float's, and repair kept 98 nodes float under FP16
(bench/RESULTS.md, "More models outside the zoo, eleventh round").

**Found by structure** (:func:`confidence_gated_outputs`): a graph output ``C`` whose values are a
``Sigmoid``'s (through data movement and the data inputs of a ``Where``, which may put a constant
instead), with an ``ArgMax`` among its ancestors; and another float graph output ``P`` whose
ancestors hold an ``ArgMax`` of the same scores (the tensor ``C``'s arg-max reads, or one computed
from it, as swift-f0's masked and padded copy). ``C`` is the model's own probability that the
decision behind ``P`` holds. **On the data** (analysis/floor.py): where ``C`` has ``P``'s shape on
a feed, ``P`` is judged on the positions where float's ``C`` is at least 0.5 (the sigmoid's own
decision: its logit's sign), and not judged on a feed with none. A model whose confidence does not
share the arg-max is not gated.
"""

from __future__ import annotations

from typing import Collection

import numpy as np
import onnx

from ..graph.ops import FLOATING, RELAYOUTS
from ..graph.walk import constant_names, upstream_nodes

__all__ = ["GATE", "confidence_gated_outputs", "confident_positions", "from_sigmoid", "gate_mask"]

#: a sigmoid probability's decision point (its logit's sign)
GATE = 0.5
_MOVES = RELAYOUTS | {"Cast"}


def _ancestors(tensor: str, producer: dict[str, onnx.NodeProto]) -> set[str]:
    """Every tensor ``tensor`` is computed from (itself included), through the main graph's nodes."""
    return {tensor} | {i for node in upstream_nodes(tensor, producer, lambda _: True) for i in node.input if i}


def from_sigmoid(tensor: str, producer: dict[str, onnx.NodeProto], constants: Collection[str], *,
                 sigmoids: Collection[str] = ("Sigmoid",), through: Collection[str] = _MOVES, where: bool = True) -> bool:
    """Whether ``tensor``'s values are a Sigmoid's, through data movement and a Where's data inputs.
    The gain reading (:mod:`.gains`) asks the same with its own walk: ``HardSigmoid`` too among the
    ``sigmoids``, ``Clip`` among the ops passed ``through`` (first input), no ``where``."""
    for _ in range(8):
        node = producer.get(tensor)
        if node is None:
            return False
        if node.op_type in sigmoids:
            return True
        if where and node.op_type == "Where" and len(node.input) == 3:
            data = [i for i in node.input[1:] if i not in constants]
            if len(data) != 1:
                return False
            tensor = data[0]
        elif node.op_type in through and node.input:
            tensor = node.input[0]
        else:
            return False
    return False


def confidence_gated_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """Value output → the sibling confidence output that gates it (module docstring)."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output if o}
    constants = constant_names(g)
    argmax_of = {n.output[0]: n.input[0] for n in g.node if n.op_type == "ArgMax" and n.input and n.output}
    floats = {o.name for o in g.output if o.type.tensor_type.elem_type in FLOATING}
    sigmoids = [o.name for o in g.output if o.name in floats and from_sigmoid(o.name, producer, constants)]
    if not sigmoids or not argmax_of:
        return {}  # most models: no ancestry walked
    ancestry: dict[str, set[str]] = {}

    def above(tensor: str) -> set[str]:
        if tensor not in ancestry:
            ancestry[tensor] = _ancestors(tensor, producer)
        return ancestry[tensor]

    gates: dict[str, str] = {}
    for conf in sigmoids:
        scores = {argmax_of[t] for t in above(conf) if t in argmax_of}
        if not scores:
            continue
        for out in g.output:
            if out.name == conf or out.name not in floats or out.name in gates:
                continue
            decided = [argmax_of[t] for t in above(out.name) if t in argmax_of]
            if any(scores & above(s) for s in decided):
                gates[out.name] = conf
    return gates


def gate_mask(probabilities: np.ndarray) -> np.ndarray | None:
    """Float's ``probabilities`` ≥ :data:`GATE`, or None where they are no finite values in [0, 1]
    (then the output they gate is judged whole): the one test of this gate and the spatial one
    (:mod:`.spatial_gates`)."""
    p = np.asarray(probabilities)
    if not np.issubdtype(p.dtype, np.floating) or not np.isfinite(p).all():
        return None
    if float(p.min()) < -1e-6 or float(p.max()) > 1.0 + 1e-6:
        return None
    return p >= GATE


def confident_positions(confidence: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """Float's confidence ≥ :data:`GATE` as a mask of ``shape``, or None where its values are no
    probabilities of that shape (then the output is judged whole)."""
    c = np.asarray(confidence)
    return gate_mask(c) if c.shape == shape else None
