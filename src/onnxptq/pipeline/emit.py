"""Emit: write the plan into the model as Q/DQ pairs, Cast pairs, function nodes and folded weights.

Input: a prepared model, its :class:`~onnxptq.pipeline.plan.Plan` and the solved :class:`QParams`.
Output: a new model. Every quantizer comes from :func:`onnxptq.onnx_ops.build_qdq`, the same
builders the format property tests hold bit-exact against the NumPy references, so what ships is
what was tested. Weights in float formats are fake-quantized once here (no runtime op); integer
weights are stored as integers behind a DequantizeLinear, the form every ONNX backend recognises.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..formats import BLOCK_FORMATS, FLOAT_FORMATS
from ..formats.base import DOMAIN, QDQNodes
from ..formats.mx_float32 import fake_quantize_any
from ..graph.external import store, tensor_values
from ..graph.opsets import is_onnx_domain, model_opset
from ..graph.passes.sink_initializers import sink_initializers
from ..graph.walk import FreshNames, Scope, ScopeIndex, all_graphs
from ..onnx_ops import build_qdq
from .plan import Plan, TensorPlan
from .solve import QParams, producer_params_key  # the solve step's output, read here

log = logging.getLogger(__name__)


def _safe(name: str) -> str:
    """A node-name stem derived from a tensor name (ONNX allows any string, but keep them readable)."""
    return re.sub(r"[^0-9A-Za-z_.:/-]", "_", name)


def quantizer_attrs(plan: TensorPlan, params: QParams | None) -> dict[str, Any]:
    """Keyword arguments for :func:`build_qdq` / :func:`fake_quantize` for this tensor."""
    quant = plan.quant
    if quant.format in ("bfp", "mx"):
        attrs = dict(quant.attr_dict)
        if plan.axis is not None:
            attrs["axis"] = plan.axis
        return attrs
    if quant.is_integer:
        assert params is not None and params.scale is not None, f"no scale solved for {plan.name}"
        attrs = {"scale": params.scale, "zero_point": params.zero_point}
        if np.ndim(params.scale) > 0 and np.size(params.scale) > 1:
            attrs["axis"] = plan.axis
        if quant.block_size:
            attrs["block_size"] = quant.block_size
        return attrs
    attrs = {}
    if params is not None and params.scale is not None:
        attrs["scale"] = float(np.asarray(params.scale).reshape(-1)[0])
    if quant.saturate:
        attrs["saturate"] = True
    elif not plan.clip_guard:  # fits with headroom: no saturating Clip (pipeline/fp16_range.py)
        attrs["saturate"] = False
    return attrs


class _Builder:
    """Accumulates the rewritten graph: nodes in order, initializers, functions, opset imports."""

    def __init__(self, model: onnx.ModelProto, index: ScopeIndex) -> None:
        self.model = model
        self.opset = model_opset(model)
        #: every graph's initializers (names are unique across scopes); new ones go to the main graph
        self.initializers = {t.name: t for s in index.scopes for t in s.graph.initializer}
        self.functions: dict[tuple[str, str, str], onnx.FunctionProto] = {
            (f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions
        }
        self.imports: dict[str, int] = {imp.domain: imp.version for imp in model.opset_import}
        self.min_opset = self.opset
        tensors = FreshNames(taken=self.initializers)
        for scope in index.scopes:
            for node in scope.graph.node:
                tensors.add(node.output)
            tensors.add(i.name for i in scope.graph.input)
        #: tensor names and node names are separate ONNX namespaces, so two pools
        self.fresh = tensors
        #: the input model's own tensor names: a fragment's internal name never takes one (absorb)
        self.original = frozenset(tensors.taken)
        self.node_names = FreshNames(taken=(n.name for n in index.nodes() if n.name))
        #: packs folded weights (onnx_ops/packed.py) when pack_weights is on
        self.packer: Any = None
        #: MatMul weights emitted as blocked int8 DequantizeLinear (weight_runtime="matmulnbits")
        self.matmul_b: set[str] = set()
        #: quantized weights kept across a search's builds, and the input model's initializers they are keyed by
        self.reuse: ConstantReuse | None = None
        #: weights this build already rounded (bias correction's), taken instead of rounding them again
        self.rounded: Rounded | None = None
        self.sources: dict[str, onnx.TensorProto] = {}

    def absorb(self, frag: QDQNodes) -> list[onnx.NodeProto]:
        self._rename_clashes(frag)
        for init in frag.initializers:
            self.initializers[init.name] = init
            self.fresh.add([init.name])
        for fn in frag.functions:
            self.functions.setdefault((fn.domain, fn.name, getattr(fn, "overload", "")), fn)
        for domain, version in frag.opset_imports.items():
            if not is_onnx_domain(domain):
                self.imports[domain] = max(self.imports.get(domain, 0), version)
        self.min_opset = max(self.min_opset, frag.min_opset)
        for node in frag.nodes:
            self.fresh.add(node.output)
            # node names must be unique too (onnxruntime checks): the fragment's name, or name_1, ...
            node.name = self.node_names(node.name)
        return list(frag.nodes)

    def _rename_clashes(self, frag: QDQNodes) -> None:
        """Give a fragment's internal names (its initializers, its tensors read inside it) fresh
        names where they are already the model's or an earlier fragment's. A fragment names them
        ``<tensor>_scale``, ``<tensor>_zero_point``, ...; a model may already hold such a name: a
        LayerNormalization's gamma ``ln_scale`` beside its output ``ln``. Taken as it was, the
        quantizer's scale replaced the gamma, silently (A8W8 output cosine 0.49,
        tests/test_emit_name_clash.py). The fragment's input and final output keep the names the
        caller gave them."""
        read = {i for n in frag.nodes for i in n.input if i}
        clash = [t.name for t in frag.initializers if t.name in self.initializers or t.name in self.original]
        clash += [o for n in frag.nodes for o in n.output if o in read and (o in self.initializers or o in self.original)]
        if not clash:
            return
        rename = {old: self.fresh(old) for old in dict.fromkeys(clash)}
        for init in frag.initializers:
            init.name = rename.get(init.name, init.name)
        for node in frag.nodes:
            node.input[:] = [rename.get(i, i) for i in node.input]
            node.output[:] = [rename.get(o, o) for o in node.output]


class ConstantReuse:
    """Quantized weights kept from one build for the next builds of a search (the accuracy floor's
    repair, :mod:`onnxptq.algorithms.repair`): a weight's rounded values depend only on the
    initializer it rounds, its format and its attributes (scale, zero point, axis, block), not on
    which other nodes a candidate keeps float, so each is computed once per search instead of once
    per candidate (on ddddocr_ocr BFP16 a quarter of a candidate build's CPU).

    Keyed by the initializer's name, the format and the attributes' values, and valid only for the
    same *source* initializer: the very object of the model given to :func:`emit`, or one equal to
    it byte for byte (bias correction hands emit a copy of the model with its corrected biases, so
    every other weight is an equal copy; a corrected bias differs and is computed afresh). What is
    kept is the stored :class:`onnx.TensorProto` (its bytes are the rounded values: one copy of
    the quantized weights, no NumPy array beside it). Weights written to an external-data sink
    (the streaming path) are never kept."""

    def __init__(self, keep_weights: bool = True) -> None:
        #: whether rounded weights are kept (off for the plain build, which may be the only one:
        #: holding a copy of the quantized weights there would raise every quantization's peak
        #: memory; bias corrections are small and always kept)
        self.keep_weights = keep_weights
        self._kept: dict[tuple[Any, ...], tuple[onnx.TensorProto, onnx.TensorProto]] = {}
        self.hits = 0
        self.misses = 0
        #: bias correction's new bias per layer (:func:`onnxptq.pipeline.build.build_model`): keyed by
        #: :meth:`key_of` (weight, format, attributes, bias), valid for the one calibration of the search
        self.corrections: dict[tuple[Any, ...], np.ndarray] = {}
        #: each build's plan and solved parameters by its config (:func:`onnxptq.pipeline.build.build_model`:
        #: the delivered build takes those of the candidate judged with its config), kept with ``keep_weights``
        self.plans: list[tuple[Any, Any, dict[str, Any]]] = []

    @staticmethod
    def key(source: onnx.TensorProto, kind: str, fmt: str, attrs: dict[str, Any]) -> tuple[Any, ...]:
        return ConstantReuse.key_of(source.name, kind, fmt, attrs)

    @staticmethod
    def key_of(name: str, kind: str, fmt: str, attrs: dict[str, Any]) -> tuple[Any, ...]:
        def frozen(v: Any) -> Any:
            if isinstance(v, np.ndarray) or isinstance(v, np.generic):
                a = np.asarray(v)
                return ("nd", a.dtype.str, a.shape, a.tobytes())
            if isinstance(v, (list, tuple)):
                return tuple(frozen(x) for x in v)
            if isinstance(v, dict):
                return tuple(sorted((k, frozen(x)) for k, x in v.items()))
            return v

        return (name, kind, fmt, frozen(attrs))

    def get(self, key: tuple[Any, ...], source: onnx.TensorProto) -> onnx.TensorProto | None:
        entry = self._kept.get(key)
        if entry is None or not _same_tensor(entry[0], source):
            self.misses += 1
            return None
        if entry[0] is not source:  # an equal copy: later builds on it compare by identity
            self._kept[key] = (source, entry[1])
        self.hits += 1
        return entry[1]

    def put(self, key: tuple[Any, ...], source: onnx.TensorProto, stored: onnx.TensorProto) -> None:
        from ..graph.external import is_external

        if self.keep_weights and not is_external(stored):
            self._kept[key] = (source, stored)


class Rounded:
    """Weights already rounded by an earlier step of the same build, handed to :func:`emit` so that
    it does not round them again: bias correction rounds every layer weight it corrects exactly as
    emit does (the same reference, :func:`onnxptq.formats.fake_quantize`, which emit's
    :func:`fake_quantize_in_slices` equals bit for bit) to measure its shift (PP-OCRv4 rec
    MXFP8_E4M3: 38 weights, ~0.05 CPU s of a ~2 s quantize, the same again in emit).

    Keyed by the weight's name, format and attributes (:meth:`ConstantReuse.key_of`): emit takes an
    entry only where its own key, dtype and shape are the entry's, and pops it, so each array lives
    until emit stores that weight, as emit's own rounding of it would. Valid for the build that
    filled it only (the same prepared weights: bias correction changes biases, not weights)."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[tuple[Any, ...], np.ndarray]] = {}

    def put(self, name: str, fmt: str, attrs: dict[str, Any], values: np.ndarray) -> None:
        self._values[name] = (ConstantReuse.key_of(name, "fold", fmt, attrs), values)

    def take(self, name: str, fmt: str, attrs: dict[str, Any], like: np.ndarray) -> np.ndarray | None:
        """The rounded values of ``name`` for ``fmt``/``attrs`` where kept for a weight of ``like``'s
        dtype and shape (else None, and emit rounds it itself)."""
        entry = self._values.pop(name, None)
        if entry is None or entry[0] != ConstantReuse.key_of(name, "fold", fmt, attrs):
            return None
        values = entry[1]
        return values if values.dtype == like.dtype and values.shape == like.shape else None

    def __len__(self) -> int:
        return len(self._values)


def _same_tensor(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    """``a`` and ``b`` are the same initializer: one object, or equal to the byte (a memcmp of
    their serialized bytes, ~10 ms for ddddocr_ocr's 54 MB of weights, where rounding them took
    ~0.25 s of CPU)."""
    if a is b:
        return True
    if a.data_type != b.data_type or list(a.dims) != list(b.dims) or a.name != b.name:
        return False
    return a.SerializeToString() == b.SerializeToString()


def _named(proto: onnx.TensorProto, name: str) -> onnx.TensorProto:
    """``proto`` itself when it already has ``name`` (graphs copy the initializers they are given),
    else a renamed copy."""
    if proto.name == name:
        return proto
    renamed = onnx.TensorProto()
    renamed.CopyFrom(proto)
    renamed.name = name
    return renamed


def emit(model: onnx.ModelProto, plan: Plan, params: dict[str, QParams], *, fold_weights: bool = True,
         store_int_weights: bool = True, bf16_qdq_to_cast: bool = True, fold_relu: bool = False,
         pack_weights: bool = True, weight_runtime: str = "exact", skip_on_grid: bool = True,
         reuse: ConstantReuse | None = None, rounded: Rounded | None = None,
         sizes: Mapping[str, int] | None = None) -> onnx.ModelProto:
    """Return a copy of ``model`` with every planned tensor quantized as the plan says.

    ``reuse``: quantized weights kept across the builds of one search (:class:`ConstantReuse`);
    ``rounded``: weights this build already rounded (:class:`Rounded`, bias correction's); the
    model is the same with or without either.

    ``sizes``: the most elements each activation held on the calibration feeds
    (:func:`.observed_sizes.observed_sizes`), a hint by which block bodies of tensors whose declared
    shape leaves dims unknown take their branch-free forms where they were seen small; the model
    computes the same values with or without it.

    ``skip_on_grid``: leave out the block-format quantizers that are exact no-ops because their
    tensor is a Relu, reshape, transpose, slice, ... of a tensor read quantized in the same
    format (:mod:`onnxptq.pipeline.on_grid`: the proof per op and format); the model's outputs
    are bit-identical either way, with ~30 executed nodes less per skipped quantizer.

    ``fold_relu``: a Relu whose output is quantized on an asymmetric integer grid starting at 0
    (zero point = qmin) is removed and its quantizer reads the Relu's input instead: saturation
    at qmin is exactly the Relu, so the result is unchanged and one node lighter (FoldRelu).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    index = ScopeIndex(out)
    b = _Builder(out, index)
    if reuse is not None:
        b.reuse = reuse
        b.sources = {t.name: t for g in all_graphs(model.graph) for t in g.initializer}
    b.rounded = rounded
    graph = out.graph
    # Quantizers go into each tensor's home graph (where it is defined), so readers there and in
    # the bodies nested in it (through the outer scope) all see the quantized value. A tensor
    # that is an output of its home graph keeps its name there and carries the quantized value.
    graph_outputs = {o.name for s in index.scopes for o in s.graph.output if index.home.get(o.name) is s}

    # Where each quantized tensor is read from after the rewrite, and the fragments to insert
    # after the node that produces the original (a _top key: at the top of that graph).
    replacement: dict[str, str] = {}
    inserts: dict[str | tuple[str, int], list[onnx.NodeProto]] = {}
    renamed_outputs: dict[str, str] = {}
    producer = {o: n.name for n in index.nodes() for o in n.output if o}
    infos = [v for s in index.scopes for v in list(s.graph.value_info) + list(s.graph.input) + list(s.graph.output)]
    elem_types = {v.name: v.type.tensor_type.elem_type for v in infos}
    # Static shapes from shape inference (None for an unknown dim): block-format bodies are
    # specialised to the block axis's length when it is known (no Pad/Slice).
    static_shapes = {v.name: _static_shape(v) for v in infos if v.type.tensor_type.HasField("shape")}

    def at(name: str) -> str | tuple[str, int]:
        """The insert key of ``name``'s quantizer: after its producer, or the top of its home graph."""
        if name in producer:
            return producer[name]
        return _top(index.home.get(name, index.main))

    # DualQuantNodes: (consumer node, tensor) -> the value after the producer-side quantizer.
    node_replacement: dict[tuple[str, str], str] = {}
    # --- packed weights (issue 26): folded float-format weights stored in their low-precision bytes
    if pack_weights and fold_weights:
        from ..onnx_ops.packed import WeightPacker

        b.packer = WeightPacker(b.opset, b.fresh)
    if weight_runtime == "matmulnbits":  # MXINT8 MatMul weights as blocked int8 DQ (MatMulNBits)
        b.matmul_b = {n.input[1] for n in index.nodes() if n.op_type == "MatMul" and len(n.input) > 1}
    # --- end packed weights
    on_grid = _on_grid(index, plan, static_shapes, elem_types, b.initializers) if skip_on_grid else {}
    folded_relus = _foldable_relus([s.graph for s in index.scopes], plan, params) if fold_relu else {}
    removed_nodes = {relu.name for relu in folded_relus.values()}

    for tplan in plan.tensors.values():
        name = tplan.name
        tparams = params.get(name)
        if tplan.role in ("weight", "bias") and name in b.initializers:
            nodes = _emit_constant(b, tplan, tparams, fold_weights, store_int_weights, replacement)
            inserts.setdefault(at(name), []).extend(nodes)
            continue
        if name in on_grid:  # already on its grid: Q(t) = t (pipeline/on_grid.py)
            continue
        source = name
        where = at(name)
        if name in folded_relus:
            source = folded_relus[name].input[0]
            where = at(source)
        is_fp16 = elem_types.get(name) == onnx.TensorProto.FLOAT16
        # fp16 fragments end in a Cast after the DequantizeLinear, whose own output already
        # takes the conventional name.
        target = f"{name}_DequantizeLinear_Output" + ("_fp16" if is_fp16 else "")
        if name in graph_outputs and not tplan.exclusive:
            # The graph output keeps its name and now carries the quantized value.
            source = b.fresh(f"{name}_QuantizeLinear_Input")
            renamed_outputs[name] = source
            target = name
        else:
            target = b.fresh(target)
        seen = None if sizes is None else sizes.get(name)
        attrs = _activation_attrs(tplan, tparams, elem_types.get(name), static_shapes.get(name), bf16_qdq_to_cast, seen)
        first = tplan.producer_view() if name not in graph_outputs and not tplan.exclusive else None
        if first is not None:
            # Both quantizers in sequence: the producer's format, then the consumers' (spec §4.5).
            mid = b.fresh(f"{name}_{first.quant.format}_DequantizeLinear_Output")
            first_attrs = _activation_attrs(first, params.get(producer_params_key(name)), elem_types.get(name),
                                            static_shapes.get(name), bf16_qdq_to_cast, seen)
            frag = build_qdq(first.quant.format, source, mid, name=_safe(name) + "_producer", opset=b.opset, **first_attrs)
            inserts.setdefault(where, []).extend(b.absorb(frag))
            node_replacement.update({(consumer, name): mid for consumer in tplan.producer_consumers})
            source = mid
        frag = build_qdq(tplan.quant.format, source, target, name=_safe(name), opset=b.opset, **attrs)
        inserts.setdefault(where, []).extend(b.absorb(frag))
        if tplan.exclusive:
            # Only the planned readers read the quantized value; the others keep the float tensor.
            node_replacement.update({(consumer, name): target for consumer in tplan.consumers})
        elif name not in graph_outputs:
            replacement[name] = target

    if b.packer is not None:  # the packed weights' shared decoders go first in the main graph
        top = inserts.setdefault(_top(index.main), [])
        top[:0] = b.absorb(b.packer.finish())

    # Rename producers of quantized graph outputs, then rewire consumers to the quantized values,
    # in every graph (names are unique across scopes). Innermost bodies first: replacing a
    # graph's nodes copies them, so a body must be final before its owner node is copied.
    original = {id(s): {t.name for t in s.graph.initializer} for s in index.scopes}
    body_originals = {n for s in index.scopes[1:] for n in original[id(s)]}
    for scope in reversed(index.scopes):
        sub = scope.graph
        new_nodes: list[onnx.NodeProto] = list(inserts.get(_top(scope), []))
        for node in sub.node:
            if node.name in removed_nodes:
                new_nodes.extend(inserts.get(node.name, []))
                continue
            for i, o in enumerate(node.output):
                if o in renamed_outputs:
                    node.output[i] = renamed_outputs[o]
            for i, inp in enumerate(node.input):
                if (node.name, inp) in node_replacement:
                    node.input[i] = node_replacement[(node.name, inp)]
                elif inp in replacement:
                    node.input[i] = replacement[inp]
            new_nodes.append(node)
            new_nodes.extend(inserts.get(node.name, []))
        del sub.node[:]
        sub.node.extend(new_nodes)
        value_info = [v for v in sub.value_info if v.name not in renamed_outputs]
        del sub.value_info[:]
        sub.value_info.extend(value_info)
        # Initializers: a body keeps its own, the main graph its own and every new one; each only
        # while something in this graph or a body under it still reads it. Pruned here, before the
        # owner node is copied into its parent graph.
        used = {i for g in all_graphs(sub) for n in g.node for i in n.input} | graph_outputs
        mine = (set(b.initializers) - body_originals) if scope.is_main else original[id(scope)]
        del sub.initializer[:]
        sub.initializer.extend(t for name, t in b.initializers.items() if name in mine and name in used)
    # A body's new constants (its weights' integers, scales, packed bytes) go into that body, as
    # its float weights were: onnxruntime's DQ -> MatMul fusion looks a weight up in its own graph.
    sink_initializers(out, set(b.initializers) - {n for names in original.values() for n in names})
    # Drop graph inputs that named initializers we removed.
    kept_inits = {t.name for t in graph.initializer}
    all_init_names = set(b.initializers)
    inputs = [i for i in graph.input if i.name not in all_init_names or i.name in kept_inits]
    del graph.input[:]
    graph.input.extend(inputs)

    del out.functions[:]
    out.functions.extend(b.functions.values())
    # one definition per body shape, the constants that differ as inputs (bit-identical calls)
    from ..graph.passes.share_functions import compact_bodies, share_functions

    compact_bodies(share_functions(out, domains={DOMAIN}), domains={DOMAIN})
    del out.opset_import[:]
    b.imports[""] = max(b.imports.get("", b.opset), b.min_opset)
    out.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in sorted(b.imports.items()))
    if b.min_opset > b.opset:
        raise ValueError(
            f"a quantizer needs opset {b.min_opset} but the prepared model has opset {b.opset}; "
            "prepare the model at that opset (QuantConfig.opset)"
        )
    # --- issue 26 item 3: constant weight decodes in Loop/Scan bodies run once, outside (bit-exact)
    from ..graph.passes.hoist_loop_constants import hoist_loop_constants

    hoist_loop_constants(out)
    # --- end
    # --- issue 26: BF16/FP16 roundings (Cast pairs, unsaturated Q/DQ functions) on tensors exact
    # in their format by construction (bit-exact)
    from ..graph.passes.drop_exact_casts import drop_exact_casts

    drop_exact_casts(out)
    # a rounding read only through data movement goes where fewer values remain (bit-exact)
    from ..graph.passes.sink_roundings import sink_roundings

    sink_roundings(out, sizes)
    # Cast chains exact on their input (a float16 model's FP16 quantizers: f16 -> f32 -> f16 -> f32
    # -> f16), every graph; the pass that works on 16-bit graphs, where drop_exact_casts does not
    from ..graph.passes.exact_cast_chains import collapse_exact_cast_chains

    collapse_exact_cast_chains(out)
    # --- end
    return out


def _top(scope: Scope) -> tuple[str, int]:
    """The insert key for the top of ``scope``'s graph."""
    return ("_top", id(scope))


def _static_shape(value: onnx.ValueInfoProto) -> tuple[int | None, ...]:
    """The dims of ``value`` (None where unknown or symbolic)."""
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim)


