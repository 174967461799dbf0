"""Translation of a legacy :class:`QuantizationConfig` (fields + ``extra_options``) into a QuantConfig.

This is the one place where the reference tool's vocabulary meets ours. The rules:

* every ``QuantizationConfig`` field and every ``extra_options`` key of the reference tool
  (spec §1.3, §2, §7.1, §8.1) is known here; an unknown key is a :class:`ConfigError` (a
  ``ValueError``) naming the nearest valid key, where the reference tool ignores it silently;
* a key that maps onto :class:`~onnxptq.config.schema.QuantConfig` is *honoured*;
* a key whose documented effect is nothing for us (our models need no custom-op library, our
  calibration never spills to disk, ...) is a *no-op* and accepted with any value;
* a documented key that we have not built raises ``NotImplementedError`` naming the key, unless its
  value asks for exactly what we do anyway (e.g. ``ConvertBNToConv: False``) — those values are
  listed per key as *inert*.

Defaults follow the reference tool where a key is absent (``ForceQuantizeNoInputCheck`` False,
``BF16QDQToCast`` False, ``Int32Bias`` only for integer weights, ...), so a hand-written config
means what the reference documents say. Two absent-key defaults are ours, because the two
realisations compute the same numbers: weights of float formats are fake-quantized once at
quantize time (``AddQDQPairToWeight`` absent ≠ the reference tool's runtime Q/DQ on BF16/BFP/MX
weights), and integer weights are stored as integers + DequantizeLinear.

The key table itself lives in :mod:`.keys`; it is appended to this docstring (generated from
:data:`~.keys.EXTRA_OPTIONS`, so it cannot drift), and
``python -c "import onnxptq.compat.options as o; print(o.options_table())"`` prints it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

from ..config.schema import RUNTIMES, AutoMixedPrecisionOptions, CalibrationOptions, ConfigError, EqualizationOptions, FinetuneOptions, QuantConfig, TensorQuant, make_tensor_quant, suggest
from .enums import ExtendedCalibrationMethod, CalibrationMethod, calibration_of, format_of, quant_format_of
from .keys import (
    AMP_AUTOMATIC_KEYS,
    AMP_DEFAULT_OP_TYPES,
    AMP_KEYS,
    AMP_UNBUILT,
    EXTRA_OPTIONS,
    FAST_FINETUNE_DEFAULTS,
    FIELD_KEYS,
    UNBUILT_FIELDS,
    OptionKey,
    options_table,
)
from .legacy import QuantizationConfig

log = logging.getLogger(__name__)

__all__ = [
    "AMP_KEYS",
    "EXTRA_OPTIONS",
    "FAST_FINETUNE_DEFAULTS",
    "OptionKey",
    "RunOptions",
    "fast_finetune_settings",
    "options_table",
    "parse",
    "to_quant_config",
]

#: FastFinetune key -> FinetuneOptions field.
_FINETUNE_FIELDS = {
    "OptimAlgorithm": "algorithm", "NumIterations": "num_iterations", "LearningRate": "learning_rate",
    "BatchSize": "batch_size", "NumBatches": "num_batches", "DataSize": "data_size", "FixedSeed": "fixed_seed",
    "OptimDevice": "optim_device", "InferDevice": "infer_device", "EarlyStop": "early_stop",
    "UpdateBias": "update_bias", "LRAdjust": "lr_adjust", "RegParam": "reg_param", "BetaRange": "beta_range",
    "WarmStart": "warm_start", "DropRatio": "drop_ratio", "LogPeriod": "log_period", "TargetOpType": "target_op_types",
    "OutputQDQ": "output_qdq", "SelectiveUpdate": "selective_update", "OutputIndex": "output_index",
    "RefModelPath": "ref_model_path", "MemOptLevel": "memory_level", "Parallel": "parallel",
    "DynamicBatch": "dynamic_batch", "SelectMaxMemLayer": "select_max_mem_layer", "NumWorkers": "num_workers",
    "PinMemory": "pin_memory", "UseGDS": "use_gds", "CacheDir": "cache_dir",
}
assert set(_FINETUNE_FIELDS) == set(FAST_FINETUNE_DEFAULTS)

_FLOAT_ELEMENT_FORMATS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
_TQO_KEYS = ("quant_type", "symmetric", "reduce_range", "axis", "scale", "zero_point", "rmin", "rmax", "convert")


@dataclass
class RunOptions:
    """Settings that steer a ModelQuantizer run rather than the quantization itself."""

    use_random_data: bool = False
    random_input_shape: dict[str, list[int]] = field(default_factory=dict)
    random_input_range: dict[str, list[float]] | None = None
    use_external_data_format: bool = False
    crypto_mode: bool = False
    debug_mode: bool = False
    print_summary: bool = True
    ignore_warnings: bool = True
    #: quantize_weights keyword arguments when UseMatMulNBits / UseGPTQ ask for weight-only
    weight_only: dict[str, Any] | None = None


__doc__ = (__doc__ or "") + "\nextra_options keys\n==================\n\n" + options_table() + "\n"


def _same(value: Any, accepted: Iterable[Any]) -> bool:
    """Value equality that keeps bools apart from ints and lists equal to tuples."""
    for ok in accepted:
        if isinstance(value, bool) != isinstance(ok, bool):
            continue
        if isinstance(value, (list, tuple)) and isinstance(ok, (list, tuple)):
            if list(value) == list(ok):
                return True
        elif type(value) is type(ok) or (isinstance(value, (int, float)) and isinstance(ok, (int, float))):
            if value == ok:
                return True
    return False


def _not_built(key: str, meaning: str, where: str = "extra_options key") -> NotImplementedError:
    return NotImplementedError(f"{where} {key!r} ({meaning}) is not implemented yet")


def _check_keys(extra: dict[str, Any]) -> None:
    """Unknown keys first (ValueError with a suggestion), then keys of unbuilt features."""
    for key in extra:
        if not isinstance(key, str) or key not in EXTRA_OPTIONS:
            raise ConfigError(f"unknown extra_options key {key!r}{suggest(key, EXTRA_OPTIONS)}")
    for key, value in extra.items():
        spec = EXTRA_OPTIONS[key]
        if spec.status == "not implemented" and key != "FastFinetune" and not _same(value, spec.inert):
            raise _not_built(key, spec.meaning)
        if spec.status == "no-op":
            # Accepted, so ported scripts run, but never silently: what the key would do is nothing here.
            log.warning("extra_options key %r has no effect in onnxptq: %s", key, spec.meaning)


def _bool(extra: dict[str, Any], key: str, default: bool) -> bool:
    value = extra.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"extra_options[{key!r}] must be True or False, not {value!r}")
    return value


def _floor_cosine(extra: dict[str, Any]) -> float | None:
    value = extra.get("AccuracyFloorCosine")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1.0 <= float(value) <= 1.0:
        raise ConfigError(f"extra_options['AccuracyFloorCosine'] must be a number in [-1, 1], not {value!r}")
    return float(value)


def _setting(cfg: QuantizationConfig, name: str, extra: dict[str, Any]) -> Any:
    """A field's value, or its extra_options spelling when given; both given and different is an error."""
    value = getattr(cfg, name)
    key = FIELD_KEYS[name]
    if key not in extra:
        return value
    default = QuantizationConfig.__dataclass_fields__[name]
    default_value = default.default_factory() if callable(default.default_factory) else default.default  # type: ignore[misc]
    if value != default_value and value != extra[key]:
        raise ConfigError(f"field {name}={value!r} and extra_options[{key!r}]={extra[key]!r} disagree; set one of them")
    return extra[key]


