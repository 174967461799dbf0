"""Mirror of ``quark.onnx.quantization.config``: the import path ported scripts use for
``get_default_config``, ``Config`` and ``QuantizationConfig`` (re-exported from onnxptq.compat).
"""

from __future__ import annotations

from ...compat.defaults import get_default_config
from ...compat.legacy import Config, QuantizationConfig

__all__ = ["Config", "QuantizationConfig", "get_default_config"]
