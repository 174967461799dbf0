"""Rows judged by their top-1 whose float top two are within the quantization's own noise: near-ties.

Why: a class output judged by rows (a classifier's ``[N, C]``, a pooled head) holds its floor by the
rows that kept float's arg-max, with a bound on their count (analysis/evidence.py). Every row kept
counts as one certain read, also a row whose float top-1 beats its top-2 by less than the format moves
that gap on other rows: that it was kept is luck, and a larger sample flips a share of such rows. The
fuzz's pooled heads under MXFP8_E4M3 (bench/fuzz_silent.py, seed 2 m000 and seed 3 m005: a mean-pooled
sequence's class scores) kept 32 of 32 rows on the held-out and calibration feeds, Wilson's low end
0.951 against the 8-bit floor 0.95: "holds, confirmed"; on 256 fresh feeds they kept 0.949 and 0.941
(bench/RESULTS.md, repaircurse and detsilent).

**The estimate** (:func:`row_ties`). Per row, float's margin ``m = z1 − z2`` (its top-1 over its best
other class) and what the quantized row keeps of it, ``q`` (its score of float's class over its best
other class); the margin lost is ``m − q`` and the row flips where it exceeds ``m`` (as a read's
positions: analysis/class_scores.py). The losses of the rows judged are the format's noise on this
output, measured, not assumed. A row kept whose margin is below some of those losses is a
**near-tie**: it flips with the chance that a loss drawn from them reaches its margin, the share of
the losses at least its margin (the empirical distribution only: a row whose margin is above every
loss seen is counted kept outright, so an output whose margins stand clear of its noise keeps its
verdict exactly). The rows a sample like this keeps on average are the rows less every row's chance
(a row lost has its own: its loss reached its margin, so its chance is at least one loss in all), the
margins' estimate of analysis/class_scores.py on the losses' own distribution; where it is below the
rows seen kept, it is the share (the lower of the two, as for reads). The floor holds that fractional
count against its bound (analysis/floor.py ``_judge_row_ties``), so a near-tie read counts as
uncertain and no more, and a verdict of rows whose ties the bound cannot absorb says *could NOT
confirm* instead of "holds".

Measured (bench/RESULTS.md, detsilent): the two pooled heads above read 0.9766 and 0.9492 ("could NOT
confirm"); anr_ar_decoder's 64 held-out rows under BFP16 / MX9 / MXINT8 (64 of 64 kept, 2 ties each)
0.9917 / 0.9941 / 0.9907 where its task metric reads 0.9922 / 0.9922 / 0.9805 on other data: at those
rates 64 rows cannot confirm 0.97, which the rows kept alone had said.

Not a break: the estimate may read below the floor where the rows seen held it (few rows, wide
noise); the rows seen and their count stay the judgement, the estimate only withholds the
confirmation (a break on estimated rows alone is class_scores' reads' rule, with its own evidence).

**A break by pooled rows judged by the estimate** (:meth:`RowMargins.judge` with ``clear_losses``; floor
``_spare_near_ties``). Where the held-out and calibration rows pooled break a top-1 that the held-out rows did
not, the flips may be float's own near-ties: tempocnn's CNN (a softmax over 256 tempo classes, 61 pooled rows)
lost 2 rows under BF16 whose float top two were 0.0035 and 0.0059 apart, where BF16 moves this output by about
0.003; 0.967 < 0.97 broke the floor and repair stepped up 29-47 of its nodes, while 48 fresh clips agreed 1.000
either way (bench/RESULTS.md, newmodels30 section 5). Such a break stands only where the rows a sample like this
keeps on average are below the floor too, with one change to the estimate: a flipped row whose float margin is
above every loss the format made on the rows it kept is a **clear loss**, counted lost outright and kept out of
the noise. Why: a flipped row's own loss reaches its margin by definition, so in the noise a few rows lost by far
more than the format moves any other row vouch for each other (three rows of margin 1 lost by 2 among 37 moved
by 0.001 read 0.994 kept on average: no break); as clear losses they are lost (37 of 40). A flip within the kept
rows' noise stays a chance, as every kept near-tie does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

__all__ = ["RowMargins", "RowTies", "row_ties"]


@dataclass(frozen=True)
class RowTies:
    """Rows of a top-1 judgement with their near-ties counted by their chance to flip (module docstring)."""

    #: rows judged
    rows: int
    #: rows whose arg-max kept float's
    kept: int
    #: rows less each row's chance to flip (the share of the losses seen at least its margin): the rows a
    #: sample like this one keeps on average
    estimated: float
    #: rows kept whose margin is below the largest loss seen (a chance to flip above 0)
    near: int
    #: the largest margin loss seen (the format's noise on this output, in the output's own units)
    noise: float
    #: rows lost counted lost outright, their margin above every kept row's loss (``judge(clear_losses=True)``)
    clear: int = 0

    @property
    def share(self) -> float:
        """The share of rows kept: the estimate where it is below the rows seen kept (near-ties lost on
        average), else the rows seen (flips the estimate spreads over the other rows are seen already)."""
        return min(self.estimated, self.kept) / self.rows if self.rows else 1.0


def _top_two(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``x`` (``[rows, C]``): its arg-max, its largest and its second largest value (one partial
    sort in the scores' own dtype: no float64 copy of a line's 40 x 6625 scores)."""
    two = np.partition(x, x.shape[1] - 2, axis=1)[:, -2:].astype(np.float64)
    return np.argmax(x, 1), two[:, 1], two[:, 0]


