"""Collapse Cast chains whose every step is exact on the value it is given (float16/float32/float64).

Why: under the FP16 preset a float16 model (``QuantConfig.widen_fp16`` automatic leaves FP16 sources
in fp16) gets, around every activation, ``Cast(FLOAT) -> Cast(FLOAT16) -> Cast(FLOAT) ->
Cast(FLOAT16)``: the quantizer works in float and rounds through float16, on a tensor that already is
float16. Every step gives back the value it is given, yet each is a full pass over the tensor
(platerec_enc FP16 ran 3.8x its source, bench/RESULTS.md "fp16widen"). ``drop_exact_casts`` leaves
16-bit graphs alone (its exactness seeds do not hold where onnxruntime computes fp16 ops in fp32);
this pass does not rely on what an op computes, only on what a Cast does to a value that is
already in a format.

The rule, for the formats F16 ⊂ F32 ⊂ F64 (every float16 value is a float32 value, every float32 a
float64 one): a tensor's *narrowest format* is the narrowest of them holding all its values: its
element type's, or for a ``Cast(to=T)`` output the narrower of T's and its input's (a Cast to a
format at least as wide as the input's values is exact; one to a narrower format rounds into it).
``Cast(to=B)`` of ``Cast(to=A)`` of x, with A and B among the three, equals ``Cast(to=B)`` of x
whenever x's narrowest format is no wider than A (the inner Cast gives back x's values exactly), so
the outer Cast is pointed at x. A Cast to x's own element type is then the identity and goes: its
readers read x (a graph output, of the main graph or of a body, keeps its node: the names of a
graph's outputs are its interface). Inner Casts nobody reads any more go too. bfloat16 and the
narrower formats are never part of a chain: a float16 value need not be a bfloat16 one.

A float16 chain ``x(FLOAT16) -> Cast(FLOAT) -> Cast(FLOAT16) -> Cast(FLOAT) -> Cast(FLOAT16)``
becomes x; an fp32 model's BF16/FP16 roundings ``x(FLOAT) -> Cast(FLOAT16) -> Cast(FLOAT)`` are
untouched (the first Cast rounds).

On onnxruntime's CPU provider the collapsed file's outputs can differ from the chain form's in their last bits
(platerec_enc: at most 0.008, task agreement 1.000 both; bench/RESULTS.md "fp16chain"): the provider computes most
float16 ops in fp32 and drops its own Cast pairs between them, so a "float16" activation holds fp32 values there and
the chain's middle ``Cast(FLOAT16)`` is the one place it is rounded. Keeping that one rounding (a pair per activation)
gives the chain form's bits and its cost (platerec_enc 3.77x the source against 3.82x; collapsed 0.99x); collapsed,
the file computes as the source does. On ONNX's reference evaluator (float16 computed in float16) the two forms are
bit-identical (tests/test_fp16_cast_chain.py).

Element types come from the graphs' declarations, from Casts' ``to``, and, for the tensors a chain
starts from that neither names, from ONNX type inference on the model's skeleton (the main graph's
initializers as typed inputs, so their bytes are not copied; a body's are); where inference fails
those chains keep their Casts.
"""

from __future__ import annotations

import logging

import onnx
from onnx import TensorProto, helper

from ..naming import value_names
from ..opsets import is_onnx_domain
from ..walk import all_graphs, declared_elem_types

log = logging.getLogger(__name__)

#: The formats a chain may pass through, narrowest first.
_RANK = {TensorProto.FLOAT16: 0, TensorProto.FLOAT: 1, TensorProto.DOUBLE: 2}


def _cast_to(node: onnx.NodeProto) -> int | None:
    """``to`` of an ONNX-domain Cast into one of the chain formats (no other attribute but
    ``saturate``, which only float8 reads), else None."""
    if node.op_type != "Cast" or not is_onnx_domain(node.domain):
        return None
    to = None
    for a in node.attribute:
        if a.name == "to":
            to = a.i
        elif a.name != "saturate":
            return None
    return to if to in _RANK else None