def _names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be a list of names, not {value!r}")
    return tuple(value)


@dataclass
class _Rules:
    """What builds a TensorQuant for a role; also records which format-specific options took effect."""

    method: str
    scale_kind: str
    percentile: float
    act_symmetric: bool
    weight_symmetric: bool
    reduce_range: bool
    per_channel: bool
    act_scaled: bool
    weight_scaled: bool
    bf16_clip: bool
    bfp_attrs: dict[str, Any]
    mx_attrs: dict[str, Any]
    used: set[str] = field(default_factory=set)

    def spec(self, fmt: str, role: Literal["activation", "weight", "tensor"]) -> TensorQuant:
        """The TensorQuant of format ``fmt`` for an activation, a weight, or a named tensor of either kind.

        A named tensor (MixedPrecisionTensor / TensorQuantOverrides) follows the activation rules:
        weights ignore the calibration fields, and per-channel needs an explicit ``axis``.
        """
        self.used.add(fmt)
        if fmt in ("bfp", "mx"):
            attrs = self.bfp_attrs if fmt == "bfp" else self.mx_attrs
            kw: dict[str, Any] = {"calibration": self.method, "percentile": self.percentile} if role != "weight" else {}
            return make_tensor_quant(fmt, attrs=attrs, **kw)
        if fmt in _FLOAT_ELEMENT_FORMATS:
            scaled = self.weight_scaled if role == "weight" else self.act_scaled
            saturate = self.bf16_clip and role != "weight" and fmt == "bf16"
            self.used.add(f"{role}-float")
            if role == "weight":
                return TensorQuant(format=fmt, scaled=scaled)
            return TensorQuant(format=fmt, scaled=scaled, saturate=saturate, calibration=self.method, percentile=self.percentile)
        # integer formats
        if role == "weight":
            self.used.add("weight-int")
            return TensorQuant(
                format=fmt,
                symmetric=self.weight_symmetric,
                per_channel=self.per_channel,
                scale_kind=self.scale_kind,  # type: ignore[arg-type]
                reduce_range=self.reduce_range,
            )
        return TensorQuant(
            format=fmt,
            symmetric=self.act_symmetric,
            scale_kind=self.scale_kind,  # type: ignore[arg-type]
            reduce_range=self.reduce_range,
            calibration=self.method,
            percentile=self.percentile,
        )


