"""A wide linear head of independent per-position columns (multi-label activations), judged by the
decisions its reader takes per column, not by an arg-max across them.

Why: madmom's 2013 piano-note model ends in a linear layer ``[T, 88]``, one activation per key and
frame, trained key by key (no softmax: a note is on or off for each key alone), and read by
``NotePeakPickingProcessor``: a threshold of 0.5 per key, peaks, notes merged within 30 ms. The
class-score rule (:func:`onnxptq.analysis.class_scores.class_like_outputs`, rule 3) reads a linear
layer of ≥ 2 columns as class scores and judged its per-frame arg-max; 96 % of the frames are
silence, every key within ±0.1, so that arg-max is noise: FP16 "broke" at top-1 0.86 with cosine
1.0000, and repair kept 3-6 nodes float on all 8 presets, for nothing (with repair off FP16, A16W8
and MXINT8 keep note F1 ≥ 0.98; bench/RESULTS.md, "The sixteenth round of outside models").
analysis/head_kind.py tells regression fields by their untrained common shift, but only for ≤ 4
columns: the independent value ``1 / sqrt(C − 1)`` shrinks with ``C`` until class heads reach it
(LAC's CRF emissions 0.133 against 0.131; a CTC captcha head, vtop_captcha, 0.285 against 0.167), so
a shift share alone cannot move a wide head. Judging each key as a field (``fields.FieldCosines``)
would break on the silent keys' noise instead (A16W8's worst key 0.10 at note F1 0.98).

**Which heads** (:func:`multilabel_like`, by float's data on a head the class-score rule found by
structure, rule 3's linear layer): more than ``head_kind.MAX_COLUMNS`` columns, at least
``head_kind.MIN_POSITIONS`` positions, and two marks of columns trained one by one:

1. *the common shift trained* (head_kind's shift share, at least :data:`SHIFT_RATIO` times the
   independent value: every loss over alternatives leaves it at its initial size), and
2. *no winner per position* (:func:`margin_share`): the median over positions of the gap between the
   two highest values, over the columns' spread. Cross-entropy, CTC and a CRF train one class
   above the others at every position; independent columns are mostly all off (a silent frame)
   or several on together (a chord), so the top two sit together.

Measured on float's outputs (12 calibration + 4 held-out feeds; bench/multilabel_heads.py), every
linear head of the zoo with more than 4 columns and the narrow ones for scale:

| output | C | trained as | shift share / independent | margin share |
|---|---|---|---|---|
| madmom_notes_brnn | 88 | per key (regression to 0/1) | **2.14** | **0.036** |
| vtop_captcha | 37 | CTC | 1.71 | 7.8 |
| ddddocr_ocr | 8210 | CTC | 0.14 | 11.4 |
| captcha_whisperer | 37 | CTC | 0.01 | 4.5 |
| LAC | 59 | CRF | 1.01 | 1.69 |
| trueocr_order | 10 | cross-entropy | 1.21 | 1.31 |
| eeg_seizure (4 columns) | 4 | cross-entropy | 0.17 | 1.49 |

The margin separates them by a factor 36 (0.036 against 1.31), the shift by less (2.14 against
1.71); both must agree, so a CTC head whose blank dominates (a large margin) stays class scores
whatever its shift, and i.i.d. synthetic scores (shift ratio ≈ 1) too. :data:`MAX_MARGIN` sits near
the geometric middle of the nearest two.

**Judgement** (:class:`ColumnRuns`), as :mod:`onnxptq.analysis.threshold_cells` judges a heat map its
reader thresholds: the threshold is the reader's (madmom's 0.5 on an activation trained toward 0/1),
so the decisions are judged at :data:`LEVELS` evenly spread thresholds over the band between float's
background (its median value: a silent key) and its highest value, 0.2 to 0.8 of the way, the
thresholds a reader of a sigmoid map may set, and 0.5 among them. At each, a column's *objects* are
its runs of consecutive positions above the threshold (a note held over frames, a tag over
tokens); float's objects are matched with the quantized model's (one sharing a position is the same
object): lost and invented ones count against an F1 summed over the thresholds and feeds, held
against the top-1 floor. Beside it, the cosine of the cells either side keeps at the lowest
threshold (a confident activation whose value moved) against the cosine floor; the output's cosine
over every cell is said, not judged: the silent cells carry it (A16W8 moved them by a few hundredths,
far under any threshold: 0.86 over every cell, 0.9994 on the cells that matter, note F1 0.985). On fewer decisions than the floor needs (float's objects at the lowest threshold and those
invented there), calibration feeds are pooled in; still fewer, the verdict breaks only where its
flips would break the floor among that many decisions, else it says it could not judge the head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .head_kind import MAX_COLUMNS, MIN_POSITIONS, shift_share
from .threshold_cells import CellTally

__all__ = ["LEVELS", "MAX_MARGIN", "SHIFT_RATIO", "ColumnRuns", "column_thresholds", "margin_share", "multilabel_like"]

#: the shift share, over the independent columns' ``1 / sqrt(C − 1)``, a multi-label head reaches at least
SHIFT_RATIO = 1.5
#: the median top-two gap over the columns' spread a multi-label head stays under (class heads ≥ 1.3)
MAX_MARGIN = 0.25
#: thresholds per judgement, evenly from 0.2 to 0.8 of the way from float's background to its top
LEVELS = 25


def _rows(values: Sequence[np.ndarray]) -> np.ndarray:
    """Every position's columns ``[positions, C]`` in float64, pooled over the feeds (finite arrays only)."""
    rows = [np.asarray(v, dtype=np.float64).reshape(-1, np.shape(v)[-1]) for v in values if np.ndim(v) >= 1]
    rows = [r for r in rows if r.size and np.isfinite(r).all()]
    return np.concatenate(rows) if rows else np.zeros((0, 0))


