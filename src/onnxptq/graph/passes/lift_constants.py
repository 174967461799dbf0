"""Lift ``Constant`` nodes to initializers.

Why: Paddle exports (both PP-OCR models) hold every weight in a ``Constant`` node. The rest of the
pipeline (BatchNorm folding, the planner's weight detection, constant folding) looks for weights as
initializers, so they are lifted first. Unlike onnx-ir's default (tensors of 16+ elements only), we
lift *all* constants, tiny shape constants and ``value_int(s)``/``value_float(s)`` forms included:
an int64 initializer feeding Reshape/Slice/Unsqueeze is as valid in onnxruntime as a Constant node,
and constant folding then sees one kind of constant instead of two.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import LiftConstantsToInitializersPass

from onnxptq.graph.passes._common import run_passes

log = logging.getLogger(__name__)


def lift_constants_pass(size_limit: int = 0) -> ir.passes.PassBase:
    """The onnx-ir pass lifting every Constant whose tensor has at least ``size_limit`` elements.

    Constants that are graph outputs stay nodes (an output cannot be an initializer of the same
    graph in every runtime); constants inside If/Loop bodies become initializers of that body.
    """
    return LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=size_limit)


def lift_constants(model: onnx.ModelProto, *, size_limit: int = 0) -> onnx.ModelProto:
    """Return a copy of ``model`` with its ``Constant`` nodes turned into initializers."""
    return run_passes(model, lift_constants_pass(size_limit))
