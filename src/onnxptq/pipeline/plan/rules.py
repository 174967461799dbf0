"""The plan's post-rules: decisions made on the whole first plan rather than node by node.

Tensors that stay float (attention-mask sentinels, transformer placement), DualQuantNodes, per-channel
depthwise inputs, tensor-wise overrides, Concat/Slice alignment, shared scales through data movement
(CPU target), requantization after float transposes and saturation limits. Each rule is a function
over the tensor table that :func:`.assign.make_plan` calls in a fixed order.
"""

from __future__ import annotations

import dataclasses
import logging

import onnx

from ...config.schema import ConfigError, QuantConfig, TensorQuant, suggest
from ...graph.external import tensor_values
from ...graph.sentinels import sentinel_tensors
from ...graph.decay import near_one_power_float_tensors
from ...graph.logdomain import log_domain_float_tensors
from ...graph.recurrent_state import recurrent_state_float_tensors
from ...graph.shape_values import shape_value_float_tensors
from ...graph.structure import structure_float_tensors
from .. import runtime
from ..transformer import LINEAR_OPS, attention_value_products, short_integer_grid, transformer_float_tensors
from .channel_axis import override_channel_axis
from .select import _Graph, depthwise_conv
from .types import Role, TensorPlan

log = logging.getLogger(__name__)

def _keep_float(model: onnx.ModelProto, tensors: dict[str, TensorPlan], producer_side: dict, consumer_side: dict) -> dict[str, str]:
    """Drop from the plan the tensors that stay float, and say why (``Plan.float_tensors``):
    attention-mask sentinels (``graph/sentinels.py``: a -3.4e38 or -inf value never sets a range)
    the transformer placement rules (``pipeline/transformer.py``: inside a decomposed GELU,
    the residual sums LayerNorm reads) and numerics by structure (``graph/structure.py``: inside
    written-out normalizations and activations, docs/structure.md), a Log's linear-domain input
    (``graph/logdomain.py``), a power of a base near 1 (``graph/decay.py``), a recurrent state
    carried across calls (``graph/recurrent_state.py``) and shape arithmetic written in float
    (``graph/shape_values.py``).
    A ``tensor_overrides`` entry naming one still quantizes
    it (applied after this): the user's explicit choice wins."""
    why: dict[str, str] = {}
    for name in sentinel_tensors(model):
        if tensors.pop(name, None) is not None:
            why[name] = "attention-mask sentinel"
    for name in transformer_float_tensors(model):
        if tensors.pop(name, None) is not None:
            why[name] = "transformer placement (GELU inside or residual sum)"
    for name, reason in structure_float_tensors(model).items():  # numerics by structure (graph/structure.py)
        if tensors.pop(name, None) is not None:
            why.setdefault(name, reason)
    for name, reason in log_domain_float_tensors(model).items():  # a Log's linear-domain input (graph/logdomain.py)
        if tensors.pop(name, None) is not None:
            why.setdefault(name, reason)
    for name, reason in near_one_power_float_tensors(model).items():  # a power of a base near 1 (graph/decay.py)
        if tensors.pop(name, None) is not None:
            why.setdefault(name, reason)
    for name, reason in recurrent_state_float_tensors(model).items():  # a state carried across calls (graph/recurrent_state.py)
        if tensors.pop(name, None) is not None:
            why.setdefault(name, reason)
    for name, reason in shape_value_float_tensors(model).items():  # shape arithmetic in float (graph/shape_values.py)
        if tensors.pop(name, None) is not None:
            why.setdefault(name, reason)
    for name in why:
        producer_side.pop(name, None)
        consumer_side.pop(name, None)
    if why:
        log.info("plan: %d tensors stay float (attention masks, normalization/activation insides, residual sums): %s",
                 len(why), ", ".join(sorted(why)[:6]))
    return why


