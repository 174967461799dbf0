"""Mirror of ``quark.onnx.quantization.api``: ``ModelQuantizer`` (defined in :mod:`onnxptq.compat`)."""

from __future__ import annotations

from ..compat.quantizer import ModelQuantizer

__all__ = ["ModelQuantizer"]