def _skeleton_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types ONNX type inference finds for every tensor of ``model`` (all graphs), run on a
    copy without the main graph's weight bytes (its initializers become typed graph inputs; the
    bodies, in its nodes, are copied whole); empty when it fails."""
    graph = model.graph
    skeleton = helper.make_graph(
        list(graph.node), graph.name, list(graph.input) + [
            helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
            for t in graph.initializer if t.name not in {i.name for i in graph.input}],
        list(graph.output), value_info=list(graph.value_info))
    proto = helper.make_model(skeleton, opset_imports=list(model.opset_import), functions=list(model.functions))
    proto.ir_version = model.ir_version
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception as exc:  # noqa: BLE001 - a chain whose start has no known type keeps its Casts
        log.debug("exact_cast_chains: type inference failed (%s); undeclared tensors keep their chains", exc)
        return {}
    return declared_elem_types(inferred.graph)


def _holds_half(graphs: list[onnx.GraphProto]) -> bool:
    """Whether the model computes in float16: a float16 input or output of its main graph, or a
    ``Cast(to=FLOAT16)`` read by anything but a Cast (in an fp32 model a float16 tensor is the middle
    of a rounding pair or a stored weight's decode)."""
    main = graphs[0]
    if any(v.type.tensor_type.elem_type == TensorProto.FLOAT16 for v in list(main.input) + list(main.output)):
        return True
    half = {n.output[0] for g in graphs for n in g.node if _cast_to(n) == TensorProto.FLOAT16}
    return any(i in half and n.op_type != "Cast" for g in graphs for n in g.node for i in n.input)


def _chain_casts(graphs: list[onnx.GraphProto]) -> dict[str, onnx.NodeProto]:
    """Output name -> every chain-format Cast of ``graphs``."""
    return {n.output[0]: n for g in graphs for n in g.node if _cast_to(n) is not None and n.output and n.output[0]}


def collapse_exact_cast_chains(model: onnx.ModelProto) -> int:
    """Point every Cast that reads an exact inner Cast at that Cast's input, drop the Casts that
    became the identity or that nothing reads, in every graph of ``model`` (bodies too, via
    graph.walk). Returns the number of Casts removed. Value names are made unique across scopes
    first (graph/naming.value_names: a no-op on a prepared model)."""
    graphs = list(all_graphs(model.graph))
    casts = _chain_casts(graphs)
    if not any(n.input[0] in casts for n in casts.values()):
        return 0  # no Cast reads a chain Cast: nothing to collapse (every fp32 model without 3-Cast chains)
    if len(graphs) > 1 and value_names(model):  # Casts are keyed by output name: sibling bodies may share names
        casts = _chain_casts(graphs)
    types = declared_elem_types(model.graph)
    types.update((o, _cast_to(n)) for o, n in casts.items())
    inferred: dict[str, int] | None = None

    def elem_type(name: str) -> int | None:
        nonlocal inferred
        if name in types:
            return types[name]
        if inferred is None:
            # an fp32 model's chains are roundings (x -> Cast(FLOAT16) -> Cast(FLOAT)) whose start is
            # float: inference would only confirm it, at a cost on large models
            inferred = _skeleton_types(model) if _holds_half(graphs) else {}
        return inferred.get(name)

    def narrowest(name: str) -> int | None:
        """The rank of the narrowest chain format holding every value of ``name`` (None: unknown
        or not a chain format)."""
        node = casts.get(name)
        if node is None:
            return _RANK.get(elem_type(name))
        inner = narrowest(source.get(name, node.input[0]))
        own = _RANK[_cast_to(node)]
        return own if inner is None else min(own, inner)

    outputs = {o.name for g in graphs for o in g.output}
    alias: dict[str, str] = {}  # a dropped identity Cast's output -> the tensor its readers read
    source: dict[str, str] = {}  # a Cast's output -> the (resolved) tensor it reads
    dropped: set[str] = set()  # outputs of the Casts removed as the identity
    left: set[str] = set()  # outputs of the inner Casts a re-pointed Cast no longer reads
    moved = 0
    for g in graphs:  # outer graph before its bodies: a body reads outer tensors already resolved
        for node in g.node:
            for k, name in enumerate(node.input):
                if name in alias:
                    node.input[k] = alias[name]
            to = _cast_to(node)
            if to is None or node.output[0] not in casts:
                continue
            x = node.input[0]
            inner = casts.get(x)
            while inner is not None:
                rank = narrowest(inner.input[0])
                if rank is None or rank > _RANK[_cast_to(inner)]:
                    break  # the inner Cast rounds: the outer one must read what it gives
                x = inner.input[0]
                inner = casts.get(x)
            chained = x != node.input[0] or x in casts  # the Cast is part of a chain
            if x != node.input[0]:
                left.add(node.input[0])
                node.input[0] = x
                moved += 1
            source[node.output[0]] = x
            if chained and elem_type(x) == to and node.output[0] not in outputs:
                alias[node.output[0]] = x
                dropped.add(node.output[0])
    if not moved and not dropped:
        return 0
    removed = _remove_unread(graphs, source, dropped, left)
    log.info("collapsed exact Cast chains: %d Casts re-pointed, %d removed", moved, removed)
    return removed


def _remove_unread(graphs: list[onnx.GraphProto], source: dict[str, str], dropped: set[str], left: set[str]) -> int:
    """Delete the chain Casts (``source``: output -> the tensor it reads) in ``dropped``, and those in
    ``left`` (or read only by Casts that go) that nobody reads any more (in place, by index, so the bodies held by the other nodes stay the same
    objects). Returns how many went."""
    readers: dict[str, int] = {}
    for g in graphs:
        for n in g.node:
            for i in n.input:
                readers[i] = readers.get(i, 0) + 1
        for o in g.output:
            readers[o.name] = readers.get(o.name, 0) + 1
    gone: set[str] = set()
    work = list(dropped) + [o for o in left if readers.get(o, 0) == 0]
    while work:  # a Cast that goes may leave the one it read unread
        out = work.pop()
        if out in gone:
            continue
        gone.add(out)
        x = source[out]
        readers[x] -= 1
        if x in source and readers[x] == 0:
            work.append(x)
    removed = 0
    for g in graphs:
        for k in range(len(g.node) - 1, -1, -1):
            if g.node[k].output and g.node[k].output[0] in gone and _cast_to(g.node[k]) is not None:
                del g.node[k]
                removed += 1
        infos = [v for v in g.value_info if v.name not in gone]
        if len(infos) != len(g.value_info):
            del g.value_info[:]
            g.value_info.extend(infos)
    return removed


__all__ = ["collapse_exact_cast_chains"]
