"""Outlier channel splitting (Zhao et al., ICML 2019, "Improving Neural Network Quantization without
Retraining using Outlier Channel Splitting"): duplicate the input channels that hold a layer's
outlier weights, and share each outlier between the copies, so one weight scale per tensor is set
by the bulk of the weights instead of by a handful of them.

Why: with one scale per weight tensor, a single weight 30× larger than the others sets the grid
step, and the bulk rounds to a few levels or to zero (PP-OCRv4 rec: two pointwise convolutions
with diagonal weights of 58 and 43, by their place identity branches re-parameterized into them,
against median channel maxima of 1.6 and 1.1; per-tensor int8 SQNR 10.8 and 9.4 dB). Cross-layer equalization cannot
help where the layer before is followed by HardSwish (not positively homogeneous), and clipping
the outlier changes the float function by far more than rounding does.

How, exactly in float: for a layer ``y = W x`` (Conv with group 1, Gemm, MatMul with a constant
weight) and input channel ``i``, ``W[:, i] x_i = Σ_k W_k[:, i] x_i`` for any split
``W[:, i] = Σ_k W_k[:, i]``. The activation channel is duplicated with a ``Gather`` on the channel
axis (indices ``0..C-1`` followed by the duplicated channels), and the weight gains one input
channel per extra copy. The Gather is data movement: integer runtimes run it on the quantized
values with the input's scale (onnxruntime drops its Q/DQ), so the cost is the extra columns:
at most ``expand_ratio`` more input channels, i.e. that fraction more MACs in that layer.

Which split: a threshold ``T`` (the tensor's new max |w|) is the smallest whose extra channels fit
the budget ``floor(expand_ratio · C_in)``; every weight with ``|w| > T`` becomes ``n = ⌈|w|/T⌉``
pieces: ``n − 1`` pieces of exactly ``±T`` and the remainder. The pieces equal to the tensor's
max sit on a symmetric min-max grid exactly (``±q_max`` codes), so only the remainder rounds: the
split weight keeps the error of one rounding, not ``n`` (the paper's equal halves would round
identically ``n`` times). Weights ``≤ T`` stay in the first copy untouched. A layer is split only
when that lowers its max |w| at least ``min_gain`` times (default 4, two bits: on rec the layers
that gain less cost Gathers and MACs and buy no accuracy, bench/RESULTS.md).

Not split: grouped and depthwise convolutions (a duplicated channel would break the group
structure; their per-tensor imbalance is what equalization handles), weights read by more than one
node, ConvTranspose, Gemm with ``transA``. Output-channel outliers are not split: duplicating an
output channel needs an Add before the following nonlinearity, an extra op on every pixel; an
outlier is always also in some input channel, which is split instead.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxptq.config.schema import OutlierSplitOptions
from onnxptq.graph.passes._common import (
    collect_names,
    constant_array,
    make_initializer,
    onnx_nodes,
    run_passes,
    set_node_constant,
    unique_name,
)

log = logging.getLogger(__name__)


@dataclass
class _Target:
    """A layer whose input channels may be split: the weight as [C_out-ish, C_in, rest…] view."""

    node: ir.Node
    weight: np.ndarray  # the stored weight
    in_axis: int  # the weight axis indexed by the input channel
    act_axis: int  # the activation axis of the input channel (for the Gather)


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return attr.as_int() if attr is not None else default


def _target(node: ir.Node) -> _Target | None:
    """``node`` as a split target, or None (see the module docstring for what is left alone)."""
    if len(node.inputs) < 2 or node.inputs[0] is None or constant_array(node.inputs[0]) is not None:
        return None
    value = node.inputs[1]
    weight = constant_array(value)
    if weight is None or weight.dtype.kind != "f" or len(value.uses()) != 1:
        return None
    if node.op_type == "Conv":
        if weight.ndim < 3 or _int_attr(node, "group", 1) != 1:
            return None
        return _Target(node, weight, in_axis=1, act_axis=1)
    if weight.ndim != 2:
        return None
    if node.op_type == "Gemm":
        if _int_attr(node, "transA", 0):
            return None
        return _Target(node, weight, in_axis=1 if _int_attr(node, "transB", 0) else 0, act_axis=1)
    return _Target(node, weight, in_axis=0, act_axis=-1)  # MatMul: A[..., K] @ B[K, N]


def _column_max(weight: np.ndarray, in_axis: int) -> np.ndarray:
    """max |w| over the weights that read each input channel."""
    w = np.moveaxis(np.abs(weight.astype(np.float64)), in_axis, 0)
    return w.reshape(w.shape[0], -1).max(axis=1)


def _extra(colmax: np.ndarray, threshold: float) -> int:
    """Extra input channels a split at ``threshold`` needs: ⌈max/T⌉ − 1 per channel."""
    return int(np.maximum(np.ceil(colmax / threshold - 1e-12) - 1, 0).sum())


def split_threshold(weight: np.ndarray, in_axis: int, options: OutlierSplitOptions) -> float | None:
    """The new max |w| of ``weight`` after splitting, or None when no split is worth it.

    The smallest threshold whose extra channels fit the budget (bisection: the count only grows as
    the threshold falls), when it lowers the max at least ``options.min_gain`` times.
    """
    colmax = _column_max(weight, in_axis)
    top = float(colmax.max()) if colmax.size else 0.0
    budget = int(math.floor(options.expand_ratio * colmax.size))
    if budget < 1 or top <= 0 or not math.isfinite(top):
        return None
    lo, hi = top / (budget + 1), top  # at T = top/(budget+1) even one channel alone needs `budget` copies
    if _extra(colmax, lo) <= budget:
        hi = lo
    else:
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if _extra(colmax, mid) <= budget:
                hi = mid
            else:
                lo = mid
    threshold = float(np.float32(hi))
    while _extra(colmax, threshold) > budget:  # float32 rounding moved it below the bisection's bound
        threshold = float(np.nextafter(np.float32(threshold), np.float32(np.inf)))
    if top / threshold < options.min_gain:
        return None
    return threshold


def split_weight(weight: np.ndarray, in_axis: int, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """(new weight with the extra input channels appended on ``in_axis``, the source channel of each
    extra one). Every weight above ``threshold`` becomes pieces of ±threshold and a remainder, in
    float64 and then the weight's dtype, so the copies sum to the original within float rounding."""
    w = np.moveaxis(weight.astype(np.float64), in_axis, 0)  # [C_in, …]
    t = float(threshold)
    count = np.maximum(np.ceil(np.abs(w) / t - 1e-12), 1)  # pieces per weight
    copies = count.reshape(w.shape[0], -1).max(axis=1).astype(np.int64)  # copies per channel
    first = w.copy()
    sign = np.sign(w)
    big = count > 1
    # the first copy holds the remainder, the others ±T each (where the weight needs them)
    first[big] = w[big] - (count[big] - 1) * sign[big] * t
    extra_w, sources = [], []
    for channel in np.nonzero(copies > 1)[0]:
        for k in range(1, int(copies[channel])):
            extra_w.append(np.where(count[channel] > k, sign[channel] * t, 0.0))
            sources.append(int(channel))
    stacked = np.concatenate([first, np.stack(extra_w)], axis=0) if extra_w else first
    return np.moveaxis(stacked, 0, in_axis).astype(weight.dtype), np.asarray(sources, np.int64)


