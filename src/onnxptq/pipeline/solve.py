"""Solve: statistics and weight values → scale and zero point of every planned tensor.

Activation ranges come from the calibration collectors (:mod:`onnxptq.calibration.methods` turns a
collector into a range by the tensor's method); weight ranges from the weight values themselves
(per channel where planned). The range → (scale, zero point) rule of each format lives in
:mod:`onnxptq.formats`; this module only routes each tensor to it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import onnx

from ..calibration import methods
from ..errors import CalibrationMissingError, ScaleOverflowError
from ..formats import floating, integer
from ..graph.external import tensor_values
from ..graph.walk import walk_scopes
from .bias_fit import weight_stretch
from .plan import Plan, TensorPlan
from .plan.thresholds import widen_to_cover

log = logging.getLogger(__name__)


@dataclass
class QParams:
    """Solved parameters of one tensor: scale and zero point (integer formats, scaled floats)."""

    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        def plain(a):
            return None if a is None else np.asarray(a).astype(np.float64).tolist()

        return {"scale": plain(self.scale), "zero_point": plain(self.zero_point)}


def producer_params_key(name: str) -> str:
    """Key in the solved params of a tensor's producer-side quantizer (DualQuantNodes)."""
    return f"{name}::producer"


def activation_range(tplan: TensorPlan, collector: Any, *, moving_average: bool = False) -> tuple[float, float]:
    """The calibrated (rmin, rmax) of an activation by its plan's method."""
    options = tplan.range_options()
    if options["method"] == "minmax" and moving_average:
        options["moving_average"] = True
    rmin, rmax = methods.compute_range(collector, options.pop("method"), **options)
    return float(rmin), float(rmax)


def share_root(plan: Plan, tplan: TensorPlan) -> TensorPlan:
    """The tensor whose scale ``tplan`` uses: the end of its ``share_with`` chain (AlignConcat,
    data movement sharing its input's parameters)."""
    root, seen = tplan, {tplan.name}
    while root.share_with and root.share_with in plan.tensors and root.share_with not in seen:
        root = plan.tensors[root.share_with]
        seen.add(root.name)
    return root


def shared_activation_params(plan: Plan, tplan: TensorPlan, stats: Mapping[str, Any], *,
                             moving_average: bool = False) -> QParams:
    """The per-tensor scale and zero point :func:`solve` gives the activation ``tplan`` (its share
    root's range, cut to the root's limits), for a stage that must simulate the delivered
    quantizer before solve runs (the range guard)."""
    root = share_root(plan, tplan)
    source = root if root.name in stats else tplan
    rmin, rmax = _clamp(activation_range(source, stats[source.name], moving_average=moving_average), root.limits)
    rmin, rmax = widen_to_cover(rmin, rmax, _union(root.covers, tplan.covers), tplan.name)
    quant = tplan.quant
    return _integer_params(quant, rmin, rmax) if quant.is_integer else _float_params(quant, rmin, rmax)


def shared_activation_params_key(plan: Plan, tplan: TensorPlan, stats: Mapping[str, Any], *,
                                 moving_average: bool = False) -> tuple:
    """Everything :func:`shared_activation_params` reads, as a key: equal keys give equal
    parameters. Kept beside it so that a new input of that function is added here in the same
    change (a cache keyed elsewhere would go stale silently: the range guard's memo, which saves
    most of its solves across repair's builds). The collector is held by identity: callers keep
    it alive with the cached entry. May raise ``TypeError`` when an option is unhashable."""
    root = share_root(plan, tplan)
    source = root if root.name in stats else tplan
    key = (tplan.name, tplan.quant, tplan.covers, root.name, root.limits, root.covers, source.name,
           tuple(sorted(source.range_options().items())), moving_average, id(stats[source.name]))
    hash(key)
    return key


