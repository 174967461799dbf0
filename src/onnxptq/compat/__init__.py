"""The Quark-compatible API: a script written for ``quark.onnx`` runs with ``onnxptq`` in its imports.

One job per module: :mod:`.enums` (type/format/method enums and their translation),
:mod:`.legacy` (``Config``, ``QuantizationConfig``), :mod:`.keys` (the table of every
``extra_options`` key and what we do with it), :mod:`.options` (fields and ``extra_options`` →
our :class:`~onnxptq.config.schema.QuantConfig`, by that table), :mod:`.defaults` (``get_default_config``),
:mod:`.quantizer` (``ModelQuantizer``), :mod:`.readers` (``RandomDataReader``) and
:mod:`.library` (``get_library_path``).
"""

from __future__ import annotations

from .defaults import get_default_config
from .enums import (
    CalibrationDataReader,
    CalibrationMethod,
    ExtendedCalibrationMethod,
    ExtendedQuantFormat,
    ExtendedQuantType,
    Int16Method,
    LayerWiseMethod,
    PowerOfTwoMethod,
    QuantFormat,
    QuantType,
    VitisQuantFormat,
    VitisQuantType,
)
from .legacy import Config, QuantizationConfig
from .library import get_library_path
from .options import to_quant_config
from .quantizer import ModelQuantizer
from .readers import RandomDataReader

__all__ = [
    "CalibrationDataReader",
    "CalibrationMethod",
    "Config",
    "ExtendedCalibrationMethod",
    "ExtendedQuantFormat",
    "ExtendedQuantType",
    "Int16Method",
    "LayerWiseMethod",
    "ModelQuantizer",
    "PowerOfTwoMethod",
    "QuantFormat",
    "QuantType",
    "QuantizationConfig",
    "RandomDataReader",
    "VitisQuantFormat",
    "VitisQuantType",
    "get_default_config",
    "get_library_path",
    "to_quant_config",
]
