"""Move a BF16/FP16 rounding past the ops that only copy its values, to where fewer values remain.

A BF16 or FP16 quantizer in the Cast form is ``x → Cast(to=T) → Cast(to=FLOAT) → t``: an
elementwise function ``q`` applied to every value of ``x``. When every reader of ``t`` only moves,
selects or copies values (Slice, Gather, Squeeze, Concat, Transpose, ...), and the tensors those
readers make are again read only by such ops, until one tensor ``f`` leaves that region for a
reader that computes with it, then ``q`` commutes with the whole region: each value of ``f`` is a
copy of a value of ``x``, and ``q`` of a copy is the copy of ``q``. So ``q(x)`` moved through the
region is the region applied to ``x`` with ``q`` applied to ``f``: the rounding can be taken off
``x`` and put on ``f``, bit for bit (a NaN too: the same function on the same value).

Why: a pair costs two kernel calls (~0.5-1 µs each on onnxruntime's CPU provider whatever the
size) plus its values, and onnxruntime's Cast to bfloat16 is a scalar loop, ~2.4x float16's MLAS
kernel per value (bench/RESULTS.md "bf16lat17"); and a
recurrent layer's output is often rounded whole (every step, both directions) where the graph then
keeps only the last step: openWakeWord's hey_mycroft rounds its second LSTM's ``[T, 2, B, H]``
output and reads ``[B, 2H]`` of it. Moving the rounding there costs the same two nodes on fewer
values.

Several roundings whose moves meet in a ``Concat`` (attacut_c: three Conv widths, each
transposed and unsqueezed, stacked) go together: the Concat's inputs are all copies of rounded
values, so one rounding of what leaves replaces them all (as many values, two Cast nodes less for
each rounding but one).

It is moved only where that is cheaper for certain: exactly one tensor leaves the region (two
would need two pairs), its element count and the rounded tensors' are known, and it holds fewer
values than the one rounded tensor, or at most as many as the several; no tensor of the region is
a graph output or read by a body (Loop/Scan/If) through the outer scope, and every ``Concat`` in
the region concatenates only region tensors (a Concat that also reads another tensor would round
that one too). All the roundings of a group are to the same type. Graphs computing in 16 bits
are left alone (:func:`onnxptq.graph.passes.drop_exact_casts._computes_in_16_bits`: onnxruntime
removes their Cast chains itself).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto

from ..ops import RELAYOUTS, REPEATS, SELECTIONS
from ..opsets import is_onnx_domain
from ..walk import dataflow, subgraph_nodes
from .drop_exact_casts import _computes_in_16_bits, _to

log = logging.getLogger(__name__)

#: Ops whose output values are copies of values of their data input(s); op type -> the input
#: positions that carry data (None: every input).
_MOVES: dict[str, tuple[int, ...] | None] = {
    **{op: (0,) for op in RELAYOUTS | SELECTIONS | REPEATS | {"DepthToSpace", "SpaceToDepth"}}, "Concat": None,
}
#: The rounding element types (the Cast form of BF16 and FP16 quantizers).
_ROUNDING_TYPES = frozenset({TensorProto.BFLOAT16, TensorProto.FLOAT16})


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


def _split(dims: Dims | None) -> tuple[int, Counter] | None:
    """The product of the known dims and the count of each named one; None if a dim is unknown."""
    if dims is None or any(d is None for d in dims):
        return None
    return int(np.prod([d for d in dims if not isinstance(d, str)], dtype=np.int64)), Counter(
        d for d in dims if isinstance(d, str))


def fewer(a: Dims | None, b: Dims | None) -> bool:
    """Whether a tensor of dims ``a`` certainly holds fewer elements than one of dims ``b``: every
    dim known or named, ``a``'s named dims among ``b``'s (each at least 1), and the product of
    ``a``'s known dims below ``b``'s."""
    sa, sb = _split(a), _split(b)
    return sa is not None and sb is not None and not (sa[1] - sb[1]) and sa[0] < sb[0]


def sink_roundings(model: onnx.ModelProto, observed: Mapping[str, int] | None = None) -> int:
    """Move Cast-pair roundings of ``model``'s main graph past pure data movement to the one
    tensor that leaves it, where that is cheaper (see the module docstring).

    ``observed``: the elements each tensor held on the calibration feeds
    (:mod:`onnxptq.pipeline.observed_sizes`), read where both tensors have one; else the dims
    the graph's value infos declare decide (:func:`fewer`). Returns the number of roundings moved."""
    graph = model.graph
    if _computes_in_16_bits(graph):
        return 0
    declared = _declared(graph)
    pinned = {o.name for o in graph.output} | {i for n in subgraph_nodes(graph) for i in n.input}

    def cheaper(leaving: str, xs: list[str]) -> bool:
        """Whether one rounding of ``leaving`` costs less than the roundings of ``xs``: fewer
        values than one, at most as many as several (two nodes less a rounding each)."""
        if observed is not None and all(n in observed for n in [leaving, *xs]):
            total = sum(observed[x] for x in xs)
            return observed[leaving] < total if len(xs) == 1 else observed[leaving] <= total
        if len(xs) == 1:
            return fewer(declared.get(leaving), declared.get(xs[0]))
        # several of the same named dims: their known parts add up (one more: "at most as many")
        parts = [_split(declared.get(x)) for x in xs]
        if any(p is None for p in parts) or any(p[1] != parts[0][1] for p in parts):
            return False
        named = tuple(parts[0][1].elements())
        return fewer(declared.get(leaving), named + (sum(p[0] for p in parts) + 1,))

    moved = 0
    while True:
        group = _one_group(graph, pinned, cheaper)
        if group is None:
            break
        _apply(graph, *group)
        moved += len(group[0])
    if moved:
        log.info("moved %d BF16/FP16 roundings past data movement to fewer values", moved)
    return moved


