"""Plan: which tensor gets which format. A pure function of (prepared model, config).

The plan is the one place where "what is quantized, how" is decided. Later steps only execute it:
calibration measures exactly the activations the plan lists, the solver turns their statistics
into scales, and the emitter writes the nodes. The plan serialises to JSON so users can read it
(``onnxptq inspect``) and tests can assert on it without running anything.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import numpy as np
import onnx

from ..config.schema import QuantConfig, TensorQuant
from ..graph.external import tensor_values
from ..graph.opsets import is_onnx_domain
from ..graph.walk import ScopeIndex
from . import runtime
from ..graph.sentinels import sentinel_tensors
from .transformer import LINEAR_OPS, is_transformer, transformer_float_tensors
from .tails import TAIL_REASON, postprocessing_tail

log = logging.getLogger(__name__)

Role = Literal["activation", "weight", "bias"]

#: Op types quantized by default (the reference tool's extended set, spec §4.6).
DEFAULT_OP_TYPES = frozenset(
    """Add ArgMax AveragePool Clip Concat Conv ConvTranspose Gather Gelu Gemm GlobalAveragePool
    InstanceNormalization LayerNormalization LeakyRelu MatMul MaxPool Mul Pad Relu Reshape Resize Sigmoid
    Softmax Split Squeeze Tanh Transpose Unsqueeze Where DepthToSpace Div Erf HardSigmoid HardSwish
    LpNormalization Max Min PRelu ReduceMean Slice SpaceToDepth Sub LSTM GRU RNN""".split()
)
#: Recurrent layers: their weights W and R are quantized like a MatMul's (per gate row, blocks
#: along the input/hidden axis) and their input X as an activation; the bias B, the initial states
#: and the outputs Y/Y_h/Y_c stay float. The state is fed back every step inside the op, where no
#: quantizer can reach it, so quantizing it outside would only round the state handed between
#: calls (a streaming model's ``stateN``), compounding the error over a stream for no backend gain.
RECURRENT = frozenset("LSTM GRU RNN".split())
#: Ops whose output only rearranges or selects input values: quantized only when forced or when
#: their input already is (their range is their input's).
PASS_THROUGH = frozenset(
    "MaxPool Reshape Squeeze Unsqueeze Transpose Resize Slice Split Gather Pad DepthToSpace SpaceToDepth Flatten".split()
)
#: For these ops only the listed input positions carry data; the others are shapes, indices, limits.
DATA_INPUTS: dict[str, tuple[int, ...]] = {
    "Clip": (0,), "Pad": (0,), "Resize": (0,), "Reshape": (0,), "Slice": (0,), "Split": (0,), "Squeeze": (0,),
    "Unsqueeze": (0,), "Gather": (0,), "Transpose": (0,), "Expand": (0,), "Tile": (0,), "ReduceMean": (0,),
    "LayerNormalization": (0,), "InstanceNormalization": (0,), "BatchNormalization": (0,), "Where": (1, 2),
    "ArgMax": (0,), "DepthToSpace": (0,), "SpaceToDepth": (0,), "LpNormalization": (0,), "Softmax": (0,),
    **{op: (0, 1, 2) for op in RECURRENT},
}
#: (op type, input index) of weights and biases whose layout we know.
WEIGHT_INPUTS = {("Conv", 1), ("ConvTranspose", 1), ("Gemm", 0), ("Gemm", 1), ("MatMul", 0), ("MatMul", 1), ("PRelu", 1),
                 *((op, i) for op in RECURRENT for i in (1, 2))}
BIAS_INPUTS = {("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2)}
#: Producers whose single following activation is fused on every backend: no Q/DQ between them.
FUSIBLE_PRODUCERS = frozenset("Conv ConvTranspose Gemm MatMul Add MaxPool AveragePool GlobalAveragePool".split())
FUSIBLE_ACTIVATIONS = frozenset("Relu Clip LeakyRelu PRelu HardSwish".split())
#: Ops without an output quantizer of their own: ArgMax gives indices, Shape-like ops give ints.
NO_OUTPUT_QUANT = frozenset("ArgMax".split()) | RECURRENT
FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
#: Elementwise ops whose constant operands AlignEltwiseQuantType moves to the activation type.
ELTWISE_OPS = frozenset("Mul Add Sub Div Min Max".split())


@dataclass
class TensorPlan:
    """The decision for one tensor."""

    name: str
    role: Role
    quant: TensorQuant
    #: per-channel axis (integer weights) or block axis (bfp/mx); None for per-tensor
    axis: int | None = None
    #: for int32 biases: the (activation, weight) tensors whose scales multiply into the bias scale
    bias_of: tuple[str, str] | None = None
    #: tensors that must share this tensor's scale and zero point (AlignConcat, AlignSlice)
    share_with: str | None = None
    #: nodes (by name) that read this tensor as a quantized input
    consumers: list[str] = field(default_factory=list)
    #: only ``consumers`` read the quantized value; the tensor's other readers keep the float one
    #: (transformer placement: a residual Add beside the MatMuls that read a LayerNorm output)
    exclusive: bool = False
    producer: str | None = None
    #: DualQuantNodes: the producer's own output format when a consumer reads another one (spec
    #: §4.5). The tensor then passes through this quantizer, then ``quant``; the consumers listed in
    #: ``producer_consumers`` read the value after the first one only.
    producer_quant: TensorQuant | None = None
    producer_axis: int | None = None
    producer_consumers: list[str] = field(default_factory=list)
    #: (low, high) outside which every reader saturates (e.g. HardSwish is 0 below -3), so values
    #: there need no codes: the solver clamps the calibrated range to it. None: unbounded.
    limits: tuple[float | None, float | None] | None = None

    def statistics_quant(self) -> TensorQuant:
        """The format this tensor's calibration statistics serve: its own, or at a dual-quant
        boundary whose consumer side needs none, the producer side's."""
        if self.quant.needs_calibration or self.producer_quant is None:
            return self.quant
        return self.producer_quant

    def collector_spec(self, num_bins: int | None = None) -> dict[str, Any]:
        """What the calibration collector of this tensor must gather (``calibration.methods.
        make_collector`` arguments), or ``{"per_channel_axis": axis}`` for per-channel min/max."""
        quant = self.statistics_quant()
        if quant.per_channel and self.axis is not None:
            return {"per_channel_axis": self.axis}
        spec: dict[str, Any] = {"method": quant.calibration, "symmetric": quant.symmetric}
        if quant.calibration == "percentile":
            spec["percentile"] = quant.percentile
        if num_bins is not None:
            spec["num_bins"] = num_bins
        return spec

    def range_options(self) -> dict[str, Any]:
        """How solve turns this tensor's statistics into a range (``calibration.methods.compute_range``
        arguments besides the collector): the method, symmetry, percentile and integer grid."""
        quant = self.quant
        options: dict[str, Any] = {"method": quant.calibration, "symmetric": quant.symmetric}
        if quant.calibration == "percentile":
            options["percentile"] = quant.percentile
        if quant.calibration == "minmse":
            # PowerOfTwoMethod.MinMSE: search among power-of-two scales, not a float window that is
            # rounded to a power of two afterwards (which can land on a worse scale than the search's).
            options["power_of_two"] = quant.scale_kind == "pow2"
        if quant.is_integer:
            from ..formats.integer import qrange

            options["qmin"], options["qmax"] = qrange(quant.format, symmetric=quant.symmetric, reduce_range=quant.reduce_range)
        return options

    def producer_view(self) -> "TensorPlan | None":
        """This tensor as the producer-side quantizer sees it (None without dual quant nodes)."""
        if self.producer_quant is None:
            return None
        return TensorPlan(self.name, self.role, self.producer_quant, axis=self.producer_axis, producer=self.producer)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "format": self.quant.describe(),
            "quant": self.quant.to_json(),
            "axis": self.axis,
            "bias_of": list(self.bias_of) if self.bias_of else None,
            "share_with": self.share_with,
            "consumers": self.consumers,
            **({"exclusive": True} if self.exclusive else {}),
            "producer": self.producer,
            **({"producer_format": self.producer_quant.describe(), "producer_axis": self.producer_axis,
                "producer_consumers": self.producer_consumers} if self.producer_quant is not None else {}),
            **({"limits": list(self.limits)} if self.limits is not None else {}),
        }


