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

from onnxptq.graph.passes._common import run_passes

log = logging.getLogger(__name__)


def shape_inference_pass(*, data_prop: bool = True) -> ir.passes.PassBase:
    """onnx-ir's shape inference, non-strict (partial results are kept)."""
    return ShapeInferencePass(check_type=False, strict_mode=False, data_prop=data_prop)


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """Return a copy of ``model`` whose intermediate tensors carry inferred dtypes and shapes."""
    return run_passes(model, shape_inference_pass(data_prop=data_prop))
