"""Mirror of ``quark.onnx.quantization.config.config``: ``Config`` and ``QuantizationConfig``."""

from __future__ import annotations

from ...compat.legacy import Config, QuantizationConfig

__all__ = ["Config", "QuantizationConfig"]
