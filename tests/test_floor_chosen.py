"""Repair's after-figure: a verdict chosen among candidates on the same samples is bounded for the choice
(issue 27 items 2 and 5; analysis/evidence.py, "Chosen among candidates"; ``floor.chosen``).

Repair delivers the first candidate whose verdict holds (and, with reads enough, confirms) on the floor's
samples, and its after-figure was that very verdict: under the reference A8W8 YOLOv8n said "after: F1 0.9675",
0.946 on 96 fresh images (bench/RESULTS.md, a8acc15; floor16 measures the gap on several models). A bound at 90 %
covers one share 90 % of the time; the best of four candidates at the floor is "confirmed" far more often than
10 %. The delivered verdict now takes its confirming ends at Bonferroni's ``1 − 0.1 / k`` and says what it was
measured on.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxptq.analysis.evidence import CONFIDENT, chosen_level, share_bound
from onnxptq.analysis.floor import OutputCheck, Verdict, chosen, floor_lines, measure
from onnxptq.analysis.maps import MaskBound
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

from test_floor_margin import EIGHT_BIT, _classifier, _feeds, _rows


def _search(rng: np.random.Generator, share: float, count: int, among: int, level: float) -> tuple[bool, bool]:
    """One search in the rule repair follows (``repair.selected_unconfirmed``): ``among`` candidates, each judged on
    ``count`` independent reads of true agreement ``share``; the first whose bound at 90 % confirms the floor 0.95
    is delivered. ``(delivered, its bound at ``level`` confirms)``."""
    for _ in range(among):
        kept = int(rng.binomial(count, share))
        if share_bound(kept, count, CONFIDENT)[0] >= 0.95:
            return True, share_bound(kept, count, level)[0] >= 0.95
    return False, False


def test_the_best_of_four_candidates_at_the_floor_confirms_too_often_unless_the_bound_counts_the_choice():
    # four candidates exactly at the floor, 128 reads each: a model at the floor is confirmed on at most 10 % of
    # draws by one 90 % bound. Simulated (the reads' binomial draw, independent of the library's code paths).
    rng = np.random.default_rng(7)
    draws, among = 4000, 4
    plain = sum(_search(rng, 0.95, 128, among, CONFIDENT)[1] for _ in range(draws)) / draws
    rng = np.random.default_rng(7)
    wide = sum(_search(rng, 0.95, 128, among, chosen_level(CONFIDENT, among))[1] for _ in range(draws)) / draws
    assert plain > 0.10 + 3 * math.sqrt(0.1 * 0.9 / draws)  # the curse: the delivered verdict "confirms" too often
    assert wide <= 0.10  # widened for the four candidates: within what one bound promises
    assert chosen_level(CONFIDENT, 1) == CONFIDENT and chosen_level(0.9, 4) == pytest.approx(0.975)


def test_a_share_that_confirmed_one_candidate_is_could_not_confirm_once_chosen_among_several():
    verdict = measure(*_rows(0, 64), EIGHT_BIT, {"logits": None})  # 64 of 64: bound 0.9753 at 90 %
    assert verdict.ok and not verdict.unconfirmed
    after = chosen(verdict, 4)  # at 1 − 0.1/4 its low end is 0.9434 < 0.95
    assert after.ok and after.unconfirmed == ["logits"] and after.floor.among == 4
    assert after.outputs["logits"].unconfirmed.low == pytest.approx(64 / (64 + 1.959964 ** 2), abs=1e-4)  # Wilson, all kept
    assert "could NOT confirm" in after.outputs["logits"].describe()
    assert not verdict.unconfirmed and verdict.floor.among == 1  # the search's own verdict is left as judged
    lines = "\n".join(floor_lines(after, {"stepped_up": {"dense1": "stepped up: 16-bit activations"}}))
    assert "repair chose this model among 4 builds on them" in lines and "NOT CONFIRMED" in lines
    assert chosen(verdict, 1) is verdict
    sure = measure(*_rows(0, 400), EIGHT_BIT, {"logits": None})
    assert not chosen(sure, 6).unconfirmed  # 400 of 400 confirm at 1 − 0.1/6 too


def test_broken_and_unjudged_outputs_keep_their_state_when_chosen():
    broken = measure(*_rows(20, 64), EIGHT_BIT, {"logits": None})
    few = measure(*_rows(0, 12), EIGHT_BIT, {"logits": None})
    assert not broken.ok and few.unjudged == ["logits"]
    assert not chosen(broken, 4).ok and chosen(few, 4).unjudged == ["logits"] and not chosen(few, 4).unconfirmed


def test_a_mask_s_pages_bound_is_widened_at_its_low_end():
    # ppocrv4_det's after-figure's shape: 12 pages, mean IoU 0.962, spread 0.02: holds at 90 %, not chosen among 4
    bound = MaskBound("above 0.3", 0.962, 0.962 - 1.363 * 0.02 / math.sqrt(12), 0.962 + 1.363 * 0.02 / math.sqrt(12), 12,
                      5000, 0.02, 0.96)
    assert bound.holds(0.95)
    wide = bound.at(chosen_level(CONFIDENT, 4))
    assert wide.high == bound.high and wide.low < bound.low and not wide.holds(0.95)
    t = wide.iou - wide.low  # the t quantile at 0.975 with 11 degrees of freedom is 2.201 (tables)
    assert t == pytest.approx(2.201 * 0.02 / math.sqrt(12), rel=1e-3)
    check = OutputCheck("maps", 0.99, 0.98, mask=("above 0.3", 0.962, 5000), mask_bound=bound, mask_floor=0.95)
    verdict = Verdict(EIGHT_BIT, {"maps": check}, samples=12)
    after = chosen(verdict, 4)
    assert after.ok and after.unconfirmed == ["maps"] and after.outputs["maps"].unconfirmed.low == pytest.approx(wide.low)
    assert check.unconfirmed is None


def test_repair_s_delivered_verdict_says_it_was_chosen_on_its_samples():
    # test_repair_curse's planted classifier: plain A8W8 breaks, repair steps dense1 up
    result = quantize(_classifier(12.0), resolve_config("A8W8"), _feeds(12.0))
    rep = result.repair
    assert rep["before"]["ok"] is False and rep["stepped_up"]
    assert result.floor.floor.among == rep["evaluations"] > 1
    assert rep["after"]["floor"]["chosen_among"] == rep["evaluations"]
    assert f"repair chose this model among {rep['evaluations']} builds on them" in result.summary()


def _embeddings(noise: float, feeds: int = 4, seed: int = 3) -> tuple[list[dict], list[dict]]:
    """An embedding output ``[1, 64]`` per feed and a candidate whose error differs from feed to feed."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for i in range(feeds):
        r = rng.normal(0, 1, (1, 64)).astype(np.float32)
        g = r + rng.normal(0, noise * (0.3 + i), r.shape).astype(np.float32)
        refs.append({"embedding": r})
        gots.append({"embedding": g})
    return refs, gots


