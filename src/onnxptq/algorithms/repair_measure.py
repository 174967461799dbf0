"""How repair chooses between candidates on an output the floor could not judge (issue 27).

Why: the search (:mod:`.repair`) accepts a candidate where the floor's verdict holds. On an output whose
reads are too few to judge ("NOT JUDGED": fewer than ``Floor.needed``) or to ever confirm a share ("could
NOT confirm" with every read kept), the verdict holds for nearly any candidate, so the search, which keeps
handing nodes back while verdicts hold, delivers whichever candidate the unjudged reads let through.
bench/fuzz_silent.py seed 1 (bench/RESULTS.md, "The session's merges, checked"): m006 MX9 and m007 BFP16
stepped 1 of 2 and 7 of 11 nodes to BF16 and handed the rest back, reads 0.965 / 0.939 on 256 fresh feeds
against the 0.97 floor, where keeping them all stepped or float gave 0.973 / 1.000; the 32 reads had said
"NOT JUDGED" for both.

So on such an output the candidates are compared by a measure that does not run out of reads: the
**margins on every judged sample**. Per decision position (float's arg-max; its near-ties left out, as
the floor's reads do: ``class_scores.judge_positions``) the candidate's loss of float's margin (float's
top-1 − top-2 gap, less what the candidate keeps of it) is turned into the chance it flips a position
like it: the share of float's margins of that kind (a background class's, the others') below that loss
(float's margin CDF, pooled over the output's judged feeds). Logits (unbounded scores over three classes or
more) are read in units of each read's spread (float's standard deviation over the read's scores): a rounding
error grows with the activations' size, and so does a margin, so a large loss on a read of large scores is
no threat to a read of small ones. Read in absolute units, the CDF pairs each loss with every read's margin as
if they were independent, and on iqc_effnet_b3 (3 quality classes, one read a feed; loss and margin correlate
+0.65) put the graph's first 207 nodes at 16 bits at 0.072 reads lost on 240 fresh feeds, where they lost
0.029 (the whole plan at 16 bits: 0.040 against 0.0125); read in the spread, 0.036 and 0.015
(bench/RESULTS.md, repair16; tests/test_repair_measure_scale.py). A read's expected loss is one less the chance
all its positions keep; a feed's, the mean over its reads. Outputs without a class axis, or that the floor
read otherwise than as classes on their last axis (points, peaks, maps...: :func:`class_reads`), are measured by
``1 − cosine`` per feed, but for **per-sample scores** (:func:`score_reads`: a MOS, a rating, one value or a few per
sample, judged within ``analysis.scores.TOLERANCE`` of float's spread): there each sample's error, as a share of that
tolerance, is the loss (:func:`_score_losses`). Why: the cosine of a score is the reason the floor reads scores per
sample (a shared offset makes it blind; one value per feed has a cosine of 1 whatever its error), and so it was here:
fuzz18's s26 m004 MXFP4 (one scalar score) measured every candidate at a loss of 0, and the search handed back the
nodes whose candidate kept all 23 samples within the tolerance at up to 0.8 of it; it read 0.8945 of 256 fresh
samples within it against the 0.90 floor (bench/RESULTS.md, repair19 and repair20).

**The rule** (:func:`worse`): a candidate is not accepted on such an output where its mean per-feed loss
is above the best-measured accepted candidate's by more than its noise (the paired difference's standard
error over the same feeds, times the one-sided z of :data:`onnxptq.analysis.evidence.CONFIDENT`), unless
its loss taken twice (:data:`SAFETY`), its noise added, is within the loss the floor allows (``1 − top1`` of
reads, ``1 − cosine`` of the cosine floor): an output far above the floor does not hold the search to its
best candidate (every node float, often, whose loss is 0). Why twice: the margins see only those the few
feeds happen to hold, and their estimate is often low by a factor up to two (``class_scores._margin_cdf``):
on m006 MX9 the margins put the candidate handing 7 of 9 nodes back at 0.978 of its reads kept, and it
read 0.965 on the 256 fresh feeds; against the whole plan in BF16 it lost 0.0059 ± 0.0023 more: worse.
One mechanism for every search (the ladder's rungs, the mixed rung, the float search): the judge
(:class:`.repair._Judge`) applies it to every candidate it builds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Collection, Mapping, Sequence

import numpy as np

from ..analysis.class_scores import BACKGROUND_SHARE, TIE_TOLERANCE, _top_two, margin_chances
from ..analysis.evidence import CONFIDENT
from ..analysis.floor import Floor, Verdict
from ..analysis.scores import TOLERANCE as SCORE_TOLERANCE, score_values, spread_of

__all__ = ["Measure", "undecided", "class_reads", "score_reads", "measure_outputs", "worse"]

Z = NormalDist().inv_cdf(CONFIDENT)
#: A candidate whose measured loss, taken this many times (the margins' estimate runs low by up to twice) and its
#: noise added, is within the floor's allowed loss is not held to the best one's (module docstring).
SAFETY = 2.0


@dataclass(frozen=True)
class Measure:
    """One output's measure on one candidate: per judged feed, the expected share of its reads lost
    (``cosine``: ``1 − cosine``)."""

    losses: np.ndarray
    #: the loss the floor allows (``1 − top1`` of reads, ``1 − cosine`` of the cosine floor)
    allowed: float
    cosine: bool = False
    #: per-sample scores: each sample's error as a share of the scores' tolerance (:func:`_score_losses`)
    scores: bool = False

    @property
    def mean(self) -> float:
        return float(np.mean(self.losses)) if self.losses.size else 0.0

    def clears(self) -> bool:
        """Whether its loss, taken :data:`SAFETY` times for the estimate's bias and its noise added, is within the
        loss the floor allows."""
        n = self.losses.size
        se = float(np.std(self.losses, ddof=1)) / math.sqrt(n) if n > 1 else math.inf
        return SAFETY * self.mean + Z * se <= self.allowed

    def describe(self) -> str:
        what = "1 − cosine" if self.cosine else "score errors in tolerances" if self.scores else "reads lost (margins)"
        return f"{what} {self.mean:.4f} on {self.losses.size} feeds"


def undecided(verdict: Verdict) -> list[str]:
    """The outputs of a verdict that holds which its reads were too few to decide: not judged
    (``top1_unjudged``, not below the floor by chance: ``within_chance`` is repair's other rule), or a share
    that could not be confirmed even with every read kept (:func:`onnxptq.algorithms.repair.selected_unconfirmed`
    leaves those to this rule)."""
    names = []
    for name, check in verdict.outputs.items():
        if not check.ok or check.within_chance is not None:
            continue
        bound = check.unconfirmed
        few = bound is not None and not bound.confirmable
        if check.top1_unjudged or few:
            names.append(name)
    return names


#: The readings of :class:`~onnxptq.analysis.floor.OutputCheck` whose decisions are not an arg-max over the output's
#: last axis (a landmark's or a sampling grid's points, peaks, a curve, per-sample scores, a picture, independent
#: columns, thresholded cells or maps, masks, regions, detections, the user's own agreement): where the floor read
#: an output so, its last axis holds no classes to take margins of.
NOT_CLASSES = ("points", "peaks", "curve", "scores", "picture", "columns", "thresholded", "heat_cells", "mask",
               "regions", "user_agreement", "detections")


def class_reads(verdict: Verdict, names: Sequence[str]) -> frozenset[str]:
    """Those of ``names`` the floor read as classes on their last axis (top-1 rows or positions): none of
    :data:`NOT_CLASSES` set on its check. Only these are measured by their margins (:func:`measure_outputs`).

    Why: a shape says nothing of how an output is read. uvdoc's page grid ``[1, 2, 45, 31]``, read by the floor as
    points that move within a pixel, was measured as 31 "classes" per grid row: its columns' near-equal neighbours
    made margins of nothing, so 0.28-0.32 of such "reads" were lost by every candidate, and a paired difference of
    these meaningless figures ruled out the ends trial that held the floor (bench/RESULTS.md, repairmin and
    repair14): MX9 was delivered with 108 of 108 nodes in BF16."""
    out = set()
    for name in names:
        check = verdict.outputs.get(name)
        if check is not None and all(getattr(check, field, None) is None for field in NOT_CLASSES):
            out.add(name)
    return frozenset(out)


def score_reads(verdict: Verdict, names: Sequence[str]) -> frozenset[str]:
    """Those of ``names`` the floor read as per-sample scores (``analysis/scores.py``): measured by their errors
    against the scores' tolerance (:func:`_score_losses`), not by a cosine."""
    return frozenset(n for n in names if getattr(verdict.outputs.get(n), "scores", None) is not None)


def _score_rows(x: np.ndarray) -> np.ndarray:
    """One feed's score output as ``[samples, values]`` (``analysis.scores.score_values``; rows of entities: every
    row a sample)."""
    rows = score_values(x)
    return rows if rows is not None else x.reshape(-1, x.shape[-1] if x.ndim else 1)


def _score_losses(pairs: list[tuple[np.ndarray, np.ndarray]], floor: Floor) -> Measure | None:
    """Per feed, its samples' mean error as a share of the scores' tolerance (``TOLERANCE`` × float's spread of each
    value over every judged sample, as the floor's :class:`~onnxptq.analysis.scores.ScoreAgreement`; a sample's error
    its worst value's); None where float's values do not spread. The loss the floor allows, in these units: the mean
    share at which half-normal errors put ``1 − top1`` of the samples past the tolerance (``√(2/π) / z``, z the
    two-sided normal quantile of ``1 − top1``: 0.49 at a 0.90 floor, 0.41 at 0.95, 0.37 at 0.97), so that
    :meth:`Measure.clears` asks twice the measured share, its noise added, to stay within it (module docstring)."""
    rows = [(_score_rows(r).astype(np.float64), _score_rows(g).astype(np.float64)) for r, g in pairs]
    spread = spread_of(np.concatenate([r for r, _ in rows]))
    live = spread > 0
    if not live.any():
        return None
    losses = [float(np.mean(np.max(np.abs(g - r)[:, live] / (SCORE_TOLERANCE * spread[live]), axis=1))) for r, g in rows]
    z = NormalDist().inv_cdf(1.0 - (1.0 - floor.top1) / 2.0)
    return Measure(np.asarray(losses), math.sqrt(2.0 / math.pi) / z, scores=True)


def _arrays(pairs: Sequence[tuple[Any, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The feeds' ``(float, candidate)`` values where both are whole finite float arrays of one shape
    (a held form of a calibration feed's output, ``analysis.held_outputs``, is left out)."""
    out = []
    for r, g in pairs:
        if not isinstance(r, np.ndarray) or not isinstance(g, np.ndarray) or r.shape != g.shape or r.size == 0:
            continue
        if not np.issubdtype(r.dtype, np.floating) or not (np.isfinite(r).all() and np.isfinite(g).all()):
            continue
        out.append((r, g))
    return out


def _reads(x: np.ndarray) -> np.ndarray:
    """``x`` as ``[reads, positions, classes]``: a rank-≥3 output's longest non-class axis is its positions
    (the time axis of ``[T, 1, C]``, ``[T, B, C]`` and ``[B, T, C]``), one read per index of the others, as
    the floor reads it (``class_scores._sequences``); a rank-2 output's rows one-position reads, a rank-1
    vector one read of one position."""
    if x.ndim == 1:
        return x.reshape(1, 1, -1)
    if x.ndim == 2:
        return x.reshape(x.shape[0], 1, x.shape[1])
    axis = int(np.argmax(x.shape[:-1]))
    return np.moveaxis(x, axis, -2).reshape(-1, x.shape[axis], x.shape[-1])


def _chances(lost: np.ndarray, margins: np.ndarray) -> np.ndarray:
    """Each loss's chance of flipping a position like it: float's ``margins`` (sorted) CDF at it, as the
    floor's estimate reads it (``class_scores.margin_chances``, with its chord: the first margin alone sets a
    slope whose spread more data does not steady); 0 where nothing was lost or no margin was seen.
    PP-OCR cls's 12 rows without the chord put a candidate the cosine floor 0.9999 held at 0.04 reads lost,
    and the search kept every node float."""
    return margin_chances(np.maximum(lost, 0.0), margins) if margins.size else np.zeros_like(lost)


def _logits(pairs: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Whether float's scores are unbounded scores over at least three classes (logits), whose margins and losses
    :func:`_margin_losses` reads in each read's spread (:func:`_scale`): not probabilities (every feed's
    scores at least 0, each position's summing to 1), whose bounds already tie a loss to its margin, nor two
    classes, whose spread over a one-position read is its margin (a read in it would flip only where it did)."""
    first = pairs[0][0]
    if first.shape[-1] < 3:
        return False
    return not all(r.min() >= 0.0 and np.allclose(r.sum(-1, dtype=np.float64), 1.0, atol=1e-3) for r, _ in pairs)


def _scale(x: np.ndarray) -> np.ndarray:
    """Each read's spread (``x``: ``[reads, positions, classes]``): the standard deviation of float's scores over
    all its positions and classes, as ``[reads, 1]``; 1 where they are all equal. Over the whole read, not per
    position: a position's own spread over one-hot-like scores is its margin (one class far above the rest), and
    margins read in it would all look alike (the planted CTC reader of tests/test_repair_judge.py: a head handed
    back to 8 bits that loses 0.10 of fresh reads measured 0.02 so). Computed without a whole copy of ``x``."""
    flat = x.reshape(x.shape[0], -1)
    n = flat.shape[1]
    mean = flat.mean(-1, dtype=np.float64)
    square = np.einsum("rc,rc->r", flat, flat, dtype=np.float64) / n
    spread = np.sqrt(np.maximum(square - mean * mean, 0.0))
    return np.where(spread > 0, spread, 1.0)[:, None]


def _margin_losses(pairs: list[tuple[np.ndarray, np.ndarray]], floor: Floor) -> Measure | None:
    """Per feed, the expected share of its reads lost, from the margins (module docstring); None where
    float decides no position. Among reads of several positions, float's background class (its arg-max at
    most positions: a CTC blank) keeps margins of its own: each position's chance is read off the margins of
    its own kind (a blank read as a glyph inserts one, as a glyph lost drops one)."""
    feeds = []
    scaled = _logits(pairs)
    for r, g in pairs:
        # in the arrays' own type, a position's top two only taken to float64: no whole copy of a reader's
        # scores (PP-OCRv4 rec: [64, 40, 6625] a feed)
        r3, g3 = _reads(r), _reads(g)
        top = np.argmax(r3, -1)
        two = _top_two(r3).astype(np.float64)
        margin = two[..., 1] - two[..., 0]
        tie = margin <= TIE_TOLERANCE * np.max(np.abs(two), -1)
        kept_top = np.take_along_axis(g3, top[..., None], -1)[..., 0].astype(np.float64)
        g_two = _top_two(g3).astype(np.float64)
        # the best other class: the candidate's second where float's class is still its first, else its first
        kept = kept_top - np.where(np.argmax(g3, -1) == top, g_two[..., 0], g_two[..., 1])
        scale = _scale(r3) if scaled else 1.0  # logits: margins and losses read in each read's spread
        feeds.append((top, margin / scale, ~tie, (margin - kept) / scale))
    tops = np.concatenate([t.ravel() for t, *_ in feeds])
    if not tops.size:
        return None
    counts = np.bincount(tops)
    sequences = pairs[0][0].ndim >= 3
    background = int(np.argmax(counts)) if sequences and counts.max() > BACKGROUND_SHARE * tops.size else None
    kinds = [np.zeros_like(d) if background is None else t == background for t, _, d, _ in feeds]
    margins = {kind: np.sort(np.concatenate([m[d & (k == kind)] for (_, m, d, _), k in zip(feeds, kinds)])) for kind in (False, True)}
    if not margins[False].size and not margins[True].size:
        return None
    losses = []
    for (_, _, d, lost), k in zip(feeds, kinds):
        chance = np.where(k, _chances(lost, margins[True]), _chances(lost, margins[False])) * d
        read_lost = 1.0 - np.prod(1.0 - chance, axis=-1)  # per read: one less the chance all its positions keep
        losses.append(float(np.mean(read_lost)))
    return Measure(np.asarray(losses), 1.0 - floor.top1)


def _cosine_losses(pairs: list[tuple[np.ndarray, np.ndarray]], floor: Floor) -> Measure | None:
    losses = []
    for r, g in pairs:
        rr, gg = r.ravel().astype(np.float64), g.ravel().astype(np.float64)
        norm = float(np.linalg.norm(rr) * np.linalg.norm(gg))
        losses.append(1.0 - float(rr @ gg) / norm if norm > 0 else (0.0 if np.array_equal(rr, gg) else 1.0))
    return Measure(np.asarray(losses), 1.0 - floor.cosine, cosine=True) if losses else None


def measure_outputs(names: Sequence[str], reference: Sequence[Mapping[str, Any]],
                    candidate: Sequence[Mapping[str, Any]], floor: Floor,
                    classes: Collection[str] | None = None, scores: Collection[str] = ()) -> dict[str, Measure]:
    """Each of ``names`` measured on the feeds (float ``reference``, ``candidate``, one dict per feed: the
    held-out feeds, then the calibration feeds the candidate was judged on): by its margins where its last
    axis holds classes, else by its cosine (module docstring). ``classes``: the outputs the floor read as
    classes (:func:`class_reads`); an output outside it is measured by its cosine whatever its shape (None:
    every output may be). ``scores``: the outputs the floor read as per-sample scores (:func:`score_reads`), measured by
    their errors against the scores' tolerance (:func:`_score_losses`). Outputs with nothing to measure are left out."""
    found: dict[str, Measure] = {}
    for name in names:
        pairs = _arrays([(r.get(name), g.get(name)) for r, g in zip(reference, candidate)])
        if not pairs:
            continue
        if name in scores:
            got = _score_losses(pairs, floor)
            if got is not None:
                found[name] = got
            continue
        read = classes is None or name in classes
        axis = read and pairs[0][0].ndim >= 1 and pairs[0][0].shape[-1] >= 2 and all(r.shape[-1] == pairs[0][0].shape[-1] for r, _ in pairs)
        got = _margin_losses(pairs, floor) if axis else None
        got = got if got is not None else _cosine_losses(pairs, floor)
        if got is not None:
            found[name] = got
    return found


def worse(candidate: Measure, best: Measure) -> bool:
    """Whether ``candidate`` is worse than ``best`` (measured on the same feeds) by more than its noise and
    not surely within the floor (:meth:`Measure.clears`; module docstring): then it may not replace it."""
    if candidate.losses.shape != best.losses.shape or (candidate.cosine, candidate.scores) != (best.cosine, best.scores):
        return False  # not measured alike: nothing to compare (the feeds judged differ)
    if candidate.clears():
        return False
    diff = candidate.losses - best.losses
    n = diff.size
    mean = float(np.mean(diff))
    if mean <= 0.0:
        return False
    se = float(np.std(diff, ddof=1)) / math.sqrt(n) if n > 1 else 0.0
    return mean > max(Z * se, 1e-12)  # equal up to float sums' rounding is no difference
