"""Exporter program objects as models: what ``torch.onnx.export(..., dynamo=True)`` returns.

torch's default exporter (torch.export + onnxscript) returns an ``ONNXProgram`` when no file is
named, and its documentation goes on with that object (``onnx_program.save(...)``,
``onnx_program.model_proto``); users hand it to us as it is. Path-or-ModelProto loading then
failed inside :class:`pathlib.Path` with a bare ``TypeError`` ("expected str, bytes or
os.PathLike object, not ONNXProgram").

We accept any object by what it offers, not by its class name: one whose ``model_proto``
attribute is an ``onnx.ModelProto`` (the exported model, weights included: onnxscript serialises
its in-memory tensors into the message) is that model. Anything else that is neither a path nor a
ModelProto gets an error naming its type and what we take.
"""

from __future__ import annotations

import os
from typing import Any

import onnx

from ..errors import OnnxptqError

__all__ = ["ModelTypeError", "as_model"]


class ModelTypeError(OnnxptqError, TypeError):
    """The model argument is neither a path, an ``onnx.ModelProto`` nor an exporter's program."""


def as_model(model: Any) -> Any:
    """``model`` unchanged when it is a path or ModelProto; an exporter program's ``model_proto``;
    else :class:`ModelTypeError`."""
    if isinstance(model, (str, os.PathLike, onnx.ModelProto)):
        return model
    proto = getattr(model, "model_proto", None)
    if isinstance(proto, onnx.ModelProto):
        return proto
    raise ModelTypeError(
        f"model: expected a path to an .onnx file, an onnx.ModelProto, or an exporter program with a "
        f".model_proto (what torch.onnx.export(..., dynamo=True) returns), got {type(model).__module__}."
        f"{type(model).__qualname__}")