def _dict_option(extra: dict[str, Any], key: str) -> dict[str, Any]:
    value = extra.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"extra_options[{key!r}] must be a dict, not {type(value).__name__}")
    return dict(value)


def fast_finetune_settings(options: dict[str, Any] | None) -> dict[str, Any]:
    """The FastFinetune dict checked and completed with the legacy defaults of spec §7.1.

    Unknown keys raise with the nearest valid one; ``OptimAlgorithm`` is lower-cased and must be
    'adaround' or 'adaquant'; ``LearningRate`` defaults to 0.1 (adaround) or 1e-5 (adaquant).
    """
    options = dict(options or {})
    for key in options:
        if key not in FAST_FINETUNE_DEFAULTS:
            raise ConfigError(f"unknown FastFinetune key {key!r}{suggest(key, FAST_FINETUNE_DEFAULTS)}")
    settings = {**FAST_FINETUNE_DEFAULTS, **options}
    algo = str(settings["OptimAlgorithm"]).lower()
    if algo not in ("adaround", "adaquant"):
        raise ConfigError(f"FastFinetune OptimAlgorithm must be 'adaround' or 'adaquant', not {settings['OptimAlgorithm']!r}")
    settings["OptimAlgorithm"] = algo
    if settings["LearningRate"] is None:
        settings["LearningRate"] = 0.1 if algo == "adaround" else 1e-5
    if settings["LogPeriod"] is None:
        settings["LogPeriod"] = max(1, int(settings["NumIterations"]) // 10)
    return settings


def _amp_overrides(amp: dict[str, Any], rules: _Rules, act_fmt: str | None,
                   weight_fmt: str) -> tuple[dict[str, tuple], AutoMixedPrecisionOptions | None]:
    """Layer-wise mixed precision: every op of TargetOpType gets the target activation/weight types.

    With an automatic target (L2Target, or Top1AccTarget with EvaluateFunction) the target types
    go only to the layers the search picks: no overrides, and the search options instead.
    """
    for key in amp:
        if key not in AMP_KEYS:
            raise ConfigError(f"unknown AutoMixprecision key {key!r}{suggest(key, AMP_KEYS)}")
    for key in AMP_AUTOMATIC_KEYS:
        if key in amp and amp[key] is not None:
            raise _not_built(key, "automatic mixed precision driven by sensitivity analysis", "AutoMixprecision key")
    for key, (meaning, inert) in AMP_UNBUILT.items():
        if key in amp and not _same(amp[key], inert):
            raise _not_built(key, meaning, "AutoMixprecision key")
    target, act_t, weight_t = amp.get("TargetQuantType"), amp.get("ActTargetQuantType"), amp.get("WeightTargetQuantType")
    if target is None and act_t is None and weight_t is None:
        raise ConfigError(
            "AutoMixprecision needs TargetQuantType (or ActTargetQuantType / WeightTargetQuantType): "
            "the type the TargetOpType layers are quantized to"
        )
    # The user documents' rule: with neither role-specific type, both take TargetQuantType; with one,
    # the other keeps the global type.
    if act_t is None and weight_t is None:
        act_fmt_t = weight_fmt_t = format_of(target, "AutoMixprecision TargetQuantType")
    else:
        act_fmt_t = format_of(act_t, "AutoMixprecision ActTargetQuantType") if act_t is not None else act_fmt
        weight_fmt_t = format_of(weight_t, "AutoMixprecision WeightTargetQuantType") if weight_t is not None else weight_fmt
    ops = amp.get("TargetOpType", AMP_DEFAULT_OP_TYPES)
    ops = _names(list(ops) if isinstance(ops, (set, frozenset)) else ops, "AutoMixprecision TargetOpType")
    act_spec = rules.spec(act_fmt_t, "activation") if act_fmt_t is not None else None
    weight_spec = rules.spec(weight_fmt_t, "weight")
    l2, top1 = amp.get("L2Target"), amp.get("Top1AccTarget")
    if l2 is None and top1 is None:
        if amp.get("EvaluateFunction") is not None:
            raise ConfigError("AutoMixprecision EvaluateFunction needs Top1AccTarget (the tolerated accuracy drop)")
        return {op: (act_spec, weight_spec) for op in ops}, None
    metric = amp.get("MetricDefault")
    if metric is not None and str(metric).lower() != ("l2" if l2 is not None else "top1"):
        raise _not_built("MetricDefault", f"the {metric!r} metric (L2Target measures l2)", "AutoMixprecision key")
    workers = amp.get("WorkerNum")
    auto = AutoMixedPrecisionOptions(
        activation=act_spec, weight=weight_spec, op_types=ops,
        l2_target=float(l2) if l2 is not None else None, top1_target=float(top1) if top1 is not None else None,
        evaluate=amp.get("EvaluateFunction"), output_index=int(amp.get("OutputIndex", amp.get("MetricOutputIndex", 0)) or 0),
        samples=int(amp.get("DataSize") or 16), workers=int(workers) if workers else None,
    )
    return {}, auto


def _tensor_overrides(cfg: QuantizationConfig, extra: dict[str, Any], rules: _Rules, specific: bool) -> dict[str, TensorQuant]:
    overrides: dict[str, TensorQuant] = {}
    mpt = _dict_option(extra, "MixedPrecisionTensor")
    if mpt and not specific:
        # As the reference tool: the key acts only with specific_tensor_precision (or its
        # extra_options spelling SpecificTensorPrecision), which otherwise would do nothing.
        log.warning("extra_options['MixedPrecisionTensor'] is ignored: specific_tensor_precision is False "
                    "(set it, or extra_options['SpecificTensorPrecision'], to True)")
        mpt = {}
    for qtype, names in mpt.items():
        fmt = format_of(qtype, "MixedPrecisionTensor key")
        for name in _names(names, f"MixedPrecisionTensor[{qtype}]"):
            if name in overrides:
                raise ConfigError(f"MixedPrecisionTensor names tensor {name!r} twice")
            overrides[name] = rules.spec(fmt, "tensor")
    for name, entries in _dict_option(extra, "TensorQuantOverrides").items():
        where = f"TensorQuantOverrides[{name!r}]"
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, (list, tuple)) or not entries:
            raise ConfigError(f"{where} must be a list with one dict of settings, not {entries!r}")
        if len(entries) > 1:
            raise _not_built(where, "per-channel / per-consumer lists of overrides", "extra_options entry")
        entry = entries[0]
        for key in entry:
            if key not in _TQO_KEYS:
                raise ConfigError(f"unknown {where} key {key!r}{suggest(key, _TQO_KEYS)}")
            if key in ("scale", "zero_point", "rmin", "rmax", "convert"):
                raise _not_built(f"{where}[{key!r}]", "fixed scales, ranges and type conversions", "extra_options entry")
        if "quant_type" not in entry:
            raise _not_built(where, "an override without quant_type (symmetry/range only)", "extra_options entry")
        spec = rules.spec(format_of(entry["quant_type"], f"{where}['quant_type']"), "tensor")
        changes: dict[str, Any] = {}
        if "symmetric" in entry:
            changes["symmetric"] = bool(entry["symmetric"])
        if "reduce_range" in entry:
            changes["reduce_range"] = bool(entry["reduce_range"])
        if "axis" in entry and entry["axis"] is not None:
            if not spec.is_integer:
                raise ConfigError(f"{where}: per-channel ('axis') overrides are for integer types only, not {spec.format}")
            changes.update(per_channel=True, axis=int(entry["axis"]))
        if name in overrides and overrides[name] != spec.with_(**changes):
            raise ConfigError(f"tensor {name!r} is given different types by MixedPrecisionTensor and TensorQuantOverrides")
        overrides[name] = spec.with_(**changes) if changes else spec
    return overrides


