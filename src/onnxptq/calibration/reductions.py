"""In-graph statistics: the nodes that reduce a calibrated tensor inside the calibration graph.

:func:`plan_reduction` gives, for a collector that needs less than the whole tensor, the nodes to
add after the tensor's producer, their outputs, and how to fold one run's results into the
collector. Every reduction views its tensor as one row per feed (:data:`ROWS_INPUT`), so a run
over several feeds concatenated on axis 0 still reports each feed's own statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from onnxptq.calibration.collectors import Collector, MinMaxCollector, PerChannelMinMaxCollector, TailCollector

__all__ = ["ROWS_INPUT", "Reduction", "minmax_nodes", "plan_reduction", "reducible"]

#: Graph input of the augmented model: ``[G, -1]``, the shape that views a tensor as one row per
#: feed when a run carries ``G`` feeds concatenated on axis 0 (``[1, -1]`` for a single feed).
ROWS_INPUT = "__onnxptq_calib_rows"
_MIN_SUFFIX = "__onnxptq_calib_min"
_MAX_SUFFIX = "__onnxptq_calib_max"


@dataclass
class Reduction:
    """Nodes that reduce one tensor inside the graph, their outputs, and how to fold the results."""

    nodes: list[onnx.NodeProto]
    outputs: list[str]
    #: ``fold(outputs, groups)``: the outputs of one run over ``groups`` feeds concatenated on
    #: axis 0 (see :data:`ROWS_INPUT`), folded into the collector feed by feed
    fold: Callable[[Sequence[np.ndarray], int], None]
    #: False when the statistics cannot be told apart per feed in a run over several feeds
    groupable: bool = True


def _reduce_node(op: str, x: str, out: str, axes: Sequence[int] | None, opset: int, extra: list[onnx.NodeProto]) -> onnx.NodeProto:
    """``ReduceMin``/``ReduceMax`` with ``keepdims=0`` over ``axes`` (None: all), in the opset's form."""
    if axes is None:
        return helper.make_node(op, [x], [out], keepdims=0, name=out)
    if opset >= 18:
        axes_name = out + "__axes"
        extra.append(helper.make_node("Constant", [], [axes_name], name=axes_name,
                                      value=helper.make_tensor(axes_name, onnx.TensorProto.INT64, [len(axes)], list(axes))))
        return helper.make_node(op, [x, axes_name], [out], keepdims=0, name=out)
    return helper.make_node(op, [x], [out], keepdims=0, axes=list(axes), name=out)


def minmax_nodes(name: str, src: str, opset: int) -> tuple[list[onnx.NodeProto], list[str]]:
    """``ReduceMin``/``ReduceMax`` of ``src`` to the scalars ``<name>__onnxptq_calib_min|max``."""
    lo, hi = name + _MIN_SUFFIX, name + _MAX_SUFFIX
    return [_reduce_node("ReduceMin", src, lo, None, opset, []), _reduce_node("ReduceMax", src, hi, None, opset, [])], [lo, hi]


def _const(name: str, values: Sequence[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name,
                            value=helper.make_tensor(name, onnx.TensorProto.INT64, [len(values)], list(values)))


def _scalar(name: str, value: int) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=helper.make_tensor(name, onnx.TensorProto.INT64, [], [value]))


def _feed_rows(value: np.ndarray, groups: int, name: str) -> int:
    """Rows of ``value`` (axis 0) per feed of a run over ``groups`` feeds."""
    if groups == 1:
        return int(value.shape[0])
    if value.ndim == 0 or value.shape[0] % groups:
        raise ValueError(f"tensor {name!r}: axis 0 of {value.shape} does not split into {groups} feeds")
    return int(value.shape[0]) // groups


def _rows_view(name: str, batch_axis: int, rank: int | None) -> tuple[list[onnx.NodeProto], str]:
    """Nodes viewing ``name`` as ``[G, -1]``, one row per feed (:data:`ROWS_INPUT`), and the view's
    name; a tensor whose samples lie on ``batch_axis`` > 0 (of ``rank`` axes) is transposed first."""
    src, nodes = name, []
    if batch_axis:
        if rank is None or not 0 < batch_axis < rank:
            raise ValueError(f"tensor {name!r}: batch axis {batch_axis} needs a rank above it, got {rank}")
        src = name + "__onnxptq_batch_first"
        perm = [batch_axis] + [i for i in range(rank) if i != batch_axis]
        nodes.append(helper.make_node("Transpose", [name], [src], perm=perm, name=src))
    rows = name + "__onnxptq_rows"
    nodes.append(helper.make_node("Reshape", [src, ROWS_INPUT], [rows], name=rows))
    return nodes, rows


def reducible(collector: Collector) -> bool:
    """Whether :func:`plan_reduction` has in-graph statistics for ``collector`` (else it needs the
    whole tensor)."""
    if type(collector) is PerChannelMinMaxCollector:
        return collector.axis >= 0
    return type(collector) in (MinMaxCollector, TailCollector)


