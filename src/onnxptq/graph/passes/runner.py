"""The pass runner: a list of named onnx-ir passes on one in-memory model, then names and the checker.

One deserialization for the whole list (a large model is read once, not once per pass), each
failure named by its step, every node given a unique name (plans, configs and reports refer to
nodes by name: :func:`onnxptq.graph.naming.node_names`, run here once, at the end of the list) and
the ONNX checker on the result, so a broken rewrite fails here and not in a user's session. Which
passes run and in which order is the pipeline's choice (:func:`onnxptq.pipeline.prepare.prepare`);
a single pass as a ``ModelProto -> ModelProto`` function uses ``_common.run_passes``.
"""

from __future__ import annotations

from typing import Sequence

import onnx
import onnx_ir as ir

from ..check import onnx_checker
from ..naming import node_names, value_names
from ._common import to_ir, to_proto

__all__ = ["PrepareError", "run_steps"]


class PrepareError(RuntimeError):
    """A prepare step failed or produced a model the ONNX checker rejects.

    Deliberately not an :class:`~onnxptq.errors.OnnxptqError`: the input was already checked, so
    this is a defect of ours, and the fuzz tests must see it as one rather than as a documented
    answer to bad input."""


def run_steps(model: onnx.ModelProto, steps: Sequence[tuple[str, ir.passes.PassBase]], *, check: bool = True) -> onnx.ModelProto:
    """Run ``steps`` (name, pass) in order on a copy of ``model``; name every node; check the result.

    Raises :class:`PrepareError` naming the step that failed, or saying the checker rejected the
    result. The input is not modified.
    """
    ir_model = to_ir(model)
    for name, step in steps:
        try:
            ir_model = step(ir_model).model
        except Exception as exc:
            raise PrepareError(f"prepare step '{name}' failed: {exc}") from exc
    result = to_proto(ir_model)
    value_names(result)  # sibling bodies may define the same value name; emit keys quantizers by name
    node_names(result)  # plans refer to nodes by name: the prepared model has a unique one each
    if check:
        try:
            onnx_checker(result)
        except onnx.checker.ValidationError as exc:
            raise PrepareError(f"the prepared model fails the ONNX checker: {exc}") from exc
    return result