def _activation_attrs(view: TensorPlan, params: QParams | None, elem_type: int | None, shape: Any,
                      bf16_qdq_to_cast: bool, observed: int | None = None) -> dict[str, Any]:
    """``build_qdq`` attributes of one activation quantizer (a tensor's plan or its producer view);
    ``elem_type``: the tensor's element type from shape inference, if known; ``observed``: the
    most elements it held on the calibration feeds (block formats' body choice), if known."""
    attrs = quantizer_attrs(view, params)
    if view.quant.format in ("bfp", "mx"):
        attrs["shape"] = shape
        if observed is not None:
            attrs["observed"] = observed
        if elem_type == onnx.TensorProto.FLOAT:
            # A body without the Cast pair; any other (or unknown) type gets the generic one.
            attrs["dtype"] = "float32"
    else:
        # A fixed dtype gives the bare Q/DQ pair that backends' QDQ fusions look for.
        attrs["dtype"] = "float16" if elem_type == onnx.TensorProto.FLOAT16 else "float32"
    if view.quant.format in ("bf16", "fp16") and not bf16_qdq_to_cast:
        attrs["cast_form"] = False
    return attrs


#: Largest slice of a weight fake-quantized at once: the NumPy references hold many temporaries
#: of their input's size (the block formats in float64), which on an 8192x8192 weight was 3.9x
#: the model's weights in peak memory for MX9 (bench/RESULTS.md). 2 MiB rather than 16: every
#: temporary of a 16 MiB slice is a fresh mmap whose pages the kernel faults in one by one (lac's
#: 58224x128 embedding: 0.22-0.32 s of system CPU per format, ~0 at 2 MiB, the same user time).
SLICE_BYTES = 2 * 2**20
_SLICEABLE = frozenset(BLOCK_FORMATS) | frozenset(FLOAT_FORMATS)