def _providers(value: Any) -> tuple[str, ...]:
    """Execution providers, each one this onnxruntime has: onnxruntime itself only warns about an
    unknown name and runs on the CPU, so a typo would be accepted and ignored."""
    import onnxruntime as ort

    names = tuple(_names(value, "execution_providers")) or ("CPUExecutionProvider",)
    available = ort.get_available_providers()
    for name in names:
        if name not in available:
            raise ConfigError(f"execution provider {name!r} is not available in this onnxruntime{suggest(name, available)}; "
                              f"available: {', '.join(available)}")
    return names


def _user_libs(value: Any) -> tuple[str, ...]:
    """``UserCustomOpLibPath``: the custom-op libraries to register in every session (ours, which
    registers nothing, is dropped: our models need no library)."""
    if not value:
        return ()
    from .library import is_own_library

    paths = [value] if isinstance(value, (str, os.PathLike)) else list(value)
    return tuple(str(p) for p in paths if not is_own_library(p))


def parse(cfg: QuantizationConfig) -> tuple[QuantConfig, RunOptions]:
    """Translate ``cfg`` into our QuantConfig plus the ModelQuantizer run options; raise on anything we cannot honour."""
    if not isinstance(cfg, QuantizationConfig):
        raise ConfigError(f"expected a QuantizationConfig, got {type(cfg).__name__}")
    if not isinstance(cfg.extra_options, dict):
        raise ConfigError(f"extra_options must be a dict, not {type(cfg.extra_options).__name__}")
    extra = dict(cfg.extra_options)
    _check_keys(extra)

    # Fields of unbuilt features, in both spellings.
    for name, feature in UNBUILT_FIELDS.items():
        value = _setting(cfg, name, extra) if name in FIELD_KEYS else getattr(cfg, name)
        if value:
            raise _not_built(name, feature, "QuantizationConfig field")
    for name in ("input_nodes", "output_nodes"):
        if _setting(cfg, name, extra):
            raise _not_built(name, "quantizing only between given start/end nodes", "QuantizationConfig field")
    if cfg.subgraphs_to_exclude:
        raise _not_built("subgraphs_to_exclude", "excluding the nodes between start and end nodes", "QuantizationConfig field")
    if cfg.log_severity_level is not None:
        log.warning("QuantizationConfig.log_severity_level is deprecated and unused (as in the reference tool)")

    fmt_kind, forced = quant_format_of(cfg.quant_format)
    if fmt_kind == "qoperator":
        raise _not_built("quant_format", "QOperator format (QLinear* operators); use QuantFormat.QDQ", "QuantizationConfig field")

    act_fmt = forced or format_of(cfg.activation_type, "activation_type")
    weight_fmt = forced or format_of(cfg.weight_type, "weight_type")

    # Calibration method and scale kind.
    method, scale_kind = calibration_of(cfg.calibrate_method)
    if scale_kind == "pow2" and not _bool(extra, "UsePowerOf2Scale", True):
        scale_kind = "float"
    if _bool(extra, "Int16Scale", False):
        method, scale_kind = "minmax", "int16"
    weight_method = extra.get("WeightCalibrateMethod")
    if weight_method is ExtendedCalibrationMethod.MinMSE or (isinstance(weight_method, str) and weight_method.lower() == "minmse"):
        weight_minmse = True
    elif weight_method in (None, CalibrationMethod.MinMax) or (isinstance(weight_method, str) and weight_method.lower() == "minmax"):
        # The reference tool also searches power-of-two weight scales by MSE under PowerOfTwoMethod.MinMSE.
        weight_minmse = method == "minmse" and scale_kind == "pow2"
    else:
        raise ConfigError(
            f"extra_options['WeightCalibrateMethod'] must be ExtendedCalibrationMethod.MinMSE or CalibrationMethod.MinMax, "
            f"not {weight_method!r}"
        )

    float_like = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "bfp", "mx")
    percentile = extra.get("Percentile", 99.999)
    if not isinstance(percentile, (int, float)) or isinstance(percentile, bool):
        raise ConfigError(f"extra_options['Percentile'] must be a number, not {percentile!r}")
    rules = _Rules(
        method=method,
        scale_kind=scale_kind,
        percentile=float(percentile),
        act_symmetric=_bool(extra, "ActivationSymmetric", act_fmt in float_like),
        weight_symmetric=_bool(extra, "WeightSymmetric", not weight_fmt.startswith("u")),
        reduce_range=bool(cfg.reduce_range),
        per_channel=bool(cfg.per_channel),
        act_scaled=_bool(extra, "ActivationScaled", False),
        weight_scaled=_bool(extra, "WeightScaled", False),
        bf16_clip=_bool(extra, "BF16WithClip", False),
        bfp_attrs=_dict_option(extra, "BFPAttributes"),
        mx_attrs=_dict_option(extra, "MXAttributes"),
    )

    weights_only = _bool(extra, "WeightsOnly", False)
    activation = None if weights_only else rules.spec(act_fmt, "activation")
    weight = rules.spec(weight_fmt, "weight")

    # Layer-wise mixed precision.
    amp = extra.get("AutoMixprecision")
    op_type_overrides: dict[str, tuple] = {}
    auto_mp = None
    if cfg.include_auto_mp and amp is None:
        raise ConfigError("include_auto_mp=True needs extra_options['AutoMixprecision'] (TargetOpType + TargetQuantType)")
    if amp is not None:
        if not isinstance(amp, dict):
            raise ConfigError(f"extra_options['AutoMixprecision'] must be a dict, not {type(amp).__name__}")
        if not cfg.include_auto_mp:
            log.warning("extra_options['AutoMixprecision'] is given but include_auto_mp is False; applying it as asked")
        op_type_overrides, auto_mp = _amp_overrides(amp, rules, None if weights_only else act_fmt, weight_fmt)
    dual_quant_nodes = _bool(extra, "EnableDualQuantNodePairs", False) or bool((amp or {}).get("DualQuantNodes", False))

    specific = bool(_setting(cfg, "specific_tensor_precision", extra))
    tensor_overrides = _tensor_overrides(cfg, extra, rules, specific)

    # Fast finetuning: the FastFinetune keys map one to one onto FinetuneOptions.
    finetune = None
    if cfg.include_fast_ft or "FastFinetune" in extra:
        ft = fast_finetune_settings(_dict_option(extra, "FastFinetune"))
        if not cfg.include_fast_ft:
            log.warning("extra_options['FastFinetune'] is given but include_fast_ft is False; treating it as a request to finetune")
        finetune = FinetuneOptions(**{_FINETUNE_FIELDS[k]: (tuple(v) if isinstance(v, list) else v) for k, v in ft.items()})

    equalize, equalization = _equalization(cfg, extra)

    # Bias.
    quantize_bias = _bool(extra, "QuantizeBias", True)
    int_weights = weight.is_integer
    int_acts = activation is not None and activation.is_integer
    int32 = _bool(extra, "Int32Bias", int_weights)
    if int32 and not (int_weights and int_acts):
        if "Int32Bias" in extra:
            log.warning("Int32Bias needs integer activations and weights; biases are quantized like weights instead")
        int32 = False
    bias = None if not quantize_bias else ("int32" if int32 else "weight")

    # Activation fusion: the four keys drive one switch.
    fuse_keys = ("RemoveQDQConvRelu", "RemoveQDQConvClip", "RemoveQDQConvLeakyRelu", "RemoveQDQConvPRelu")
    fuse_values = {k: _bool(extra, k, True) for k in fuse_keys}
    if len(set(fuse_values.values())) > 1:
        odd = next(k for k, v in fuse_values.items() if v != fuse_values["RemoveQDQConvRelu"])
        raise _not_built(odd, "setting RemoveQDQConv* keys independently; give all four the same value")
    fuse = fuse_values["RemoveQDQConvRelu"]

    # Weight storage: absent key -> our defaults (see the module docstring).
    kwargs: dict[str, Any] = {}
    if "AddQDQPairToWeight" in extra:
        runtime_q = _bool(extra, "AddQDQPairToWeight", False)
        kwargs.update(fold_weights=not runtime_q, store_int_weights=not runtime_q)
    if "PackWeights" in extra:
        kwargs["pack_weights"] = _bool(extra, "PackWeights", True)
    if "BlockDotOperandsOnly" in extra:
        dots_only = _bool(extra, "BlockDotOperandsOnly", True)
        kwargs.update(int_block_dot_operands_only=dots_only, fp_block_dot_operands_only=dots_only)

    # BF16QDQToCast only means something when BF16 is used; otherwise the schema default stands, so
    # configs that never touch BF16 compare equal regardless of the key.
    if "bf16" in rules.used:
        kwargs["bf16_qdq_to_cast"] = _bool(extra, "BF16QDQToCast", False)
    else:
        _bool(extra, "BF16QDQToCast", False)

    optimize = bool(_setting(cfg, "optimize_model", extra)) and _bool(extra, "SimplifyModel", True)
    if _bool(extra, "SkipPreprocess", False):
        optimize = False
    fold_bn = _bool(extra, "FoldBatchNorm", optimize)

    opset = extra.get("ConvertOpsetVersion")
    if opset is not None and (not isinstance(opset, int) or isinstance(opset, bool) or opset < 7):
        raise ConfigError(f"extra_options['ConvertOpsetVersion'] must be an opset number >= 7, not {opset!r}")

    calib_kwargs: dict[str, Any] = {
        "providers": _providers(_setting(cfg, "execution_providers", extra)),
        "moving_average": _bool(extra, "CalibMovingAverage", False),
        "custom_op_libraries": _user_libs(extra.get("UserCustomOpLibPath")),
    }
    size = extra.get("CalibDataSize")
    if size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ConfigError(f"extra_options['CalibDataSize'] must be a positive integer, not {size!r}")
        calib_kwargs["data_size"] = size
    if "NumBins" in extra:
        bins = extra["NumBins"]
        if not isinstance(bins, int) or isinstance(bins, bool) or bins < 2:
            raise ConfigError(f"extra_options['NumBins'] must be an integer >= 2, not {bins!r}")
        calib_kwargs["num_bins"] = bins

    _warn_unused(cfg, extra, rules)

    op_types = _names(_setting(cfg, "op_types_to_quantize", extra), "op_types_to_quantize")
    config = QuantConfig(
        activation=activation,
        weight=weight,
        bias=bias,
        op_types=op_types or None,
        extra_op_types=_names(_setting(cfg, "extra_op_types_to_quantize", extra), "extra_op_types_to_quantize"),
        quantize_all_op_types=_bool(extra, "QuantizeAllOpTypes", False),
        nodes_to_quantize=_names(_setting(cfg, "nodes_to_quantize", extra), "nodes_to_quantize"),
        nodes_to_exclude=_names(cfg.nodes_to_exclude, "nodes_to_exclude"),
        op_type_overrides=op_type_overrides,
        tensor_overrides=tensor_overrides,
        force_quantize_no_input_check=_bool(extra, "ForceQuantizeNoInputCheck", False),
        fuse_activations=fuse,
        align_concat=_bool(extra, "AlignConcat", False),
        align_slice=_bool(extra, "AlignSlice", False),
        align_eltwise_quant_type=_bool(extra, "AlignEltwiseQuantType", False),
        fold_relu=_bool(extra, "FoldRelu", False),
        quantize_subgraphs=_bool(extra, "EnableSubgraph", True),
        convert_fp16_to_fp32=bool(_setting(cfg, "convert_fp16_to_fp32", extra)),
        widen_fp16=_bool(extra, "WidenFP16", False) if "WidenFP16" in extra else None,
        dedicated_qdq_pair=_bool(extra, "DedicatedQDQPair", False),
        runtime=_runtime(extra),
        refine_block_axis=_bool(extra, "RefineBlockAxis", True),
        dual_quant_nodes=dual_quant_nodes,
        auto_mixed_precision=auto_mp,
        weight_minmse=weight_minmse,
        calibration=CalibrationOptions(**calib_kwargs),
        opset=opset,
        optimize=optimize,
        fold_batchnorm=fold_bn,
        pool_spatial_means=_bool(extra, "ConvertReduceMeanToGlobalAvgPool", True),
        finetune=finetune,
        equalize=equalize,
        equalization=equalization,
        bias_correction=_bool(extra, "BiasCorrection", False) if "BiasCorrection" in extra else None,
        repair=_bool(extra, "AccuracyFloorRepair", True),
        strict=_bool(extra, "AccuracyFloorStrict", False),
        floor_cosine=_floor_cosine(extra),
        **_smooth_quant(cfg, extra),
        **kwargs,
    )
    run = RunOptions(
        use_random_data=_bool(extra, "UseRandomData", False),
        random_input_shape=_dict_option(extra, "RandomDataReaderInputShape"),
        random_input_range=extra.get("RandomDataReaderInputDataRange"),
        use_external_data_format=bool(cfg.use_external_data_format),
        crypto_mode=bool(_setting(cfg, "crypto_mode", extra)),
        debug_mode=bool(_setting(cfg, "debug_mode", extra)),
        print_summary=bool(_setting(cfg, "print_summary", extra)),
        ignore_warnings=bool(_setting(cfg, "ignore_warnings", extra)),
        weight_only=_weight_only(extra),
    )
    return config, run


