"""onnxptq: post-training quantization of ONNX models that run on stock onnxruntime."""

from __future__ import annotations

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

# Before any onnx-ir import: sympy (~34 MiB, which onnx-ir imports and a quantization never uses)
# is imported only if something reads it (onnxptq/deferred.py).
from .deferred import defer_sympy as _defer_sympy  # noqa: E402

_defer_sympy()

# --- our own API -------------------------------------------------------------------------------
# Imported lazily: ``import onnxptq.formats`` must not pull in the whole pipeline (and onnxruntime
# sessions, tqdm, ...) for users who only want the format references.
_LAZY = {
    "quantize": ("api", "quantize"),
    "QuantizationResult": ("pipeline.complete", "QuantizationResult"),
    "get_preset": ("config.presets", "get_preset"),
    "preset_names": ("config.presets", "preset_names"),
    "QuantConfig": ("config.schema", "QuantConfig"),
    "TensorQuant": ("config.schema", "TensorQuant"),
    "CalibrationOptions": ("config.schema", "CalibrationOptions"),
    "auto_mixed_precision": ("algorithms.mixed_precision", "auto_mixed_precision"),
    "L2Target": ("algorithms.mixed_precision", "L2Target"),
    "Top1Target": ("algorithms.mixed_precision", "Top1Target"),
    "AutoMixedPrecisionOptions": ("config.schema", "AutoMixedPrecisionOptions"),
    # weight-only (LLM) quantization: onnxptq.weight_only
    "quantize_weights": ("weight_only.api", "quantize_weights"),
    "WeightOnlyResult": ("weight_only.api", "WeightOnlyResult"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'onnxptq' has no attribute {name!r}")

# --- Quark-compatible API (onnxptq.compat): `from quark.onnx import X` -> `from onnxptq import X` ---
_LAZY.update(
    {
        name: ("compat", name)
        for name in (
            "ModelQuantizer",
            "Config",
            "QuantizationConfig",
            "QuantType",
            "QuantFormat",
            "CalibrationMethod",
            "CalibrationDataReader",
            "ExtendedQuantType",
            "ExtendedQuantFormat",
            "VitisQuantType",
            "VitisQuantFormat",
            "PowerOfTwoMethod",
            "Int16Method",
            "LayerWiseMethod",
            "ExtendedCalibrationMethod",
            "RandomDataReader",
            "get_library_path",
            "get_default_config",
        )
    }
)
# --- end of the Quark-compatible API ------------------------------------------------------------