def fake_quantize_in_slices(values: np.ndarray, fmt: str, attrs: dict[str, Any]) -> np.ndarray:
    """``fake_quantize(values, fmt, **attrs)``, computed slice by slice along an axis the format's
    blocks do not span (bit-identical: element formats round each value alone, block formats each
    block along ``attrs['axis']`` alone). Integer formats (per-channel scales along an axis) and
    small or rank-1 tensors go through whole. MXINT8 goes through the float32 path that gives the
    reference's bits (:mod:`onnxptq.formats.mx_float32`: ~half of a weight's quantize time)."""
    if values.nbytes <= SLICE_BYTES or values.ndim < 2 or fmt not in _SLICEABLE:
        return fake_quantize_any(values, fmt, **attrs)
    block_axis = attrs.get("axis", 1) % values.ndim if fmt in ("bfp", "mx") else None
    along = 0 if block_axis != 0 else 1
    rows = max(1, SLICE_BYTES * values.shape[along] // values.nbytes)
    out = np.empty(values.shape, dtype=values.dtype)
    for start in range(0, values.shape[along], rows):
        index = [slice(None)] * values.ndim
        index[along] = slice(start, start + rows)
        out[tuple(index)] = fake_quantize_any(np.ascontiguousarray(values[tuple(index)]), fmt, **attrs)
    return out


def _emit_constant(b: _Builder, tplan: TensorPlan, params: QParams | None, fold: bool, store_int: bool,
                   replacement: dict[str, str]) -> list[onnx.NodeProto]:
    """Quantize a weight or bias initializer; returns the nodes to place at the top of the graph.

    A body's weight (an ``If`` branch's LSTM, as silero VAD's) is packed as the main graph's are:
    its decode nodes sit at the top of its body, reading the group streams decoded in the main
    graph through the outer scope, and onnxruntime folds both at load (the optimized graph is the
    unpacked form's). Stored as rounded fp32 instead, silero_half's BF16 file was 1.12x its fp32
    file (fuzz17)."""
    name = tplan.name
    tensor = b.initializers[name]
    quant = tplan.quant
    attrs = quantizer_attrs(tplan, params)
    source = b.sources.get(name) if b.reuse is not None else None

    def kept(kind: str) -> tuple[onnx.TensorProto | None, Any]:
        """The stored quantized weight of an earlier build, and its reuse key (None, None: no reuse)."""
        if source is None or b.reuse is None:
            return None, None
        key = b.reuse.key(source, kind, quant.format, attrs)
        return b.reuse.get(key, source), key

    def keep(key: Any, stored: onnx.TensorProto) -> None:
        if key is not None and b.reuse is not None and source is not None:
            b.reuse.put(key, source, stored)

    if quant.is_integer and store_int:
        from ..formats import integer

        q_name = b.fresh(f"{name}_quantized")
        stored, key = kept("int")
        if stored is None:
            values = tensor_values(tensor)
            q = integer.quantize(values.astype(np.float32), quant.format, attrs["scale"], attrs["zero_point"],
                                 attrs.get("axis"), attrs.get("block_size"))
            stored = store(q, q_name)
            keep(key, stored)
        b.initializers[q_name] = _named(stored, q_name)
        target = b.fresh(f"{name}_DequantizeLinear_Output")
        from ..onnx_ops import integer as int_ops

        frag = int_ops.build_dequantize(quant.format, q_name, target, name=_safe(name), opset=b.opset,
                                        scale=attrs["scale"], zero_point=attrs["zero_point"],
                                        axis=attrs.get("axis"), block_size=attrs.get("block_size"))
        if tensor.data_type == onnx.TensorProto.FLOAT16:
            cast_out = b.fresh(f"{target}_fp16")
            frag.nodes.append(onnx.helper.make_node("Cast", [target], [cast_out], to=onnx.TensorProto.FLOAT16,
                                                    name=f"{_safe(name)}_CastFp16"))
            target = cast_out
        replacement[name] = target
        return b.absorb(frag)
    if fold:
        stored, key = kept("fold")
        packs = b.packer is not None
        values = tensor_values(tensor) if stored is None or packs or name in b.matmul_b else None
        if stored is not None:
            folded = numpy_helper.to_array(stored) if values is not None else None
        else:
            folded = b.rounded.take(name, quant.format, attrs, values) if b.rounded else None
            if folded is None:
                folded = np.asarray(fake_quantize_in_slices(values, quant.format, attrs), dtype=values.dtype)
        if name in b.matmul_b and quant.format == "mx":
            from ..onnx_ops.packed import mxint8_as_dequantize

            target = b.fresh(f"{name}_DequantizeLinear_Output")
            frag = mxint8_as_dequantize(name, values, folded, attrs, target, b.fresh, b.opset)
            if frag is not None:
                replacement[name] = target
                return b.absorb(frag)
        if packs:  # packed storage, decoded by folded standard ops
            target = b.fresh(f"{name}_{quant.format}")
            frag = b.packer.add(name, values, folded, quant.format, attrs, target)
            if frag is not None:
                replacement[name] = target
                return b.absorb(frag)
        new_name = b.fresh(f"{name}_{quant.format}")
        if stored is None:
            stored = store(folded, new_name)
            keep(key, stored)
        b.initializers[new_name] = _named(stored, new_name)
        replacement[name] = new_name
        return []
    values = tensor_values(tensor)
    target = b.fresh(f"{name}_DequantizeLinear_Output")
    if quant.format in ("bfp", "mx"):
        attrs["shape"] = tuple(values.shape)
    # The weight's dtype is known: without it the fragment is the generic CastLike-wrapped form,
    # whose inner DequantizeLinear output took the target's name too (AddQDQPairToWeight failed
    # the checker: "'W_DequantizeLinear_Output' used as output names multiple times").
    attrs["dtype"] = "float16" if values.dtype == np.float16 else "float32"
    frag = build_qdq(quant.format, name, target, name=_safe(name), opset=b.opset, **attrs)
    replacement[name] = target
    return b.absorb(frag)


def _on_grid(index: ScopeIndex, plan: Plan, shapes: dict[str, Any], elem_types: dict[str, int],
             initializers: dict[str, onnx.TensorProto]) -> dict[str, str]:
    """:func:`onnxptq.pipeline.on_grid.on_grid_tensors` on this model, with emit's wiring: a
    node reads a planned tensor's quantized value unless the tensor is exclusive to other
    consumers (a producer-side quantizer is ruled out there)."""
    from .on_grid import on_grid_tensors

    nodes = list(index.nodes())
    constants: dict[str, np.ndarray] = {}
    for node in nodes:
        if node.op_type == "Constant" and is_onnx_domain(node.domain) and node.output:
            for a in node.attribute:
                if a.name == "value":
                    constants[node.output[0]] = onnx.numpy_helper.to_array(a.t)
                elif a.name == "value_ints":
                    constants[node.output[0]] = np.asarray(list(a.ints), np.int64)

    def constant(name: str) -> np.ndarray | None:
        if name not in constants and name in initializers and initializers[name].data_type == onnx.TensorProto.INT64:
            constants[name] = tensor_values(initializers[name])
        return constants.get(name)

    def reads_quantized(node_name: str, tensor: str) -> bool:
        tplan = plan.tensors[tensor]
        return node_name in tplan.consumers if tplan.exclusive else True

    found = on_grid_tensors(nodes, plan, shapes, elem_types, constant, reads_quantized)
    if found:
        log.debug("%d block-format quantizers left out (tensors already on the grid): %s", len(found), found)
    return found


def _foldable_relus(graphs: list[onnx.GraphProto], plan: Plan, params: dict[str, QParams]) -> dict[str, onnx.NodeProto]:
    """Relu nodes whose output quantizer already clamps at 0: {Relu output: Relu node}.

    ``graphs``: the main graph and every body, so a reader inside a body counts too.
    """
    from ..formats import integer

    outputs = {o.name for g in graphs for o in g.output}
    readers: dict[str, int] = {}
    nodes = [n for g in graphs for n in g.node]
    for node in nodes:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    found = {}
    for node in nodes:
        if node.op_type != "Relu" or not is_onnx_domain(node.domain):
            continue
        out, inp = node.output[0], node.input[0]
        tplan = plan.tensors.get(out)
        if tplan is None or not tplan.quant.is_integer or tplan.quant.symmetric or out in outputs or inp in outputs:
            continue
        if inp in plan.tensors or readers.get(inp, 0) != 1 or getattr(tplan, "producer_quant", None) is not None:
            continue
        if tplan.exclusive and any(out in n.input and n.name not in tplan.consumers for n in nodes):
            continue  # a reader outside its consumers takes the float Relu output, so the Relu must stay
        qp = params.get(out)
        if qp is None or qp.zero_point is None:
            continue
        qmin, _ = integer.qrange(tplan.quant.format, symmetric=False, reduce_range=tplan.quant.reduce_range)
        if np.all(np.asarray(qp.zero_point).astype(np.int64) == qmin):
            found[out] = node
    return found


__all__ = ["ConstantReuse", "QParams", "emit", "quantizer_attrs", "producer_params_key", "DOMAIN"]