class RowMargins:
    """The rows a top-1 judgement counts, feed by feed; :meth:`judge` takes their margins and counts their
    near-ties (module docstring).

    :meth:`add` keeps the feed's arrays (the floor's own, alive for its judgement) and :meth:`judge` takes the
    margins (three numbers a row): the floor adds every feed of a row-judged output as it reads it, but asks
    for the ties only where the rows hold and confirm the floor (``floor._judge_row_ties``), so a broken, unjudged
    or unconfirmed output takes no margins (before, every feed's two partial sorts ran for every such output:
    a line's 40 x 6625 scores each)."""

    def __init__(self) -> None:
        self._pairs: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        """One feed's float and quantized scores ``[..., C]`` (the rows: every index of the axes before the last)."""
        self._pairs.append((ref, got))

    def with_pairs(self, pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> "RowMargins":
        """A tally of these rows and ``pairs``' (the calibration feeds' rows pooled with the held-out ones); this
        one unchanged."""
        out = RowMargins()
        out._pairs = [*self._pairs, *pairs]
        return out

    def judge(self, clear_losses: bool = False) -> RowTies | None:
        """The rows added with their near-ties counted; None where none was added. ``clear_losses``: flipped rows
        whose margin is above every kept row's loss counted lost outright and out of the noise (a pooled break
        judged: module docstring, "A break by pooled rows")."""
        found = [f for f in (_margins(ref, got) for ref, got in self._pairs) if f is not None]
        if not found:
            return None
        m, q, kept = (np.concatenate(part) for part in zip(*found))
        rows = int(m.size)
        clear = np.zeros(rows, bool)
        if clear_losses:
            clear = ~kept & (m > (np.max((m - q)[kept]) if kept.any() else -np.inf))
        loss = np.sort((m - q)[~clear])
        if not loss.size:  # every row a clear loss
            return RowTies(rows, 0, 0.0, 0, float(np.max(m - q)), rows)
        # each row's chance to flip: the share of the losses at least its margin (a row lost has its own)
        chance = np.where(clear, 1.0, (loss.size - np.searchsorted(loss, m, side="left")) / loss.size)
        return RowTies(rows, int(np.count_nonzero(kept)), float(rows - chance.sum()),
                       int(np.count_nonzero(chance[kept] > 0)), float(loss[-1]), int(np.count_nonzero(clear)))


def _margins(ref: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(float's margins, what the quantized rows keep of them, kept)`` of one feed's rows (module docstring);
    None where no row is finite on both sides or the shapes do not pair."""
    r, g = np.asarray(ref), np.asarray(got)
    if r.shape != g.shape or r.ndim < 1 or r.shape[-1] < 2:
        return None
    r2, g2 = r.reshape(-1, r.shape[-1]), g.reshape(-1, g.shape[-1])
    finite = np.isfinite(r2).all(1) & np.isfinite(g2).all(1)
    if not finite.all():
        r2, g2 = r2[finite], g2[finite]
    if not r2.shape[0]:
        return None
    top, r_first, r_second = _top_two(r2)
    g_top, g_first, g_second = _top_two(g2)
    at = np.take_along_axis(g2, top[:, None], 1)[:, 0].astype(np.float64)
    kept = g_top == top  # as the floor's top-1 counts a row kept
    # the quantized score of float's class over its best other class
    return r_first - r_second, np.where(kept, g_first - g_second, at - g_first), kept


def row_ties(pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> RowTies | None:
    """The rows of ``pairs`` (float, quantized arrays ``[..., C]``, the rows a top-1 counts: every index
    of the axes before the last) with their near-ties counted (module docstring); None where no row
    is finite on both sides or the class axis has fewer than two classes."""
    tally = RowMargins()
    for r, g in pairs:
        tally.add(r, g)
    return tally.judge()
