"""Mirror of ``quark.onnx.quantization.config``: ``get_default_config``, ``Config``, ``QuantizationConfig``."""

from __future__ import annotations

from ...compat.defaults import get_default_config
from ...compat.legacy import Config, QuantizationConfig

__all__ = ["Config", "QuantizationConfig", "get_default_config"]
