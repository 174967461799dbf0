"""Graph hygiene: common-subexpression elimination, dead-code removal, topological sort.

Why: the rewriting passes leave orphans behind (a BatchNorm's old weights, a folded chain's
inputs), Paddle exports repeat identical Shape/Cast nodes, and the later stages (calibration builds
one augmented model, emit inserts nodes by position) want a small graph in topological order. All
of it is onnx-ir's own passes; nothing here is re-implemented.
"""

from __future__ import annotations

import logging

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import (
    CommonSubexpressionEliminationPass,
    RemoveUnusedFunctionsPass,
    RemoveUnusedNodesPass,
    TopologicalSortPass,
)

from onnxptq.graph.passes._common import run_passes

log = logging.getLogger(__name__)


def cse_pass() -> ir.passes.PassBase:
    """onnx-ir's CSE: identical nodes on identical inputs become one (main graph; If/Loop skipped)."""
    return CommonSubexpressionEliminationPass()


def remove_unused_passes() -> list[ir.passes.PassBase]:
    """Dead nodes, unused initializers (main graph) and unused model-local functions go."""
    return [RemoveUnusedNodesPass(), RemoveUnusedFunctionsPass()]


def eliminate_common_subexpressions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with duplicate nodes merged and the orphans removed."""
    return run_passes(model, cse_pass(), *remove_unused_passes())


def remove_unused(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` without dead nodes, unused initializers or unused functions."""
    return run_passes(model, *remove_unused_passes())


def topological_sort(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with the nodes of the graph and of each function sorted (stable)."""
    return run_passes(model, TopologicalSortPass())
