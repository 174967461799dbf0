"""Plan: which tensor gets which format. A pure function of (prepared model, config).

:func:`make_plan` walks the selected nodes (:mod:`.select`) and gives each tensor they read or
write its role, format and axis (per-channel axis of an integer weight, block axis of BFP/MX),
then applies the post-rules (:mod:`.rules`). The axis helpers live here beside it.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import onnx

from ...config.schema import QuantConfig, TensorQuant
from ...graph.naming import check_node_names
from ...graph.ops import BIAS_INPUTS, DATA_INPUTS, ELTWISE_OPS, NO_OUTPUT_QUANT, RECURRENT, WEIGHT_INPUTS
from .. import runtime
from ...analysis.class_scores import score_float_tensors
from ..tails import TAIL_REASON, postprocessing_tail
from ..transformer import is_transformer
from .channel_axis import weight_channel_axis
from .rules import (
    _apply_alignment,
    _apply_tensor_overrides,
    _dual_quant_nodes,
    _keep_float,
    _linear_inputs_only,
    _per_channel_depthwise_inputs,
    _saturation_limits,
    _share_through_data_movement,
)
from .peaks import recurring_peaks
from .qdq_propagation import _requantize_after_float_transposes
from .scarce import scarce_ranges
from .thresholds import decision_thresholds
from .select import is_lookup_table, _cpu_skip_reason, _drop_isolated_cpu_nodes, configured_op_types, _feeds_fused_activation, _fused_activations, _Graph, _node_formats, _skip_reason
from .fp_blocks import dot_operands_only, fp_element_blocks
from .short_blocks import off_unit_axis
from .log_readers import fp_log_domain_dots
from .late_rules import late_float_rules
from .corners import orphan_int32_biases, passthrough_outputs, row_int32_biases, scalar_block_tensors
from .float_fusion import epilogue_boundaries
from .types import Plan, Role, TensorPlan

log = logging.getLogger(__name__)


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


def make_plan(model: onnx.ModelProto, config: QuantConfig) -> Plan:
    """Decide the format of every tensor of ``model``: a prepared model (every node named). A pure
    function: the model is read, never changed."""
    check_node_names(model)
    g = _Graph(model, subgraphs=config.quantize_subgraphs)
    op_types = configured_op_types(config)
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
            _skip_reason(node, g, config, op_types, quantized_tensors) or _cpu_skip_reason(node, config, selected_outputs, g))
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
        # A lookup table under the CPU's integer placement: the table alone, per row; the rows it
        # returns stay float (no integer reader pays for a quantizer there, select.is_lookup_table).
        integer = runtime.integer_placement(config, _node_formats(node, config)[0])
        table_only = is_lookup_table(node, g) and integer
        # A dot product a Loop/Scan runs at every step, under the CPU's integer placement: like a
        # recurrent layer, its weights are stored quantized and its activations (the step's input
        # and carried state) stay float: no integer kernel forms with the weights' DequantizeLinear
        # outside the body, and a state rounded at every step compounds (select._cpu_skip_reason).
        weights_only = integer and node.name in g.iterated
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
                    axis = weight_channel_axis(node, index, rank) if quant.per_channel else None
                    if table_only and index == 0:  # one scale per row: per slice along the Gather's axis
                        gather_axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                        quant, axis = quant.with_(per_channel=True, symmetric=True), gather_axis % rank
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
                if (node.op_type in RECURRENT or weights_only) and runtime.integer_placement(config, quant):
                    continue  # CPU target: a recurrent layer (or cell) runs float; only its weights are stored quantized
                axis = None
                if quant.format in ("bfp", "mx"):
                    default = quant.attr_dict.get("axis", 1)
                    if config.refine_block_axis:  # a weight computed at load (select.runs_at_load): the weight's blocks
                        axis = _block_axis(node, index, g.rank.get(name), at_load := g.made_at_load(name), default)
                        if not (_reduces(node, index) or at_load):
                            axis = off_unit_axis(axis, g.dims.get(name))
                    else:
                        axis = default
                add(name, "activation", quant, node, consumer=True, axis=axis, reducing=_reduces(node, index))
        if node.op_type in NO_OUTPUT_QUANT or table_only or weights_only:
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
                if config.refine_block_axis:
                    axis = off_unit_axis(axis, g.dims.get(out))
                if g.rank.get(out) == 1:
                    axis = 0
            add(out, "activation", quant, node, consumer=False, axis=axis)

    float_tensors = _keep_float(model, tensors, producer_side, consumer_side)
    float_tensors.update(epilogue_boundaries(tensors, g, selected, config, producer_side, consumer_side))  # float_fusion.py: bf16/fp16 epilogues
    if not config.quantize_postprocessing:  # class scores read by arg-max (analysis/class_scores.py)
        for name, reason in score_float_tensors(model).items():
            if tensors.pop(name, None) is not None:
                float_tensors.setdefault(name, reason)
                producer_side.pop(name, None)
                consumer_side.pop(name, None)
    for name, reason in late_float_rules(tensors, g, config).items():  # plan/late_rules.py
        float_tensors[name] = reason
        producer_side.pop(name, None)
        consumer_side.pop(name, None)
    if config.activation is not None and config.activation.is_integer and is_transformer(model):
        float_tensors.update(_linear_inputs_only(model, tensors, g, producer_side, consumer_side, config.activation))
    if config.fp_block_dot_operands_only or config.int_block_dot_operands_only:
        dots_only = dot_operands_only(tensors, g, fp=config.fp_block_dot_operands_only, integer=config.int_block_dot_operands_only)
        for name, reason in dots_only.items():  # fp_blocks.py: dot-product operands only
            float_tensors[name] = reason
            producer_side.pop(name, None)
            consumer_side.pop(name, None)
    for name, reason in scalar_block_tensors(tensors, g.rank).items():  # corners.py: no block axis
        float_tensors[name] = reason
        producer_side.pop(name, None)
        consumer_side.pop(name, None)
    for name, reason in row_int32_biases(tensors, {n: tuple(i.dims) for n, i in g.initializers.items()}).items():  # corners.py
        float_tensors[name] = reason
    for name, reason in passthrough_outputs(tensors, g.inputs, g.outputs).items():  # corners.py: no producer to rename
        float_tensors[name] = reason
        producer_side.pop(name, None)
        consumer_side.pop(name, None)
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
    decision_thresholds(tensors, g)  # thresholds.py: a compared tensor's range reaches the constant
    recurring_peaks(tensors, g)  # peaks.py: weighted layers' operands/results keep recurring peaks
    scarce_ranges(tensors, g)  # scarce.py: 16-bit activations of a few values per sample get a margin
    float_tensors.update(fp_element_blocks(tensors, g, config.mx_weight_scale_search, config.mx_activation_scale_search,
                                            keep=config.tensor_overrides))  # fp_blocks.py: MX weights' exponents, MXFP weights' axis, biases float
    float_tensors.update(fp_log_domain_dots(tensors, g))  # log_readers.py: a Log's first dot products float under MXFP
    float_tensors.update(orphan_int32_biases(tensors))  # corners.py: an int32 bias needs both scales
    plan = Plan(tensors=tensors, nodes=[n.name for n in selected], skipped_nodes=skipped,
                float_tensors={k: v for k, v in float_tensors.items() if k not in tensors})
    log.info("plan: %d nodes, %d tensors (%s)", len(plan.nodes), len(tensors), ", ".join(f"{k} ×{v}" for k, v in plan.summary().items()))
    return plan
