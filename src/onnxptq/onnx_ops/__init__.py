"""ONNX realisations of the formats: one builder module per family, standard ops only.

Each module exposes ``build(fmt, x, y, *, name, opset, **attrs) -> QDQNodes``. Formats that
standard ONNX lacks become FunctionProtos in the ``onnxptq`` domain, embedded in the model.
"""

from . import bfp, floating, integer, mx

__all__ = ["bfp", "floating", "integer", "mx"]