def _weight_range_minmse(values: np.ndarray, axis: int | None, quant: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Weight ranges by the MinMSE search over each channel's (or the whole tensor's) histogram."""
    qmin, qmax = integer.qrange(quant.format, symmetric=quant.symmetric, reduce_range=quant.reduce_range)
    options = {"symmetric": quant.symmetric, "qmin": qmin, "qmax": qmax, "power_of_two": quant.scale_kind == "pow2"}
    values = values.astype(np.float32)
    rows = [values] if axis is None else [np.take(values, i, axis=axis) for i in range(values.shape[axis])]
    lows, highs = [], []
    for i, row in enumerate(rows):
        collector = methods.make_collector("minmse", name=f"{name}[{i}]") if axis is not None else methods.make_collector("minmse", name=name)
        collector.update(row)
        lo, hi = methods.compute_range(collector, "minmse", **options)
        lows.append(lo)
        highs.append(hi)
    if axis is None:
        return np.asarray(lows[0]), np.asarray(highs[0])
    return np.asarray(lows, dtype=np.float64), np.asarray(highs, dtype=np.float64)


def _clamp(bounds: tuple[Any, Any], limits: tuple[float | None, float | None] | None) -> tuple[Any, Any]:
    """The calibrated range cut to the readers' live interval (see TensorPlan.limits).

    Per-channel ranges are cut elementwise; a cut that would empty the range is not made.
    """
    if limits is None:
        return bounds
    low, high = limits
    rmin, rmax = np.asarray(bounds[0], dtype=np.float64), np.asarray(bounds[1], dtype=np.float64)
    new_min = np.maximum(rmin, low) if low is not None else rmin
    new_max = np.minimum(rmax, high) if high is not None else rmax
    if np.any(new_min > new_max):
        return bounds
    if np.ndim(bounds[0]) == 0:
        return float(new_min), float(new_max)
    return new_min.astype(np.asarray(bounds[0]).dtype), new_max.astype(np.asarray(bounds[1]).dtype)


def _fit_int32_biases(plan: Plan, params: dict[str, QParams], weight_ranges: Mapping[str, tuple[Any, Any]],
                      inits: Mapping[str, onnx.TensorProto]) -> None:
    """Stretch the range of every integer weight whose int32 bias would saturate on
    ``scale(input) × scale(weight)`` just enough that it fits (:mod:`.bias_fit`), in place: the
    bias loop of :func:`solve` then reads the widened weight scales."""
    fitted: list[str] = []
    for tplan in plan.tensors.values():
        if tplan.role != "bias" or tplan.bias_of is None or tplan.name not in inits:
            continue
        act, weight = tplan.bias_of
        wplan = plan.tensors.get(weight)
        if act not in params or weight not in params or weight not in weight_ranges or wplan is None or not wplan.quant.is_integer:
            continue
        factor = weight_stretch(tensor_values(inits[tplan.name]), params[act].scale, params[weight].scale)
        if factor is None:
            continue
        rmin, rmax = weight_ranges[weight]
        rmin, rmax = np.asarray(rmin, np.float64) * factor, np.asarray(rmax, np.float64) * factor
        weight_ranges[weight] = (rmin, rmax)
        params[weight] = _integer_params(wplan.quant, rmin, rmax)
        fitted.append(f"{weight} (x{float(np.max(factor)):.3g})")
    if fitted:
        log.info("solve: %d weight(s) got a wider grid so that their int32 bias fits (pipeline/bias_fit.py): %s",
                 len(fitted), ", ".join(fitted[:6]))


def _union(a: tuple[float, float] | None, b: tuple[float, float] | None) -> tuple[float, float] | None:
    if a is None or b is None:
        return a or b
    return (min(a[0], b[0]), max(a[1], b[1]))


def _integer_params(quant, rmin, rmax) -> QParams:
    scale, zero_point = integer.compute_scale_zp(
        rmin, rmax, quant.format, symmetric=quant.symmetric, reduce_range=quant.reduce_range, scale_kind=quant.scale_kind
    )
    return QParams(scale=np.asarray(scale, dtype=np.float32), zero_point=np.asarray(zero_point))


def _float_params(quant, rmin, rmax) -> QParams:
    scale, zero_point = floating.compute_float_scale(rmin, rmax, quant.format, scaled=quant.scaled, symmetric=quant.symmetric)
    return QParams(scale=np.asarray(scale, dtype=np.float32), zero_point=np.asarray(zero_point, dtype=np.float32))


def solve(model: onnx.ModelProto, plan: Plan, stats: Mapping[str, Any], *, moving_average: bool = False,
          weight_minmse: bool = False) -> dict[str, QParams]:
    """Scale and zero point for every planned tensor that has them (bfp/mx and unscaled floats don't).

    ``moving_average`` (``CalibMovingAverage``): MinMax activation ranges are the mean of the
    per-batch extremes, not the extremes of all batches. ``weight_minmse``
    (``WeightCalibrateMethod: MinMSE``): integer weight ranges minimise the quantization MSE of the
    weight values (per channel where the weight is per channel) instead of spanning min..max.
    """
    # Weights may live in If/Loop/Scan bodies (names are unique across a model's scopes).
    inits = {t.name: t for scope in walk_scopes(model.graph) for t in scope.graph.initializer}
    params: dict[str, QParams] = {}
    ranges: dict[str, tuple[Any, Any]] = {}
    weight_ranges: dict[str, tuple[Any, Any]] = {}

    for tplan in plan.tensors.values():
        if tplan.role != "activation" or not tplan.quant.needs_calibration:
            continue
        if tplan.name not in stats:
            raise CalibrationMissingError(f"activation {tplan.name!r} was planned for {tplan.quant.describe()} but got no calibration statistics")
        collector = stats[tplan.name]
        if tplan.quant.per_channel and getattr(collector, "channel_min", None) is not None:
            ranges[tplan.name] = (collector.channel_min, collector.channel_max)
        else:
            ranges[tplan.name] = activation_range(tplan, collector, moving_average=moving_average)

    for tplan in plan.tensors.values():
        if tplan.role != "activation" or tplan.name not in ranges:
            continue
        root = share_root(plan, tplan)
        rmin, rmax = _clamp(ranges.get(root.name, ranges[tplan.name]), root.limits)
        rmin, rmax = widen_to_cover(rmin, rmax, _union(root.covers, tplan.covers), tplan.name)
        quant = tplan.quant
        params[tplan.name] = _integer_params(quant, rmin, rmax) if quant.is_integer else _float_params(quant, rmin, rmax)

    for tplan in plan.tensors.values():
        # DualQuantNodes: the producer-side quantizer of a boundary tensor, from the same statistics.
        first = tplan.producer_view()
        if first is None or not first.quant.needs_calibration:
            continue
        if tplan.name not in stats:
            raise CalibrationMissingError(f"activation {tplan.name!r} (producer side, {first.quant.describe()}) got no calibration statistics")
        rmin, rmax = activation_range(first, stats[tplan.name])
        quant = first.quant
        params[producer_params_key(tplan.name)] = (
            _integer_params(quant, rmin, rmax) if quant.is_integer else _float_params(quant, rmin, rmax)
        )

    for tplan in plan.tensors.values():
        if tplan.role != "weight" or tplan.name not in inits:
            continue
        quant = tplan.quant
        if not (quant.is_integer or quant.scaled):
            continue
        values = tensor_values(inits[tplan.name])
        axis = tplan.axis if quant.is_integer and quant.per_channel else None
        # One reduction guards the scale math (NaN and inf carry through the max): a weight near the
        # float32 limit has no finite scale, and an extra pass would page in a streamed weight again.
        amax = float(np.max(np.abs(values))) if values.size else 0.0
        if not np.isfinite(amax) or amax > np.finfo(np.float32).max / 2:
            raise ScaleOverflowError(
                f"weight {tplan.name!r} holds non-finite values or values near the float32 limit "
                f"(max |w| = {amax:.3g}); it cannot be quantized (exclude its node)"
            )
        if weight_minmse and quant.is_integer:
            rmin, rmax = _weight_range_minmse(values, axis, quant, tplan.name)
        else:
            rmin, rmax = integer.weight_range(values, axis)
        params[tplan.name] = _integer_params(quant, rmin, rmax) if quant.is_integer else _float_params(quant, rmin, rmax)
        weight_ranges[tplan.name] = (rmin, rmax)

    _fit_int32_biases(plan, params, weight_ranges, inits)

    for tplan in plan.tensors.values():
        if tplan.role != "bias" or tplan.name not in inits:
            continue
        quant = tplan.quant
        if tplan.bias_of is not None:
            act, weight = tplan.bias_of
            if act not in params or weight not in params:
                raise CalibrationMissingError(
                    f"int32 bias {tplan.name!r} needs the scales of {act!r} and {weight!r}; one was not quantized"
                )
            wide = params[act].scale.astype(np.float64) * params[weight].scale.astype(np.float64)
            if not np.all(wide <= np.finfo(np.float32).max):
                raise ScaleOverflowError(
                    f"int32 bias {tplan.name!r}: its scale, scale({act!r}) × scale({weight!r}) = "
                    f"{float(np.max(wide)):.3g}, does not fit float32; the weight or the activation is "
                    f"far too large to quantize; exclude the node that reads them"
                )
            scale = wide.astype(np.float32)
            scale = np.where(scale == 0, np.float32(1.0), scale).astype(np.float32)
            if scale.size == 1:
                scale = scale.reshape(())
            params[tplan.name] = QParams(scale=scale, zero_point=np.zeros(scale.shape, dtype=np.int32))
        elif quant.is_integer or quant.scaled:
            values = tensor_values(inits[tplan.name])
            rmin, rmax = integer.weight_range(values)
            params[tplan.name] = _integer_params(quant, rmin, rmax) if quant.is_integer else _float_params(quant, rmin, rmax)
    return params
