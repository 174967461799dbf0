"""Graph rewrites of a float model, one pass a file (onnx-ir style), each ``ModelProto -> ModelProto``.

Each pass leaves its input untouched and pins its result to an IR version onnxruntime accepts; its
test sits beside the others in ``tests/test_graph_<pass>.py``. Which passes run, in which order and
why, is decided in one place: :func:`onnxptq.pipeline.prepare.prepare`.

The fusions (``fold_affine``, ``fold_scalar_affine``, ``fuse_hardswish``, ``fuse_layernorm``) exist
for quantization: exporters spell HardSwish as ``Add → Clip → Mul → Div``, LayerNorm as nine
elementwise ops and a learnable affine as ``Mul → Add``, and a quantizer puts a quantizer on every
tensor between quantized ops, so each decomposition multiplies the rounding points. Hardware runs
them as one op, so quantizing them as one op is also the honest simulation. Each rewrite is exact in
structure and numerically equal to float rounding.
"""

from __future__ import annotations

from onnxptq.graph.passes.cleanup import eliminate_common_subexpressions, remove_unused, topological_sort
from onnxptq.graph.passes.eliminate_identity import eliminate_identity
from onnxptq.graph.passes.fold_affine import FoldAffinePass
from onnxptq.graph.passes.fold_batchnorm import fold_batchnorm
from onnxptq.graph.passes.fold_constants import fold_constants
from onnxptq.graph.passes.fold_scalar_affine import FoldScalarAffineIntoConvPass
from onnxptq.graph.passes.fuse_hardswish import FuseHardSwishPass
from onnxptq.graph.passes.fuse_layernorm import FuseLayerNormPass
from onnxptq.graph.passes.lift_constants import lift_constants
from onnxptq.graph.passes.merge_matmuls import merge_matmuls
from onnxptq.graph.passes.shape_inference import infer_shapes
from onnxptq.graph.passes.upgrade_opset import OpsetUpgradeError, model_opset, upgrade_opset
from onnxptq.graph.passes.widen_fp16 import convert_float16_to_float

__all__ = [
    "FoldAffinePass",
    "FoldScalarAffineIntoConvPass",
    "FuseHardSwishPass",
    "FuseLayerNormPass",
    "OpsetUpgradeError",
    "convert_float16_to_float",
    "eliminate_common_subexpressions",
    "eliminate_identity",
    "fold_batchnorm",
    "fold_constants",
    "infer_shapes",
    "lift_constants",
    "merge_matmuls",
    "model_opset",
    "remove_unused",
    "topological_sort",
    "upgrade_opset",
]

