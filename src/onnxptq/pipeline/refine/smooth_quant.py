"""SmoothQuant (Xiao et al., ICML 2023; the reference tool's ``include_sq`` / ``SmoothAlpha``).

Why: a transformer's activations into its linear layers have a few outlier channels, tens of times
larger than the rest. One per-tensor int8 scale covers the outliers and leaves the ordinary
channels a handful of codes, while the weights of the same layer are flat and would take more
range. ``Y = X W = (X diag(s)^-1) (diag(s) W)`` moves range from the activation to the weight
exactly in real arithmetic; with ``s_j = a_j^alpha / w_j^(1 - alpha)`` (``a_j``: the activation's
absmax over calibration data in input channel ``j``, ``w_j``: the weight's absmax in row ``j``) both
sides end up with flatter channels. ``alpha`` sets how much difficulty moves to the weights.

Which layers: MatMul with a constant 2-D weight as input 1, and Gemm with a constant B (``transA``
0), reading an activation whose last axis is the contracted one. All such readers of one activation
share one ``s`` (``w_j`` is the max over their weights), because they read one tensor.

Where ``1/s`` goes, in this order (the float model is unchanged up to float rounding either way):

1. **folded into the producer** when every reader of the activation is a smoothed layer and the
   producer is a ``LayerNormalization`` (its scale and bias, divided by ``s``) or a ``Mul`` by a
   constant whose broadcast covers the last axis (the constant, divided by ``s``): nothing is added;
2. **an inserted ``Mul``** by ``1/s`` feeding only the smoothed layers otherwise: e.g. a BERT
   LayerNorm output that the residual ``Add`` also reads (folding would change the residual), or a
   GELU output. The Mul runs in float before the activation's quantizer; onnxruntime fuses nothing
   across it, and it costs one elementwise pass over the activation.

Statistics: per-channel min/max of each target activation over the whole calibration data,
streamed by :func:`onnxptq.calibration.runner.collect` with in-graph reductions (memory is two
vectors per target, however many samples). It runs before the quantization plan is made because
smoothing changes the activations the plan calibrates: see :func:`onnxptq.pipeline.calibrate.calibrate_once`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...calibration import collectors, runner
from ...graph.opsets import is_onnx_domain

log = logging.getLogger(__name__)

__all__ = ["SmoothTarget", "smoothing_targets", "smoothing_scales", "apply_smoothing", "smooth_quant"]

#: Floor on both statistics, so a dead channel (all zeros) gets a finite scale.
_EPS = 1e-5


@dataclass
class SmoothTarget:
    """One activation and the linear layers reading it that share its smoothing vector."""

    activation: str
    rank: int
    #: (node, weight initializer name, whether the weight's rows are its axis 1 (Gemm transB=1))
    readers: list[tuple[onnx.NodeProto, str, bool]] = field(default_factory=list)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    ranks: dict[str, int] = {}
    for vi in [*model.graph.value_info, *model.graph.input, *model.graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            ranks[vi.name] = len(vi.type.tensor_type.shape.dim)
    return ranks


def smoothing_targets(model: onnx.ModelProto, exclude: Iterable[str] = ()) -> list[SmoothTarget]:
    """Every main-graph activation read as the data input of a MatMul/Gemm with a constant 2-D
    weight (the layers SmoothQuant applies to), with those readers. ``exclude``: node names left
    alone (the user's ``nodes_to_exclude``)."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    skip = set(exclude)
    ranks = _ranks(model)
    if not ranks:
        inferred = onnx.shape_inference.infer_shapes(model)
        ranks = _ranks(inferred)
    targets: dict[str, SmoothTarget] = {}
    weight_readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            if name in inits:
                weight_readers[name] = weight_readers.get(name, 0) + 1
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm") or not is_onnx_domain(node.domain) or node.name in skip:
            continue
        if len(node.input) < 2 or node.input[0] in inits or node.input[1] not in inits:
            continue
        weight = inits[node.input[1]]
        if len(weight.dims) != 2 or weight_readers.get(node.input[1], 0) != 1:
            continue  # a shared weight would be scaled for two activations
        trans_b = False
        if node.op_type == "Gemm":
            attrs = _attrs(node)
            if attrs.get("transA", 0):
                continue
            trans_b = bool(attrs.get("transB", 0))
        rank = ranks.get(node.input[0])
        if rank is None or rank < 2:
            continue
        target = targets.setdefault(node.input[0], SmoothTarget(node.input[0], rank))
        target.readers.append((node, node.input[1], trans_b))
    return list(targets.values())


def smoothing_scales(act_absmax: np.ndarray, weight_absmax: np.ndarray, alpha: float) -> np.ndarray:
    """``s_j = a_j^alpha / w_j^(1-alpha)`` (the paper's eq. 4), both floored at a small epsilon."""
    a = np.maximum(np.asarray(act_absmax, np.float64), _EPS)
    w = np.maximum(np.asarray(weight_absmax, np.float64), _EPS)
    return (a ** alpha / w ** (1.0 - alpha)).astype(np.float32)


def _row_absmax(weight: np.ndarray, trans_b: bool) -> np.ndarray:
    return np.abs(weight).max(axis=0 if trans_b else 1)


def apply_smoothing(model: onnx.ModelProto, targets: Sequence[SmoothTarget], act_absmax: dict[str, np.ndarray],
                    alpha: float) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``model`` with each target smoothed (see the module docstring for where ``1/s``
    goes). Returns the model and, per activation, how: ``"LayerNormalization"``, ``"Mul"`` (folded
    into that producer) or ``"inserted Mul"``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    graph_outputs = {o.name for o in graph.output}
    nodes = {n.name: n for n in graph.node}
    how: dict[str, str] = {}
    infos = {vi.name: vi for vi in [*graph.value_info, *graph.input, *graph.output]}
    inferred = False
    inserted: dict[str, list[onnx.NodeProto]] = {}  # producer name ('' for a graph input) -> Muls after it

    def set_init(name: str, value: np.ndarray) -> None:
        inits[name].CopyFrom(numpy_helper.from_array(value.astype(numpy_helper.to_array(inits[name]).dtype), name))

    for target in targets:
        name = target.activation
        stats = act_absmax.get(name)
        channels = {inits[w].dims[0 if not tb else 1] for _, w, tb in target.readers}
        if stats is None or len(channels) != 1 or stats.shape != (channels.pop(),):
            log.debug("smooth quant: %s has no matching per-channel statistics; left alone", name)
            continue
        w_absmax = np.max([_row_absmax(numpy_helper.to_array(inits[w]), tb) for _, w, tb in target.readers], axis=0)
        s = smoothing_scales(stats, w_absmax, alpha)
        for node, w, tb in target.readers:
            weight = numpy_helper.to_array(inits[w]).astype(np.float64)
            set_init(w, weight * (s[None, :] if tb else s[:, None]))
        smoothed = {n.name for n, _, _ in target.readers}
        all_smoothed = name not in graph_outputs and all(r.name in smoothed for r in readers.get(name, []))
        prod = producer.get(name)
        if all_smoothed and prod is not None and _fold_into_producer(prod, s, inits, readers, set_init):
            how[name] = prod.op_type
            continue
        scale_name = f"{name}__smooth_scale"
        smooth_out = f"{name}__smoothed"
        graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), scale_name))
        mul = helper.make_node("Mul", [name, scale_name], [smooth_out], name=f"{name}__smooth_mul")
        if name not in infos and not inferred:
            inferred = True
            infos.update({vi.name: vi for vi in onnx.shape_inference.infer_shapes(model).graph.value_info if vi.name not in infos})
        if name in infos:  # the planner quantizes only tensors it knows are float
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(infos[name])
            vi.name = smooth_out
            graph.value_info.append(vi)
        for node, _, _ in target.readers:
            for i, inp in enumerate(nodes[node.name].input):
                if inp == name:
                    nodes[node.name].input[i] = smooth_out
        inserted.setdefault(prod.name if prod is not None else "", []).append(mul)
        how[name] = "inserted Mul"
    if inserted:
        new_nodes = list(inserted.get("", []))
        for node in graph.node:
            new_nodes.append(node)
            new_nodes.extend(inserted.get(node.name, []))
        del graph.node[:]
        graph.node.extend(new_nodes)
    return out, how


