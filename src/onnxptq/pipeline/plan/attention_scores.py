"""The attention score products of a graph, found by dataflow: which MatMul makes the scores a Softmax reads.

Why a module of its own: the FP8-element MX rule (plan/fp_blocks.py ``attention_score_operands``)
and the measurements that decided it (bench/mxfp8_attention.py) need the same answer, and no
name or exporter convention gives it. A score product is a ``MatMul`` whose two inputs are both
computed at run time (queries and keys, not a weight: a classifier head ``x·W → Softmax`` is no
attention) and whose output reaches a ``Softmax`` input through ops that move or rescale each score
without mixing them: the ``1/√d`` scale (``Mul``/``Div``), a mask or position bias (``Add``/``Sub``,
``Where``), a dtype round trip (``Cast``) and head reshapes/permutations. The value product is the
``MatMul`` reading that Softmax's output (``pipeline/transformer.py attention_value_products``).
"""

from __future__ import annotations

import onnx

from ...graph.ops import RELAYOUTS
from .select import _Graph

__all__ = ["SCORE_PATH_OPS", "score_products"]

#: ops between a score MatMul and its Softmax that keep each score its own value (up to a scale, an
#: added bias or mask, a dtype round trip or a relayout)
SCORE_PATH_OPS = RELAYOUTS | {"Mul", "Div", "Add", "Sub", "Where", "Cast", "Dropout"}
#: how many such ops a path may hold (a scale, a mask, a bias, a reshape around each: seen up to 4)
_MAX_PATH = 6


def _computed(name: str, g: _Graph) -> bool:
    """Whether ``name`` is made at run time (not a weight nor folded from weights at load)."""
    if name in g.initializers:
        return False
    node = g.producer.get(name)
    return node is None or not (node.op_type == "Constant" or g.runs_at_load(node))


def _score_source(name: str, g: _Graph, depth: int = _MAX_PATH) -> onnx.NodeProto | None:
    """The MatMul with two computed inputs whose output tensor ``name`` carries through :data:`SCORE_PATH_OPS`,
    or None: a relayout or Cast carries its first input, an arithmetic op or ``Where`` either computed input
    (the other is the scale, the mask or the bias; a mask computed from the input ids is searched too and
    holds no such MatMul)."""
    src = g.producer.get(name)
    if src is None or depth < 0:
        return None
    if src.op_type == "MatMul":
        return src if len(src.input) >= 2 and all(_computed(i, g) for i in src.input[:2]) else None
    if src.op_type not in SCORE_PATH_OPS:
        return None
    carried = list(src.input[:2]) if src.op_type in ("Mul", "Div", "Add", "Sub") else (
        list(src.input[1:3]) if src.op_type == "Where" else list(src.input[:1]))
    for i in carried:
        if i and _computed(i, g):
            found = _score_source(i, g, depth - 1)
            if found is not None:
                return found
    return None


def score_products(g: _Graph) -> dict[str, tuple[str, str]]:
    """``{MatMul name: (queries, keys)}`` for every attention score product of ``g`` (module docstring)."""
    found: dict[str, tuple[str, str]] = {}
    for node in g.nodes:
        if node.op_type != "Softmax":
            continue
        src = _score_source(node.input[0], g) if node.input else None
        if src is None:
            continue
        found[src.name] = (src.input[0], src.input[1])
    return found