def _weight_only(extra: dict[str, Any]) -> dict[str, Any] | None:
    """The weight-only request of UseMatMulNBits / UseGPTQ (see :mod:`onnxptq.compat.weight_only`);
    their parameter dicts alone are checked and, with neither switch on, warned about."""
    from . import weight_only

    if weight_only.requested(extra):
        return weight_only.weight_only_kwargs(extra)
    for key, switch in (("MatMulNBitsParams", "UseMatMulNBits"), ("GPTQParams", "UseGPTQ")):
        if key in extra:
            weight_only.weight_only_kwargs({switch: True, **extra})  # the values are checked all the same
            log.warning("extra_options[%r] is given but %s is not True; it has no effect", key, switch)
    return None


#: CLE keys -> EqualizationOptions fields
_CLE_FIELDS = {"CLESteps": "steps", "CLEBalanceMethod": "balance_method", "CLEWeightThreshold": "weight_threshold",
               "CLEScaleAppendBias": "scale_append_bias", "CLEScaleUseThreshold": "scale_use_threshold",
               "CLETotalLayerDiffThreshold": "total_layer_diff_threshold"}


def _equalization(cfg: QuantizationConfig, extra: dict[str, Any]) -> tuple[bool | None, EqualizationOptions]:
    """``include_cle`` (None: automatic, see :mod:`.legacy`) and the CLE keys."""
    if cfg.include_cle not in (None, True, False):
        raise ConfigError(f"include_cle must be True, False or None (automatic), not {cfg.include_cle!r}")
    given = {field_: extra[key] for key, field_ in _CLE_FIELDS.items() if key in extra}
    for name in ("scale_append_bias", "scale_use_threshold"):
        if name in given and not isinstance(given[name], bool):
            raise ConfigError(f"extra_options CLE key for {name} must be a bool, not {given[name]!r}")
    if "steps" in given and (isinstance(given["steps"], bool) or not isinstance(given["steps"], int)):
        raise ConfigError(f"extra_options['CLESteps'] must be an integer (>= 1, or -1), not {given['steps']!r}")
    if given and cfg.include_cle is False:
        log.warning("CLE keys are given but include_cle is False: cross-layer equalization does not run")
    return cfg.include_cle, EqualizationOptions(**given)


