"""Whole-model float conversion without calibration: FP32/FP16 → BF16 (four layouts), FP16 ↔ FP32.

``bf16`` holds the BF16 rewrite, ``fp16`` the float16 widening and narrowing built on it,
``interface`` the declared input/output types both restore, ``convert`` the file-level entry
points the tools and ``onnxptq convert`` call (their flags: :mod:`onnxptq.commands.convert`),
``dequantize`` the float model under onnxruntime's dynamic int8 quantization (for packages that
ship only that file). Graph walking comes from :mod:`onnxptq.graph.walk`, as everywhere else.
"""

from __future__ import annotations

from .bf16 import ACTIVATION_MODES, BFLOAT16, FLOAT, FLOAT16, FORMATS, convert_float_to_bf16, prepare_graph, round_bf16, saturate, to_bf16
from .convert import convert_file, convert_model, verify_runs
from .dequantize import NotRecoverableError, dequantize_dynamic
from .fp16 import convert_float16_to_float, convert_float_to_float16
from .interface import has_type, io_types, set_io_types

__all__ = [
    "ACTIVATION_MODES",
    "BFLOAT16",
    "FLOAT",
    "FLOAT16",
    "FORMATS",
    "NotRecoverableError",
    "convert_file",
    "convert_float16_to_float",
    "convert_float_to_bf16",
    "convert_float_to_float16",
    "convert_model",
    "dequantize_dynamic",
    "has_type",
    "io_types",
    "prepare_graph",
    "round_bf16",
    "saturate",
    "set_io_types",
    "to_bf16",
    "verify_runs",
]
