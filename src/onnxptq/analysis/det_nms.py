"""A detector's candidates judged as its reader reads them: thresholded, NMS per class, matched.

Why: a YOLOv8-style output (``[1, 4 + C, N]``, found by :func:`score_rows.detector_score_rows`) is
read as detections: each candidate's class is its best class score, candidates under a threshold
are dropped, greedy NMS per class keeps one box per object. The floor judged its score fields by
their cosine on candidates either side scores ≥ 0.2 (``threshold_cells.confident_only``), and on
the DocLayNet layout detector that cosine broke where the detections held (A16W8 field 12 cosine
0.9886, box F1 1.000; A8W8 0.9012, box F1 0.963-0.997): a single confident anchor moves
(0.836 → 0.000) while its neighbour keeps the detection (bench/RESULTS.md, "CenterFace's heat map
judged by the faces its thresholds keep; DocLayNet's score field diagnosed"). A cosine over
anchors cannot see that; the detections after NMS do, and a lost object, an invented one, a box
moved beyond IoU 0.5 or a class swapped each count once against both sets (F1).

**Judged** (:func:`judge_detections`): float's and the quantized model's detections at the
thresholds :data:`THRESHOLDS`, NMS at IoU :data:`NMS_IOU`, matched per class at IoU ≥
:data:`MATCH_IOU` (greedy, best IoU first), F1 pooled over images and thresholds against the top-1
floor. The four box rows are read as ``x1 y1 x2 y2`` where every candidate float keeps has
``x2 ≥ x1`` and ``y2 ≥ y1``, else as ``cx cy w h`` (ultralytics' export); both models' boxes go
through the same reading, so the figure compares like with like.

**Which rows are the boxes**: the box rows are the Concat's non-sigmoid rows where they are four; where
they are more (YOLOv8-seg's 4 box rows beside 32 mask coefficients: captcha-recognizer's slider head
``[1, 4 + 1 + 32, N]``), the one non-sigmoid input of exactly four rows, the others being values read
at the kept detections only. No such input (or two): not judged.

**Not judged below the floor's count**: fewer than ``Floor.needed`` float objects (at the lowest
threshold, pooled over feeds) cannot estimate an F1 of 0.97, as a top-1 on few rows cannot; then
the field cosines judge as before. An object is a group of float's detections of one class whose
boxes overlap (:func:`_objects`): NMS at 0.6 leaves apart the boxes of one object that overlap less
(a head whose anchors each keep their own box: the built YOLOv8-seg head of
tests/test_floor_few_detections.py: 113 detections at 0.25 on its first 4 images, 6 objects), and they are one
decision, not several (DocLayNet's 85 detections at 0.25 are 76 objects; nudenet's 5 and the slider
head's 9 are 5 and 9).

**Nor where float's own detections are chaotic** (:data:`JITTER`): a head whose kept set hangs on
near-ties (clusters of overlapping boxes with scores a thousandth apart) loses and invents detections
under any rounding, float's own included, and its F1 measures NMS's chaos, not the format. So float's
detections are compared with those of float's outputs jittered at about FP16's step (scores by
±:data:`JITTER`, boxes by ±:data:`JITTER` of their value, two draws of fixed seeds, at the lowest
threshold); where that F1's mean (``Detections.stable``) falls below ``1 − 1 / (4·needed)`` (a quarter
of the floor's margin: 0.993 at 0.97, 0.988 at 0.95) the detections are not judged and the verdict
says why. A real detector's kept set is stable there (DocLayNet, nudenet, the slider head: 1.000 on the
bench's feeds at every preset). The range guard's built head (random boxes over the whole map) is
both: its boxes overlap everywhere, one object per class and image (8 on its 4 images, too few), and
its kept set keeps 0.973-0.984 under the jitter; it had "broken" at F1 0.931 with every channel within
its format's bound.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from .score_rows import Rows

__all__ = ["THRESHOLDS", "NMS_IOU", "MATCH_IOU", "JITTER", "Detections", "box_iou", "detections", "f1_of", "judge_detections",
           "matched_count", "matched_pairs"]

#: score thresholds a user of such a detector sets (ultralytics' default 0.25 and two stricter ones)
THRESHOLDS = (0.25, 0.4, 0.5)
#: ultralytics' NMS IoU default (0.7 for predict, 0.6 for val): the middle of the usual band
NMS_IOU = 0.6
#: a float detection is kept where a quantized one of its class overlaps it this much (COCO's 0.5)
MATCH_IOU = 0.5
#: float's jitter for the stability check: scores by this much, boxes by this share of their value (FP16's
#: step is 5e-4 of a value: a detector whose kept set moves under it cannot be judged by any format)
JITTER = 1e-3


class Detections(NamedTuple):
    """The detections' agreement: F1 over ``float_count`` float detections (pooled over images and
    the thresholds, as are the lost and invented ones); ``needed``: the float detections at the lowest
    threshold the judgement asked for."""

    f1: float
    float_count: int
    lost: int
    invented: int
    needed: int
    #: F1 of float's detections against float's jittered at the lowest threshold (module docstring): below
    #: ``1 − 1 / (4·needed)`` the kept set is chaotic and the detections are not judged (``judged``; then
    #: ``f1`` is NaN and ``float_count`` float's detections at the lowest threshold)
    stable: float = 1.0

    @property
    def judged(self) -> bool:
        """Whether float's kept set is stable enough to judge by (module docstring)."""
        return stable_enough(self.stable, self.needed)