def _linear_inputs_only(model: onnx.ModelProto, tensors: dict[str, TensorPlan], g: _Graph, producer_side: dict,
                        consumer_side: dict, activation: TensorQuant) -> dict[str, str]:
    """Integer activations on a transformer graph (``pipeline/transformer.py``): keep only the
    activations a MatMul/Gemm reads, read quantized by those readers alone; the rest stay float.
    With an 8-bit (or shorter) grid the attention ``probs·V`` MatMuls read both operands float:
    an 8-bit grid over [0, max p] rounds the many probabilities near 1/tokens to a code or two."""
    kinds = {n.name: n.op_type for n in g.nodes}
    float_readers = attention_value_products(model) if short_integer_grid(activation.format) else set()
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "activation":
            continue
        linear = [c for c in t.consumers if kinds.get(c) in LINEAR_OPS and c not in float_readers]
        if not linear:
            del tensors[name]
            producer_side.pop(name, None)
            consumer_side.pop(name, None)
            pv = any(c in float_readers for c in t.consumers)
            why[name] = ("transformer placement (8-bit integer activations: the attention probs·V product reads float)" if pv
                         else "transformer placement (integer activations: MatMul/Gemm inputs only)")
        elif (len(linear) != len(t.consumers) or any(r.op_type not in LINEAR_OPS or r.name in float_readers for r in g.consumers.get(name, []))
              or name in g.outputs):
            t.consumers, t.exclusive = linear, True
    if why:
        log.info("plan: %d activations stay float (transformer graph, integer activations: MatMul/Gemm inputs only%s)", len(why),
                 f"; {len(float_readers)} probs·V products float" if float_readers else "")
    return why


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


def _is_depthwise(node: onnx.NodeProto, g: _Graph) -> bool:
    """One input and one output channel per group (multiplier 1), unlike runtime.float_conv_reason,
    which also counts channel multipliers above 1 (see the note there)."""
    return depthwise_conv(node, g, multiplier_one=True)


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
        if tplan.exclusive:  # the other readers take the float value (e.g. vector ops under a block format)
            readers = {n: qa for n, qa in readers.items() if n in tplan.consumers}
        boundary = [(q, ax) for q, ax in readers.values() if (q, ax) != (pquant, paxis)]
        if not boundary:
            continue
        tplan.quant, tplan.axis = boundary[0]
        tplan.producer_quant, tplan.producer_axis = pquant, paxis
        tplan.producer_consumers = [n for n, qa in readers.items() if qa == (pquant, paxis)]
        log.debug("tensor %s: dual quant nodes %s -> %s", name, pquant.describe(), tplan.quant.describe())


def _apply_tensor_overrides(tensors: dict[str, TensorPlan], config: QuantConfig, g: _Graph) -> None:
    """The user's ``tensor_overrides`` (and repair's steps) over the plan. Why the axis rule: a per-channel
    integer weight keeps the plan's channel axis, and a user's other ``axis`` is refused (onnxruntime's
    QLinearConv / MatMulIntegerToFloat take one scale per output channel and fail at run time on any
    other; it used to be dropped silently); one the plan had per tensor, or kept float (so it had none),
    takes the axis its readers imply, as the plan would have given it (the override of a float-kept Conv
    weight to int8 per channel made one scale for the whole tensor: rnnweights' note)."""
    for name, quant in config.tensor_overrides.items():  # names checked by graph.check.check_config_names
        if name in tensors:
            plan = tensors[name]
            axis = plan.axis if (quant.format == plan.quant.format or quant.format in ("bfp", "mx")) else None
            if quant.is_integer and plan.role == "weight" and quant.per_channel:
                if not plan.quant.per_channel:
                    axis = override_channel_axis(name, quant, g)
                elif quant.axis is not None and override_channel_axis(name, quant, g) != plan.axis:
                    readers = ", ".join(f"{n.op_type} {n.name!r}" for n in g.consumers.get(name, []))
                    raise ConfigError(f"tensor_overrides[{name!r}]: axis {quant.axis} is not the weight's output-channel axis "
                                      f"{plan.axis}, along which its integer reader ({readers}) takes one scale per channel in "
                                      f"onnxruntime; leave 'axis' out, or give {plan.axis}")
                else:
                    axis = plan.axis
            # Only the quantizer changes: what earlier rules decided about the tensor (its readers,
            # ``exclusive`` under the transformer placement) stays (repair's 16-bit step overrides
            # planned tensors: algorithms/step_up.py).
            tensors[name] = dataclasses.replace(plan, quant=quant, axis=axis)
        else:
            role: Role = "weight" if name in g.initializers else "activation"
            axis = override_channel_axis(name, quant, g) if (role == "weight" and quant.is_integer and quant.per_channel) else None
            tensors[name] = TensorPlan(name, role, quant, consumers=[n.name for n in g.consumers.get(name, [])],
                                       producer=g.producer[name].name if name in g.producer else None, axis=axis)


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