@dataclass
class Plan:
    """Every tensor to quantize, in a deterministic order, plus the nodes that were selected."""

    tensors: dict[str, TensorPlan]
    nodes: list[str]
    skipped_nodes: dict[str, str] = field(default_factory=dict)
    #: tensors a selected node reads or writes that stay float on purpose, with the reason
    #: (attention-mask sentinels, transformer placement rules)
    float_tensors: dict[str, str] = field(default_factory=dict)
    #: the range-mismatch guard's decisions by tensor (:mod:`onnxptq.pipeline.guard`): action, reason
    guard: dict[str, dict[str, Any]] = field(default_factory=dict)

    def activations(self) -> list[TensorPlan]:
        return [t for t in self.tensors.values() if t.role == "activation"]

    def needs_calibration(self) -> list[str]:
        """Activation tensors whose scale comes from data (integer, or float formats with a real scale)."""
        return [t.name for t in self.activations()
                if t.quant.needs_calibration or (t.producer_quant is not None and t.producer_quant.needs_calibration)]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "skipped_nodes": self.skipped_nodes,
            "float_tensors": self.float_tensors,
            **({"guard": self.guard} if self.guard else {}),
            "tensors": [t.to_json() for t in self.tensors.values()],
        }

    def summary(self) -> dict[str, int]:
        """Count of planned tensors per (role, format) — what ``inspect`` prints."""
        counts: dict[str, int] = defaultdict(int)
        for t in self.tensors.values():
            counts[f"{t.role}: {t.quant.describe()}"] += 1
        return dict(sorted(counts.items()))


class _Graph:
    """Read-only indexes over a model's graphs: the main graph, and with ``subgraphs`` every
    If/Loop/Scan body too (tensor names are unique across a model's scopes, so one index serves
    all; a body reading an outer tensor is one more consumer of it)."""

    def __init__(self, model: onnx.ModelProto, subgraphs: bool = True) -> None:
        index = ScopeIndex(model)
        scopes = index.scopes if subgraphs else [index.main]
        graphs = [s.graph for s in scopes]
        self.nodes = list(index.nodes()) if subgraphs else list(model.graph.node)
        self.initializers = {t.name: t for g in graphs for t in g.initializer}
        self.inputs = [i.name for i in model.graph.input if i.name not in self.initializers]
        #: outputs of the graph that produces them (a body output is renamed in its own body)
        self.outputs = {o.name for g in graphs for o in g.output}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in self.nodes:
            for out in node.output:
                if out:
                    self.producer[out] = node
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        infos = [vi for g in graphs for vi in list(g.value_info) + list(g.input) + list(g.output)]
        self.elem_type: dict[str, int] = {}
        self.rank: dict[str, int] = {}
        for vi in infos:
            if vi.type.HasField("tensor_type"):
                self.elem_type[vi.name] = vi.type.tensor_type.elem_type
                if vi.type.tensor_type.HasField("shape"):
                    self.rank[vi.name] = len(vi.type.tensor_type.shape.dim)
        for init in self.initializers.values():
            self.elem_type[init.name] = init.data_type
            self.rank[init.name] = len(init.dims)

    def is_float(self, name: str) -> bool:
        return self.elem_type.get(name) in FLOAT_TYPES