def stable_enough(stable: float, needed: int) -> bool:
    """Whether float's kept set, whose F1 against float's jittered is ``stable``, is stable enough to judge
    ``needed`` objects by: at least ``1 − 1 / (4·needed)`` (module docstring)."""
    return stable >= 1.0 - 1.0 / (4.0 * max(needed, 1))


def box_iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one ``x1 y1 x2 y2`` box with each of ``others`` ``[K, 4]``."""
    x1 = np.maximum(box[0], others[:, 0])
    y1 = np.maximum(box[1], others[:, 1])
    x2 = np.minimum(box[2], others[:, 2])
    y2 = np.minimum(box[3], others[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda b: np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)  # noqa: E731
    union = area(box) + area(others) - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def _nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy NMS: indices kept, best score first."""
    order = list(np.argsort(-scores, kind="stable"))
    keep: list[int] = []
    while order:
        i = order.pop(0)
        keep.append(i)
        if order:
            rest = np.asarray(order)
            order = [j for j, o in zip(order, box_iou(boxes[i], boxes[rest])) if o <= iou]
    return keep


def detections(scores: np.ndarray, boxes: np.ndarray, threshold: float,
               iou: float = NMS_IOU) -> tuple[np.ndarray, np.ndarray]:
    """``(classes [K], boxes [K, 4])`` one image's reader keeps: ``scores [C, N]``, ``boxes [N, 4]``
    (``x1 y1 x2 y2``); each candidate's class is its best score, NMS per class."""
    best = scores.max(axis=0)
    cls = scores.argmax(axis=0)
    chosen = np.flatnonzero(best >= threshold)
    out_cls: list[int] = []
    out_box: list[np.ndarray] = []
    for c in np.unique(cls[chosen]):
        idx = chosen[cls[chosen] == c]
        for k in _nms(boxes[idx], best[idx], iou):
            out_cls.append(int(c))
            out_box.append(boxes[idx[k]])
    return np.asarray(out_cls, np.int64), np.asarray(out_box, np.float64).reshape(-1, 4)


def matched_pairs(ref: np.ndarray, got: np.ndarray) -> list[tuple[int, int]]:
    """``(float box, quantized box)`` index pairs of boxes ``[K, 4]`` (``x1 y1 x2 y2``) matched one to one at IoU ≥
    :data:`MATCH_IOU`, greedily, the best IoU first."""
    if not len(ref) or not len(got):
        return []
    pairs = sorted(((o, i, j) for i in range(len(ref)) for j, o in enumerate(box_iou(ref[i], got)) if o >= MATCH_IOU),
                   reverse=True)
    used_a: set[int] = set()
    used_b: set[int] = set()
    out: list[tuple[int, int]] = []
    for _, i, j in pairs:
        if i not in used_a and j not in used_b:
            used_a.add(i)
            used_b.add(j)
            out.append((i, j))
    return out


def matched_count(ref: tuple[np.ndarray, np.ndarray], got: tuple[np.ndarray, np.ndarray]) -> int:
    """Float detections with a quantized one of their class at IoU ≥ :data:`MATCH_IOU` (one each)."""
    return sum(len(matched_pairs(ref[1][ref[0] == c], got[1][got[0] == c])) for c in np.unique(ref[0]))


def box_ranges(rows: Rows) -> tuple[tuple[int, int], ...] | None:
    """The box rows' ranges: every non-sigmoid row where they are four, else the one non-sigmoid input of
    exactly four rows (the others: mask coefficients, read at kept detections only); None where neither."""
    if sum(b - a for a, b in rows.boxes) == 4:
        return rows.boxes
    four = [(a, b) for a, b in rows.boxes if b - a == 4]
    return (four[0],) if len(four) == 1 else None


def _split(x: np.ndarray, rows: Rows) -> tuple[np.ndarray, np.ndarray] | None:
    """``(scores [images, C, N], boxes [images, 4, N])`` of an output, or None where its rows do not fit."""
    total = max(stop for _, stop in (*rows.scores, *rows.boxes))
    boxes = box_ranges(rows)
    if x.ndim <= rows.axis or x.shape[rows.axis] != total or boxes is None:
        return None
    lead = int(np.prod(x.shape[:rows.axis], dtype=np.int64))
    x = np.asarray(x, np.float64).reshape(lead, total, -1)
    pick = lambda ranges: np.concatenate([x[:, a:b] for a, b in ranges], axis=1)  # noqa: E731
    return pick(rows.scores), pick(boxes)


