"""Raise a model's default-domain opset with ``onnx.version_converter``.

Why: several formats need newer operators than old exports use (int16/int4/blocked Q/DQ need
opset 21), and onnxruntime checks a model-local function's body against the *model's* opset, so a
function written for opset 21 fails inside an opset-11 model. Both PP-OCR models (opset 11 and 12)
convert to 21 and run. The converter drops model-local functions (onnx 1.23); we restore them and
raise their default-domain
import is raised with the model when every op they use has the same definition at both versions,
and a clear error names the function and op otherwise. When no op of the model itself (bodies
included) changed definition between the two opsets, the import is raised without the converter:
exact, cheaper, and possible for a model past protobuf's 2 GB limit, which the converter (it
serializes the model) cannot take.
"""

from __future__ import annotations

import logging

import onnx
import onnx.version_converter

from onnxptq.graph import opsets
from onnxptq.graph.io import ORT_MAX_IR_VERSION, TARGET_OPSET, load_model, pin_versions
from onnxptq.graph.opsets import ONNX_DOMAINS, is_onnx_domain
from onnxptq.graph.passes.lean_convert import convert_version_lean
from onnxptq.graph.walk import all_graphs

log = logging.getLogger(__name__)

from onnxptq.errors import OnnxptqError


class OpsetUpgradeError(OnnxptqError, ValueError):
    """The model (or one of its functions) cannot be converted to the requested opset."""


def model_opset(model: onnx.ModelProto) -> int:
    """The default-domain opset the model imports."""
    try:
        return opsets.model_opset(model)
    except ValueError as exc:
        raise OpsetUpgradeError(str(exc)) from None


def _changed_ops(op_types: set[str], old: int, new: int) -> list[str]:
    """The ops among ``op_types`` whose schema differs between opsets ``old`` and ``new``."""
    changed = []
    for op in sorted(op_types):
        try:
            if onnx.defs.get_schema(op, old).since_version != onnx.defs.get_schema(op, new).since_version:
                changed.append(op)
        except onnx.defs.SchemaError:
            changed.append(op)
    return changed


def _upgrade_functions(model: onnx.ModelProto, target: int) -> None:
    """Raise each model-local function's default-domain import to ``target`` where that is exact."""
    for function in model.functions:
        imports = {e.domain: e for e in function.opset_import}
        entry = next((imports[d] for d in sorted(ONNX_DOMAINS) if d in imports), None)
        if entry is None or entry.version == target:
            continue
        ops = {n.op_type for n in function.node if is_onnx_domain(n.domain)}
        changed = _changed_ops(ops, entry.version, target)
        if changed:
            raise OpsetUpgradeError(
                f"function {function.domain}::{function.name} uses ops whose definition changed between "
                f"opset {entry.version} and {target}: {', '.join(changed)}; rebuild the function for opset {target}"
            )
        entry.version = target


def _convert(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """The converter's result, its large float weights kept out of it (graph/passes/lean_convert.py: a
    fraction of the memory, the same bytes); where that fails, the converter on the whole model, whose
    error is then the one to report."""
    try:
        return convert_version_lean(model, target)
    except Exception as exc:  # an adapter that read a weight's values: the plain converter decides
        log.debug("version converter with weights as references failed (%s); converting the whole model", exc)
    return onnx.version_converter.convert_version(model, target)


def upgrade_opset(model: onnx.ModelProto, target: int = TARGET_OPSET) -> onnx.ModelProto:
    """Return a copy of ``model`` converted to default-domain opset ``target``.

    A model already at ``target`` is returned as a copy; a model above it raises (a downgrade
    loses operators and is not what a quantizer should do silently).
    """
    # A model of only non-default domains (an ai.onnx.ml LinearClassifier → Normalizer → ZipMap
    # from skl2onnx/onnxmltools) need not import the default domain: it has no op to convert, and
    # the import is what the quantizer's own nodes need. 0 stands for "not imported".
    current = opsets.model_opset(model, default=0)
    if current == 0 and any(is_onnx_domain(n.domain) for g in all_graphs(model.graph) for n in g.node):
        raise OpsetUpgradeError("the model has nodes of the default ONNX domain but imports no version of it "
                                "(opset_import has no '' / 'ai.onnx' entry): the model is invalid")
    if current == target:
        return pin_versions(load_model(model))
    if current > target:
        raise OpsetUpgradeError(f"model opset {current} is above the target opset {target}; downgrading is not supported")
    every_op = {n.op_type for g in all_graphs(model.graph) for n in g.node if is_onnx_domain(n.domain)}
    if not _changed_ops(every_op, current, target):
        # No op of the model (bodies included) changed definition in between: raising the import
        # is exact, and needs neither the converter nor a serialized model (which a model past
        # protobuf's 2 GB limit cannot be).
        converted = load_model(model)
        for entry in converted.opset_import:
            if is_onnx_domain(entry.domain):
                entry.version = target
        if current == 0:
            converted.opset_import.append(onnx.helper.make_opsetid("", target))
    else:
        try:
            converted = _convert(model, target)
        except Exception as exc:
            hint = ", ".join(_changed_ops(every_op, current, target)) or "none"
            raise OpsetUpgradeError(
                f"onnx.version_converter could not convert the model from opset {current} to {target}: {exc} "
                f"(ops whose definition changed in between: {hint})"
            ) from exc
        # The converter infers shapes as it converts and writes them into value_info, from the declared
        # output shapes too: lore_process declares [batch, 54, 4] (its export's count) for an output that is
        # also read inside, and the readers came out [batch, 54, 256], a size the block bodies were then built
        # for (every other count failed at run time). Only what the source itself declared is kept: the
        # preparation infers again from the inputs (graph/passes/shape_inference.py).
        own = {vi.name for vi in model.graph.value_info}
        kept = [vi for vi in converted.graph.value_info if vi.name in own]
        del converted.graph.value_info[:]
        converted.graph.value_info.extend(kept)
    if model_opset(converted) != target:
        raise OpsetUpgradeError(f"version converter returned opset {model_opset(converted)}, expected {target}")
    if len(converted.functions) != len(model.functions):
        # onnx.version_converter drops model-local functions; put them back, then raise their opset.
        del converted.functions[:]
        converted.functions.extend(model.functions)
    _upgrade_functions(converted, target)
    # The converter keeps the old IR version; newer opsets come with a minimum IR version
    # (opset 21 -> IR 10), which the checker and onnxruntime enforce.
    needed = onnx.helper.find_min_ir_version_for(list(converted.opset_import), ignore_unknown=True)
    converted.ir_version = min(max(converted.ir_version, needed), ORT_MAX_IR_VERSION)
    log.info("upgraded model opset %s -> %d", current or "(none)", target)
    return pin_versions(converted)
