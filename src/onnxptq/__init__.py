"""onnxptq: post-training quantization of ONNX models that run on stock onnxruntime."""

from __future__ import annotations

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

# --- our own API -------------------------------------------------------------------------------
from .api import QuantizationResult, quantize  # noqa: E402
from .config.presets import get_preset, preset_names  # noqa: E402
from .config.schema import CalibrationOptions, QuantConfig, TensorQuant  # noqa: E402
