"""One function definition per body shape: model-local functions that differ only in the values of
their top-level ``Constant`` nodes become one definition, the differing values its extra inputs.

Why: emit specialises each block quantizer's body to its tensor (the block count along the axis,
the padding, the tail: constants folded at build time so that the body runs fast), and named each
specialisation apart, so a model carried one definition per distinct tensor shape even where the
bodies were identical: the shipped PP-OCR cls under MXINT8 held 24 definitions of 1.9-3.0 KB, 11
of them byte-identical but for their name, all 24 of only 5 shapes of body (56 KB, a tenth of the
fp32 file, against the issue's "block formats ≤ 0.30×"; bench/RESULTS.md, branch blocksize).

Exact by substitution: a ``Constant`` node whose output a body reads is the same value as a
function input fed by an initializer holding that value, and onnxruntime inlines model-local
functions before it optimises, so the initializer is a constant there as the node was (the same
folding, the same kernels). Each call passes its own member's values; one initializer per distinct
value serves every call that needs it. Bodies nested in a body (If branches) are compared whole:
only the top level's constants are lifted, so a nested graph never reads a lifted name it did not
read before through the same outer scope. Calls made from inside a function cannot read an
initializer, so a group with such a call only shares when its members are byte-identical.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from typing import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..opsets import is_onnx_domain
from ..walk import model_nodes, subgraphs, tensor_names

log = logging.getLogger(__name__)

#: Off: every specialisation keeps its own definition (the tests build both forms and compare).
SHARE = True
#: Stem of the lifted values' initializer names (short: every call names them once more).
STEM = "fc"

_LIFTABLE = {"value", "value_float", "value_floats", "value_int", "value_ints"}


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a ``Constant`` node, or None for the kinds not lifted (strings, sparse)."""
    if len(node.attribute) != 1 or node.attribute[0].name not in _LIFTABLE:
        return None
    a = node.attribute[0]
    if a.name == "value":
        return numpy_helper.to_array(a.t)
    if a.name == "value_float":
        return np.array(a.f, np.float32)
    if a.name == "value_floats":
        return np.array(list(a.floats), np.float32)
    if a.name == "value_int":
        return np.array(a.i, np.int64)
    return np.array(list(a.ints), np.int64)


def _is_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and is_onnx_domain(node.domain)


def _skeleton(fn: onnx.FunctionProto) -> bytes:
    """``fn`` without its name and its top-level constants' values: what must match to share."""
    g = onnx.FunctionProto()
    g.CopyFrom(fn)
    g.name = ""
    for node in g.node:
        if _is_constant(node) and _constant_value(node) is not None:
            kind = node.attribute[0].name
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("kind", kind))
    return g.SerializeToString(deterministic=True)


def constants_first(fn: onnx.FunctionProto) -> onnx.FunctionProto:
    """``fn``'s top-level ``Constant`` nodes moved before its other nodes, ordered by their first
    reader among those (node, then input slot; the unread last, as they were); in place.

    Why: emit's specialisations place a body's constants where each was made, so bodies that
    compute the same (akiki_vad MX9: three of five definitions) differed only in where a
    Constant sat or in which order two were made, and were not shared (blockfile13). The order of
    first use is the body's own, whatever the order of making. Exact: a Constant reads nothing,
    so the body stays in topological order and computes the same values; nested graphs are left
    as they are."""
    consts = [n for n in fn.node if _is_constant(n)]
    rest = [n for n in fn.node if not _is_constant(n)]
    first: dict[str, tuple[int, int]] = {}
    for i, node in enumerate(rest):
        for j, name in enumerate(node.input):
            first.setdefault(name, (i, j))
    unread = (len(rest), 0)
    order = sorted(range(len(consts)), key=lambda k: (first.get(consts[k].output[0], unread), k))
    consts = [consts[k] for k in order]
    if list(fn.node) != consts + rest:
        ordered = [onnx.NodeProto() for _ in range(len(consts) + len(rest))]
        for dst, src in zip(ordered, consts + rest):
            dst.CopyFrom(src)
        del fn.node[:]
        fn.node.extend(ordered)
    return fn