def node_names(model: onnx.ModelProto) -> list[str]:
    """Give every node of ``model``, in every graph and If/Loop/Scan body, a unique name, in place
    (prepare's last step: plans refer to nodes by name); returns the main graph's names."""
    seen: set[str] = set()
    names = []
    index = ScopeIndex(model)
    for i, node in enumerate(index.nodes()):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}" if not node.name else f"{node.name}_{i}"
        seen.add(node.name)
        if index.node_scope[id(node)].is_main:
            names.append(node.name)
    return names


def _excluded(name: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern == name:
            return True
        if pattern.startswith("^") and ".*" in pattern and re.match(pattern, name):
            return True
    return False


def _weight_axis(node: onnx.NodeProto, index: int, rank: int) -> int | None:
    """Output-channel axis of a weight for per-channel integer quantization."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv" and index == 1:
        return 0
    if node.op_type == "ConvTranspose" and index == 1:
        return 1
    if node.op_type == "Gemm" and index == 1:
        return 0 if attrs.get("transB", 0) else 1
    if node.op_type == "MatMul" and index == 1 and rank >= 2:
        return rank - 1
    if node.op_type in RECURRENT and index in (1, 2):
        return 1  # [directions, gates x hidden, input or hidden]: one scale per gate row
    return None


def _size(tensor: onnx.TensorProto) -> int:
    size = 1
    for d in tensor.dims:
        size *= d
    return size


def _vector_axis(tensor: onnx.TensorProto) -> int | None:
    """The one non-singleton axis of a per-channel constant (an elementwise op's scale or offset).

    Such constants are per-channel parameters (a folded-away BatchNorm or a learnable affine);
    quantizing them per tensor lets one large channel erase the small ones.
    """
    big = [i for i, d in enumerate(tensor.dims) if d != 1]
    return big[0] if len(big) == 1 else None


def _block_axis(node: onnx.NodeProto, index: int, rank: int | None, is_weight: bool, default: int) -> int:
    """The axis BFP/MX blocks run along: the reduction (K) dimension of a matrix product (§4.4)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "MatMul":
        if index == 0:
            return (rank - 1) if (is_weight and rank) else -1
        return (rank - 2) if (is_weight and rank and rank >= 2) else -2
    if node.op_type == "Gemm":
        if index == 0:
            return 0 if attrs.get("transA", 0) else 1
        if index == 1:
            return 1 if attrs.get("transB", 0) else 0
    if node.op_type in RECURRENT:
        # X [seq, batch, input] and W/R [directions, gates x hidden, input or hidden] meet along
        # their last axis (X·Wᵀ, H·Rᵀ).
        return 2 if is_weight else -1
    if node.op_type in ("Softmax", "LayerNormalization") and index == 0:
        return int(attrs.get("axis", -1))
    if rank == 1:
        return 0
    return default


#: Readers whose block axis is the axis they reduce over (contract, normalize, softmax): for their
#: inputs the block axis is a property of the op, not of the tensor's layout.
_REDUCING_READERS = frozenset({"MatMul", "Gemm", "Softmax", "LayerNormalization"})


def _reduces(node: onnx.NodeProto, index: int) -> bool:
    """Whether ``node`` reads input ``index`` along a reduction axis (see :func:`_block_axis`)."""
    if node.op_type in ("MatMul", "Gemm"):
        return index in (0, 1)
    return node.op_type in _REDUCING_READERS and index == 0


def check_node_names(model: onnx.ModelProto) -> None:
    """Plans refer to nodes by name: every node, in the main graph and in every body, needs a unique one.

    :func:`onnxptq.pipeline.prepare.prepare` gives them (:func:`node_names`); a model that skipped
    it is refused here, naming the node, rather than renamed behind the caller's back.
    """
    seen: set[str] = set()
    for index, node in enumerate(ScopeIndex(model).nodes()):  # bodies included
        if not node.name or node.name in seen:
            why = "has no name" if not node.name else f"repeats the name {node.name!r}"
            raise ValueError(f"node {index} ({node.op_type}) {why}: plans refer to nodes by unique name; "
                             "prepare the model first (onnxptq.pipeline.prepare.prepare names every node)")
        seen.add(node.name)


def make_plan(model: onnx.ModelProto, config: QuantConfig) -> Plan:
    """Decide the format of every tensor of ``model``: a prepared model (every node named). A pure
    function: the model is read, never changed."""
    check_node_names(model)
    g = _Graph(model, subgraphs=config.quantize_subgraphs)
    op_types = set(config.op_types) if config.op_types is not None else set(DEFAULT_OP_TYPES)
    op_types |= set(config.extra_op_types) | set(config.op_type_overrides)
    if config.quantize_all_op_types:
        op_types |= {n.op_type for n in g.nodes}
    # Names in the config (nodes, tensors, op types) were checked once: graph.check.check_config_names.

    selected: list[onnx.NodeProto] = []
    skipped: dict[str, str] = {}
    quantized_tensors: set[str] = set()
    selected_outputs: set[str] = set()
    tail = set() if config.quantize_postprocessing else postprocessing_tail(model)
    for node in g.nodes:
        reason = TAIL_REASON if node.name in tail else (
            _skip_reason(node, g, config, op_types, quantized_tensors) or _cpu_skip_reason(node, config, selected_outputs))
        if reason:
            skipped[node.name] = reason
            continue
        selected.append(node)
        quantized_tensors.update(i for i in node.input if i)
        quantized_tensors.update(o for o in node.output if o)
        selected_outputs.update(o for o in node.output if o)
    selected = _drop_isolated_cpu_nodes(selected, skipped, g, config)

    tensors: dict[str, TensorPlan] = {}
    selected_names = {n.name for n in selected}

    def spec_for(node: onnx.NodeProto, role: Role) -> TensorQuant | None:
        act, weight = _node_formats(node, config)
        if runtime.integer_placement(config, act):
            assert act is not None
            act = runtime.cpu_activation(act)
            if role == "weight" and node.op_type in ("Add", "Mul"):
                return runtime.cpu_constant(act)
        if role == "activation":
            return act
        if role == "weight":
            if config.align_eltwise_quant_type and node.op_type in ELTWISE_OPS and act is not None and act.is_integer:
                # AlignEltwiseQuantType: an elementwise op's constant takes the activation type
                # (int16 under A16W8), so both operands share one precision.
                return act.with_(per_channel=False, symmetric=True)
            return weight
        return weight if config.bias == "weight" else None

    # DualQuantNodes bookkeeping: each activation's producer-side and per-consumer (format, axis).
    producer_side: dict[str, tuple[TensorQuant, int | None]] = {}
    consumer_side: dict[str, dict[str, tuple[TensorQuant, int | None]]] = defaultdict(dict)

    # Activations whose block axis a reducing reader set (MatMul, Gemm, Softmax, LayerNorm): an
    # elementwise reader never moves it back to the channel axis (residual Adds read the same
    # tensors as the next layer's MatMuls).
    reduced_axis: set[str] = set()

    def add(name: str, role: Role, quant: TensorQuant | None, node: onnx.NodeProto, *, consumer: bool, axis=None, bias_of=None,
            reducing: bool = False):
        if quant is None or not g.is_float(name):
            return
        if reducing and role == "activation" and not quant.is_integer and config.refine_block_axis:
            reduced_axis.add(name)
        if config.dual_quant_nodes and role == "activation":
            if consumer:
                consumer_side[name].setdefault(node.name, (quant, axis))
            elif name not in tensors:
                producer_side[name] = (quant, axis)
        existing = tensors.get(name)
        if existing is None:
            tensors[name] = TensorPlan(name, role, quant, axis=axis, bias_of=bias_of, producer=g.producer[name].name if name in g.producer else None)
            existing = tensors[name]
        elif consumer and existing.consumers == [] and existing.quant != quant:
            # The consumer's format governs what it reads; a producer-side choice yields to it.
            existing.quant, existing.axis = quant, axis
        elif (existing.axis != axis and axis is not None and existing.role == "activation" and not existing.quant.is_integer
              and (reducing or name not in reduced_axis)):
            log.debug("tensor %s: block axis %s (was %s) for %s", name, axis, existing.axis, node.name)
            existing.axis = axis
        if consumer and node.name not in existing.consumers:
            existing.consumers.append(node.name)

    for node in selected:
        data_positions = DATA_INPUTS.get(node.op_type)
        for index, name in enumerate(node.input):
            if not name or (data_positions is not None and index not in data_positions):
                continue
            is_init = name in g.initializers
            if config.fuse_activations and index == 0 and node.op_type in _fused_activations(config) and name in g.producer:
                producer = g.producer[name]
                if producer.name in selected_names and _feeds_fused_activation(producer, name, g, selected_names, config):
                    continue  # fused with its producer: no quantizer in between
            if (node.op_type, index) in BIAS_INPUTS and is_init:
                weight_name = node.input[1] if len(node.input) > 1 else ""
                quant = spec_for(node, "bias")
                act_quant = spec_for(node, "activation")
                wt_quant = spec_for(node, "weight")
                if config.bias == "int32" and wt_quant is not None and wt_quant.is_integer and act_quant is not None and act_quant.is_integer:
                    add(name, "bias", wt_quant.with_(format="int32", per_channel=wt_quant.per_channel, symmetric=True),
                        node, consumer=True, axis=0 if wt_quant.per_channel else None, bias_of=(node.input[0], weight_name))
                elif quant is not None:
                    add(name, "bias", quant, node, consumer=True, axis=_block_axis(node, index, 1, True, 0) if not quant.is_integer else None)
                continue
            if is_init:
                quant = spec_for(node, "weight")
                if quant is None:
                    continue
                if quant.format in ("bfp", "mx") and _size(g.initializers[name]) <= 1:
                    # A block of one: the reference tool's kernels return such tensors unchanged,
                    # and a scalar scale (e.g. a learnable activation gain) loses up to 12% under
                    # the OCP scale rule, which alone breaks PP-OCRv4 rec at MXFP8.
                    continue
                rank = len(g.initializers[name].dims)
                if quant.is_integer:
                    axis = _weight_axis(node, index, rank) if quant.per_channel else None
                    if (quant.per_channel and axis is None and (node.op_type, index) not in WEIGHT_INPUTS
                            and quant.format.startswith("int")):
                        # Per-channel elementwise constants only for signed types: onnxruntime 1.31's
                        # CPU QDQ fusion turns Add/Mul with an unsigned per-channel constant into
                        # QLinearAdd/QLinearMul, which require scalar parameters (load fails).
                        axis = _vector_axis(g.initializers[name])
                    if quant.per_channel and axis is None:
                        quant = quant.with_(per_channel=False)
                else:
                    axis = _block_axis(node, index, rank, True, quant.attr_dict.get("axis", 1)) if quant.format in ("bfp", "mx") else None
                add(name, "weight", quant, node, consumer=True, axis=axis)
            else:
                quant = spec_for(node, "activation")
                if quant is None:
                    continue
                axis = None
                if quant.format in ("bfp", "mx"):
                    default = quant.attr_dict.get("axis", 1)
                    axis = _block_axis(node, index, g.rank.get(name), False, default) if config.refine_block_axis else default
                add(name, "activation", quant, node, consumer=True, axis=axis, reducing=_reduces(node, index))
        if node.op_type in NO_OUTPUT_QUANT:
            continue
        quant = spec_for(node, "activation")
        for out in node.output:
            if not out or quant is None:
                continue
            if config.fuse_activations and _feeds_fused_activation(node, out, g, selected_names, config):
                continue
            axis = None
            if quant.format in ("bfp", "mx"):
                default = quant.attr_dict.get("axis", 1)
                # A MatMul's output rows are along its last axis, whatever its first input was.
                axis = -1 if (node.op_type == "MatMul" and config.refine_block_axis) else default
                if g.rank.get(out) == 1:
                    axis = 0
            add(out, "activation", quant, node, consumer=False, axis=axis)

    float_tensors = _keep_float(model, tensors, producer_side, consumer_side)
    if config.activation is not None and config.activation.is_integer and is_transformer(model):
        float_tensors.update(_linear_inputs_only(tensors, g, producer_side, consumer_side))
    if config.dual_quant_nodes:
        _dual_quant_nodes(tensors, producer_side, consumer_side, g)
    if config.depthwise_input_per_channel and not runtime.is_cpu(config):
        # onnxruntime's QLinearConv takes one scalar input scale: a per-channel input would keep
        # the depthwise convolution float behind a DequantizeLinear.
        _per_channel_depthwise_inputs(tensors, g)
    _apply_tensor_overrides(tensors, config, g)
    _apply_alignment(tensors, selected, config)
    if runtime.is_cpu(config):
        _share_through_data_movement(tensors, selected)
    _requantize_after_float_transposes(tensors, g)
    _saturation_limits(tensors, g, config)
    plan = Plan(tensors=tensors, nodes=[n.name for n in selected], skipped_nodes=skipped,
                float_tensors={k: v for k, v in float_tensors.items() if k not in tensors})
    log.info("plan: %d nodes, %d tensors (%s)", len(plan.nodes), len(tensors), ", ".join(f"{k} ×{v}" for k, v in plan.summary().items()))
    return plan


def _keep_float(model: onnx.ModelProto, tensors: dict[str, TensorPlan], producer_side: dict, consumer_side: dict) -> dict[str, str]:
    """Drop from the plan the tensors that stay float, and say why (``Plan.float_tensors``):
    attention-mask sentinels (``graph/sentinels.py``: a -3.4e38 or -inf value never sets a range)
    and the transformer placement rules (``pipeline/transformer.py``: inside a decomposed GELU,
    the residual sums LayerNorm reads). A ``tensor_overrides`` entry naming one still quantizes
    it (applied after this): the user's explicit choice wins."""
    why: dict[str, str] = {}
    for name in sentinel_tensors(model):
        if tensors.pop(name, None) is not None:
            why[name] = "attention-mask sentinel"
    for name in transformer_float_tensors(model):
        if tensors.pop(name, None) is not None:
            why[name] = "transformer placement (GELU inside or residual sum)"
    for name in why:
        producer_side.pop(name, None)
        consumer_side.pop(name, None)
    if why:
        log.info("plan: %d tensors stay float (attention masks, GELU insides, residual sums): %s",
                 len(why), ", ".join(sorted(why)[:6]))
    return why


def _linear_inputs_only(tensors: dict[str, TensorPlan], g: _Graph, producer_side: dict, consumer_side: dict) -> dict[str, str]:
    """Integer activations on a transformer graph (``pipeline/transformer.py``): keep only the
    activations a MatMul/Gemm reads, read quantized by those readers alone; the rest stay float."""
    kinds = {n.name: n.op_type for n in g.nodes}
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "activation":
            continue
        linear = [c for c in t.consumers if kinds.get(c) in LINEAR_OPS]
        if not linear:
            del tensors[name]
            producer_side.pop(name, None)
            consumer_side.pop(name, None)
            why[name] = "transformer placement (integer activations: MatMul/Gemm inputs only)"
        elif len(linear) != len(t.consumers) or any(r.op_type not in LINEAR_OPS for r in g.consumers.get(name, [])) or name in g.outputs:
            t.consumers, t.exclusive = linear, True
    if why:
        log.info("plan: %d activations stay float (transformer graph, integer activations: MatMul/Gemm inputs only)", len(why))
    return why


def _skip_reason(node, g: _Graph, config: QuantConfig, op_types: set[str], quantized: set[str]) -> str | None:
    if config.nodes_to_quantize and node.name not in config.nodes_to_quantize:
        return "not in nodes_to_quantize"
    if _excluded(node.name, config.nodes_to_exclude):
        return "excluded"
    if node.op_type not in op_types:
        return f"op type {node.op_type} not quantized"
    if not is_onnx_domain(node.domain):
        return f"domain {node.domain}"
    if not any(g.is_float(i) for i in node.input if i) and not any(g.is_float(o) for o in node.output if o):
        return "no float tensors"
    if node.op_type in PASS_THROUGH and not config.force_quantize_no_input_check:
        if not node.input or node.input[0] not in quantized:
            return "pass-through op whose input is not quantized"
    if any(i in g.initializers and _all_inf(g.initializers[i]) for i in node.input if i):
        return "an initializer input is entirely ±inf"
    return None


def _node_formats(node: onnx.NodeProto, config: QuantConfig) -> tuple[TensorQuant | None, TensorQuant | None]:
    """(activation, weight) formats the config gives ``node``, before any runtime adjustment."""
    act, weight = config.activation, config.weight
    if node.op_type in config.op_type_overrides:
        act, weight = config.op_type_overrides[node.op_type]
    if node.name in config.node_overrides:
        act, weight = config.node_overrides[node.name]
    return act, weight


def _cpu_skip_reason(node: onnx.NodeProto, config: QuantConfig, selected_outputs: set[str]) -> str | None:
    """Why the CPU target leaves ``node`` float although the op-type rules select it.

    A Q/DQ pair around an op that onnxruntime's CPU provider has no integer kernel for only
    converts back and forth; data-movement ops and fused activations are worth quantizing only
    behind an integer producer (they then run on its integer output). Convolutions that onnxruntime
    runs slower as QLinearConv than in float are left to :func:`_drop_isolated_cpu_nodes`, which
    sees their neighbours. Explicit op-type choices
    (``op_types``, ``extra_op_types``, overrides, ``quantize_all_op_types``, ``nodes_to_quantize``)
    are the user's and are honoured.
    """
    if not runtime.integer_placement(config, _node_formats(node, config)[0]) or _explicit(node, config):
        return None
    if node.op_type not in runtime.CPU_OP_TYPES:
        return f"runtime cpu: onnxruntime has no integer {node.op_type} kernel"
    if node.op_type in runtime.CPU_DATA_MOVEMENT | runtime.CPU_FUSED_ACTIVATIONS:
        if not node.input or node.input[0] not in selected_outputs:
            return f"runtime cpu: {node.op_type} runs on integers only behind an integer producer"
    return None


def _explicit(node: onnx.NodeProto, config: QuantConfig) -> bool:
    """Whether the user chose ``node``'s op type or the node itself for quantization explicitly."""
    return (config.op_types is not None or config.quantize_all_op_types or node.op_type in config.extra_op_types
            or node.op_type in config.op_type_overrides or node.name in config.nodes_to_quantize)


def _drop_isolated_cpu_nodes(selected: list[onnx.NodeProto], skipped: dict[str, str], g: _Graph,
                             config: QuantConfig) -> list[onnx.NodeProto]:
    """On the CPU target, unselect the cheap integer ops that no selected node feeds.

    An Add/Mul/Concat/pooling/... whose data inputs all come from float ops (e.g. PP-LCNetV3's
    learnable shift after a HardSwish, an SE block's pooling of a float depthwise output) would
    become a QLinear kernel behind one QuantizeLinear per input: in float it costs next to
    nothing, and one QuantizeLinear on its output (where an integer reader needs one) replaces
    those, with one rounding instead of two, and on a smaller tensor where the op reduces (a
    GlobalAveragePool; onnxruntime would otherwise also move the QuantizeLinear up through a
    MaxPool in front of it and run its slow uint8 MaxPool). Conv/MatMul/Gemm are kept
    (their integer kernel pays for the Q/DQ around it), and so are explicit choices (op types,
    node names, per-node formats such as the mixed-precision search's). Only nodes with 8-bit
    activations are considered: the rules weigh onnxruntime's uint8 kernels, and it has none for
    16-bit activations (A16W8 runs float between its Q/DQ either way). Data-movement
    ops and fused activations that lose their integer producer go too; repeated to a fixed point.
    PP-OCRv4 rec A8W8 (bench/RESULTS.md, issue 16): 14 depthwise Convs, the stem and 14 such Adds
    float, CER 0.055 → 0.037 at 0.41× float latency.
    """
    kept = list(selected)
    while True:
        names = {n.name for n in kept}
        produced = {o for n in kept for o in n.output if o}
        drop = []
        for node in kept:
            act = _node_formats(node, config)[0]
            if (not runtime.integer_placement(config, act) or not runtime.has_integer_kernels(act)
                    or _explicit(node, config) or node.name in config.node_overrides):
                continue
            data = [i for i in node.input if i and i not in g.initializers]
            if node.op_type in runtime.CPU_MATRIX_OPS:
                weight = g.initializers.get(node.input[1]) if len(node.input) > 1 else None
                dims = list(weight.dims) if weight is not None else None
                read = _read_by_selected(node, names, g)
                slower = runtime.float_conv_reason(node, dims)
                if slower and not (read and data and data[0] in produced):
                    drop.append((node, slower))
                elif weight is not None and runtime.is_image_stem(node, dims) and not read:
                    drop.append((node, "runtime cpu: an image stem runs faster in float, and no integer reader needs "
                                       "its output quantized"))
                continue
            if node.op_type in runtime.CPU_DATA_MOVEMENT | runtime.CPU_FUSED_ACTIVATIONS:
                if not data or data[0] not in produced:
                    drop.append((node, f"runtime cpu: {node.op_type} runs on integers only behind an integer producer"))
                continue
            if not any(i in produced for i in data):
                drop.append((node, f"runtime cpu: no integer producer; the {node.op_type} runs float and its "
                                   "output is quantized once where an integer reader needs it"))
        if not drop:
            return kept
        for node, reason in drop:
            skipped[node.name] = reason
        gone = {id(n) for n, _ in drop}
        kept = [n for n in kept if id(n) not in gone]


def _read_by_selected(node: onnx.NodeProto, names: set[str], g: _Graph) -> bool:
    """Whether a node in ``names`` reads ``node``'s outputs, directly or behind a Relu/Clip (an
    activation onnxruntime fuses into the producer, selected or not)."""
    pending = [o for o in node.output if o]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for reader in g.consumers.get(name, []):
            if reader.name in names:
                return True
            if reader.op_type in runtime.CPU_FUSED_ACTIVATIONS:
                pending.extend(o for o in reader.output if o)
    return False


def _fused_activations(config: QuantConfig) -> frozenset[str]:
    """Activations that take no quantizer between them and their producer on this target."""
    return runtime.CPU_FUSED_ACTIVATIONS if runtime.is_cpu(config) else FUSIBLE_ACTIVATIONS


def _share_through_data_movement(tensors: dict[str, TensorPlan], nodes: list[onnx.NodeProto]) -> None:
    """Data-movement outputs take their input's scale and zero point on the CPU target.

    onnxruntime drops the DequantizeLinear/QuantizeLinear around Reshape, Transpose, MaxPool, ...
    (runs them on the integer values) only when both carry equal parameters; a separately
    calibrated output scale would leave the op float between a DQ and a Q.
    """
    for node in nodes:
        if node.op_type not in runtime.CPU_DATA_MOVEMENT or not node.input:
            continue
        source = tensors.get(node.input[0])
        if source is None or source.role != "activation" or not source.quant.is_integer:
            continue
        for out in node.output:
            t = tensors.get(out)
            if t is not None and t.role == "activation" and t.quant == source.quant and t.share_with is None:
                t.share_with = source.name


#: Ops onnxruntime's optimizer moves a DequantizeLinear past (QDQ propagation): each moves or picks values.
_ORT_QDQ_PROPAGATION = frozenset("Transpose Reshape Squeeze Unsqueeze Flatten MaxPool Slice".split())


def _requantize_after_float_transposes(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """A signed 8-bit activation read through its DequantizeLinear by a float ``Transpose`` (or another
    op of :data:`_ORT_QDQ_PROPAGATION`, and on along a chain of them) gets the same quantizer on
    that op's output (``share_with``: exact, these ops move or pick values).

    Why: onnxruntime 1.32's graph optimizer (opset 21) pushes such a DequantizeLinear past the
    Transpose and writes a QuantizeLinear with ``output_dtype`` INT8 but a UINT8 zero point, then
    refuses the model it built ("output_dtype INT8 does not match y_zero_point type UINT8"). Seen
    on MiniLM with the NPU placement, ``op_types=MatMul`` and the attention-output MatMuls excluded:
    the attention context is quantized as the P·V MatMul's output and read by a float Transpose.
    With a QuantizeLinear/DequantizeLinear already after the Transpose it fuses them instead (the
    Reshape after it is the next place the optimizer would go, so the chain is followed).
    uint8 and int16 activations do not trigger it (tests/test_transformer_placement.py).
    """
    work = [t for t in tensors.values()
            if t.role == "activation" and t.quant.format == "int8" and t.axis is None and not t.exclusive]
    while work:
        t = work.pop()
        for reader in g.consumers.get(t.name, []):
            out = reader.output[0] if reader.output else ""
            if (reader.op_type not in _ORT_QDQ_PROPAGATION or reader.input[0] != t.name or not out or out in tensors
                    or not g.is_float(out)):
                continue
            tensors[out] = TensorPlan(out, "activation", t.quant, share_with=t.name, producer=reader.name)
            work.append(tensors[out])  # the optimizer goes on through a chain (Transpose -> Reshape)


def _saturation_bounds(node: onnx.NodeProto, g: _Graph) -> tuple[float | None, float | None] | None:
    """The input interval outside which ``node``'s output no longer changes, or None if unknown."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "HardSwish":
        return (-3.0, None)
    if node.op_type == "HardSigmoid":
        alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
        if alpha <= 0:
            return None
        return (-beta / alpha, (1.0 - beta) / alpha)
    if node.op_type == "Relu":
        return (0.0, None)
    if node.op_type == "Clip":
        bounds: list[float | None] = [attrs.get("min"), attrs.get("max")]
        for i in (1, 2):
            if len(node.input) > i and node.input[i]:
                init = g.initializers.get(node.input[i])
                if init is None:
                    return None
                bounds[i - 1] = float(tensor_values(init).reshape(-1)[0])
        return (bounds[0], bounds[1])
    return None


def _saturation_limits(tensors: dict[str, TensorPlan], g: _Graph, config: QuantConfig) -> None:
    """Integer activations read only by saturating ops get the union of those ops' live intervals.

    A Conv output read only by a HardSwish keeps its negative tail below -3 in the calibration
    statistics, although HardSwish maps all of it to 0: clamping the range there spends the
    codes on values that change the result (exact: the reader's output is unchanged).

    On the CPU target such a tensor is a quantization point the NPU placement does not have (the
    activation is fused there): onnxruntime needs a QuantizeLinear right after the Conv for
    QLinearConv. Its range is then chosen by MinMSE rather than by the preset's outlier-keeping
    percentile: the rare extremes of a pre-activation cost every other value resolution twice
    (here and after the activation). PP-OCRv4 rec A8W8: CER 0.069 with the percentile range,
    0.054 with MinMSE (float 0.039).
    """
    for t in tensors.values():
        if t.role != "activation" or not t.quant.is_integer or t.name in g.outputs or t.producer_quant is not None:
            continue
        readers = g.consumers.get(t.name, [])
        bounds = [_saturation_bounds(n, g) if n.input and n.input[0] == t.name and t.name not in n.input[1:] else None
                  for n in readers]
        if not readers or any(b is None for b in bounds):
            continue
        lows = [b[0] for b in bounds if b is not None]
        highs = [b[1] for b in bounds if b is not None]
        low = None if any(v is None for v in lows) else min(v for v in lows if v is not None)
        high = None if any(v is None for v in highs) else max(v for v in highs if v is not None)
        if low is not None or high is not None:
            t.limits = (low, high)
        if (runtime.integer_placement(config, t.quant) and t.quant.calibration == "percentile"
                and all(n.op_type not in runtime.CPU_OP_TYPES for n in readers)):
            t.quant = t.quant.with_(calibration="minmse")


def _all_inf(tensor: onnx.TensorProto) -> bool:
    if tensor.data_type not in FLOAT_TYPES:
        return False
    values = tensor_values(tensor)
    return values.size > 0 and bool(np.all(np.isinf(values)))


def _feeds_fused_activation(node, out: str, g: _Graph, selected: set[str], config: QuantConfig) -> bool:
    if node.op_type not in FUSIBLE_PRODUCERS or out in g.outputs:
        return False
    consumers = g.consumers.get(out, [])
    return (len(consumers) == 1 and consumers[0].op_type in _fused_activations(config)
            and consumers[0].name in selected)


def _is_depthwise(node: onnx.NodeProto, g: _Graph) -> bool:
    """One input and one output channel per group (multiplier 1), unlike runtime.float_conv_reason,
    which also counts channel multipliers above 1 (see the note there)."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in g.initializers:
        return False
    group = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == "group"), 1)
    dims = g.initializers[node.input[1]].dims
    return group > 1 and len(dims) >= 2 and dims[1] == 1 and dims[0] == group


def _channelwise_constant(name: str, g: _Graph) -> bool:
    """A constant that an NCHW tensor broadcasts per channel: a scalar, [C,1,1] or [1,C,1,1]."""
    tensor = g.initializers.get(name)
    if tensor is None:
        return False
    dims = list(tensor.dims)
    if all(d == 1 for d in dims):
        return True
    return len(dims) in (3, 4) and all(d == 1 for i, d in enumerate(dims) if i != len(dims) - 3)


def _per_channel_depthwise_inputs(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """Integer activations on a channel-wise path into depthwise convolutions go per channel.

    A tensor qualifies when each reader is a depthwise Conv (as its data input) or a channel-wise
    affine (Mul/Add/Sub/Div by a scalar or per-channel constant) whose own output qualifies: along
    such a path every value keeps its channel, so per-channel scales fold into the affine
    constants and finally into the depthwise weights — no extra cost on hardware.

    Unsigned activations stay per tensor: onnxruntime 1.31's CPU QDQ fusion turns the producer of
    a uint8 per-channel tensor into a QLinearConv/QLinearAdd that requires scalar output
    parameters, and the session fails to load (signed types are not fused there).
    """
    candidates = {
        name for name, t in tensors.items()
        if t.role == "activation" and t.quant.is_integer and not t.quant.format.startswith("u")
        and name not in g.outputs and g.rank.get(name) == 4
    }
    accepted: set[str] = set()

    def reader_ok(node: onnx.NodeProto, name: str) -> bool:
        if _is_depthwise(node, g):
            return node.input[0] == name and name not in node.input[1:]
        if node.op_type in ("Mul", "Add", "Sub", "Div") and len(node.input) == 2:
            other = node.input[1] if node.input[0] == name else node.input[0]
            if other == name or not _channelwise_constant(other, g) or (node.op_type in ("Sub", "Div") and node.input[0] != name):
                return False
            out = node.output[0]
            return out in accepted or (out not in tensors and out not in g.outputs)
        return False

    changed = True
    while changed:
        changed = False
        for name in sorted(candidates - accepted):
            readers = g.consumers.get(name, [])
            if readers and all(reader_ok(n, name) for n in readers):
                accepted.add(name)
                changed = True
    for t in tensors.values():
        # An int32 bias scale is input scale x weight scale: per channel now, along the bias.
        if t.role == "bias" and t.bias_of is not None and t.bias_of[0] in accepted:
            t.axis = 0
    for name in accepted:
        tensors[name].quant = tensors[name].quant.with_(per_channel=True)
        tensors[name].axis = 1
        # The affine's constant stays float: it folds into the per-channel requantization on
        # hardware, and onnxruntime's QDQ fusion would otherwise turn DQ→Mul→Q into a QLinearMul,
        # which rejects per-channel scales at session creation.
        for node in g.consumers.get(name, []):
            if node.op_type in ("Mul", "Add", "Sub", "Div"):
                for other in node.input:
                    if other != name and other in tensors and tensors[other].role == "weight":
                        del tensors[other]


def _dual_quant_nodes(tensors: dict[str, TensorPlan], producer_side: dict[str, tuple[TensorQuant, int | None]],
                      consumer_side: dict[str, dict[str, tuple[TensorQuant, int | None]]], g: _Graph) -> None:
    """Precision boundaries get both quantizers: the producer's, then the consumers' (spec §4.5).

    Without this, one quantizer per tensor serves every reader (the first consumer's format wins).
    With it, a tensor whose producer writes format P and some consumer reads format C != P is
    quantized P then C; consumers that read P take the value after the first quantizer, the
    others after the second. Graph outputs keep a single quantizer (their name carries one value).
    """
    for name, (pquant, paxis) in producer_side.items():
        tplan = tensors.get(name)
        if tplan is None or tplan.role != "activation" or name in g.outputs:
            continue
        readers = consumer_side.get(name, {})
        boundary = [(q, ax) for q, ax in readers.values() if (q, ax) != (pquant, paxis)]
        if not boundary:
            continue
        tplan.quant, tplan.axis = boundary[0]
        tplan.producer_quant, tplan.producer_axis = pquant, paxis
        tplan.producer_consumers = [n for n, qa in readers.items() if qa == (pquant, paxis)]
        log.debug("tensor %s: dual quant nodes %s -> %s", name, pquant.describe(), tplan.quant.describe())


def _apply_tensor_overrides(tensors: dict[str, TensorPlan], config: QuantConfig, g: _Graph) -> None:
    for name, quant in config.tensor_overrides.items():  # names checked by graph.check.check_config_names
        if name in tensors:
            plan = tensors[name]
            axis = plan.axis if (quant.format == plan.quant.format or quant.format in ("bfp", "mx")) else None
            if quant.is_integer and plan.role == "weight" and quant.per_channel:
                axis = plan.axis if plan.quant.per_channel else None
            tensors[name] = TensorPlan(name, plan.role, quant, axis=axis, bias_of=plan.bias_of, consumers=plan.consumers, producer=plan.producer)
        else:
            role: Role = "weight" if name in g.initializers else "activation"
            tensors[name] = TensorPlan(name, role, quant, consumers=[n.name for n in g.consumers.get(name, [])],
                                       producer=g.producer[name].name if name in g.producer else None)


def _apply_alignment(tensors: dict[str, TensorPlan], nodes: list[onnx.NodeProto], config: QuantConfig) -> None:
    """Concat inputs share the output's scale (AlignConcat); Slice outputs share the input's (AlignSlice)."""
    for node in nodes:
        if config.align_concat and node.op_type == "Concat" and node.output[0] in tensors:
            out = tensors[node.output[0]]
            for name in node.input:
                if name in tensors and tensors[name].role == "activation" and tensors[name].quant == out.quant:
                    tensors[name].share_with = out.name
        if config.align_slice and node.op_type == "Slice" and node.input[0] in tensors:
            for name in node.output:
                if name in tensors and tensors[name].quant == tensors[node.input[0]].quant:
                    tensors[name].share_with = node.input[0]
