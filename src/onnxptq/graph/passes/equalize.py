"""Cross-layer equalization (Nagel et al., ICCV 2019, "Data-Free Quantization Through Weight
Equalization and Bias Correction"): rescale consecutive layers so that one weight scale per tensor
fits every channel.

Why: after BatchNorm folding, the output channels of a layer can differ in range by orders of
magnitude; with one scale per weight tensor the small channels round to a handful of levels (or to
zero). For a head layer ``y = f(W1 x + b1)`` followed by a tail ``z = W2 y + b2``, and a positive
per-channel ``s``, ``W1 ← diag(s) W1``, ``b1 ← s b1``, ``W2 ← W2 diag(1/s)`` leaves ``z`` unchanged
exactly when ``f(s x) = s f(x)`` for every channel (positive homogeneity). With
``s_i = sqrt(r2_i / r1_i)`` (``r1_i`` the head's output-channel range, ``r2_i`` the tail's
input-channel range) both ranges become ``sqrt(r1_i r2_i)``: the channels of each tensor move
toward one range.

What lies between head and tail is checked op by op (:data:`HOMOGENEOUS`, :func:`_link`); a chain
with anything else is left alone, so the float model's outputs change by float rounding only:

* scaled through: Relu, LeakyRelu, PRelu (``max(sx, a sx) = s max(x, a x)``), Clip with bounds
  only at 0 or ±inf, MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool (per-channel maps
  that commute with a positive per-channel factor), Pad (constant 0, no padding of the channel or
  batch axis), Mul / Div by a constant (elementwise), Add / Sub of a constant (the constant is
  scaled with the channel), Identity, Gather with constant indices on a spatial axis of a conv
  output (it picks positions; when it leaves [N, C] the channels are last, where a Gemm / MatMul
  tail reads them: recurrent heads picking one time step);
* never scaled through: HardSwish (``hardswish(s x) = s x relu6(s x + 3)/6 ≠ s hardswish(x)``
  wherever ``|x| < 3``: the kink positions do not scale, so no ``s ≠ 1`` is exact for every
  input), Sigmoid, HardSigmoid, Tanh, Softmax, Gelu, Elu, Selu, Softplus (not homogeneous), Clip
  with a finite non-zero bound such as ReLU6 (the paper replaces it by ReLU; that changes the
  float model, so we do not), Reshape / Transpose / Flatten (they move the channel axis), and any
  op with a second non-constant input (a residual Add: the other branch would need the same
  scale).

Pairs: Conv (any group) or Gemm / MatMul with constant weights as head; Conv with a matching group
structure (dense, grouped or depthwise) or Gemm / MatMul as tail, over a chain of single-consumer
tensors, in every graph of the model (If/Loop/Scan bodies too: silero VAD holds all its layers in
an If branch). A Conv → depthwise Conv → Conv triple is two pairs sharing the depthwise layer, equalized
in turn, ``steps`` rounds (−1: until the largest relative scale change of a round is below
``total_layer_diff_threshold``, at most :data:`MAX_STEPS` rounds).

Bias absorption, where it is exact: when the chain is affine per channel (no Relu-like op, no
padding) and the tail has no spatial padding, the head's bias is moved into the tail's bias
(``W2 (W1 x + b1) = W2 W1 x + W2 b1``), which takes a constant offset out of the quantized tensor
between them. Through Relu it is exact only with a proven lower bound of the pre-activation (the
paper's β − 3γ from BatchNorm statistics is a 3σ rule, not a bound, and the statistics are gone once
BatchNorm is folded), so it is not done there.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxptq.config.schema import EqualizationOptions
from onnxptq.graph.passes._common import (
    collect_names,
    constant_array,
    is_onnx_domain,
    onnx_nodes,
    run_passes,
    set_node_constant,
)

log = logging.getLogger(__name__)

#: rounds at most when ``steps`` is −1 (the reference tool's bound)
MAX_STEPS = 20
#: with ``scale_append_bias``, |bias| / BIAS_SHRINK joins the head's channel range, so a channel
#: whose bias dominates its weights is not scaled up into a large activation offset
BIAS_SHRINK = 5.0
#: ops that pass a positive per-channel scale through unchanged (constants handled in ``_link``)
HOMOGENEOUS = frozenset({"Relu", "LeakyRelu", "PRelu", "Identity", "MaxPool", "AveragePool", "GlobalAveragePool",
                         "GlobalMaxPool", "Clip", "Pad", "Mul", "Div", "Add", "Sub"})


@dataclass
class _Layer:
    """A weight layer's view for equalization: its node, kind, and where its channels live."""

    node: ir.Node
    kind: str  # "conv" | "gemm" | "matmul"
    weight: np.ndarray
    bias: np.ndarray | None
    group: int = 1
    trans_b: bool = False

    @property
    def out_channels(self) -> int:
        if self.kind == "conv":
            return self.weight.shape[0]
        return self.weight.shape[0] if self.trans_b else self.weight.shape[1]

    @property
    def in_channels(self) -> int:
        if self.kind == "conv":
            return self.weight.shape[1] * self.group
        return self.weight.shape[1] if self.trans_b else self.weight.shape[0]

    def out_view(self) -> np.ndarray:
        """Weights as [out channel, everything else]."""
        if self.kind == "conv":
            return self.weight.reshape(self.weight.shape[0], -1)
        return self.weight if self.trans_b else self.weight.T

    def out_range(self) -> np.ndarray:
        return np.abs(self.out_view()).max(axis=1)

    def in_range(self) -> np.ndarray:
        """max |w| over the weights that read each input channel."""
        w = np.abs(self.weight)
        if self.kind != "conv":
            return (w.max(axis=0) if self.trans_b else w.max(axis=1))
        c_out, cpg = w.shape[0], w.shape[1]
        per = w.reshape(self.group, c_out // self.group, cpg, -1).max(axis=(1, 3))  # [group, cpg]
        return per.reshape(-1)

    def scale_out(self, s: np.ndarray) -> None:
        if self.kind == "conv":
            self.weight = self.weight * s.reshape(-1, *([1] * (self.weight.ndim - 1)))
        else:
            self.weight = self.weight * (s.reshape(-1, 1) if self.trans_b else s.reshape(1, -1))
        if self.bias is not None:
            self.bias = self.bias * s if self.kind != "gemm" else _scale_last(self.bias, s)

    def scale_in(self, s: np.ndarray) -> None:
        """Divide the weights reading input channel i by s_i."""
        if self.kind == "conv":
            c_out, cpg = self.weight.shape[0], self.weight.shape[1]
            inv = (1.0 / s).reshape(self.group, 1, cpg, *([1] * (self.weight.ndim - 2)))
            w = self.weight.reshape(self.group, c_out // self.group, cpg, *self.weight.shape[2:]) * inv
            self.weight = w.reshape(self.weight.shape)
        else:
            self.weight = self.weight / (s.reshape(1, -1) if self.trans_b else s.reshape(-1, 1))


def _scale_last(c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Gemm's C scaled along its last (output-channel) axis, broadcast up to it when needed."""
    full = np.broadcast_to(c, np.broadcast_shapes(c.shape, (s.size,)))
    return full * s


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return attr.as_int() if attr is not None else default


def _layer(node: ir.Node) -> _Layer | None:
    """The equalizable view of ``node``, or None (non-constant or non-float weights, odd shapes)."""
    if not is_onnx_domain(node.domain) or node.op_type not in ("Conv", "Gemm", "MatMul") or len(node.inputs) < 2:
        return None
    weight = constant_array(node.inputs[1])
    if weight is None or weight.dtype.kind != "f":
        return None
    bias = None
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        bias = constant_array(node.inputs[2])
        if bias is None or bias.dtype.kind != "f":
            return None
    w = weight.astype(np.float64)
    b = None if bias is None else bias.astype(np.float64)
    if node.op_type == "Conv":
        if w.ndim < 3:
            return None
        group = _int_attr(node, "group", 1)
        if group < 1 or w.shape[0] % group:
            return None
        return _Layer(node, "conv", w, b, group=group)
    if w.ndim != 2:
        return None
    if node.op_type == "Gemm":
        return _Layer(node, "gemm", w, b, trans_b=bool(_int_attr(node, "transB", 0)))
    return _Layer(node, "matmul", w, None)


def _sole_consumer(value: ir.Value) -> tuple[ir.Node, int] | None:
    if value.is_graph_output():
        return None
    uses = list(value.uses())
    if len(uses) != 1:
        return None
    node, index = uses[0][0], uses[0][1]
    return node, index


def _finite_zero_or_inf(node: ir.Node, index: int, attr: str, bad_default: bool) -> bool:
    """True when Clip's bound (input ``index`` or attribute ``attr`` of opset < 11) is 0, ±inf or absent."""
    value = node.inputs[index] if index < len(node.inputs) else None
    if value is not None:
        bound = constant_array(value)
        if bound is None or bound.size != 1:
            return False
        v = float(bound.reshape(-1)[0])
    elif attr in node.attributes:
        v = node.attributes[attr].as_float()
    else:
        return not bad_default
    return v == 0.0 or math.isinf(v)


@dataclass
class _Link:
    """One op of the chain between head and tail, and the constant it needs rescaled (if any)."""

    node: ir.Node
    const_index: int | None = None
    affine: bool = True


def _gather_link(node: ir.Node, index: int, axis_kind: str, rank: int | None) -> tuple[_Link, str, int] | None:
    """A ``Gather`` with constant indices along a spatial axis of a convolution's output, as a chain
    link: it selects positions, never mixes channels, so a per-channel scale passes through it
    exactly (and a per-channel bias stays per channel). Returns the link, the channel layout after
    it (``"flat"``: rank 2, channels last, where a Gemm / MatMul tail reads them) and the new rank.

    Why: recurrent heads read the last conv feature map by picking one time step (silero VAD:
    ``Conv → Relu → Gather(axis 2, index 0) → Gemm``, the LSTM's input projection), and without
    this link the conv's output channels, 200× apart in range, are never equalized.
    """
    if (not is_onnx_domain(node.domain) or node.op_type != "Gather" or index != 0 or len(node.outputs) != 1
            or axis_kind != "conv" or rank is None):
        return None
    indices = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    if indices is None or indices.dtype.kind not in "iu":
        return None
    axis = _int_attr(node, "axis", 0)
    axis = axis + rank if axis < 0 else axis
    if axis < 2 or axis >= rank:
        return None  # the batch or the channel axis
    new_rank = rank - 1 + indices.ndim
    if new_rank < 2:
        return None
    return _Link(node), ("flat" if new_rank == 2 else "conv"), new_rank


def _link(node: ir.Node, index: int, axis_kind: str) -> _Link | None:
    """``node`` (reached through its input ``index``) as a chain link, or None when it does not
    commute with a positive per-channel scale (see the module docstring for each op).

    ``axis_kind`` is ``"conv"`` (channels on axis 1), ``"gemm"`` / ``"matmul"`` (channels last) or
    ``"flat"`` (a conv's channels moved last by a :func:`_gather_link`): there a constant to add
    would need its own per-channel rescaling in the new layout, so Add/Sub are not passed."""
    if not is_onnx_domain(node.domain) or node.op_type not in HOMOGENEOUS or index != 0 or len(node.outputs) != 1:
        return None
    op = node.op_type
    if op in ("Add", "Sub") and axis_kind == "flat":
        return None
    spatial = op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Pad")
    if spatial and axis_kind != "conv":
        return None  # the channel axis of Gemm/MatMul outputs is the last one, pools act on axis 1
    if op in ("Mul", "Div", "Add", "Sub"):
        if len(node.inputs) != 2 or constant_array(node.inputs[1]) is None:
            return None
        return _Link(node, 1 if op in ("Add", "Sub") else None)
    if op == "Clip":
        ok = _finite_zero_or_inf(node, 1, "min", False) and _finite_zero_or_inf(node, 2, "max", False)
        return _Link(node, affine=False) if ok else None
    if op == "PRelu":
        return _Link(node, affine=False) if len(node.inputs) == 2 and constant_array(node.inputs[1]) is not None else None
    if op == "Pad":
        mode = node.attributes.get("mode")
        if mode is not None and mode.as_string() != "constant":
            return None
        pads = constant_array(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
        if pads is None:
            pads_attr = node.attributes.get("pads")
            pads = np.array(pads_attr.as_ints()) if pads_attr is not None else None
        if pads is None or len(node.inputs) > 3 and node.inputs[3] is not None:
            return None  # unknown pads, or an axes input
        rank = len(pads) // 2
        if rank < 2 or pads[0] or pads[1] or pads[rank] or pads[rank + 1]:
            return None
        value = node.inputs[2] if len(node.inputs) > 2 else None
        if value is not None:
            v = constant_array(value)
            if v is None or np.any(v != 0):
                return None
        elif "value" in node.attributes and node.attributes["value"].as_float() != 0.0:
            return None
        return _Link(node, affine=False)
    if op == "AveragePool":
        # count_include_pad with padding averages in zeros: not affine (a constant does not pass).
        padded = any(_int_attr(node, "count_include_pad", 0) and v for v in
                     (node.attributes["pads"].as_ints() if "pads" in node.attributes else []))
        auto = node.attributes.get("auto_pad")
        padded = padded or (auto is not None and auto.as_string() not in ("NOTSET", "VALID") and
                            bool(_int_attr(node, "count_include_pad", 0)))
        return _Link(node, affine=not padded)
    return _Link(node, affine=op not in ("Relu", "LeakyRelu"))


def _tail_accepts(head: _Layer, tail: _Layer, index: int, axis_kind: str | None = None) -> bool:
    if index != 0:
        return False
    if (axis_kind or head.kind) == "conv":
        return tail.kind == "conv" and tail.in_channels == head.out_channels
    if tail.kind == "conv":
        return False
    if tail.kind == "gemm" and _int_attr(tail.node, "transA", 0):
        return False
    return tail.in_channels == head.out_channels


@dataclass
class _Pair:
    head: _Layer
    tail: _Layer
    links: list[_Link] = field(default_factory=list)


def find_pairs(graph: ir.Graph) -> list[_Pair]:
    """Every (head, chain, tail) of ``graph`` that equalization may rescale exactly, in graph order."""
    layers: dict[int, _Layer] = {}
    for node in onnx_nodes(graph, "Conv", "Gemm", "MatMul"):
        layer = _layer(node)
        if layer is not None:
            layers[id(node)] = layer
    pairs = []
    for node in onnx_nodes(graph, "Conv", "Gemm", "MatMul"):
        head = layers.get(id(node))
        if head is None:
            continue
        value, links = node.outputs[0], []
        axis_kind, rank = head.kind, (head.weight.ndim if head.kind == "conv" else None)
        while True:
            step = _sole_consumer(value)
            if step is None:
                break
            consumer, index = step
            tail = layers.get(id(consumer))
            if tail is not None:
                if _tail_accepts(head, tail, index, axis_kind) and tail.node is not head.node:
                    pairs.append(_Pair(head, tail, links))
                break
            gathered = _gather_link(consumer, index, axis_kind, rank)
            if gathered is not None:
                link, axis_kind, rank = gathered
            else:
                link = _link(consumer, index, axis_kind)
            if link is None:
                break
            links.append(link)
            value = consumer.outputs[0]
    return pairs


def _scales(pair: _Pair, opts: EqualizationOptions) -> np.ndarray:
    """Per-channel s with head ×s, tail ÷s; 1 where a range is 0 or both are below the threshold."""
    r0 = pair.head.out_range()
    if opts.scale_append_bias and pair.head.bias is not None:
        r0 = np.maximum(r0, np.abs(np.broadcast_to(pair.head.bias, np.broadcast_shapes(pair.head.bias.shape, r0.shape)).reshape(-1, r0.size)).max(0) / BIAS_SHRINK)
    r1 = pair.tail.in_range()
    s = np.ones_like(r0)
    ok = (r0 > 0) & (r1 > 0) & np.isfinite(r0) & np.isfinite(r1)
    if opts.scale_use_threshold:
        ok &= (r0 + r1) >= opts.weight_threshold
    s[ok] = np.sqrt(r1[ok] / r0[ok])
    return s


def _channel_shape(kind: str, const: np.ndarray, rank: int, channels: int) -> tuple[int, ...]:
    """Shape of a per-channel factor that broadcasts against a constant of an output of ``rank``."""
    if kind == "conv":
        return (channels,) + (1,) * (max(rank, const.ndim) - 2)
    return (channels,)


class EqualizePass(ir.passes.InPlacePass):
    """Cross-layer equalization of every graph of the model, If/Loop/Scan bodies included (see
    the module docstring): a model whose layers all live in a body (silero VAD computes inside an
    If) otherwise gets no equalization at all, and its per-tensor weights keep channel ranges
    200x apart."""

    def __init__(self, options: EqualizationOptions | None = None) -> None:
        super().__init__()
        self.options = options or EqualizationOptions()

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for graph in list(model.graphs()):
            modified = self._equalize_graph(model, graph) or modified
        return ir.passes.PassResult(model, modified=modified)

    def _equalize_graph(self, model: ir.Model, graph: ir.Graph) -> bool:
        """Equalize the pairs whose nodes live in ``graph`` itself; True when any was found."""
        opts = self.options
        pairs = find_pairs(graph)
        if not pairs:
            return False
        # Each pair's constants (Add/Sub operands) are scaled cumulatively; keep their arrays here.
        consts: dict[int, np.ndarray] = {}
        for p in pairs:
            for link in p.links:
                if link.const_index is not None:
                    consts[id(link.node)] = constant_array(link.node.inputs[link.const_index]).astype(np.float64)  # type: ignore[union-attr]
        rounds = MAX_STEPS if opts.steps == -1 else int(opts.steps)
        change = math.inf
        done = 0
        for done in range(1, rounds + 1):
            change = 0.0
            for p in pairs:
                s = _scales(p, opts)
                p.head.scale_out(s)
                p.tail.scale_in(s)
                for link in p.links:
                    if link.const_index is not None:
                        c = consts[id(link.node)]
                        rank = p.head.weight.ndim if p.head.kind == "conv" else max(c.ndim, 1)
                        consts[id(link.node)] = c * s.reshape(_channel_shape(p.head.kind, c, rank, s.size))
                change = max(change, float(np.abs(np.log(s)).max()) if s.size else 0.0)
            if opts.steps == -1 and change < opts.total_layer_diff_threshold:
                break
        absorbed = self._absorb(pairs) if opts.absorb_bias else 0
        self._write(graph, model, pairs, consts)
        log.info("cross-layer equalization%s: %d layer pair(s), %d round(s), last max |log s| %.3g, %d bias(es) absorbed",
                 "" if graph is model.graph else f" in body {graph.name!r}", len(pairs), done, change, absorbed)
        return True

    @staticmethod
    def _absorb(pairs: list[_Pair]) -> int:
        """Move the head bias into the tail bias where that is exact (see the module docstring)."""
        count = 0
        for p in pairs:
            head, tail = p.head, p.tail
            if head.bias is None or head.kind == "gemm" or not all(link.affine and link.const_index is None for link in p.links):
                continue
            if any(link.node.op_type in ("Mul", "Div") for link in p.links):
                continue  # the offset would be scaled on its way; kept simple and exact
            if tail.kind == "conv":
                pads = tail.node.attributes.get("pads")
                auto = tail.node.attributes.get("auto_pad")
                if (pads is not None and any(pads.as_ints())) or (auto is not None and auto.as_string() not in ("NOTSET", "VALID")):
                    continue
                cpg = tail.weight.shape[1]
                b = head.bias.reshape(tail.group, 1, cpg)
                w = tail.weight.reshape(tail.group, tail.weight.shape[0] // tail.group, cpg, -1).sum(axis=3)
                shift = (w * b).sum(axis=2).reshape(-1)
            elif tail.kind == "gemm":
                alpha = tail.node.attributes["alpha"].as_float() if "alpha" in tail.node.attributes else 1.0
                wt = tail.weight.T if tail.trans_b else tail.weight
                shift = alpha * (head.bias @ wt)
                beta = tail.node.attributes["beta"].as_float() if "beta" in tail.node.attributes else 1.0
                if beta == 0.0:
                    continue
                shift = shift / beta
            else:
                continue  # MatMul has no bias input to take the offset
            base = np.zeros(shift.shape) if tail.bias is None else tail.bias
            if tail.kind == "gemm" and tail.bias is not None and tail.bias.ndim == 2 and tail.bias.shape[0] != 1:
                continue
            tail.bias = (base.reshape(-1) + shift).reshape(base.shape if tail.bias is not None else shift.shape)
            head.bias = np.zeros_like(head.bias)
            count += 1
        return count

    @staticmethod
    def _write(graph: ir.Graph, model: ir.Model, pairs: list[_Pair], consts: dict[int, np.ndarray]) -> None:
        names = collect_names(model)
        written: set[int] = set()
        for p in pairs:
            for layer in (p.head, p.tail):
                if id(layer.node) in written:
                    continue
                written.add(id(layer.node))
                dtype = constant_array(layer.node.inputs[1]).dtype  # type: ignore[union-attr]
                set_node_constant(graph, layer.node, 1, layer.weight.astype(dtype), names, "cle")
                if layer.bias is not None:
                    set_node_constant(graph, layer.node, 2, layer.bias.astype(dtype), names, "cle")
            for link in p.links:
                if link.const_index is not None and id(link.node) in consts:
                    original = constant_array(link.node.inputs[link.const_index])
                    set_node_constant(graph, link.node, link.const_index, consts.pop(id(link.node)).astype(original.dtype),  # type: ignore[union-attr]
                                      names, "cle")


def equalize(model: onnx.ModelProto, options: EqualizationOptions | None = None) -> onnx.ModelProto:
    """Return a cross-layer-equalized copy of ``model`` (the input is not modified)."""
    return run_passes(model, EqualizePass(options), RemoveUnusedNodesPass())