def share_functions(model: onnx.ModelProto, domains: Iterable[str] | None = None) -> onnx.ModelProto:
    """Merge ``model``'s local functions (of ``domains``; None: every domain) that differ only in
    top-level constant values, in place; returns ``model``. Calls are renamed to the kept
    definition and given the lifted values as extra inputs (main-graph initializers)."""
    if not SHARE or len(model.functions) < 2:
        return model
    wanted = None if domains is None else set(domains)
    # Bodies compared under their compacted names: emit names each specialisation's values after
    # its tensor, so bodies equal but for those private names and constants did not group
    # (akiki_vad MX9: two of five definitions, 1.7 KB; blockfile13). Renaming a body's private
    # values is exact (:func:`compact_bodies`). Top-level constants first (:func:`constants_first`),
    # so that where a body's Constant sits does not keep two bodies apart either.
    for fn in model.functions:
        if wanted is None or fn.domain in wanted:
            constants_first(fn)
    compact_bodies(model, domains)
    groups: dict[tuple[str, bytes], list[onnx.FunctionProto]] = defaultdict(list)
    for fn in model.functions:
        if wanted is None or fn.domain in wanted:
            groups[(fn.domain, _skeleton(fn))].append(fn)
    groups = {k: v for k, v in groups.items() if len(v) > 1}
    if not groups:
        return model
    graph_nodes, fn_nodes = model_nodes(model)
    called_inside = {(n.domain, n.op_type) for n in fn_nodes}
    taken = tensor_names(model)
    values: dict[tuple, str] = {}  # _value_key -> initializer name
    counter = [0]

    def initializer(value: np.ndarray) -> str:
        key = _value_key(value)
        if key not in values:
            while f"{STEM}{counter[0]}" in taken:
                counter[0] += 1
            name = f"{STEM}{counter[0]}"
            taken.add(name)
            model.graph.initializer.append(numpy_helper.from_array(value, name))
            values[key] = name
        return values[key]

    #: (domain, old name) -> (kept name, extra input names)
    rename: dict[tuple[str, str], tuple[str, list[str]]] = {}
    dropped: set[tuple[str, str]] = set()
    # sizes only for the debug line: ByteSize serializes every definition
    before = sum(f.ByteSize() for f in model.functions) if log.isEnabledFor(logging.DEBUG) else 0
    for (domain, skeleton), members in groups.items():
        keep = members[0]
        consts = [i for i, n in enumerate(keep.node) if _is_constant(n) and _constant_value(n) is not None]
        member_values = [[_constant_value(m.node[i]) for i in consts] for m in members]
        differ = [j for j in range(len(consts))
                  if any(_value_key(mv[j]) != _value_key(member_values[0][j]) for mv in member_values[1:])]
        if differ and any((domain, m.name) in called_inside for m in members):
            continue  # a call inside a function could not read the lifted initializers
        lifted = [consts[j] for j in differ]
        lifted_outputs = [keep.node[i].output[0] for i in lifted]
        # The shared definition's name: the family (what tools match: ``BFPQuantizeDequantize``...),
        # a digest of what defines it, body and lifted positions (equal names, equal bodies), and
        # the suffix all members end in (the activation dtype's, ``_f32``); not one member's
        # shape-specific name: every call writes it once more.
        digest = hashlib.sha1(skeleton + repr(lifted).encode()).hexdigest()[:8]
        tails = {m.name.rsplit("_", 1)[-1] for m in members}  # a dtype suffix (``_f32``) the members agree on
        tail = f"_{tails.pop()}" if len(tails) == 1 and "_" in keep.name else ""
        shared = f"{keep.name.split('_')[0]}_{digest}{tail}"
        if shared != keep.name and any(f.domain == domain and f.name == shared for f in model.functions):
            shared = keep.name
        for m, mv in zip(members, member_values):
            rename[(domain, m.name)] = (shared, [initializer(mv[j]) for j in differ])
            if m is not keep:
                dropped.add((domain, m.name))
        keep.name = shared
        if lifted:
            kept_nodes = [n for i, n in enumerate(keep.node) if i not in set(lifted)]
            del keep.node[:]
            keep.node.extend(kept_nodes)
            keep.input.extend(lifted_outputs)
    if not rename:
        return model
    declared = {(f.domain, f.name): len(f.input) for f in model.functions}
    for node in graph_nodes + fn_nodes:
        target = rename.get((node.domain, node.op_type))
        if target is None:
            continue
        node.op_type = target[0]
        # a call may leave trailing optional inputs out: the lifted ones come after all declared
        n_own = declared[(node.domain, target[0])] - len(target[1])
        node.input.extend([""] * (n_own - len(node.input)))
        node.input.extend(target[1])
    kept = [f for f in model.functions if (f.domain, f.name) not in dropped]
    del model.functions[:]
    model.functions.extend(kept)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("shared functions: %d definitions of %d B -> %d of %d B (%d lifted values)", len(kept) + len(dropped),
                  before, len(kept), sum(f.ByteSize() for f in kept), len(values))
    return model


