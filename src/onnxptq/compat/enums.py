"""The reference tool's enumerations, and their translation into our format names.

Users port scripts that name types as ``QuantType.QInt8`` (onnxruntime), ``ExtendedQuantType.QBFP``
(the reference tool's own enum, whose values differ from onnxruntime's), deprecated
``VitisQuantType`` members, or plain strings. Every one of these is translated here, once, into a
format name of :data:`onnxptq.formats.ALL_FORMATS`, so the rest of the compat layer never compares
enum values across enums (``QuantType.QInt8`` is 0 but ``ExtendedQuantType.QInt8`` is 1).
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Any

from onnx import TensorProto
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType

from ..config.schema import ConfigError, suggest
from ..formats.base import ALL_FORMATS

log = logging.getLogger(__name__)

__all__ = [
    "CalibrationDataReader",
    "CalibrationMethod",
    "ExtendedCalibrationMethod",
    "ExtendedQuantFormat",
    "ExtendedQuantType",
    "Int16Method",
    "LayerWiseMethod",
    "PowerOfTwoMethod",
    "QuantFormat",
    "QuantType",
    "VitisQuantFormat",
    "VitisQuantType",
    "calibration_of",
    "format_of",
    "quant_format_of",
]


class ExtendedQuantType(Enum):
    """The reference tool's quantization types (values as in the reference tool, not onnxruntime's)."""

    QInt8 = 1
    QUInt8 = 2
    QInt16 = 3
    QUInt16 = 4
    QInt32 = 5
    QUInt32 = 6
    QFloat16 = 7
    QBFloat16 = 8
    QBFP = 9
    QMX = 10
    #: The mixed-precision user document spells it this way; an alias of QBFloat16, not a new type.
    QBloat16 = 8

    def __str__(self) -> str:
        return self.name

    @property
    def tensor_type(self) -> int:
        """The ONNX element type of the quantized tensor (UNDEFINED for BFP and MX)."""
        return _TENSOR_TYPES[self]

    @staticmethod
    def from_string(name: str) -> "ExtendedQuantType":
        """The member called ``name`` (e.g. ``"QInt16"``); unknown names raise with the nearest one."""
        try:
            return ExtendedQuantType[name]
        except KeyError:
            names = list(ExtendedQuantType.__members__)
            raise ValueError(f"unknown ExtendedQuantType {name!r}{suggest(name, names)}; valid: {', '.join(names)}") from None


_TENSOR_TYPES = {
    ExtendedQuantType.QInt8: TensorProto.INT8,
    ExtendedQuantType.QUInt8: TensorProto.UINT8,
    ExtendedQuantType.QInt16: TensorProto.INT16,
    ExtendedQuantType.QUInt16: TensorProto.UINT16,
    ExtendedQuantType.QInt32: TensorProto.INT32,
    ExtendedQuantType.QUInt32: TensorProto.UINT32,
    ExtendedQuantType.QFloat16: TensorProto.FLOAT16,
    ExtendedQuantType.QBFloat16: TensorProto.BFLOAT16,
    ExtendedQuantType.QBFP: TensorProto.UNDEFINED,
    ExtendedQuantType.QMX: TensorProto.UNDEFINED,
}


class ExtendedQuantFormat(Enum):
    """The reference tool's format enum, distinct from onnxruntime's ``QuantFormat``.

    In the reference tool ``ExtendedQuantFormat.QDQ`` selects its extended quantizer (needed there
    for 16/32-bit integers, FP16, BF16, BFP and MX). We emit every format with either, so both QDQ
    spellings mean the same here; QOperator (QLinear* ops) is not implemented.
    """

    QOperator = 0
    QDQ = 1


class VitisQuantType(Enum):
    """Deprecated alias of :class:`ExtendedQuantType`; members convert by value (with a warning)."""

    QInt8 = 1
    QUInt8 = 2
    QInt16 = 3
    QUInt16 = 4
    QInt32 = 5
    QUInt32 = 6
    QFloat16 = 7
    QBFloat16 = 8
    QBFP = 9
    QMX = 10


class VitisQuantFormat(Enum):
    """Deprecated formats; all mean ``ExtendedQuantFormat.QDQ``, the last two also force BFP / MX types."""

    QDQ = 2
    FixNeuron = 3
    BFPFixNeuron = 4
    MXFixNeuron = 5


class PowerOfTwoMethod(Enum):
    """Calibration with power-of-two scales (the NPU-style methods)."""

    NonOverflow = 0
    MinMSE = 1


class Int16Method(Enum):
    """Min/max calibration with an ``M / 2**N`` scale (``Int16Scale``)."""

    MinMax = 0


class LayerWiseMethod(Enum):
    """Per-layer percentile search: each tensor keeps the candidate percentile whose range
    quantizes its histogram with the least error (``calibration="layerwise_percentile"``)."""

    LayerWisePercentile = 0


class ExtendedCalibrationMethod(Enum):
    """Weight-range methods, given as ``extra_options['WeightCalibrateMethod']``."""

    MinMSE = 0


#: Reference-tool type name -> our format name. onnxruntime's QuantType shares the names it has.
_TYPE_NAMES = {
    "QInt8": "int8",
    "QUInt8": "uint8",
    "QInt16": "int16",
    "QUInt16": "uint16",
    "QInt32": "int32",
    "QUInt32": "uint32",
    "QFloat16": "fp16",
    "QBFloat16": "bf16",
    "QBloat16": "bf16",
    "QBFP": "bfp",
    "QMX": "mx",
    "QInt4": "int4",
    "QUInt4": "uint4",
    "QFLOAT8E4M3FN": "fp8_e4m3",
}


def format_of(value: Any, what: str) -> str:
    """Our format name for a type given as any of the enums above, onnxruntime's, or a string.

    Strings may be a member name (``"QInt16"``, case-insensitive) or one of our format names
    (``"int16"``, ``"fp8_e5m2"`` — the latter has no enum member in either tool). ``what`` names
    the option in error messages.
    """
    if isinstance(value, VitisQuantType):
        log.warning("%s: VitisQuantType is deprecated; use ExtendedQuantType.%s", what, value.name)
        value = ExtendedQuantType(value.value)
    if isinstance(value, (ExtendedQuantType, QuantType)):
        return _TYPE_NAMES[value.name]
    if isinstance(value, str):
        lowered = {k.lower(): v for k, v in _TYPE_NAMES.items()}
        key = value.strip()
        if key.lower() in lowered:
            return lowered[key.lower()]
        if key.lower() in ALL_FORMATS:
            return key.lower()
        valid = list(_TYPE_NAMES) + list(ALL_FORMATS)
        raise ConfigError(f"{what}: unknown quantization type {value!r}{suggest(key, valid)}; valid: {', '.join(valid)}")
    raise ConfigError(
        f"{what}: expected an ExtendedQuantType, onnxruntime QuantType or type name, got {type(value).__name__} {value!r}"
    )


def quant_format_of(value: Any) -> tuple[str, str | None]:
    """('qdq' | 'qoperator', forced format or None) for a ``quant_format`` value of any spelling."""
    if isinstance(value, VitisQuantFormat):
        log.warning("quant_format: VitisQuantFormat.%s is deprecated; use ExtendedQuantFormat.QDQ", value.name)
        forced = {"BFPFixNeuron": "bfp", "MXFixNeuron": "mx"}.get(value.name)
        return "qdq", forced
    if isinstance(value, (QuantFormat, ExtendedQuantFormat)):
        return value.name.lower(), None
    if isinstance(value, str) and value.lower() in ("qdq", "qoperator"):
        return value.lower(), None
    raise ConfigError(f"quant_format: expected QuantFormat.QDQ or ExtendedQuantFormat.QDQ, got {value!r}")


#: calibrate_method -> (our calibration method, scale kind).
_METHODS: dict[Any, tuple[str, str]] = {
    CalibrationMethod.MinMax: ("minmax", "float"),
    CalibrationMethod.Entropy: ("entropy", "float"),
    CalibrationMethod.Percentile: ("percentile", "float"),
    CalibrationMethod.Distribution: ("distribution", "float"),
    PowerOfTwoMethod.NonOverflow: ("nonoverflow", "pow2"),
    PowerOfTwoMethod.MinMSE: ("minmse", "pow2"),
    Int16Method.MinMax: ("minmax", "int16"),
}


def calibration_of(value: Any) -> tuple[str, str]:
    """(calibration method, scale kind) for a ``calibrate_method`` value.

    Strings name a member (``"Percentile"``, ``"NonOverflow"``, case-insensitive); ``"MinMSE"`` is
    the power-of-two method, as it is the only activation MinMSE of the reference tool.
    """
    if value in _METHODS:
        return _METHODS[value]
    if value is LayerWiseMethod.LayerWisePercentile:
        return "layerwise_percentile", "float"
    if value is ExtendedCalibrationMethod.MinMSE:
        raise ConfigError(
            "calibrate_method: ExtendedCalibrationMethod.MinMSE is a weight method; "
            "pass it as extra_options['WeightCalibrateMethod'] and choose an activation method here"
        )
    if isinstance(value, str):
        by_name = {m.name.lower(): m for m in _METHODS if not isinstance(m, Int16Method)}
        if value.lower() in by_name:
            return _METHODS[by_name[value.lower()]]
        if value.lower() == "layerwisepercentile":
            return calibration_of(LayerWiseMethod.LayerWisePercentile)
        names = [m.name for m in _METHODS if not isinstance(m, Int16Method)]
        raise ConfigError(f"calibrate_method: unknown method {value!r}{suggest(value, names)}; valid: {', '.join(names)}")
    raise ConfigError(f"calibrate_method: expected a CalibrationMethod / PowerOfTwoMethod / Int16Method, got {value!r}")