def plan_reduction(name: str, collector: Collector, opset: int, elem_type: int | None, batch_axis: int = 0,
                   rank: int | None = None) -> Reduction | None:
    """The in-graph reduction feeding ``collector``, or None when it needs the whole tensor.

    Each reduction first views the tensor as ``[G, -1]`` (:data:`ROWS_INPUT`) and reduces each
    row, so one run over ``G`` concatenated feeds yields every feed's own statistics: the same
    numbers, batch by batch, as ``G`` runs (a moving average or a histogram's growth depends on
    how the data was batched; the caller's batching is kept). A tensor whose samples lie on
    ``batch_axis`` > 0 (of ``rank`` axes) is transposed to bring them first.
    """
    if type(collector) is MinMaxCollector:
        view, rows = _rows_view(name, batch_axis, rank)
        lo, hi = name + _MIN_SUFFIX, name + _MAX_SUFFIX
        extra: list[onnx.NodeProto] = []
        reds = [_reduce_node("ReduceMin", rows, lo, [1], opset, extra), _reduce_node("ReduceMax", rows, hi, [1], opset, extra)]

        def fold_minmax(out: Sequence[np.ndarray], groups: int) -> None:
            for lo_g, hi_g in zip(out[0].tolist(), out[1].tolist()):
                collector.update_extremes(lo_g, hi_g)

        return Reduction([*view, *extra, *reds], [lo, hi], fold_minmax)
    if type(collector) is PerChannelMinMaxCollector:
        # [d0 .. d_axis, rest]: reduce every axis but the channel one and axis 0, whatever the
        # rank; the feeds' rows are then told apart on axis 0 (not possible when it is the
        # channel axis).
        axis = collector.axis
        if not reducible(collector):
            return None
        shaped, shape = name + "__onnxptq_pc", name + "__onnxptq_pc_shape"
        lo, hi = name + _MIN_SUFFIX, name + _MAX_SUFFIX
        nodes = [_const(shape, [0] * (axis + 1) + [-1]), helper.make_node("Reshape", [name, shape], [shaped], name=shaped)]
        axes = [i for i in range(axis + 2) if i not in (0, axis)]
        extra = []
        reds = [_reduce_node("ReduceMin", shaped, lo, axes, opset, extra), _reduce_node("ReduceMax", shaped, hi, axes, opset, extra)]

        def fold_channels(out: Sequence[np.ndarray], groups: int) -> None:
            lo_all, hi_all = out[0], out[1]
            if axis == 0:
                collector.update_channel_extremes(lo_all, hi_all)
                return
            r = _feed_rows(lo_all, groups, name)
            for g in range(groups):
                collector.update_channel_extremes(lo_all[g * r : (g + 1) * r].min(axis=0), hi_all[g * r : (g + 1) * r].max(axis=0))

        return Reduction(nodes + extra + reds, [lo, hi], fold_channels, groupable=axis != 0 and batch_axis == 0)
    if type(collector) is TailCollector:
        p = name + "__onnxptq_tail"
        nodes, rows_f = _rows_view(name, batch_axis, rank)
        if elem_type != onnx.TensorProto.FLOAT:  # TopK has no float16/bfloat16 CPU kernel
            nodes.append(helper.make_node("Cast", [rows_f], [p + "_f32"], to=onnx.TensorProto.FLOAT, name=p + "_f32"))
            rows_f = p + "_f32"
        nodes += [
            helper.make_node("Shape", [rows_f], [p + "_shape"], name=p + "_shape"),
            _scalar(p + "_one", 1),
            helper.make_node("Gather", [p + "_shape", p + "_one"], [p + "_n"], axis=0, name=p + "_n"),
            _const(p + "_div", [collector.batch_divisor]),
            _scalar(p + "_kmin", collector.min_batch_k),
            helper.make_node("Div", [p + "_n", p + "_div"], [p + "_share"], name=p + "_share"),
            # k = min(n, max(kmin, n // div)) per feed: Clip sets everything to its max when min > max.
            helper.make_node("Clip", [p + "_share", p + "_kmin", p + "_n"], [p + "_k"], name=p + "_k"),
            # Sorted, so that each feed's extremes and tail levels are the rows' ends: no ReduceMin /
            # ReduceMax pass over the tensor and no reduction in Python.
            helper.make_node("TopK", [rows_f, p + "_k"], [p + "_top", p + "_top_i"], axis=-1, largest=1, sorted=1, name=p + "_top"),
            helper.make_node("TopK", [rows_f, p + "_k"], [p + "_bot", p + "_bot_i"], axis=-1, largest=0, sorted=1, name=p + "_bot"),
        ]

        def fold_tails(out: Sequence[np.ndarray], groups: int) -> None:
            top, bottom, n = out[0], out[1], int(out[2])
            if n == 0:
                return
            for g in range(top.shape[0]):
                collector.update_tails(top[g], bottom[g], n, ordered=True)

        return Reduction(nodes, [p + "_top", p + "_bot", p + "_n"], fold_tails)
    return None
