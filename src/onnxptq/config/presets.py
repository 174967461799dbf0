"""Named presets: the configurations users start from (``--preset A8W8``, ``get_default_config``).

Integer presets differ from the reference tool on purpose: weights are per-channel and
activations are calibrated with a method that clips outliers, because per-tensor MinMax loses the
transformer-style PP-OCR recogniser entirely (reference tool: CER 1.00 on our rendered lines).
The compatible ``get_default_config`` (onnxptq.compat) maps to exactly these, tested.
"""

from __future__ import annotations

from typing import Callable

from .schema import ConfigError, FinetuneOptions, QuantConfig, TensorQuant, make_tensor_quant, suggest

#: Activation calibration for the integer presets; chosen on PP-OCR rec/cls (see docs/presets.md).
INT_ACTIVATION_METHOD = "percentile"
INT_PERCENTILE = 99.9999

BFP16_ATTRS = {"bfp_method": "to_bfp", "axis": 1, "bit_width": 16, "block_size": 8, "rounding_mode": 2}
MX_PRIME_ATTRS = {
    "bfp_method": "to_bfp_prime",
    "axis": 1,
    "block_size": 16,
    "sub_block_size": 2,
    "sub_block_shift_bits": 1,
    "rounding_mode": 2,
}


def _int_act(fmt: str, symmetric: bool = True) -> TensorQuant:
    return TensorQuant(format=fmt, symmetric=symmetric, calibration=INT_ACTIVATION_METHOD, percentile=INT_PERCENTILE)


def _int_weight(fmt: str = "int8", symmetric: bool = True) -> TensorQuant:
    return TensorQuant(format=fmt, symmetric=symmetric, per_channel=True)


def _bfp(bit_width: int, prime: bool) -> TensorQuant:
    attrs = dict(MX_PRIME_ATTRS if prime else BFP16_ATTRS)
    attrs["bit_width"] = bit_width
    return make_tensor_quant("bfp", attrs=attrs)


def _mx(element_dtype: str) -> TensorQuant:
    return make_tensor_quant("mx", attrs={"element_dtype": element_dtype, "axis": 1, "block_size": 32, "rounding_mode": 2})


def _integer(act: str, weight: str = "int8", act_symmetric: bool = True, weight_symmetric: bool = True, **kw) -> QuantConfig:
    return QuantConfig(activation=_int_act(act, act_symmetric), weight=_int_weight(weight, weight_symmetric), bias="int32", **kw)


def _float(act: TensorQuant, weight: TensorQuant, **kw) -> QuantConfig:
    return QuantConfig(activation=act, weight=weight, bias="weight", **kw)


BF16 = TensorQuant(format="bf16")
FP16 = TensorQuant(format="fp16")

_PRESETS: dict[str, Callable[[], QuantConfig]] = {
    # Asymmetric int8 activations: most activations are post-ReLU/HardSwish and nearly one-signed,
    # so a symmetric grid wastes half its codes; on PP-OCR cls that is 0.88 vs 0.955 accuracy
    # (float 0.9575). The reference tool's A8W8 is symmetric (see docs/presets.md).
    "A8W8": lambda: _integer("int8", act_symmetric=False, align_concat=True, fold_relu=True),
    "A16W8": lambda: _integer("int16", align_concat=True, fold_relu=True, align_eltwise_quant_type=True),
    "U8S8": lambda: _integer("uint8", act_symmetric=False),
    "S8S8": lambda: _integer("int8"),
    "U8U8": lambda: _integer("uint8", "uint8", act_symmetric=False, weight_symmetric=False),
    "S16S8": lambda: _integer("int16"),
    "U16S8": lambda: _integer("uint16", act_symmetric=False),
    "A8W4": lambda: _integer("int8", "int4"),
    "FP16": lambda: _float(FP16, FP16),
    "BF16": lambda: _float(BF16, BF16, quantize_all_op_types=True),
    "FP8_E4M3": lambda: _float(TensorQuant(format="fp8_e4m3", scaled=True), TensorQuant(format="fp8_e4m3", scaled=True)),
    "FP8_E5M2": lambda: _float(TensorQuant(format="fp8_e5m2", scaled=True), TensorQuant(format="fp8_e5m2", scaled=True)),
    "BFP16": lambda: _float(_bfp(16, False), _bfp(16, False)),
    "MX4": lambda: _float(_bfp(11, True), _bfp(11, True)),
    "MX6": lambda: _float(_bfp(13, True), _bfp(13, True)),
    "MX9": lambda: _float(_bfp(16, True), _bfp(16, True)),
    "MXINT8": lambda: _float(_mx("int8"), _mx("int8")),
    "MXFP8_E4M3": lambda: _float(_mx("fp8_e4m3"), _mx("fp8_e4m3")),
    "MXFP8_E5M2": lambda: _float(_mx("fp8_e5m2"), _mx("fp8_e5m2")),
    "MXFP6_E3M2": lambda: _float(_mx("fp6_e3m2"), _mx("fp6_e3m2")),
    "MXFP6_E2M3": lambda: _float(_mx("fp6_e2m3"), _mx("fp6_e2m3")),
    "MXFP4": lambda: _float(_mx("fp4_e2m1"), _mx("fp4_e2m1")),
    "BF16_BFP16": lambda: _float(BF16, _bfp(16, False)),
    "BF16_MXINT8": lambda: _float(BF16, _mx("int8")),
    "MX9_INT8": lambda: QuantConfig(activation=_bfp(16, True), weight=_int_weight("int8"), bias=None),
}

