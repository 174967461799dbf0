"""Which pages may confirm a mask verdict: the held-out pages alone; the calibration pages only break it
or leave it open (issue 27, analysis/maps.py "Which pages confirm", floor.py ``_judge_masks``).

ppocrv4_det BFP16 / MX9 and mrz_seg A16W8 held on 12 pooled pages (bound low ends 0.971-0.979 against
0.97) while their 4 held-out pages' bounds reached 0.961-0.964 and the task metric read 0.962-0.966:
the 8 calibration pages, whose ranges were fitted, confirmed them. Planted here: a 64x64 map whose
text line a candidate widens by ``k`` columns (page IoU 800 / (800 + 20k), exact).
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, floor_lines, measure, unconfirmed_text

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def page(widen: int = 0) -> np.ndarray:
    # a background of 0.3 carries the map's cosine (≥ 0.98 here), as a page's large flat regions do
    m = np.full((1, 1, 64, 64), 0.3, np.float32)
    m[0, 0, 10:30, 10:50 + widen] = 0.9
    return m


def verdict(held: list[int], seen: list[int] | None, floor: Floor = EIGHT):
    refs, gots = [{"p": page()} for _ in held], [{"p": page(w)} for w in held]
    more = None if seen is None else ([{"p": page()} for _ in seen], [{"p": page(w)} for w in seen])
    return measure(refs, gots, floor, prob_maps={"p": ()}, seen=more)


TIGHT = [0, 1, 0, 0, 1, 0, 0, 1]  # 8 calibration pages at 1.0 / 0.976: their pooled bound clears 0.95


def test_held_out_pages_straddling_while_calibration_pages_hold_are_named():
    # held-out IoUs 1, 1, 0.909, 0.976: mean 0.971 above 0.95, bound about 0.935-1.007; pooled with TIGHT it held before
    v = verdict([0, 0, 4, 1], TIGHT)
    check = v.outputs["p"]
    assert check.mask_bound.pages == 12 and check.mask_bound.holds(EIGHT.top1)  # the pooled figure, said beside
    assert v.ok and not v.unjudged and v.unconfirmed == ["p"]
    b = check.unconfirmed
    assert b.count == 4 and "held-out pages" in b.unit and b.low < EIGHT.top1 <= b.share
    assert b.share == pytest.approx(np.mean([1, 1, 800 / 880, 800 / 820]))
    text = unconfirmed_text(v)
    assert "p: " in text and "could NOT confirm" in text and "4 held-out and 0 calibration samples" in text
    assert any("could NOT confirm" in line for line in floor_lines(v))
    assert v.ok_needs_calibration_feeds  # repair judges its candidates on the same pages
    # the user's repair_uncertain: it breaks, so repair acts on it
    strict = verdict([0, 0, 4, 1], TIGHT, Floor("8-bit", *FAMILY_FLOORS["8-bit"], confirm=True))
    assert not strict.ok and strict.broken == ["p"]


def test_held_out_pages_clearly_holding_hold_without_a_warning():
    v = verdict([0, 1, 0, 1], TIGHT)  # held-out 1, 0.976, 1, 0.976: bound about 0.977-0.999
    assert v.ok and not v.unjudged and not v.unconfirmed and not v.advisories
    assert unconfirmed_text(v) == "" and not any("NOT" in line for line in floor_lines(v))


def test_held_out_mean_below_the_floor_is_not_judged_on_calibration_pages_that_hold():
    # held-out 1, 0.909, 0.909, 0.976: mean 0.949 below 0.95 by a spread that could be chance; TIGHT pooled holds
    v = verdict([0, 4, 4, 1], TIGHT)
    check = v.outputs["p"]
    assert v.ok and v.unjudged == ["p"] and not v.unconfirmed
    assert check.mask_bound.pages == 4 and check.seen_feeds == 0 and check.mask_bound.iou < EIGHT.top1


def test_calibration_pages_may_still_break_a_mask_the_held_out_pages_hold():
    # held-out 1, 1, 1, 0.976 hold on 4 pages; 8 calibration pages at 0.87-0.89 break it pooled
    v = verdict([0, 0, 0, 1], [5, 6, 5, 6, 5, 6, 5, 6])
    assert not v.ok and v.outputs["p"].mask_bound.breaks(EIGHT.top1) and v.outputs["p"].seen_feeds == 8