def _smooth_quant(cfg: QuantizationConfig, extra: dict[str, Any]) -> dict[str, Any]:
    """``include_sq`` (None: automatic, see :mod:`.legacy`) and ``SmoothAlpha``."""
    if cfg.include_sq not in (None, True, False):
        raise ConfigError(f"include_sq must be True, False or None (automatic), not {cfg.include_sq!r}")
    out: dict[str, Any] = {"smooth_quant": cfg.include_sq}
    if "SmoothAlpha" in extra:
        alpha = extra["SmoothAlpha"]
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= float(alpha) <= 1.0:
            raise ConfigError(f"extra_options['SmoothAlpha'] must be a number in [0, 1], not {alpha!r}")
        if cfg.include_sq is False:
            log.warning("SmoothAlpha is given but include_sq is False: SmoothQuant does not run")
        out["smooth_alpha"] = float(alpha)
    return out


def _runtime(extra: dict[str, Any]) -> str:
    """``TargetRuntime``: ours, absent in the reference tool, whose placement is the NPU one.

    Absent, the config targets onnxruntime's CPU provider like every other entry point
    (``to_quant_config(get_default_config(n)) == get_preset(n)``); ``"npu"`` asks for the
    reference tool's placement.
    """
    value = extra.get("TargetRuntime", "cpu")
    if value not in RUNTIMES:
        raise ConfigError(f"extra_options['TargetRuntime'] must be one of {', '.join(RUNTIMES)}, not {value!r}")
    return value


