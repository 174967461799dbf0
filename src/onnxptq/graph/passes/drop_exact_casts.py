"""Drop BF16 Cast pairs that cannot change a value: the tensor is already bfloat16-exact.

A BF16 quantizer is ``Cast(to=BFLOAT16) → Cast(to=FLOAT)``, two full passes at ~0.5 ns an element
on onnxruntime's CPU provider (bench/RESULTS.md, issue 26). When its input was produced by an op
that only moves, selects or clamps-at-zero values (Transpose, Reshape, Slice, Concat, MaxPool,
Relu, nearest Resize, ...) from tensors that are themselves bfloat16-exact (outputs of Cast pairs),
every value it holds is a bfloat16 value, and the pair is the identity on them: a value the
round trip maps to itself. Removing it is bit-exact (NaN stays NaN; only a NaN's payload could
differ, which no format defines). The plan still lists the tensor as BF16; only the redundant
runtime work goes (PP-OCRv4 rec: 25 of its 178 pairs, det: 8 of 157, most of them large).
"""

from __future__ import annotations

import logging

import onnx
from onnx import TensorProto

from ..opsets import is_onnx_domain

log = logging.getLogger(__name__)

#: op type -> indices of its data inputs (None: every input). Each maps bfloat16-exact inputs to
#: bfloat16-exact outputs: it copies, selects, reorders, max-reduces, or takes max(x, 0).
_PRESERVING: dict[str, tuple[int, ...] | None] = {
    "Identity": (0,), "Reshape": (0,), "Flatten": (0,), "Squeeze": (0,), "Unsqueeze": (0,),
    "Transpose": (0,), "Slice": (0,), "Split": (0,), "Gather": (0,), "Expand": (0,), "Tile": (0,),
    "Concat": None, "MaxPool": (0,), "GlobalMaxPool": (0,), "ReduceMax": (0,), "ReduceMin": (0,),
    "Relu": (0,), "Resize": (0,), "DepthToSpace": (0,), "SpaceToDepth": (0,),
}


def _preserves(node: onnx.NodeProto) -> tuple[int, ...] | None | bool:
    if not is_onnx_domain(node.domain) or node.op_type not in _PRESERVING:
        return False
    if node.op_type == "Resize":
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"nearest")
        if mode != b"nearest":
            return False
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        return False  # the indices output is not a value
    return _PRESERVING[node.op_type]


def drop_exact_bf16_casts(model: onnx.ModelProto) -> int:
    """Remove, in ``model``'s main graph, every BF16 Cast pair whose input is bfloat16-exact by
    construction (see the module docstring). Returns the number of pairs removed."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in graph.output}

    def to(node: onnx.NodeProto) -> int:
        return next((a.i for a in node.attribute if a.name == "to"), -1)

    exact: set[str] = set()
    pairs: dict[str, onnx.NodeProto] = {}  # float Cast output -> its bf16 Cast
    for node in graph.node:  # topological order
        if node.op_type == "Cast" and is_onnx_domain(node.domain) and to(node) == TensorProto.FLOAT:
            first = producer.get(node.input[0])
            if first is not None and first.op_type == "Cast" and to(first) == TensorProto.BFLOAT16 \
                    and is_onnx_domain(first.domain):
                exact.add(node.output[0])
                pairs[node.output[0]] = first
            continue
        data = _preserves(node)
        if data is False:
            continue
        inputs = [i for k, i in enumerate(node.input) if i and (data is None or k in data)]
        if inputs and all(i in exact for i in inputs):
            exact.update(o for o in node.output if o)

    rename: dict[str, str] = {}
    drop: set[int] = set()
    for out, first in pairs.items():
        source = first.input[0]
        if source not in exact or out in outputs or readers.get(first.output[0], 0) != 1:
            continue
        second = producer[out]
        rename[out] = source
        drop.update((id(first), id(second)))
    if not rename:
        return 0
    kept = [n for n in graph.node if id(n) not in drop]
    for n in kept:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
    # Bodies read outer tensors by name too.
    for n in kept:
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_in(g, rename)
    del graph.node[:]
    graph.node.extend(kept)
    infos = [v for v in graph.value_info if v.name not in rename]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    log.info("dropped %d BF16 Cast pairs on tensors already bfloat16-exact", len(rename))
    return len(rename)


def _rename_in(graph: onnx.GraphProto, rename: dict[str, str]) -> None:
    for n in graph.node:
        for k, i in enumerate(n.input):
            if i in rename:
                n.input[k] = rename[i]
        for a in n.attribute:
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_in(g, rename)
    for o in graph.output:
        if o.name in rename:  # a body output that is an outer tensor, by name
            o.name = rename[o.name]


__all__ = ["drop_exact_bf16_casts"]
