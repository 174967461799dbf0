"""``get_default_config(name)``: our presets, written as legacy :class:`QuantizationConfig` objects.

Each entry describes *our* preset (:mod:`onnxptq.config.presets`), not the reference tool's: the
integer presets use per-channel weights and Percentile activation ranges (the reference tool's
A8W8 is per-tensor MinMax, which loses PP-OCR rec entirely), BF16 presets emit Cast pairs, every
preset sets ForceQuantizeNoInputCheck. The test suite holds
``to_quant_config(get_default_config(n)) == get_preset(n)`` for every preset name, so the two
surfaces cannot drift apart.

Finetune variants (``*_ADAROUND``, ``*_ADAQUANT``) carry the reference tool's FastFinetune
settings; quantizing with them raises NotImplementedError until fast finetuning lands.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from ..config import presets
from ..config.schema import ConfigError, suggest
from .enums import CalibrationMethod, ExtendedQuantFormat, ExtendedQuantType, QuantType
from .legacy import QuantizationConfig

__all__ = ["ADAQUANT_PARAMS", "ADAROUND_PARAMS", "REFERENCE_PRESET_NAMES", "default_config_names", "get_default_config"]

#: FastFinetune settings of the reference tool's *_ADAROUND / *_ADAQUANT presets (spec §1.5).
ADAROUND_PARAMS: dict[str, Any] = {
    "DataSize": 1000,
    "FixedSeed": 1705472343,
    "BatchSize": 2,
    "NumIterations": 1000,
    "LearningRate": 0.1,
    "OptimAlgorithm": "adaround",
    "OptimDevice": "cpu",
    "InferDevice": "cpu",
    "EarlyStop": True,
}
ADAQUANT_PARAMS: dict[str, Any] = {**ADAROUND_PARAMS, "LearningRate": 0.00001, "OptimAlgorithm": "adaquant"}

#: Every name the reference tool's get_default_config accepts (spec §1.5), to tell "not ported"
#: (NotImplementedError) from "no such preset" (ValueError).
REFERENCE_PRESET_NAMES = frozenset(
    ["UINT8_DYNAMIC_QUANT", "XINT8", "XINT8_ADAROUND", "XINT8_ADAQUANT", "VINT8", "U8U8_AAWA", "S16S16_MIXED_S8S8",
     "BF16_BFP16", "BF16_MXINT8", "MX9_INT8", "INT8_CNN_DEFAULT", "INT16_CNN_DEFAULT", "INT8_TRANSFORMER_DEFAULT",
     "INT16_TRANSFORMER_DEFAULT", "INT8_CNN_ACCURATE", "INT16_CNN_ACCURATE", "INT8_TRANSFORMER_ACCURATE",
     "INT16_TRANSFORMER_ACCURATE", "MATMUL_NBITS", "FP16", "FP16_ADAQUANT", "BF16", "BF16_ADAQUANT"]
    + [f"{b}{s}" for b in ("S8S8_AAWS", "U8S8_AAWS", "S16S8_ASWS", "A8W8", "A16W8", "U16S8_AAWS")
       for s in ("", "_ADAROUND", "_ADAQUANT")]
    + [f"{b}{s}" for b in ("BFP16", "MX4", "MX6", "MX9", "MXFP8E5M2", "MXFP8E4M3", "MXFP6E3M2", "MXFP6E2M3",
                           "MXFP4E2M1", "MXINT8", "BF16_MIXED_BFP16", "BF16_MIXED_MXINT8") for s in ("", "_ADAQUANT")]
)

_METHOD = {
    "minmax": CalibrationMethod.MinMax,
    "percentile": CalibrationMethod.Percentile,
    "entropy": CalibrationMethod.Entropy,
    "distribution": CalibrationMethod.Distribution,
}
_FQ = {"ForceQuantizeNoInputCheck": True}
_MIXED_OPS = ["Conv", "ConvTranspose", "Gemm", "MatMul"]


def _integer(act: Any, weight: Any, **extra: Any) -> QuantizationConfig:
    """Our integer presets: per-channel weights, outlier-clipping activation ranges."""
    return QuantizationConfig(
        calibrate_method=_METHOD[presets.INT_ACTIVATION_METHOD],
        quant_format=ExtendedQuantFormat.QDQ,
        activation_type=act,
        weight_type=weight,
        per_channel=True,
        extra_options={**_FQ, "Percentile": presets.INT_PERCENTILE, **extra},
    )


def _floating(act: Any, weight: Any, **extra: Any) -> QuantizationConfig:
    return QuantizationConfig(
        calibrate_method=CalibrationMethod.MinMax,
        quant_format=ExtendedQuantFormat.QDQ,
        activation_type=act,
        weight_type=weight,
        extra_options={**_FQ, **extra},
    )


def _bfp(bit_width: int, prime: bool) -> dict[str, Any]:
    return {**(presets.MX_PRIME_ATTRS if prime else presets.BFP16_ATTRS), "bit_width": bit_width}


def _mx(element_dtype: str) -> dict[str, Any]:
    return {"element_dtype": element_dtype, "axis": 1, "block_size": 32, "rounding_mode": 2}


def _bfp_preset(bit_width: int, prime: bool) -> Callable[[], QuantizationConfig]:
    return lambda: _floating(ExtendedQuantType.QBFP, ExtendedQuantType.QBFP, BFPAttributes=_bfp(bit_width, prime))


def _mx_preset(element_dtype: str) -> Callable[[], QuantizationConfig]:
    return lambda: _floating(ExtendedQuantType.QMX, ExtendedQuantType.QMX, MXAttributes=_mx(element_dtype))


def _mixed(target: Any, attrs: dict[str, Any]) -> QuantizationConfig:
    """BF16 everywhere, the compute-heavy op types in a block format (layer-wise mixed precision)."""
    cfg = _floating(
        ExtendedQuantType.QBFloat16,
        ExtendedQuantType.QBFloat16,
        QuantizeAllOpTypes=True,
        BF16QDQToCast=True,
        AutoMixprecision={"TargetOpType": list(_MIXED_OPS), "TargetQuantType": target},
        **attrs,
    )
    cfg.include_auto_mp = True
    return cfg


def _mx9_int8() -> QuantizationConfig:
    cfg = _floating(ExtendedQuantType.QBFP, QuantType.QInt8, BFPAttributes=_bfp(16, True), QuantizeBias=False)
    cfg.per_channel = True
    return cfg


_AS = {"ActivationSymmetric": True}
_NPU_ALIGN = {"AlignSlice": False, "FoldRelu": True, "AlignConcat": True}
_BF16 = ExtendedQuantType.QBFloat16

#: Canonical preset name -> legacy description of our preset.
_BUILDERS: dict[str, Callable[[], QuantizationConfig]] = {
    "A8W8": lambda: _integer(QuantType.QInt8, QuantType.QInt8, ActivationSymmetric=False, **_NPU_ALIGN),
    "A16W8": lambda: _integer(ExtendedQuantType.QInt16, QuantType.QInt8, **_AS, **_NPU_ALIGN, AlignEltwiseQuantType=True),
    "U8S8": lambda: _integer(QuantType.QUInt8, QuantType.QInt8),
    "S8S8": lambda: _integer(QuantType.QInt8, QuantType.QInt8, **_AS),
    "U8U8": lambda: _integer(QuantType.QUInt8, QuantType.QUInt8, ActivationSymmetric=False, WeightSymmetric=False),
    "S16S8": lambda: _integer(ExtendedQuantType.QInt16, QuantType.QInt8, **_AS),
    "U16S8": lambda: _integer(ExtendedQuantType.QUInt16, QuantType.QInt8),
    "A8W4": lambda: _integer(QuantType.QInt8, QuantType.QInt4, **_AS),
    "FP16": lambda: _floating(ExtendedQuantType.QFloat16, ExtendedQuantType.QFloat16),
    "BF16": lambda: _floating(_BF16, _BF16, QuantizeAllOpTypes=True, BF16QDQToCast=True),
    "FP8_E4M3": lambda: _floating(QuantType.QFLOAT8E4M3FN, QuantType.QFLOAT8E4M3FN, WeightScaled=True, ActivationScaled=True),
    # No enum of either tool has FP8 E5M2; our format name is accepted as a type string.
    "FP8_E5M2": lambda: _floating("fp8_e5m2", "fp8_e5m2", WeightScaled=True, ActivationScaled=True),
    "BFP16": _bfp_preset(16, False),
    "MX4": _bfp_preset(11, True),
    "MX6": _bfp_preset(13, True),
    "MX9": _bfp_preset(16, True),
    "MXINT8": _mx_preset("int8"),
    "MXFP8_E4M3": _mx_preset("fp8_e4m3"),
    "MXFP8_E5M2": _mx_preset("fp8_e5m2"),
    "MXFP6_E3M2": _mx_preset("fp6_e3m2"),
    "MXFP6_E2M3": _mx_preset("fp6_e2m3"),
    "MXFP4": _mx_preset("fp4_e2m1"),
    "BF16_BFP16": lambda: _floating(_BF16, ExtendedQuantType.QBFP, BFPAttributes=_bfp(16, False), BF16QDQToCast=True),
    "BF16_MXINT8": lambda: _floating(_BF16, ExtendedQuantType.QMX, MXAttributes=_mx("int8"), BF16QDQToCast=True),
    "MX9_INT8": _mx9_int8,
    "BF16_MIXED_BFP16": lambda: _mixed(ExtendedQuantType.QBFP, {"BFPAttributes": _bfp(16, False)}),
    "BF16_MIXED_MXINT8": lambda: _mixed(ExtendedQuantType.QMX, {"MXAttributes": _mx("int8")}),
}


def default_config_names() -> list[str]:
    """Every name get_default_config accepts: our preset names, aliases and finetune variants."""
    return presets.preset_names()


def get_default_config(name: str) -> QuantizationConfig:
    """A fresh (deep-copied) legacy :class:`QuantizationConfig` describing our preset ``name``.

    The reference tool's spellings (``MXFP8E4M3``, ``U8S8_AAWS``, ...) name the same presets. A
    reference preset we do not provide (``XINT8``, ``MATMUL_NBITS``, ...) raises
    NotImplementedError; any other unknown name raises ValueError with the closest valid name.
    """
    base, finetune = presets.split_finetune(name)
    builder = _BUILDERS.get(base)
    if builder is None:
        if str(name).upper() in REFERENCE_PRESET_NAMES:
            raise NotImplementedError(f"preset {name!r} of the reference tool is not provided by onnxptq yet")
        raise ConfigError(f"unknown config name {name!r}{suggest(str(name).upper(), default_config_names())}")
    cfg = builder()
    if finetune is not None:
        cfg.include_fast_ft = True
        cfg.extra_options["FastFinetune"] = dict(ADAROUND_PARAMS if finetune == "adaround" else ADAQUANT_PARAMS)
    return copy.deepcopy(cfg)