def _as_xyxy(boxes: np.ndarray, corners: bool) -> np.ndarray:
    """``[N, 4]`` corners from the box rows ``[4, N]``."""
    b = boxes.T
    if corners:
        return b
    half = b[:, 2:] / 2
    return np.concatenate([b[:, :2] - half, b[:, :2] + half], axis=1)


def _objects(cls: np.ndarray, boxes: np.ndarray) -> int:
    """Float's objects among one image's detections ``(classes [K], boxes [K, 4])``: groups of one class
    joined by boxes that overlap at all (module docstring)."""
    found = 0
    for c in np.unique(cls):
        b = boxes[cls == c]
        link = np.array([box_iou(box, b) > 0 for box in b]) | np.eye(len(b), dtype=bool)
        reach = link.copy()
        while True:  # transitive closure: boxes chained by overlaps are one object
            wider = (reach.astype(np.int64) @ link.astype(np.int64)) > 0
            if np.array_equal(wider, reach):
                break
            reach = wider
        found += len({row.tobytes() for row in reach})
    return found


def _counts(pairs: Sequence[tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]],
            corners: bool, thresholds: Sequence[float] = THRESHOLDS) -> tuple[int, int, int, int]:
    """``(float's detections over the thresholds, lost, invented, float's objects at the lowest threshold)``."""
    ref_n = lost = invented = counted = 0
    for (s_ref, b_ref), (s_got, b_got) in pairs:
        for image in range(s_ref.shape[0]):
            box_r, box_g = _as_xyxy(b_ref[image], corners), _as_xyxy(b_got[image], corners)
            for t in thresholds:
                d_ref = detections(s_ref[image], box_r, t)
                d_got = detections(s_got[image], box_g, t)
                hits = matched_count(d_ref, d_got)
                ref_n += len(d_ref[0])
                lost += len(d_ref[0]) - hits
                invented += len(d_got[0]) - hits
                if t == thresholds[0]:
                    counted += _objects(*d_ref)
    return ref_n, lost, invented, counted


def f1_of(ref_n: int, lost: int, invented: int) -> float:
    """F1 of ``ref_n`` float detections of which ``lost`` were lost, beside ``invented`` ones."""
    hits = ref_n - lost
    return 2 * hits / max(2 * hits + lost + invented, 1)


def _jittered(scores: np.ndarray, boxes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Float's scores and boxes moved far below any format's step (:data:`JITTER`)."""
    s = np.clip(scores + rng.uniform(-JITTER, JITTER, scores.shape), 0.0, 1.0)
    return s, boxes * (1.0 + rng.uniform(-JITTER, JITTER, boxes.shape))


def judge_detections(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], rows: Rows,
                     needed: int) -> Detections | None:
    """Float's and the quantized model's detections compared over the feeds (module docstring);
    None where the output is not such a detector's (scores outside [0, 1], no four box rows,
    shapes that differ) or float detects fewer than ``needed`` objects; ``stable`` says whether
    float's own kept set held under a jitter (``Detections.judged``)."""
    pairs = []
    for r, g in zip(reference, candidate):
        if r.shape != g.shape or not (np.isfinite(r).all() and np.isfinite(g).all()):
            return None
        a, b = _split(r, rows), _split(g, rows)
        if a is None or b is None or a[0].min() < 0 or a[0].max() > 1:
            return None
        pairs.append((a, b))
    if not pairs:
        return None
    corners = True  # every candidate float keeps reads as x1 y1 x2 y2: corners, else centre and size
    for (s_ref, b_ref), _ in pairs:
        k = s_ref.max(axis=1) >= THRESHOLDS[0]  # [images, N]
        corners = corners and bool(np.all(b_ref[:, 2][k] >= b_ref[:, 0][k]) and np.all(b_ref[:, 3][k] >= b_ref[:, 1][k]))
    # float against float jittered, at the lowest threshold (the most detections) and first: a chaotic kept
    # set is not judged, and its comparison with the candidate (the costly part on thousands of boxes) not run
    draws = [_counts([(a, _jittered(*a, np.random.default_rng(seed))) for a, _ in pairs], corners, THRESHOLDS[:1])
             for seed in range(2)]
    if draws[0][3] < max(needed, 1):
        return None
    found = Detections(float("nan"), draws[0][0], 0, 0, needed, float(np.mean([f1_of(*own[:3]) for own in draws])))
    if not found.judged:
        return found
    ref_n, lost, invented, _ = _counts(pairs, corners)
    return Detections(float(f1_of(ref_n, lost, invented)), ref_n, lost, invented, needed, found.stable)
