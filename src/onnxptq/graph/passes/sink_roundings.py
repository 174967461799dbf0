"""Move a BF16/FP16 rounding past the ops that only copy its values, to where fewer values remain.

A BF16 or FP16 quantizer in the Cast form is ``x → Cast(to=T) → Cast(to=FLOAT) → t``: an
elementwise function ``q`` applied to every value of ``x``. When every reader of ``t`` only moves,
selects or copies values (Slice, Gather, Squeeze, Concat, Transpose, ...), and the tensors those
readers make are again read only by such ops, until one tensor ``f`` leaves that region for a
reader that computes with it, then ``q`` commutes with the whole region: each value of ``f`` is a
copy of a value of ``x``, and ``q`` of a copy is the copy of ``q``. So ``q(x)`` moved through the
region is the region applied to ``x`` with ``q`` applied to ``f``: the rounding can be taken off
``x`` and put on ``f``, bit for bit (a NaN too: the same function on the same value).

Why: onnxruntime's CPU Cast to bfloat16 is a scalar loop (~0.8 ns an element for the pair on an
AMD EPYC, against ~0.3 ns for float16's MLAS kernel, bench/RESULTS.md "bf16lat17"), and a
recurrent layer's output is often rounded whole (every step, both directions) where the graph then
keeps only the last step: openWakeWord's hey_mycroft rounds its second LSTM's ``[T, 2, B, H]``
output and reads ``[B, 2H]`` of it. Moving the rounding there costs the same two nodes on fewer
values.

It is moved only where that is cheaper for certain: exactly one tensor leaves the region (two
would need two pairs), its element count and ``x``'s are known and the leaving tensor holds
fewer, no tensor of the region is a graph output or read by a body (Loop/Scan/If) through the
outer scope, and every ``Concat`` in the region concatenates only region tensors (a Concat that
also reads another tensor would round that one too). Graphs computing in 16 bits are left alone
(:func:`onnxptq.graph.passes.drop_exact_casts._computes_in_16_bits`: onnxruntime removes their
Cast chains itself).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Mapping

import onnx
from onnx import TensorProto

from ..opsets import is_onnx_domain
from ..walk import subgraph_nodes

log = logging.getLogger(__name__)

#: Ops whose output values are copies of values of their data input(s); op type -> the input
#: positions that carry data (None: every input).
_MOVES: dict[str, tuple[int, ...] | None] = {
    "Identity": (0,), "Reshape": (0,), "Flatten": (0,), "Squeeze": (0,), "Unsqueeze": (0,),
    "Transpose": (0,), "Slice": (0,), "Split": (0,), "Gather": (0,), "Concat": None,
    "DepthToSpace": (0,), "SpaceToDepth": (0,), "Expand": (0,), "Tile": (0,),
}
#: The rounding element types (the Cast form of BF16 and FP16 quantizers).
_ROUNDING_TYPES = frozenset({TensorProto.BFLOAT16, TensorProto.FLOAT16})


def _to(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "to"), -1)


def _is_cast(node: onnx.NodeProto, to: int | frozenset[int]) -> bool:
    if node.op_type != "Cast" or not is_onnx_domain(node.domain):
        return False
    return _to(node) in to if isinstance(to, frozenset) else _to(node) == to


Dims = tuple  # of int (known), str (a symbol) or None (unknown)


def _declared(graph: onnx.GraphProto) -> dict[str, Dims]:
    """The dims the graph declares or shape inference wrote for its tensors (value infos)."""
    out: dict[str, Dims] = {}
    for v in list(graph.input) + list(graph.value_info) + list(graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return out


def fewer(a: Dims | None, b: Dims | None) -> bool:
    """Whether a tensor of dims ``a`` certainly holds fewer elements than one of dims ``b``: every
    dim known or named, ``a``'s named dims among ``b``'s (each at least 1), and the product of
    ``a``'s known dims below ``b``'s."""
    if a is None or b is None or any(d is None for d in a + b):
        return False
    known = [1, 1]
    names: list[Counter] = [Counter(), Counter()]
    for k, dims in enumerate((a, b)):
        for d in dims:
            if isinstance(d, str):
                names[k][d] += 1
            else:
                known[k] *= int(d)
    return not (names[0] - names[1]) and known[0] < known[1]


def sink_roundings(model: onnx.ModelProto, observed: Mapping[str, int] | None = None) -> int:
    """Move Cast-pair roundings of ``model``'s main graph past pure data movement to the one
    tensor that leaves it, where that tensor holds fewer elements (see the module docstring).

    ``observed``: the elements each tensor held on the calibration feeds
    (:mod:`onnxptq.pipeline.observed_sizes`), read where both tensors have one; else the dims
    the graph's value infos declare decide (:func:`fewer`). Returns the number of roundings moved."""
    from .drop_exact_casts import _computes_in_16_bits

    graph = model.graph
    if _computes_in_16_bits(graph):
        return 0
    declared = _declared(graph)

    def smaller(leaving: str, x: str) -> bool:
        if observed is not None and leaving in observed and x in observed:
            return observed[leaving] < observed[x]
        return fewer(declared.get(leaving), declared.get(x))
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for i in node.input:
            if i:
                readers.setdefault(i, []).append(node)
    producer = {o: n for n in graph.node for o in n.output if o}
    pinned = {o.name for o in graph.output} | {i for n in subgraph_nodes(graph) for i in n.input}

    def region_of(t: str) -> tuple[list[onnx.NodeProto], list[str]] | None:
        """The move nodes reached from ``t`` and the tensors that leave them, or None when the
        region cannot take the rounding's place (see the module docstring)."""
        nodes: list[onnx.NodeProto] = []
        members, leaving, todo = {t}, [], [t]
        while todo:
            name = todo.pop()
            if name in pinned:
                return None
            outside = False
            for node in readers.get(name, []):
                data = _MOVES.get(node.op_type) if is_onnx_domain(node.domain) else None
                positions = [k for k, i in enumerate(node.input) if i == name]
                if node.op_type not in _MOVES or not is_onnx_domain(node.domain) or (
                        data is not None and any(k not in data for k in positions)):
                    outside = True
                    continue
                if any(node is n for n in nodes):
                    continue
                nodes.append(node)
                for o in node.output:
                    if o and o not in members:
                        members.add(o)
                        todo.append(o)
            if outside:
                leaving.append(name)
        for node in nodes:
            if node.op_type == "Concat" and any(i and i not in members for i in node.input):
                return None
        return nodes, leaving

    moved = 0
    for first in list(graph.node):
        if not _is_cast(first, _ROUNDING_TYPES):
            continue
        mid = first.output[0]
        second = readers.get(mid, [])
        if len(second) != 1 or not _is_cast(second[0], TensorProto.FLOAT) or mid in pinned:
            continue
        second = second[0]
        x, t = first.input[0], second.output[0]
        found = region_of(t)
        if found is None or not found[0] or len(found[1]) != 1 or found[1][0] == t:
            continue
        nodes, (leaving,) = found
        if not smaller(leaving, x):
            continue
        # the region reads x; the pair goes after the leaving tensor's producer and its readers
        # outside the region read the rounded copy
        region = {id(n) for n in nodes}
        outside_readers = [n for n in readers.get(leaving, []) if id(n) not in region]
        for node in nodes:
            for k, i in enumerate(node.input):
                if i == t:
                    node.input[k] = x
        first.input[0], second.output[0] = leaving, t
        for node in outside_readers:
            for k, i in enumerate(node.input):
                if i == leaving:
                    node.input[k] = t
        kept = [n for n in graph.node if n is not first and n is not second]
        at = next(k for k, n in enumerate(kept) if n is producer[leaving]) + 1
        kept[at:at] = [first, second]
        del graph.node[:]
        graph.node.extend(kept)
        # t now holds the leaving tensor's values: its old shape no longer describes it
        infos = [v for v in graph.value_info if v.name not in (t, mid)]
        del graph.value_info[:]
        graph.value_info.extend(infos)
        # the maps follow the rewrite
        readers = {}
        for node in graph.node:
            for i in node.input:
                if i:
                    readers.setdefault(i, []).append(node)
        producer = {o: n for n in graph.node for o in n.output if o}
        moved += 1
    if moved:
        log.info("moved %d BF16/FP16 roundings past data movement to fewer values", moved)
    return moved


__all__ = ["sink_roundings"]