def _fold_into_producer(prod: onnx.NodeProto, s: np.ndarray, inits: dict, readers: dict, set_init) -> bool:
    """Divide the producer's own constants by ``s`` when that alone divides its output by ``s``."""
    def owned(name: str) -> bool:
        return name in inits and len(readers.get(name, [])) == 1
    if prod.op_type == "LayerNormalization" and is_onnx_domain(prod.domain):
        if _attrs(prod).get("axis", -1) != -1 or len(prod.input) < 2 or not owned(prod.input[1]):
            return False
        if len(prod.input) > 2 and prod.input[2] and not owned(prod.input[2]):
            return False
        for name in prod.input[1:3]:
            if name:
                set_init(name, numpy_helper.to_array(inits[name]).astype(np.float64) / s)
        return True
    if prod.op_type == "Mul" and is_onnx_domain(prod.domain):
        const = [i for i in prod.input if owned(i)]
        if len(const) != 1:
            return False
        value = numpy_helper.to_array(inits[const[0]]).astype(np.float64)
        if value.ndim and (value.shape[-1] not in (1, s.size) or value.size != value.shape[-1]):
            return False  # only a scalar-or-last-axis vector constant broadcasts to one per channel
        set_init(const[0], np.broadcast_to(value.reshape(-1), s.shape) / s)
        return True
    return False


def collect_absmax(model: onnx.ModelProto, targets: Sequence[SmoothTarget], feeds: Iterable[dict[str, np.ndarray]], *,
                   providers: Sequence[str] = ("CPUExecutionProvider",), progress: bool = False) -> dict[str, np.ndarray]:
    """Per-channel (last axis) absmax of each target activation over every feed, streamed."""
    wanted = {t.activation: functools.partial(collectors.PerChannelMinMaxCollector, t.rank - 1) for t in targets}
    filled = runner.collect(model, wanted, feeds, providers=tuple(providers), progress=progress)
    out = {}
    for name, col in filled.items():
        if col.channel_min is not None:
            out[name] = np.maximum(np.abs(col.channel_min), np.abs(col.channel_max))
    return out


def smooth_quant(model: onnx.ModelProto, feeds: Iterable[dict[str, np.ndarray]], alpha: float, *,
                 exclude: Iterable[str] = (), providers: Sequence[str] = ("CPUExecutionProvider",),
                 progress: bool = False) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Statistics pass over ``feeds`` then :func:`apply_smoothing`; the model unchanged (and no
    pass run) when it has no smoothable layer."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"SmoothQuant alpha (smooth_alpha / SmoothAlpha) must be in [0, 1], got {alpha}")
    targets = smoothing_targets(model, exclude)
    if not targets:
        return model, {}
    stats = collect_absmax(model, targets, feeds, providers=providers, progress=progress)
    smoothed, how = apply_smoothing(model, targets, stats, alpha)
    counts: dict[str, int] = {}
    for v in how.values():
        counts[v] = counts.get(v, 0) + 1
    log.info("smooth quant (alpha %.2f): %d activations smoothed (%s)", alpha, len(how),
             ", ".join(f"{k} ×{v}" for k, v in counts.items()))
    return smoothed, how