def _warn_unused(cfg: QuantizationConfig, extra: dict[str, Any], rules: _Rules) -> None:
    """Options that only act on formats this config does not use: said aloud, never dropped silently."""
    checks = [
        ("BFPAttributes", "BFPAttributes" in extra, "bfp" in rules.used, "no tensor uses ExtendedQuantType.QBFP"),
        ("MXAttributes", "MXAttributes" in extra, "mx" in rules.used, "no tensor uses ExtendedQuantType.QMX"),
        ("per_channel", cfg.per_channel, "weight-int" in rules.used, "no weight has an integer type"),
        ("WeightScaled", rules.weight_scaled, "weight-float" in rules.used, "no weight has a float type"),
        ("ActivationScaled", rules.act_scaled, "activation-float" in rules.used or "tensor-float" in rules.used,
         "no activation has a float type"),
        ("BF16WithClip", rules.bf16_clip, "bf16" in rules.used, "nothing is BF16"),
    ]
    for name, given, effective, why in checks:
        if given and not effective:
            log.warning("%s has no effect on this configuration: %s", name, why)


def to_quant_config(cfg: QuantizationConfig) -> QuantConfig:
    """Our :class:`QuantConfig` for a legacy :class:`QuantizationConfig` (see the module docstring)."""
    return parse(cfg)[0]