#: Layer-wise mixed presets: BF16 everywhere, the compute-heavy layers in a block format.
_MIXED_TARGETS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _bf16_mixed(target: TensorQuant) -> QuantConfig:
    overrides = {op: (target, target) for op in _MIXED_TARGETS}
    return _float(BF16, BF16, quantize_all_op_types=True, op_type_overrides=overrides)


_PRESETS["BF16_MIXED_BFP16"] = lambda: _bf16_mixed(_bfp(16, False))
_PRESETS["BF16_MIXED_MXINT8"] = lambda: _bf16_mixed(_mx("int8"))

#: The reference tool's spellings of the same presets.
ALIASES = {
    "MXFP8E4M3": "MXFP8_E4M3",
    "MXFP8E5M2": "MXFP8_E5M2",
    "MXFP6E3M2": "MXFP6_E3M2",
    "MXFP6E2M3": "MXFP6_E2M3",
    "MXFP4E2M1": "MXFP4",
    "MXFP4_E2M1": "MXFP4",
    "S8S8_AAWS": "S8S8",
    "U8S8_AAWS": "U8S8",
    "U8U8_AAWA": "U8U8",
    "S16S8_ASWS": "S16S8",
    "U16S8_AAWS": "U16S8",
    "INT8_CNN_DEFAULT": "U8S8",
    "FP8E4M3": "FP8_E4M3",
    "FP8E5M2": "FP8_E5M2",
}

#: Presets that add fast finetuning (AdaRound / AdaQuant) on top of a base preset.
FINETUNE_SUFFIXES = ("_ADAROUND", "_ADAQUANT")


def preset_names() -> list[str]:
    """Every accepted preset name (canonical names, aliases and finetune variants)."""
    base = list(_PRESETS) + list(ALIASES)
    tuned = [f"{n}{s}" for n in ("A8W8", "A16W8", "U8S8", "S8S8", "S16S8", "U16S8") for s in FINETUNE_SUFFIXES]
    tuned += [f"{n}_ADAQUANT" for n in ("BF16", "FP16", "BFP16", "MX4", "MX6", "MX9", "MXINT8", "MXFP8E4M3",
                                         "MXFP8E5M2", "MXFP6E3M2", "MXFP6E2M3", "MXFP4E2M1", "BF16_MIXED_BFP16",
                                         "BF16_MIXED_MXINT8")]
    return base + tuned


def canonical_name(name: str) -> str:
    """The canonical preset name for ``name`` (case-insensitive, aliases resolved)."""
    key = str(name).upper().replace("-", "_")
    return ALIASES.get(key, key)


def split_finetune(name: str) -> tuple[str, str | None]:
    """('A8W8', 'adaround') for 'A8W8_ADAROUND'; (name, None) otherwise."""
    key = canonical_name(name)
    for suffix in FINETUNE_SUFFIXES:
        if key.endswith(suffix):
            return canonical_name(key[: -len(suffix)]), suffix[1:].lower()
    return key, None


def finetune_preset(algorithm: str) -> FinetuneOptions:
    """The FastFinetune settings of the reference tool's *_ADAROUND / *_ADAQUANT presets (spec §1.5).

    ADAROUND_P / ADAQUANT_P: 1000 samples, batch 2, 1000 iterations per layer, early stop, on CPU;
    learning rate 0.1 (AdaRound) or 1e-5 (AdaQuant).
    """
    return FinetuneOptions(
        algorithm=algorithm,  # type: ignore[arg-type]
        num_iterations=1000,
        learning_rate=0.1 if algorithm == "adaround" else 1e-5,
        batch_size=2,
        data_size=1000,
        fixed_seed=1705472343,
        optim_device="cpu",
        infer_device="cpu",
        early_stop=True,
    )


def get_preset(name: str) -> QuantConfig:
    """A fresh :class:`QuantConfig` for preset ``name``.

    Finetune variants (``*_ADAROUND``, ``*_ADAQUANT``) are the base preset plus
    :func:`finetune_preset`; AdaRound needs integer weights, so ``BF16_ADAROUND`` and the like are
    refused. An unknown name raises with the closest valid one.
    """
    base, finetune = split_finetune(name)
    if base not in _PRESETS:
        raise ConfigError(f"unknown preset {name!r}{suggest(base, preset_names())}; valid: {', '.join(sorted(_PRESETS))}")
    cfg = _PRESETS[base]()
    if finetune is not None:
        if finetune == "adaround" and not (cfg.weight is not None and cfg.weight.is_integer):
            raise ConfigError(f"preset {name!r}: AdaRound learns integer rounding, but {base} weights are "
                              f"{cfg.weight.describe() if cfg.weight else 'float'}; use {base}_ADAQUANT")
        cfg = cfg.replace(finetune=finetune_preset(finetune))
    return cfg


def resolve_config(config: QuantConfig | str) -> QuantConfig:
    """A config object as given, or the preset of that name: what every entry point accepts."""
    if isinstance(config, QuantConfig):
        return config
    if isinstance(config, str):
        return get_preset(config)
    raise TypeError(f"config must be a QuantConfig or a preset name, not {type(config).__name__}")