#: The characters of a body's short names (:func:`short_name`): a name of one is written for
#: each of a body's first 52 values, two for the next 52 · 62.
_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NEXT = _FIRST + "0123456789"


def short_name(k: int) -> str:
    """The ``k``-th short name (``a .. Z``, then ``aa, ab, ..``): distinct for distinct ``k``."""
    if k < len(_FIRST):
        return _FIRST[k]
    k -= len(_FIRST)
    tail = ""
    while True:
        k, r = divmod(k, len(_NEXT))
        tail = _NEXT[r] + tail
        if k < len(_FIRST):
            return _FIRST[k] + tail
        k -= len(_FIRST)


def compact_bodies(model: onnx.ModelProto, domains: Iterable[str] | None = None) -> onnx.ModelProto:
    """Short internal names in ``model``'s local functions (of ``domains``), in place.

    Why: a body's intermediate names (``greaterorequal_41``) are written once where made and once
    per reader, and a Constant's tensor carries its name once more: ~0.5 KB of a 3 KB block
    body. Inside a function they are private: onnxruntime renames them when it inlines the call,
    so one- and two-letter names (:func:`short_name`) compute the same (ONNX names are
    single-assignment across nested scopes, so one map serves the body and its If branches); a
    Constant's tensor is written without a name and each ``If`` branch graph is named ``g`` (the
    checker wants a name, nothing reads it): 0.2-0.4 KB of a 1.5-2.7 KB block body (blockfile10).
    The formal inputs are renamed too (a call binds them by position); ``x`` and the outputs keep
    theirs.
    """
    if not SHARE:
        return model
    wanted = None if domains is None else set(domains)
    for fn in model.functions:
        if wanted is not None and fn.domain not in wanted:
            continue
        keep = {n for n in fn.input if len(n) <= 1} | set(fn.output)
        graphs_nodes: list[onnx.NodeProto] = []
        bodies: list[onnx.GraphProto] = []

        def collect(nodes: Iterable[onnx.NodeProto]) -> None:
            for node in nodes:
                graphs_nodes.append(node)
                for sub in subgraphs(node):
                    bodies.append(sub)
                    collect(sub.node)

        collect(fn.node)
        made = [n for n in fn.input if n not in keep]
        made += [o for n in graphs_nodes for o in n.output if o and o not in keep]
        made += [v.name for g in bodies for v in g.input if v.name not in keep]
        # names that stay (formal parameters, anything read but made nowhere here) are never given
        taken = keep | ({i for n in graphs_nodes for i in n.input} - set(made))
        rename: dict[str, str] = {}
        k = 0
        for name in dict.fromkeys(made):
            while short_name(k) in taken:
                k += 1
            rename[name] = short_name(k)
            k += 1
        for node in graphs_nodes:
            if _is_constant(node) and node.attribute and node.attribute[0].name == "value":
                node.attribute[0].t.ClearField("name")
        for g in bodies:
            g.name = "g"
        if not any(len(new) < len(old) for old, new in rename.items()):
            continue
        fn.input[:] = [rename.get(i, i) for i in fn.input]
        for node in graphs_nodes:
            node.input[:] = [rename.get(i, i) for i in node.input]
            node.output[:] = [rename.get(o, o) for o in node.output]
        for g in bodies:
            for v in list(g.input) + list(g.output) + list(g.value_info):
                v.name = rename.get(v.name, v.name)
        for v in fn.value_info:
            v.name = rename.get(v.name, v.name)
    return model


def _value_key(value: np.ndarray) -> tuple:
    """What makes two lifted values one: dtype, shape and bytes (one initializer serves equal keys)."""
    return value.dtype.str, value.shape, value.tobytes()


__all__ = ["share_functions", "compact_bodies", "constants_first", "short_name", "SHARE"]
