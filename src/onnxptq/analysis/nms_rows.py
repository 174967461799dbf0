"""Rows a graph's own ``NonMaxSuppression`` kept, judged as its reader reads them: matched boxes at thresholds.

Why: TF2 RetinaFace (retinaface 1.1.1, tf2onnx) ends in its own NMS and writes ``Identity:0`` ``[faces, 16]``: a
``Gather`` of the rows of a ``[candidates, 16]`` table (box, 5 landmarks, valid, score) at the indices the
``NonMaxSuppression`` kept, in its score order. The floor read that output as one vector by its cosine, and a
photo whose faces came out in another row order (two faces scoring 0.998 and 0.999 swap under any rounding) or
one face fewer was a shape that "differs from float's" and counted against it: A8W8 broke at cosine 0.9634 on 5
held-out photos and repair kept all 201 nodes float, where the plain A8W8 file keeps F1 0.991 of float's faces on
16 fresh photos (bench/RESULTS.md, newmodels30 section 5). Its user reads faces: rows above a score, each a box.

**Found by structure** (:func:`nms_row_outputs`): a graph output that is (through ``Identity``/``Cast``) a
``Gather`` along the rows (axis 0) of a table whose indices come, through index plumbing (``Slice``,
``Gather``, ``Squeeze``, ``Unsqueeze``, ``Reshape``, ``Cast``, ``Identity``, ``Flatten``), from a
``NonMaxSuppression``'s selected indices; and whose NMS read its ``boxes`` and its ``scores`` from that same
table, each through relayouts from a ``Slice`` of the table's last axis: four columns for the boxes, one for the
score. Those columns are the rows' boxes and score, read from the graph, not guessed from values. The box layout
is the NMS's own (``center_point_box``: ``[y1, x1, y2, x2]`` as any diagonal pair, or centre and size); the
NMS's constant ``score_threshold`` is the lowest score a kept row can have.

**Judged** (:func:`judge_nms_rows`): on each feed, float's rows and the quantized model's at the score column's
thresholds — the NMS's own (else :data:`det_nms.THRESHOLDS`' lowest) and two stricter ones, half and nine tenths of
the way from it to 1 (RetinaFace: 0.5, 0.75, 0.95, its package's ``predict`` reading 0.95) — matched one to one
at IoU ≥ :data:`det_nms.MATCH_IOU` (greedy, best first, as :mod:`.det_nms`); F1 pooled over the feeds and the
thresholds, against the top-1 floor. Row order does not matter and a row count that differs is what it is: a
face lost or invented. The rows matched at the lowest threshold are compared value by value too (their cosine,
every column: the landmarks a box match does not see), against the cosine floor.

As :mod:`.det_nms`: not judged where float's own kept rows move under a jitter of :data:`det_nms.JITTER` (scores
by that much, boxes by that share) below ``1 − 1 / (4·needed)``: then it is NMS's chaos, not the format; and
"could not judge" below ``needed`` float rows at the lowest threshold (an object a row: NMS has already merged
its candidates), where the calibration feeds' rows are pooled in (they may break the F1, its bound counts the
held-out rows alone: floor ``share_of``).

Scores of more than one column (a class per column) are not read here: which class NMS kept a row for is in its
selected indices, not in the rows; such outputs keep the floor's other readings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph.external import constant_tensors
from ..graph.ops import RELAYOUTS
from ..graph.walk import first_input_chain
from .det_nms import JITTER, MATCH_IOU, THRESHOLDS, f1_of, matched_pairs, stable_enough

__all__ = ["NmsRows", "NmsRowAgreement", "nms_row_outputs", "judge_nms_rows", "thresholds_of"]

#: ops an index may pass through between the NMS's selected indices and the row gather
_INDEX_PLUMBING = frozenset("Slice Gather Squeeze Unsqueeze Reshape Cast Identity Flatten".split())
#: ops between a gathered table and a graph output that keep its rows and columns as they are
_KEEPS_ROWS = frozenset(("Identity", "Cast"))
#: the stricter thresholds: these shares of the way from the lowest one to 1
_STRICTER = (0.5, 0.9)


@dataclass(frozen=True)
class NmsRows:
    """A graph output of rows an NMS kept (module docstring): the table's box columns and score column as
    ``Slice`` bounds on its last axis (resolved against the rows' width when judged), the box layout and the
    NMS's constant score threshold."""

    #: the NonMaxSuppression node whose kept indices select the rows
    nms: str
    #: ``(start, end)`` of the box columns and of the score column on the last axis (Slice's own bounds)
    boxes: tuple[int, int]
    score: tuple[int, int]
    #: ``center_point_box``: boxes as centre and size, else as a diagonal pair of corners
    centre: bool = False
    #: the NMS's constant ``score_threshold`` (None: none or not constant)
    threshold: float | None = None

    def columns(self, width: int) -> tuple[list[int], int] | None:
        """``(the 4 box columns, the score column)`` in rows ``width`` wide; None where they do not resolve so."""
        box = list(range(width))[slice(*self.boxes)]
        score = list(range(width))[slice(*self.score)]
        return (box, score[0]) if len(box) == 4 and len(score) == 1 else None


def _arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The main graph's small constants as arrays (Slice bounds, axes, thresholds)."""
    out: dict[str, np.ndarray] = {}
    for name, t in constant_tensors(model.graph).items():
        if t.data_location != onnx.TensorProto.EXTERNAL and int(np.prod(t.dims, dtype=np.int64)) <= 64:
            out[name] = numpy_helper.to_array(t)
    return out


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _rank(model: onnx.ModelProto, tensor: str) -> int | None:
    """The declared rank of ``tensor`` (graph inputs, outputs, value_info), None where not declared."""
    for info in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        if info.name == tensor and info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
            return len(info.type.tensor_type.shape.dim)
    return None


def _last_axis_slice(node: onnx.NodeProto, consts: Mapping[str, np.ndarray], rank: int) -> tuple[int, int] | None:
    """``(start, end)`` of a ``Slice`` on its data's last axis (``rank``), every other axis taken whole; None
    where it is no such slice (steps other than 1, bounds not constant)."""
    if node.op_type != "Slice" or len(node.input) < 3 or any(i not in consts for i in node.input[1:] if i):
        return None
    starts, ends = (np.asarray(consts[i]).reshape(-1).tolist() for i in node.input[1:3])
    axes = (np.asarray(consts[node.input[3]]).reshape(-1).tolist() if len(node.input) > 3 and node.input[3]
            else list(range(len(starts))))
    steps = (np.asarray(consts[node.input[4]]).reshape(-1).tolist() if len(node.input) > 4 and node.input[4]
             else [1] * len(starts))
    found = None
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = axis + rank if axis < 0 else axis
        if step != 1:
            return None
        if axis == rank - 1:
            found = (int(start), int(min(end, 2 ** 62)))
        elif not (start == 0 and end >= 2 ** 31 - 1):
            return None  # rows cut too: not the columns of every candidate
    return found


def _column_source(tensor: str, table: str, producer: Mapping[str, onnx.NodeProto], consts: Mapping[str, np.ndarray],
                   rank: int) -> tuple[int, int] | None:
    """The last-axis ``Slice`` of ``table`` that ``tensor`` is, through relayouts (the NMS's boxes or scores)."""
    node = first_input_chain(tensor, producer, RELAYOUTS, lambda n: n.op_type == "Slice" and n.input[0] == table, 8)
    return None if node is None else _last_axis_slice(node, consts, rank)


def _from_nms(tensor: str, producer: Mapping[str, onnx.NodeProto]) -> onnx.NodeProto | None:
    """The ``NonMaxSuppression`` whose selected indices ``tensor`` is drawn from through index plumbing."""
    return first_input_chain(tensor, producer, _INDEX_PLUMBING, lambda n: n.op_type == "NonMaxSuppression")


def nms_row_outputs(model: onnx.ModelProto) -> dict[str, NmsRows]:
    """``{graph output: its NMS rows}`` of ``model``'s main graph (module docstring, "Found by structure")."""
    nodes = list(model.graph.node)
    if not any(n.op_type == "NonMaxSuppression" for n in nodes):
        return {}
    producer = {o: n for n in nodes for o in n.output if o}
    consts = _arrays(model)
    found: dict[str, NmsRows] = {}
    for out in model.graph.output:
        node = producer.get(out.name)
        while node is not None and node.op_type in _KEEPS_ROWS:
            node = producer.get(node.input[0])
        if node is None or node.op_type != "Gather" or len(node.input) < 2 or _attr(node, "axis", 0) != 0:
            continue
        table = node.input[0]
        rank = _rank(model, table) or _rank(model, out.name)  # a 1-D index along the rows keeps the table's rank
        if rank is None or rank < 2:
            continue
        nms = _from_nms(node.input[1], producer)
        if nms is None or len(nms.input) < 2:
            continue
        boxes = _column_source(nms.input[0], table, producer, consts, rank)
        score = _column_source(nms.input[1], table, producer, consts, rank)
        if boxes is None or score is None:
            continue
        thr = consts.get(nms.input[4]) if len(nms.input) > 4 and nms.input[4] else None
        threshold = float(np.asarray(thr).reshape(-1)[0]) if thr is not None and np.asarray(thr).size == 1 else None
        found[out.name] = NmsRows(nms.name or nms.output[0], boxes, score, bool(_attr(nms, "center_point_box", 0)), threshold)
    return found


def thresholds_of(found: NmsRows) -> tuple[float, ...]:
    """The score column's thresholds (module docstring, "Judged"): the NMS's own, else det_nms' lowest, and two
    stricter ones toward 1."""
    low = found.threshold if found.threshold is not None and 0.0 <= found.threshold < 1.0 else THRESHOLDS[0]
    return (low, *(low + (1.0 - low) * s for s in _STRICTER))


@dataclass(frozen=True)
class NmsRowAgreement:
    """Post-NMS rows compared (module docstring): F1 over float's rows pooled over the feeds and thresholds."""

    f1: float
    #: float's rows over the thresholds, those lost and those invented (pooled as the F1)
    float_rows: int
    lost: int
    invented: int
    #: float's rows at the lowest threshold (its objects: the units a bound counts) and how many of them the
    #: held-out feeds hold
    objects: int
    held_objects: int
    thresholds: tuple[float, ...]
    #: F1 of float's rows against float's jittered (module docstring); judged only at or above ``1 − 1/(4·needed)``
    stable: float
    needed: int
    #: the rows matched at the lowest threshold, value by value: their pooled cosine and the worst feed's
    cosine: float
    cosine_min: float
    #: feeds whose row count differs from float's
    recounted: int
    #: calibration feeds pooled with the held-out ones
    seen_feeds: int = 0

    @property
    def judged(self) -> bool:
        """Enough float rows, and float's own kept rows stable (module docstring)."""
        return self.objects >= max(self.needed, 1) and stable_enough(self.stable, self.needed)

    def describe(self) -> str:
        t = "/".join(f"{x:.3g}" for x in self.thresholds)
        seen = f" on the held-out and {self.seen_feeds} calibration samples" if self.seen_feeds else ""
        text = (f"rows its NonMaxSuppression kept, matched at IoU ≥ {MATCH_IOU:g} at scores ≥ {t}: F1 {self.f1:.4f} of "
                f"{self.float_rows} float rows over the thresholds ({self.lost} lost, {self.invented} invented; "
                f"{self.recounted} feed(s) with another row count){seen}; matched rows' cosine {self.cosine:.4f} "
                f"(analysis/nms_rows.py)")
        if not stable_enough(self.stable, self.needed):
            return (f"{text} — NOT JUDGED: float's own kept rows move under a jitter of {JITTER:g} "
                    f"(F1 {self.stable:.4f})")
        if self.objects < max(self.needed, 1):
            return f"{text} — NOT JUDGED: {self.objects} float rows at {self.thresholds[0]:.3g}, the floor needs {self.needed}"
        return text


def _corners(boxes: np.ndarray, centre: bool) -> np.ndarray:
    """``[K, 4]`` as ``x1 y1 x2 y2`` corners (in the NMS's own axis order: IoU does not mind which is x)."""
    if centre:
        half = boxes[:, 2:] / 2
        return np.concatenate([boxes[:, :2] - half, boxes[:, :2] + half], axis=1)
    return np.concatenate([np.minimum(boxes[:, :2], boxes[:, 2:]), np.maximum(boxes[:, :2], boxes[:, 2:])], axis=1)


def _split(x: np.ndarray, found: NmsRows) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(rows [K, W] float64, corners [K, 4], scores [K])`` of one feed's output; None where the columns do not
    resolve or a value is not finite."""
    x = np.asarray(x, np.float64)
    if x.ndim < 1 or not np.isfinite(x).all():
        return None
    rows = x.reshape(-1, x.shape[-1]) if x.size else x.reshape(0, x.shape[-1] if x.ndim else 0)
    cols = found.columns(rows.shape[-1])
    if cols is None:
        return None
    box, score = cols
    return rows, _corners(rows[:, box], found.centre), rows[:, score]


def _count(pairs: Sequence[tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]],
           thresholds: Sequence[float]) -> tuple[int, int, int, int]:
    """``(float rows over the thresholds, lost, invented, float rows at the lowest threshold)``."""
    ref_n = lost = invented = objects = 0
    for (_, b_ref, s_ref), (_, b_got, s_got) in pairs:
        for t in thresholds:
            a, b = b_ref[s_ref >= t], b_got[s_got >= t]
            hits = len(matched_pairs(a, b))
            ref_n, lost, invented = ref_n + len(a), lost + len(a) - hits, invented + len(b) - hits
            objects += len(a) if t == thresholds[0] else 0
    return ref_n, lost, invented, objects


def _matched_rows(ref: tuple[np.ndarray, np.ndarray, np.ndarray], got: tuple[np.ndarray, np.ndarray, np.ndarray],
                  threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Float's rows at ``threshold`` and the quantized rows matched to them (greedy by IoU, one each)."""
    keep_r, keep_g = np.flatnonzero(ref[2] >= threshold), np.flatnonzero(got[2] >= threshold)
    pairs = [(keep_r[i], keep_g[j]) for i, j in matched_pairs(ref[1][keep_r], got[1][keep_g])]
    idx_r, idx_g = [p[0] for p in pairs], [p[1] for p in pairs]
    return ref[0][idx_r], got[0][idx_g]


def _jittered(rows: tuple[np.ndarray, np.ndarray, np.ndarray], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float's kept rows moved far below any format's step (det_nms' jitter)."""
    r, boxes, scores = rows
    return r, boxes * (1.0 + rng.uniform(-JITTER, JITTER, boxes.shape)), scores + rng.uniform(-JITTER, JITTER, scores.shape)


def judge_nms_rows(reference: Iterable[np.ndarray], candidate: Iterable[np.ndarray], found: NmsRows, needed: int,
                   seen: Iterable[tuple[np.ndarray, np.ndarray]] = ()) -> NmsRowAgreement | None:
    """Float's and the quantized model's kept rows compared over the held-out feeds (module docstring), with the
    calibration feeds' ``seen`` pairs pooled in where the held-out ones hold fewer than ``needed`` float rows at the
    lowest threshold; None where the rows are not such (columns that do not resolve, values not finite, float's
    scores outside [0, 1] where no NMS threshold says where they live)."""
    held = [(a, b) for a, b in ((_split(r, found), _split(g, found)) for r, g in zip(reference, candidate))]
    if not held or any(a is None or b is None for a, b in held):
        return None
    thresholds = thresholds_of(found)
    if found.threshold is None and any(len(a[2]) and (a[2].min() < 0 or a[2].max() > 1) for a, _ in held):
        return None  # scores that are no probabilities and no threshold of the graph's own: no threshold to read at
    pairs = list(held)
    held_objects = _count(held, thresholds[:1])[3]
    seen_feeds = 0
    if held_objects < max(needed, 1):
        for r, g in seen:
            a, b = _split(r, found), _split(g, found)
            if a is not None and b is not None:
                pairs.append((a, b))
                seen_feeds += 1
    draws = [_count([(a, _jittered(a, np.random.default_rng(seed))) for a, _ in pairs], thresholds) for seed in range(2)]
    stable = float(np.mean([f1_of(*d[:3]) for d in draws]))
    ref_n, lost, invented, objects = _count(pairs, thresholds)
    sums = np.zeros(3)
    worst = 1.0
    for a, b in pairs:
        x, y = _matched_rows(a, b, thresholds[0])
        if x.size:
            xx, yy, xy = float((x * x).sum()), float((y * y).sum()), float((x * y).sum())
            sums += (xx, yy, xy)
            worst = min(worst, float(xy / max(np.sqrt(xx * yy), 1e-300)))
    cosine = float(sums[2] / max(np.sqrt(sums[0] * sums[1]), 1e-300)) if sums[0] > 0 else 1.0
    recounted = sum(len(a[0]) != len(b[0]) for a, b in pairs)
    return NmsRowAgreement(f1_of(ref_n, lost, invented), ref_n, lost, invented, objects, held_objects, thresholds, stable,
                           needed, cosine, worst, recounted, seen_feeds)
