"""Drop BF16 Cast pairs that cannot change a value: the tensor is already bfloat16-exact.

A BF16 quantizer is ``Cast(to=BFLOAT16) → Cast(to=FLOAT)``, two full passes at ~0.5 ns an element
on onnxruntime's CPU provider (bench/RESULTS.md, issue 26). When its input was produced by an op
that only moves, selects or clamps values (Transpose, Reshape, Slice, Concat, MaxPool, Relu,
nearest Resize, Max, Clip, Pad, ...) from tensors that are themselves bfloat16-exact, every value
it holds is a bfloat16 value, and the pair is the identity on them: a value the round trip maps to
itself. Removing it is bit-exact (NaN stays NaN; only a NaN's payload could differ, which no
format defines). The plan still lists the tensor as BF16; only the redundant runtime work goes
(PP-OCRv4 rec: 25 of its 178 pairs, det: 8 of 157, most of them large).

Exact by construction (the seeds): the output of a Cast pair; a ``Cast(to=FLOAT)`` of a BFLOAT16
initializer (a packed weight, onnx_ops/packed.py); a float initializer whose every element has its
low 16 bits zero (a constant the plan rounded at quantize time, e.g. a Max's bound); an absent
optional input that defaults to 0 (Pad's value, Clip's bounds).

Why each op keeps exactness (bfloat16 values B, closed under negation and containing ±0, ±Inf):

* Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice, Split, Gather, Expand, Tile,
  Concat, DepthToSpace, SpaceToDepth: every output element is a copy of an input element.
* nearest Resize: a copy of the nearest input element (linear/cubic interpolate: not kept).
* MaxPool (values output), GlobalMaxPool, ReduceMax, ReduceMin, Max, Min: each output is one of its
  inputs' elements (a maximum or minimum of a set is a member of it; NaN propagates as NaN).
  AveragePool, GlobalAveragePool, ReduceMean are averages, new values: not kept.
* Relu: ``max(x, 0)`` with 0 ∈ B. Clip: ``min(max(x, lo), hi)`` is x, lo or hi, so it is kept when
  its bounds are exact too (an absent bound is none).
* Pad: copies (reflect/edge/wrap) or the pad value; kept when that value is exact (absent: 0).
* Where: selects from its two value inputs (the condition is bool).
* Neg, Abs: flip or clear the sign bit, which bfloat16 shares with float.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto

from ..external import ExternalDataError, tensor_values
from ..opsets import is_onnx_domain

log = logging.getLogger(__name__)

#: op type -> indices of its data inputs (None: every input). Each maps bfloat16-exact inputs to
#: bfloat16-exact outputs: it copies, selects, reorders, max-reduces, or takes max(x, 0).
_PRESERVING: dict[str, tuple[int, ...] | None] = {
    "Identity": (0,), "Reshape": (0,), "Flatten": (0,), "Squeeze": (0,), "Unsqueeze": (0,),
    "Transpose": (0,), "Slice": (0,), "Split": (0,), "Gather": (0,), "Expand": (0,), "Tile": (0,),
    "Concat": None, "MaxPool": (0,), "GlobalMaxPool": (0,), "ReduceMax": (0,), "ReduceMin": (0,),
    "Relu": (0,), "Resize": (0,), "DepthToSpace": (0,), "SpaceToDepth": (0,),
    "Max": None, "Min": None, "Clip": (0, 1, 2), "Pad": (0, 2), "Where": (1, 2), "Neg": (0,), "Abs": (0,),
}
#: The largest float initializer read element by element to tell whether it is bfloat16-exact.
_CONSTANT_LIMIT = 1 << 16


def _exact_constant(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` is a float initializer of at most ``_CONSTANT_LIMIT`` elements whose
    every element is a bfloat16 value (its low 16 bits zero)."""
    if tensor.data_type != TensorProto.FLOAT or int(np.prod(tensor.dims, dtype=np.int64)) > _CONSTANT_LIMIT:
        return False
    try:
        values = np.ascontiguousarray(tensor_values(tensor), dtype=np.float32)
    except ExternalDataError:
        # the streaming path's external data is still being written (a temporary file): not
        # readable here, so not known exact; keeping its Cast pair is always correct
        return False
    return bool(np.all(values.view(np.uint32) & np.uint32(0xFFFF) == 0))


def _preserves(node: onnx.NodeProto) -> tuple[int, ...] | None | bool:
    if not is_onnx_domain(node.domain) or node.op_type not in _PRESERVING:
        return False
    if node.op_type == "Resize":
        mode = next((a.s for a in node.attribute if a.name == "mode"), b"nearest")
        if mode != b"nearest":
            return False
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        return False  # the indices output is not a value
    if node.op_type in ("Clip", "Pad"):
        # opset < 11 gives bounds / the pad value as attributes: kept only when they are bfloat16 values
        bounds = [a.f for a in node.attribute if a.name in ("min", "max", "value")]
        if any(np.array(b, np.float32).view(np.uint32) & np.uint32(0xFFFF) for b in bounds):
            return False
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
    inputs_by_name = {i.name for i in graph.input}  # an initializer listed as an input can be fed: not a constant
    initializers = {t.name: t for t in graph.initializer if t.name not in inputs_by_name}
    checked: dict[str, bool] = {}

    def exact_input(name: str) -> bool:
        if name in exact:
            return True
        if name in initializers:
            if name not in checked:
                checked[name] = _exact_constant(initializers[name])
            return checked[name]
        return False

    for node in graph.node:  # topological order
        if node.op_type == "Cast" and is_onnx_domain(node.domain) and to(node) == TensorProto.FLOAT:
            source = initializers.get(node.input[0])
            if source is not None and source.data_type == TensorProto.BFLOAT16:
                exact.add(node.output[0])  # a packed bf16 weight, decoded
                continue
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
        if inputs and all(exact_input(i) for i in inputs):
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
