"""In-graph statistics: the nodes that reduce a calibrated tensor inside the calibration graph.

:func:`plan_reduction` gives, for a collector that needs less than the whole tensor, the nodes to
add after the tensor's producer, their outputs, and how to fold one run's results into the
collector. Every reduction views its tensor as one row per feed (:data:`ROWS_INPUT`), so a run
over several feeds concatenated on axis 0 still reports each feed's own statistics.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnxptq.calibration.collectors import Collector, MinMaxCollector, PerChannelMinMaxCollector, TailCollector

log = logging.getLogger(__name__)

__all__ = ["ROWS_INPUT", "Reduction", "SharedConstants", "minmax_nodes", "plan_reduction", "reducible"]

#: Graph input of the augmented model: ``[G, -1]``, the shape that views a tensor as one row per
#: feed when a run carries ``G`` feeds concatenated on axis 0 (``[1, -1]`` for a single feed).
ROWS_INPUT = "__onnxptq_calib_rows"
_MIN_SUFFIX = "__onnxptq_calib_min"
_MAX_SUFFIX = "__onnxptq_calib_max"
_SUM_SUFFIX = "__onnxptq_calib_sum"


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


class SharedConstants:
    """The reductions' ``Constant`` nodes as one initializer per distinct value, shared by every reduction.

    Why: each reduction spells its own axes, shapes and scalars (a tail reduction ~10 of them), so the
    calibration graph of a large model is mostly ``Constant`` nodes (DAT-light x2, A16W8: 16 499 of 56 725
    nodes), each a node for every onnxruntime graph pass at session creation; its distinct values are a
    few dozen. The same values reach the same ops, so the statistics are the same bits (creation of that
    session, 1 thread: 10.9 -> 8.4 CPU s; bench/RESULTS.md, calib18)."""

    PREFIX = "__onnxptq_calib_const"

    def __init__(self) -> None:
        self._names: dict[tuple[int, tuple[int, ...], bytes], str] = {}
        #: the shared initializers, one per distinct (type, shape, value)
        self.initializers: list[onnx.TensorProto] = []

    def lift(self, nodes: Sequence[onnx.NodeProto]) -> list[onnx.NodeProto]:
        """``nodes`` without their ``Constant(value=...)`` nodes, each reader reading the shared initializer."""
        renamed: dict[str, str] = {}
        kept: list[onnx.NodeProto] = []
        for node in nodes:
            if node.op_type == "Constant" and not node.domain and len(node.attribute) == 1 \
                    and node.attribute[0].name == "value":
                value = node.attribute[0].t
                array = numpy_helper.to_array(value)
                key = (value.data_type, tuple(value.dims), array.tobytes())
                if key not in self._names:
                    self._names[key] = f"{self.PREFIX}{len(self._names)}"
                    self.initializers.append(numpy_helper.from_array(array, self._names[key]))
                renamed[node.output[0]] = self._names[key]
                continue
            if any(i in renamed for i in node.input):
                node = _copy_node(node)
                node.input[:] = [renamed.get(i, i) for i in node.input]
            kept.append(node)
        return kept


def _copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


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


def _sum_nodes(x: str, out: str, axes: Sequence[int], opset: int, elem_type: int | None,
               extra: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """``ReduceSum`` of ``x`` over ``axes`` to ``out``: NaN/Inf exactly where that part of ``x`` held
    NaN/Inf, which the min/max beside it cannot say: onnxruntime's ReduceMin/ReduceMax drop a NaN
    that is not first in the row and skip values beside it (1.32: the max of [0, NaN, 2, 3] is 2).
    A float16/bfloat16 sum would overflow on finite values, so ``x * 0`` (0, or NaN where ``x`` is
    NaN/Inf) is summed instead, also where the type is unknown (one more pass); a float32 sum
    overflows only past 3.4e38 (the tensor is then read whole: the same range, more slowly)."""
    nodes: list[onnx.NodeProto] = []
    summed = x
    # Unknown type before opset 15 (no CastLike to make a 0 of x's type): the plain sum, whose
    # overflow on finite float16 values only sends the tensor to the fetched path.
    if elem_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE) and (elem_type is not None or opset >= 15):
        summed, zero, like = out + "_zeroed", out + "_zero", out + "_zero_like"
        nodes.append(helper.make_node("Constant", [], [zero], name=zero, value=helper.make_tensor(
            zero, onnx.TensorProto.FLOAT if elem_type is None else elem_type, [], [0.0])))
        if elem_type is None:  # a 0 of x's own type, whatever it is
            nodes.append(helper.make_node("CastLike", [zero, x], [like], name=like))
            zero = like
        nodes.append(helper.make_node("Mul", [x, zero], [summed], name=summed))
    if opset >= 13:  # ReduceSum takes its axes as an input from opset 13 (ReduceMin/Max from 18)
        nodes.append(_reduce_node("ReduceSum", summed, out, axes, 18, extra))
    else:
        nodes.append(helper.make_node("ReduceSum", [summed], [out], keepdims=0, axes=list(axes), name=out))
    return nodes


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


#: Values per chunk of the chunked tails (:func:`_chunked_tails`).
TAIL_CHUNK = 64
#: Values per feed from which a tail collector's tensor gets the chunked tails: below it the
#: ``k`` chunks gathered (``k >= min_batch_k``, 64 by default, times :data:`TAIL_CHUNK` values) are
#: a large part of the tensor, and the dozen extra nodes cost more than the TopK they spare. A
#: tensor of unknown size gets them.
CHUNKED_TAILS_MIN = 1 << 16
#: The opset from which the chunked tails' ops take their axes as inputs (ReduceSum, Slice's steps).
_CHUNKED_OPSET = 13


def _chunk_dividing(size: int | None) -> int | None:
    """The chunk length nearest :data:`TAIL_CHUNK` (16 to 256) that divides ``size`` values, None
    where none does or ``size`` is unknown."""
    if not size:
        return None
    fits = [c for c in range(16, 257) if size % c == 0]
    return min(fits, key=lambda c: (abs(c - TAIL_CHUNK), c)) if fits else None


#: ``_chunked_tails``' chunk: a length that divides every row, the name of a tensor ``[1]`` whose
#: value divides every row (the last axis's length), or None (chunks of :data:`TAIL_CHUNK` and a rest)
Chunk = int | str | None


def _tail_chunk(dims: Sequence[int | None] | None) -> tuple[Chunk, int | None]:
    """``(chunk, values per feed)`` for a tensor of declared ``dims`` (batch axis first; None: not
    declared, an entry None: a symbolic axis). A chunk that divides the row needs no ``Slice``
    copies of it (they cost as much as a reduction): one dividing the per-feed size where every
    axis is known, else one dividing the product of the known trailing axes, else the last axis
    itself (its length is read in the graph), where the tensor has one beside the batch axis."""
    if dims is None:
        return None, None
    rest = list(dims[1:])
    if all(d is not None for d in rest):
        size = int(np.prod(rest, dtype=np.int64))
        return _chunk_dividing(size), size
    trailing = 1
    for d in reversed(rest):
        if d is None:
            break
        trailing *= int(d)
    fits = _chunk_dividing(trailing) if trailing > 1 else None
    if fits:
        return fits, None
    return ("last" if rest else None), None


def _chunked_tails(p: str, src: str, rows: str, opset: int, chunk: Chunk = None, size: int | None = None,
                   k_static: int | None = None) -> list[onnx.NodeProto]:
    """Nodes giving ``p_top``/``p_bot`` (each row's ``p_k`` largest/smallest values, sorted, exactly
    the values of a ``TopK`` over the whole row) and ``p_sum`` (each row's sum: NaN where it held a
    NaN), from a ``TopK`` over a small part of each row (``rows``, the view of ``src``).

    Why: two ``TopK`` passes over every activation were two thirds of A8W8's calibration runs on a
    conv net (PP-OCRv6 tiny det: 525 of 795 ms a feed; the float model runs in 232 ms), while a
    ``ReduceMax`` over the same values is a few times cheaper per value. The row is cut into chunks
    (``chunk``: a length that divides every row; ``"last"``: ``src``'s last axis, which does; None:
    :data:`TAIL_CHUNK` values each, the last ``n mod TAIL_CHUNK`` apart, the *rest*, sliced off);
    the ``k`` chunks with the largest maxima and the rest are gathered and the ``TopK`` runs on them.

    Exact: let ``t`` be the ``k``-th largest chunk maximum and ``v`` the row's ``k``-th largest
    value. The ``k`` chosen chunks hold ``k`` values ``>= t`` (their maxima), so ``v >= t``. A
    value ``> t`` lies in a chunk whose maximum is ``> t``, and every such chunk is chosen (fewer
    than ``k`` of them); the rest is taken whole. So the gathered values hold every value ``> t``
    and at least ``k`` values ``>= t``: their ``k`` largest are the row's ``k`` largest (values
    equal to ``t`` differ at most by the sign of a zero, where ``t`` is a zero of both signs).
    Chosen chunks are gathered in their order in the row, so ``TopK``'s tie order (lower index
    first) is the whole row's. The smallest side mirrors it. NaN: ``ReduceMax`` drops it where
    ``TopK`` placed it somewhere, so the row's sum says it (tests/test_chunked_tails.py).

    ``size`` and ``k_static``: a row's values and ``k`` where the declared shape fixes them (:func:`plan_reduction`):
    the row's chunk count, the chosen chunks' count and the views' shapes are then constants, the same
    numbers the graph would compute, not nodes."""
    k, n = p + "_k", p + "_n"
    nodes = [
        _const(p + "_axis1", [1]), _const(p + "_axis2", [2]), _const(p + "_flat", [0, -1]),
        helper.make_node("ReduceSum", [rows, p + "_axis1"], [p + "_sum"], keepdims=0, name=p + "_sum"),
    ]
    whole = chunk is not None  # the chunks cover the row: no rest
    if size is not None and k_static is not None and chunk != "last":
        c = chunk if isinstance(chunk, int) else TAIL_CHUNK
        m = size // c
        nodes += [_const(p + "_shape3", [0, -1, c]), _const(p + "_span", [1, 1, c]), _const(p + "_kc", [min(k_static, m)])]
        if not whole:
            nodes += [_const(p + "_n1", [size]), _const(p + "_zero", [0]), _const(p + "_mc", [m * c])]
        return nodes + _chunk_gathers(p, rows, opset, k, whole)
    nodes += [_const(p + "_vec", [1]), helper.make_node("Reshape", [n, p + "_vec"], [p + "_n1"], name=p + "_n1")]
    if chunk == "last":  # the last axis's length (at least 1: an empty tensor divides by nothing)
        nodes += [_const(p + "_last", [-1]), _const(p + "_one1", [1]),
                  helper.make_node("Shape", [src], [p + "_src_shape"], name=p + "_src_shape"),
                  helper.make_node("Gather", [p + "_src_shape", p + "_last"], [p + "_w"], axis=0, name=p + "_w"),
                  helper.make_node("Max", [p + "_w", p + "_one1"], [p + "_c"], name=p + "_c")]
    else:
        nodes.append(_const(p + "_c", [chunk if isinstance(chunk, int) else TAIL_CHUNK]))
    nodes += [
        _const(p + "_zero", [0]), _const(p + "_minus1", [-1]), _const(p + "_ones2", [1, 1]),
        helper.make_node("Concat", [p + "_zero", p + "_minus1", p + "_c"], [p + "_shape3"], axis=0, name=p + "_shape3"),
        helper.make_node("Concat", [p + "_ones2", p + "_c"], [p + "_span"], axis=0, name=p + "_span"),
        helper.make_node("Div", [p + "_n1", p + "_c"], [p + "_m"], name=p + "_m"),
        helper.make_node("Min", [k, p + "_m"], [p + "_kc"], name=p + "_kc"),
    ]
    if not whole:
        nodes.append(helper.make_node("Mul", [p + "_m", p + "_c"], [p + "_mc"], name=p + "_mc"))
    return nodes + _chunk_gathers(p, rows, opset, k, whole)


def _chunk_gathers(p: str, rows: str, opset: int, k: str, whole: bool) -> list[onnx.NodeProto]:
    """:func:`_chunked_tails`' chunk view of ``rows`` and its two sides (chunk maxima or minima, the chosen
    chunks gathered in row order, their ``TopK``), from the tensors ``<p>_shape3``, ``_span``, ``_kc``,
    ``_zero``, ``_mc``, ``_n1``, ``_axis1``, ``_axis2``, ``_flat`` and ``k`` defined before them."""
    nodes: list[onnx.NodeProto] = []
    if whole:
        nodes.append(helper.make_node("Reshape", [rows, p + "_shape3"], [p + "_x3"], name=p + "_x3"))
    else:
        nodes += [
            helper.make_node("Slice", [rows, p + "_zero", p + "_mc", p + "_axis1"], [p + "_main"], name=p + "_main"),
            helper.make_node("Slice", [rows, p + "_mc", p + "_n1", p + "_axis1"], [p + "_rest"], name=p + "_rest"),
            helper.make_node("Reshape", [p + "_main", p + "_shape3"], [p + "_x3"], name=p + "_x3"),
        ]
    extra: list[onnx.NodeProto] = []
    for side, op, largest in (("top", "ReduceMax", 1), ("bot", "ReduceMin", 0)):
        q = f"{p}_{side}"
        nodes += [
            _reduce_node(op, p + "_x3", q + "_cm", [2], opset, extra),
            helper.make_node("TopK", [q + "_cm", p + "_kc"], [q + "_cv", q + "_ci"], axis=-1, largest=largest, sorted=0, name=q + "_ci"),
            # the chosen chunks in row order (TopK's ties then fall as over the whole row)
            helper.make_node("TopK", [q + "_ci", p + "_kc"], [q + "_cs", q + "_csi"], axis=-1, largest=0, sorted=1, name=q + "_cs"),
            helper.make_node("Unsqueeze", [q + "_cs", p + "_axis2"], [q + "_c3"], name=q + "_c3"),
            helper.make_node("Expand", [q + "_c3", p + "_span"], [q + "_ie"], name=q + "_ie"),
            helper.make_node("GatherElements", [p + "_x3", q + "_ie"], [q + "_g"], axis=1, name=q + "_g"),
            helper.make_node("Reshape", [q + "_g", p + "_flat"], [q + "_cand" if whole else q + "_gf"], name=q + "_gf"),
        ]
        if not whole:
            nodes.append(helper.make_node("Concat", [q + "_gf", p + "_rest"], [q + "_cand"], axis=1, name=q + "_cand"))
        nodes.append(helper.make_node("TopK", [q + "_cand", k], [q, q + "_i"], axis=-1, largest=largest, sorted=1, name=q))
    return extra + nodes


def reducible(collector: Collector) -> bool:
    """Whether :func:`plan_reduction` has in-graph statistics for ``collector`` (else it needs the
    whole tensor)."""
    if type(collector) is PerChannelMinMaxCollector:
        return collector.axis >= 0
    return type(collector) in (MinMaxCollector, TailCollector)


def plan_reduction(name: str, collector: Collector, opset: int, elem_type: int | None, batch_axis: int = 0,
                   rank: int | None = None, dims: Sequence[int | None] | None = None,
                   size_hint: int | None = None) -> Reduction | None:
    """The in-graph reduction feeding ``collector``, or None when it needs the whole tensor.

    Each reduction first views the tensor as ``[G, -1]`` (:data:`ROWS_INPUT`) and reduces each
    row, so one run over ``G`` concatenated feeds yields every feed's own statistics: the same
    numbers, batch by batch, as ``G`` runs (a moving average or a histogram's growth depends on
    how the data was batched; the caller's batching is kept). A tensor whose samples lie on
    ``batch_axis`` > 0 (of ``rank`` axes) is transposed to bring them first. ``dims``: the
    tensor's declared axes (None: no shape; an entry None: a symbolic axis), which pick the form of
    a tail collector's reduction (:func:`_chunked_tails` from :data:`CHUNKED_TAILS_MIN` values a
    feed, or where the size is unknown; chunks from :func:`_tail_chunk`). ``size_hint``: the values
    of the first feed where ``dims`` leave it unknown: it decides whether to chunk, not how.
    """
    if type(collector) is MinMaxCollector:
        view, rows = _rows_view(name, batch_axis, rank)
        lo, hi, total = name + _MIN_SUFFIX, name + _MAX_SUFFIX, name + _SUM_SUFFIX
        extra: list[onnx.NodeProto] = []
        reds = [_reduce_node("ReduceMin", rows, lo, [1], opset, extra), _reduce_node("ReduceMax", rows, hi, [1], opset, extra)]
        reds += _sum_nodes(rows, total, [1], opset, elem_type, extra)

        def fold_minmax(out: Sequence[np.ndarray], groups: int) -> None:
            for lo_g, hi_g, sum_g in zip(out[0].tolist(), out[1].tolist(), out[2].tolist()):
                collector.update_extremes(lo_g if math.isfinite(sum_g) else math.nan, hi_g)

        return Reduction([*view, *extra, *reds], [lo, hi, total], fold_minmax)
    if type(collector) is PerChannelMinMaxCollector:
        # [d0 .. d_axis, rest]: reduce every axis but the channel one and axis 0, whatever the
        # rank; the feeds' rows are then told apart on axis 0 (not possible when it is the
        # channel axis).
        axis = collector.axis
        if not reducible(collector):
            return None
        shaped, shape = name + "__onnxptq_pc", name + "__onnxptq_pc_shape"
        lo, hi, total = name + _MIN_SUFFIX, name + _MAX_SUFFIX, name + _SUM_SUFFIX
        nodes = [_const(shape, [0] * (axis + 1) + [-1]), helper.make_node("Reshape", [name, shape], [shaped], name=shaped)]
        axes = [i for i in range(axis + 2) if i not in (0, axis)]
        extra = []
        reds = [_reduce_node("ReduceMin", shaped, lo, axes, opset, extra), _reduce_node("ReduceMax", shaped, hi, axes, opset, extra)]
        reds += _sum_nodes(shaped, total, axes, opset, elem_type, extra)

        def fold_channels(out: Sequence[np.ndarray], groups: int) -> None:
            # a channel whose sum is not finite held NaN/Inf (its min/max cannot say: _sum_nodes)
            lo_all, hi_all = np.where(np.isfinite(out[2]), out[0], np.nan), out[1]
            if axis == 0:
                collector.update_channel_extremes(lo_all, hi_all)
                return
            r = _feed_rows(lo_all, groups, name)
            for g in range(groups):
                collector.update_channel_extremes(lo_all[g * r : (g + 1) * r].min(axis=0), hi_all[g * r : (g + 1) * r].max(axis=0))

        return Reduction(nodes + extra + reds, [lo, hi, total], fold_channels, groupable=axis != 0 and batch_axis == 0)
    if type(collector) is TailCollector:
        p = name + "__onnxptq_tail"
        nodes, rows_f = _rows_view(name, batch_axis, rank)
        if elem_type != onnx.TensorProto.FLOAT:  # TopK has no float16/bfloat16 CPU kernel
            nodes.append(helper.make_node("Cast", [rows_f], [p + "_f32"], to=onnx.TensorProto.FLOAT, name=p + "_f32"))
            rows_f = p + "_f32"
        src_dims = (None if dims is None or not 0 <= batch_axis < len(dims)
                    else [dims[batch_axis]] + [d for i, d in enumerate(dims) if i != batch_axis])
        chunk, size = _tail_chunk(src_dims)
        # Declared sizes fix n and k (collector.batch_k, the formula the nodes below compute): constants, not
        # nodes (DAT-light x2: ~8 nodes less a chunked tensor). The row's length still comes back
        # (``_n``) and a feed whose length differs from the declared one is not folded but
        # handed to the runner's recovery (read whole from then on: the same statistics).
        # Only where the sample axis is declared too: a symbolic one may hold more than the feed's samples (DAT-light
        # x2's attention windows, [B * windows, ...]), and a wrong guess cost a rebuild of the session.
        batch = src_dims[0] if src_dims is not None else None
        static = size * batch if size and isinstance(batch, int) and batch > 0 else None
        nodes += [
            helper.make_node("Shape", [rows_f], [p + "_shape"], name=p + "_shape"),
            _scalar(p + "_one", 1),
            helper.make_node("Gather", [p + "_shape", p + "_one"], [p + "_n"], axis=0, name=p + "_n"),
        ]
        if static is not None:
            nodes.append(_const(p + "_k", [collector.batch_k(static)]))
        else:
            nodes += [
                _const(p + "_div", [collector.batch_divisor]),
                _scalar(p + "_kmin", collector.min_batch_k),
                helper.make_node("Div", [p + "_n", p + "_div"], [p + "_share"], name=p + "_share"),
                # k = min(n, max(kmin, n // div)) per feed: Clip sets everything to its max when min > max.
                helper.make_node("Clip", [p + "_share", p + "_kmin", p + "_n"], [p + "_k"], name=p + "_k"),
            ]
        known = size if size is not None else size_hint  # a hint (the first feed's size) picks, never the chunk
        chunked = opset >= _CHUNKED_OPSET and (known is None or known >= CHUNKED_TAILS_MIN)
        if chunked:
            src = name + "__onnxptq_batch_first" if batch_axis else name
            nodes += _chunked_tails(p, src, rows_f, opset, chunk, static,
                                    None if static is None else collector.batch_k(static))
        else:
            # Sorted, so that each feed's extremes and tail levels are the rows' ends: no ReduceMin /
            # ReduceMax pass over the tensor and no reduction in Python.
            nodes += [
                helper.make_node("TopK", [rows_f, p + "_k"], [p + "_top", p + "_top_i"], axis=-1, largest=1, sorted=1, name=p + "_top"),
                helper.make_node("TopK", [rows_f, p + "_k"], [p + "_bot", p + "_bot_i"], axis=-1, largest=0, sorted=1, name=p + "_bot"),
            ]

        def fold_tails(out: Sequence[np.ndarray], groups: int) -> None:
            top, bottom = out[0], out[1]
            n = int(out[2])
            if static is not None and n != static:
                # the model ran with another size than it declares: this feed is not folded, and the
                # runner reads the tensor whole from now on (runner._Runs._recover), this feed too
                log.warning("tensor %r: declared %d values a feed, ran with %d: read whole from now on", name, static, n)
                collector.skipped_batches += 1
                return
            if n == 0:
                return
            # Chunked: a row whose sum is NaN held a NaN (or both infinities): skipped whole, as the
            # collector skips a batch whose extremes are not finite (the chunk maxima do not carry
            # a NaN: onnxruntime's ReduceMax/ReduceMin drop it).
            sums = out[3] if chunked else None
            for g in range(top.shape[0]):
                nan = sums is not None and bool(np.isnan(sums[g]))
                collector.update_tails(top[g], bottom[g], n, lo=math.nan if nan else None, ordered=True)
        return Reduction(nodes, [p + "_top", p + "_bot", p + "_n"] + ([p + "_sum"] if chunked else []), fold_tails)
    return None
