"""A break the margins' estimate alone shows on fewer reads than the floor needs must be one the
estimate is sure of (issue 27 item 2: ``class_scores._surely_below``).

unidic's tagger under MXINT8 broke the 16-bit floor at 0.9650 on 12 sentences with none of 418
decision positions flipped; on 240 other sentences the same estimate reads 0.978 and 396 of 400
sentences keep every tag. sudachi's BF16 / A16W8 / MX9 broke on their 4 held-out sentences' margins
(0.95 / 0.96 / 0.94) where 399 / 398 / 397 of 400 sentences keep every tag (bench/RESULTS.md,
"False breaks on few reads"). The estimate's slope at 0 rests on the 5 smallest margins, worth about
5 flips of evidence whatever the positions: a point estimate a little below the floor is no
judgement on 12 reads. Built tag logits: uniform margins, a loss every position takes.
"""

from __future__ import annotations

import numpy as np

from onnxptq.analysis.class_scores import Scores, judge_positions
from onnxptq.analysis.floor import Floor, measure

READS, T, C = 12, 35, 12
FLOOR = Floor("16-bit", 0.0, 0.97)


def _tags(loss: float, flips: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``[READS, T, C]`` logits: every position decides (float's best 2, runner-up 2 − margin, the
    rest −4: no margin is a float near-tie), margins at the expected order statistics of a uniform spread over [0, 4] (density 1/4
    at 0), so the flip rate the margins estimate for a loss ``L`` is ``L / 4``; the quantized copy
    takes twice ``loss`` off the best score of the positions whose margin is at least 2 (half of
    them: the same estimate, and no margin is lost, so nothing flips by itself), and flips the
    ``flips`` positions of the largest margins to their runner-up."""
    n = READS * T
    margins = 4.0 * (np.arange(n) + 1) / (n + 1)
    ref = np.full((n, C), -4.0)
    rows = np.arange(n)
    top = 1 + rows % (C - 1)
    rival = (top % (C - 1)) + 1
    ref[rows, top] = 2.0
    ref[rows, rival] = 2.0 - margins
    got = ref.copy()
    got[rows, top] -= np.where(margins >= 2.0, 2.0 * loss, 0.0)
    for i in range(1, flips + 1):
        got[rows[-i], rival[-i]] = got[rows[-i], top[-i]] + 0.5
    return ref.reshape(READS, T, C), got.reshape(READS, T, C)


def _verdict(ref: np.ndarray, got: np.ndarray):
    return measure([{"y": r[None]} for r in ref], [{"y": g[None]} for g in got], FLOOR, {"y": Scores(C, "linear")}, reused=True)


def test_an_estimate_a_little_below_the_floor_with_nothing_flipped_is_not_judged():
    """A flip rate of 1.15 × the floor's (reads 0.965, as unidic MXINT8's 0.9650) and no position of
    420 flipped: main broke the floor; it is not judged (12 reads of the 34 a 0.97 floor needs)."""
    allowed = 1.0 - FLOOR.top1 ** (1.0 / T)
    ref, got = _tags(4.0 * 1.15 * allowed)
    p = judge_positions(list(ref[None]), list(got[None]))
    assert p.flipped == 0 and p.positions == READS * T and 0.96 < p.agreement < 0.97, p.describe()
    assert not p.judged(FLOOR.needed, FLOOR.top1)
    verdict = _verdict(ref, got)
    check = verdict.outputs["y"]
    assert verdict.ok and check.top1_unjudged, check.describe()


def test_an_estimate_far_below_the_floor_still_breaks_it_with_nothing_flipped():
    """Five times the floor's flip rate (reads 0.86): the estimate is sure of it, broken as before."""
    allowed = 1.0 - FLOOR.top1 ** (1.0 / T)
    ref, got = _tags(4.0 * 5.0 * allowed)
    p = judge_positions(list(ref[None]), list(got[None]))
    assert p.flipped == 0 and p.agreement < 0.9 and p.judged(FLOOR.needed, FLOOR.top1), p.describe()
    verdict = _verdict(ref, got)
    assert not verdict.ok and not verdict.outputs["y"].top1_unjudged


def test_one_flip_beside_an_estimate_below_the_floor_breaks_it():
    """Twice the floor's rate from margins and one flip seen (sudachi MXINT8 on its 4 held-out
    sentences: 1 of 125): the flip adds to the estimate's evidence, the break is judged."""
    allowed = 1.0 - FLOOR.top1 ** (1.0 / T)
    ref, got = _tags(4.0 * 2.0 * allowed, flips=1)
    p = judge_positions(list(ref[None]), list(got[None]))
    assert p.flipped == 1 and p.agreement < 0.97 and p.judged(FLOOR.needed, FLOOR.top1), p.describe()
    assert not _verdict(ref, got).ok
    ref, got = _tags(4.0 * 2.0 * allowed)  # the same estimate without the flip: not sure of it
    assert not judge_positions(list(ref[None]), list(got[None])).judged(FLOOR.needed, FLOOR.top1)


def test_enough_reads_judge_by_the_point_estimate_as_before():
    """On 36 reads (≥ 34) the estimate decides as it did: 1.15 × the floor's rate breaks it."""
    global READS
    saved, READS = READS, 36
    try:
        allowed = 1.0 - FLOOR.top1 ** (1.0 / T)
        ref, got = _tags(4.0 * 1.15 * allowed)
        verdict = _verdict(ref, got)
        assert verdict.outputs["y"].positions.flipped == 0 and not verdict.ok, verdict.describe()
    finally:
        READS = saved