def margin_share(values: Sequence[np.ndarray]) -> float:
    """The median over positions of the gap between the two highest columns, over the root-mean-square
    spread of the centred columns (``head_kind.shift_share``'s denominator); NaN where nothing varies."""
    z = _rows(values)
    if z.shape[0] == 0 or z.shape[1] < 2:
        return float("nan")
    centred = z - z.mean(axis=1, keepdims=True)
    spread = math.sqrt(float(centred.var(axis=0).mean()))
    if spread == 0.0:
        return float("nan")
    top = np.partition(z, z.shape[1] - 2, axis=1)[:, -2:]
    return float(np.median(top[:, 1] - top[:, 0])) / spread


def multilabel_like(values: Sequence[np.ndarray]) -> bool:
    """Whether float's outputs ``values`` (arrays ``[..., positions, C]``, rank ≥ 2) of a linear head are
    independent per-column activations rather than class scores (module docstring); False where it
    cannot be told (too few columns or positions, values that do not vary)."""
    if not values or np.ndim(values[0]) < 2:
        return False
    width = int(np.shape(values[0])[-1])
    if width <= MAX_COLUMNS:
        return False
    share, positions = shift_share(values)
    if positions < MIN_POSITIONS or not math.isfinite(share) or share < SHIFT_RATIO / math.sqrt(width - 1):
        return False
    margin = margin_share(values)
    return math.isfinite(margin) and margin < MAX_MARGIN


def column_thresholds(values: Sequence[np.ndarray]) -> tuple[float, ...]:
    """:data:`LEVELS` thresholds from 0.2 to 0.8 of the way from float's median value (the background)
    to its highest; empty where float's values do not rise above their median."""
    z = _rows(values)
    if not z.size:
        return ()
    low, high = float(np.median(z)), float(z.max())
    if not high > low:
        return ()
    return tuple(float(low + f * (high - low)) for f in np.linspace(0.2, 0.8, LEVELS))


def _runs(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    """``(float's runs, lost, invented)`` of the masks ``a`` (float) and ``b`` (quantized) ``[rows, T]``:
    runs of consecutive True along a row; a float run is kept where a quantized one shares a position."""
    pad = np.zeros((a.shape[0], 1), dtype=bool)
    fa, fb = np.concatenate([a, pad], 1).ravel(), np.concatenate([b, pad], 1).ravel()

    def labels(f: np.ndarray) -> np.ndarray:
        start = f & ~np.concatenate([[False], f[:-1]])
        return np.where(f, np.cumsum(start), 0)

    la, lb = labels(fa), labels(fb)
    both = fa & fb
    found, made = int(la.max(initial=0)), int(lb.max(initial=0))
    kept, hit = np.unique(la[both]).size, np.unique(lb[both]).size
    return found, found - kept, made - hit


@dataclass
class ColumnRuns(CellTally):
    """One multi-label head over the feeds (held-out, then calibration): per threshold float's runs,
    those lost and those invented; float's cells at the lowest threshold; the cosine sums of the cells
    either side keeps there."""

    thresholds: tuple[float, ...]
    #: per threshold: float's runs, lost, invented
    kept: np.ndarray = field(init=False)
    cells: int = 0
    #: float64 sums x², y², x·y over the cells either side keeps at the lowest threshold
    sums: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    feeds: int = 0
    #: feeds whose quantized values were not finite (a break)
    nonfinite: int = 0

    def __post_init__(self) -> None:
        self.kept = np.zeros((len(self.thresholds), 3), dtype=np.int64)

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        """One feed's float and quantized head (same shape ``[..., T, C]``, float finite: the caller's checks)."""
        r, g = np.asarray(ref, dtype=np.float32), np.asarray(got, dtype=np.float32)
        self.feeds += 1
        if not np.isfinite(g).all():
            self.nonfinite += 1
            return
        if r.ndim < 2:
            r, g = r[None], g[None]
        # runs along the positions axis (the last but one), one row per column and leading index
        rr = np.moveaxis(r.reshape(-1, *r.shape[-2:]), -1, 1).reshape(-1, r.shape[-2])
        gg = np.moveaxis(g.reshape(-1, *g.shape[-2:]), -1, 1).reshape(-1, g.shape[-2])
        for i, t in enumerate(self.thresholds):
            self.kept[i] += _runs(rr >= t, gg >= t)
        if not self.thresholds:
            return
        self.tally_cells(r, g, self.thresholds[0])