class SplitOutliersPass(ir.passes.InPlacePass):
    """Outlier channel splitting of the Conv / Gemm / MatMul weights of every graph, If/Loop/Scan
    bodies included (module docstring): layers inside a body have the same per-tensor weights."""

    def __init__(self, options: OutlierSplitOptions | None = None) -> None:
        super().__init__()
        self.options = options or OutlierSplitOptions()

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        names = collect_names(model)
        split = 0
        added = 0
        for graph, node in [(g, n) for g in list(model.graphs()) for n in onnx_nodes(g, "Conv", "Gemm", "MatMul")]:
            target = _target(node)
            if target is None:
                continue
            threshold = split_threshold(target.weight, target.in_axis, self.options)
            if threshold is None:
                continue
            new_weight, sources = split_weight(target.weight, target.in_axis, threshold)
            channels = target.weight.shape[target.in_axis]
            indices = np.concatenate([np.arange(channels, dtype=np.int64), sources])
            x = node.inputs[0]
            base = node.name or "layer"
            index_value = make_initializer(graph, unique_name(names, f"{base}_ocs_indices"), indices)
            gathered = ir.Value(name=unique_name(names, f"{x.name or base}_ocs"))
            gather = ir.Node("", "Gather", [x, index_value], attributes=[ir.AttrInt64("axis", target.act_axis)],
                             outputs=[gathered], name=unique_name(names, f"{base}_ocs_gather"))
            graph.insert_before(node, gather)
            node.replace_input_with(0, gathered)
            set_node_constant(graph, node, 1, new_weight, names, "ocs")
            log.debug("outlier split %s: max |w| %.4g -> %.4g, %d extra input channel(s) of %d",
                      node.name, float(np.abs(target.weight).max()), threshold, sources.size, channels)
            split += 1
            added += sources.size
        if split:
            log.info("outlier channel splitting: %d layer(s), %d input channel(s) added", split, added)
        return ir.passes.PassResult(model, modified=bool(split))


def split_outliers(model: onnx.ModelProto, options: OutlierSplitOptions | None = None) -> onnx.ModelProto:
    """Return a copy of ``model`` with outlier input channels split (the input is not modified)."""
    return run_passes(model, SplitOutliersPass(options), RemoveUnusedNodesPass())