Pair = tuple[onnx.NodeProto, onnx.NodeProto]


def _key(node: onnx.NodeProto) -> str:
    """A node by its outputs (protobuf wrappers are no stable identity; output names are unique)."""
    return "\0".join(node.output)


def _region(seeds: set[str], readers: dict[str, list[onnx.NodeProto]], pinned: set[str],
            strict: bool) -> tuple[list[onnx.NodeProto], list[str]] | None:
    """The move nodes reached from the tensors ``seeds`` and the tensors that leave them (read by
    anything else), or None where a seed's values reach a graph output or a body. ``strict``: also
    None where a Concat of the region reads a tensor from outside it."""
    nodes: list[onnx.NodeProto] = []
    seen: set[str] = set()
    members, leaving, todo = set(seeds), [], list(seeds)
    while todo:
        name = todo.pop()
        if name in pinned:
            return None
        outside = False
        for node in readers.get(name, []):
            data = _MOVES.get(node.op_type, ()) if is_onnx_domain(node.domain) else ()
            positions = [k for k, i in enumerate(node.input) if i == name]
            if node.op_type not in _MOVES or not is_onnx_domain(node.domain) or (
                    data is not None and any(k not in data for k in positions)):
                outside = True
                continue
            key = _key(node)
            if key in seen:
                continue
            seen.add(key)
            nodes.append(node)
            for o in node.output:
                if o and o not in members:
                    members.add(o)
                    todo.append(o)
        if outside:
            leaving.append(name)
    if strict and any(n.op_type == "Concat" and any(i and i not in members for i in n.input) for n in nodes):
        return None
    return nodes, leaving


def _one_group(graph: onnx.GraphProto, pinned: set[str], cheaper) -> tuple[list[Pair], list[onnx.NodeProto], str] | None:
    """The first roundings (one, or several whose moves meet in a Concat) that can go to the one
    tensor leaving their moves, cheaper: (their pairs, the move nodes, the leaving tensor)."""
    readers = dataflow(graph.node)[1]
    pairs: dict[str, Pair] = {}  # by the rounded tensor
    for first in graph.node:
        if not _is_cast(first, _ROUNDING_TYPES) or first.output[0] in pinned:
            continue
        second = readers.get(first.output[0], [])
        if len(second) == 1 and _is_cast(second[0], TensorProto.FLOAT) and second[0].output[0] not in pinned:
            pairs[second[0].output[0]] = (first, second[0])
    # roundings whose moves share a node go together (a Concat of several rounded tensors)
    parent = {t: t for t in pairs}

    def root(t: str) -> str:
        while parent[t] != t:
            t = parent[t]
        return t

    first_reach: dict[str, str] = {}  # a move node (by its output) -> the first rounding reaching it
    for t in pairs:
        found = _region({t}, readers, pinned, strict=False)
        if found is None:
            continue
        for n in found[0]:
            other = first_reach.setdefault(_key(n), t)
            parent[root(other)] = root(t)
    groups: dict[str, set[str]] = {}
    for t in pairs:
        groups.setdefault(root(t), set()).add(t)
    for seeds in groups.values():
        found = _region(seeds, readers, pinned, strict=True)
        if found is None or not found[0] or len(found[1]) != 1 or found[1][0] in seeds:
            continue
        tos = {_to(pairs[t][0]) for t in seeds}
        chosen = [pairs[t] for t in sorted(seeds)]
        if len(tos) == 1 and cheaper(found[1][0], [first.input[0] for first, _ in chosen]):
            return chosen, found[0], found[1][0]
    return None


def _apply(graph: onnx.GraphProto, chosen: list[Pair], nodes: list[onnx.NodeProto], leaving: str) -> None:
    """Take the pairs ``chosen`` off their tensors (the moves read their inputs) and round
    ``leaving`` with the first of them, whose output name its readers outside the moves read."""
    readers = dataflow(graph.node)[1]
    region = {_key(n) for n in nodes}
    back = {second.output[0]: first.input[0] for first, second in chosen}
    for node in nodes:
        for k, i in enumerate(node.input):
            if i in back:
                node.input[k] = back[i]
    first, second = chosen[0]
    t = second.output[0]
    for node in readers.get(leaving, []):
        if _key(node) not in region:
            for k, i in enumerate(node.input):
                if i == leaving:
                    node.input[k] = t
    first.input[0] = leaving
    gone = {_key(n) for pair in chosen[1:] for n in pair} | {_key(first), t}
    kept = [n for n in graph.node if _key(n) not in gone]
    at = next(k for k, n in enumerate(kept) if leaving in n.output) + 1
    kept[at:at] = [first, second]
    del graph.node[:]
    graph.node.extend(kept)
    # the rounded names now hold the leaving tensor's values (or none): their old shapes go
    stale = {o for pair in chosen for n in pair for o in n.output}
    infos = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(infos)


__all__ = ["sink_roundings"]