def _jackknife_low(refs: list[dict], gots: list[dict], level: float) -> tuple[float, float]:
    """The pooled cosine and its jackknife low end, by concatenation (not the floor's per-feed sums)."""
    from onnxptq.analysis.maps import t_quantile

    x = [np.asarray(f["embedding"], np.float64).ravel() for f in refs]
    y = [np.asarray(f["embedding"], np.float64).ravel() for f in gots]

    def cos(idx: list[int]) -> float:
        a, b = np.concatenate([x[i] for i in idx]), np.concatenate([y[i] for i in idx])
        return float(a @ b / np.sqrt((a @ a) * (b @ b)))

    n = len(x)
    whole = cos(list(range(n)))
    left = np.array([cos([j for j in range(n) if j != i]) for i in range(n)])
    se = math.sqrt((n - 1) / n * float(((left - left.mean()) ** 2).sum()))
    return whole, whole - t_quantile(level, n - 1) * se


def test_a_cosine_a_search_chose_by_is_bounded_by_its_spread_over_the_feeds():
    # sscd_distilled MXINT8's after-figure in shape: an embedding's pooled cosine just above the 16-bit floor's 0.99 on
    # 4 held-out feeds, chosen among 4 builds (on 48 fresh images it read 0.9876: bench/RESULTS.md, floor16)
    refs, gots = _embeddings(0.06)
    floor = resolve_config("MXINT8")
    from onnxptq.analysis.floor import floor_for

    judged = measure(refs, gots, floor_for(floor))
    check = judged.outputs["embedding"]
    assert judged.ok and 0.99 <= check.cosine < 0.999 and not judged.unconfirmed  # judged on its figure: holds
    after = chosen(judged, 4)
    whole, low = _jackknife_low(refs, gots, chosen_level(CONFIDENT, 4))
    bound = after.outputs["embedding"].unconfirmed
    assert after.ok and after.unconfirmed == ["embedding"] and bound is not None
    assert bound.share == pytest.approx(whole, abs=1e-6) and bound.low == pytest.approx(low, abs=1e-6) and low < 0.99
    assert bound.to_confirm and bound.to_confirm > 4 and "could NOT confirm" in after.describe()
    assert "embedding" not in judged.to_json()["outputs"]["embedding"].get("cosine_sums", {})  # not in the JSON
    tight = measure(*_embeddings(0.002), floor_for(floor))
    assert not chosen(tight, 4).unconfirmed  # far above the floor: its spread does not reach it


def test_a_chosen_cosine_that_more_feeds_would_decide_asks_for_the_second_look():
    # the cosine case of pipeline/second_look.could_confirm: its bound counts feeds, and the feeds that would
    # decide it (to_confirm) are what the reserve must reach; read as a Wilson share of 4 "rows" it never did
    from onnxptq.analysis.floor import floor_for
    from onnxptq.pipeline.second_look import could_confirm

    refs, gots = _embeddings(0.06)
    after = chosen(measure(refs, gots, floor_for(resolve_config("MXINT8"))), 4)
    check = after.outputs["embedding"]
    need = check.unconfirmed.to_confirm
    assert need is not None and need > after.samples
    assert could_confirm(check, after.samples, need)          # the reserve reaches the feeds that decide it
    assert not could_confirm(check, after.samples, need - 1)  # one short: the look would not decide it
