"""Good rows confirmed again, bad rows still caught (issue 27 item 2): the floor's second look on a reserve of
held-out samples (pipeline/second_look.py, analysis/evidence.py "Two looks"), and the near-tie bound on the
held-out rows alone, its margins taken only where they are read (analysis/floor.py ``_judge_row_ties``).

A share of ~70 held-out reads at 0.99 cannot confirm 0.97 at 90 %: khmersm, mp_face_short and anr_ar_decoder rows
that meet their floor on the task metric read "could NOT confirm" (bench/RESULTS.md, lead 09:36-12:05). Where the
data is long enough, a reserve held out of calibration is judged only where the first look cannot confirm; the
two looks' levels keep the chance to confirm a model at the floor near one bound's 10 %.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis import row_ties
from onnxptq.analysis.evidence import CONFIDENT, FIRST_LOOK, SECOND_LOOK, ShareBound, share_bound
from onnxptq.analysis.floor import Floor, measure
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import HOLDOUT_RESERVE, MIN_RESERVE, reserve_stream, split_holdout
from onnxptq.pipeline.second_look import _beta_binomial_tail, could_confirm


def _binomial(n: int, p: float) -> np.ndarray:
    return np.array([math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)])


def _confirms(n1: int, n2: int, floor: float, first: float, second: float) -> float:
    """The exact chance that a model keeping each read with probability ``floor`` is confirmed by a first look on
    ``n1`` reads at ``first`` or, failing that, a second on ``n2`` (the first ones and ``n2 − n1`` more) at
    ``second``: summed over both looks' binomial counts, no sampling."""
    p1, more = _binomial(n1, floor), _binomial(n2 - n1, floor)
    one = np.array([share_bound(k, n1, first)[0] >= floor for k in range(n1 + 1)])
    two = np.array([share_bound(k, n2, second)[0] >= floor for k in range(n2 + 1)], np.float64)
    later = np.array([more @ two[k:k + n2 - n1 + 1] for k in range(n1 + 1)])
    return float(p1 @ np.where(one, 1.0, later))


@pytest.mark.parametrize("n1, n2, floor, inflated", [(80, 320, 0.97, True), (77, 308, 0.97, True), (35, 140, 0.95, True),
                                                     (100, 400, 0.95, True), (64, 256, 0.95, False), (32, 128, 0.97, False),
                                                     (200, 800, 0.97, False)])
def test_two_looks_confirm_a_model_at_the_floor_about_as_often_as_one(n1, n2, floor, inflated):
    """Two looks at 90 % each confirm a model exactly at the floor up to twice as often as one bound (0.14-0.21 where
    the first look can confirm); the looks' levels (95 % then 92 %) keep it near one bound at 90 % on all the reads
    (Wilson's coverage steps with the counts: 0.077-0.125 here, one bound 0.077-0.103)."""
    single = _confirms(n2, n2, floor, CONFIDENT, CONFIDENT)
    naive = _confirms(n1, n2, floor, CONFIDENT, CONFIDENT)
    looks = _confirms(n1, n2, floor, FIRST_LOOK, SECOND_LOOK)
    assert looks <= 0.126 and looks <= single + 0.045, (looks, single)
    assert naive >= looks - 1e-12
    assert not inflated or (naive > 0.14 and naive - looks > 0.05), (naive, looks)


def _exact_tail(at_least: int, draws: int, a: int, b: int) -> float:
    """``P(X ≥ at_least)``, X beta-binomial with integer ``a``, ``b``: exact rationals, Beta by factorials."""
    from fractions import Fraction

    def beta(x: int, y: int) -> Fraction:
        return Fraction(math.factorial(x - 1) * math.factorial(y - 1), math.factorial(x + y - 1))

    return float(sum(math.comb(draws, x) * beta(x + a, draws - x + b) for x in range(at_least, draws + 1)) / beta(a, b))


@pytest.mark.parametrize("at_least, draws, a, b", [(56, 56, 9, 1), (95, 96, 33, 1), (10, 50, 4, 2), (0, 20, 2, 3)])
def test_the_second_looks_chance_is_the_beta_binomial_tail(at_least, draws, a, b):
    assert _beta_binomial_tail(at_least, draws, a, b) == pytest.approx(_exact_tail(at_least, draws, a, b), rel=1e-9, abs=1e-12)


def test_a_look_is_taken_where_it_has_a_chance_to_confirm():
    """8 of 8 rows kept, 64 with the reserve (every one must be kept for 0.97): one chance in 7, not taken; 32 of 32
    rows, 128 with it: taken; a tagger's 149 of 150 tokens, 600 with it: taken."""
    def look(kept: int, count: int, floor: float, samples: int, held: int) -> bool:
        check = SimpleNamespace(unconfirmed=ShareBound.of(kept / count, count, "rows", floor), mask_bound=None)
        return could_confirm(check, samples, held)

    assert not look(8, 8, 0.97, 8, 64) and look(32, 32, 0.97, 8, 32) and look(149, 150, 0.97, 8, 32)
    assert not look(30, 32, 0.97, 8, 32)  # 2 lost of 32: 0.97 is out of reach of 128 rows


def _feeds(n: int) -> list[dict[str, np.ndarray]]:
    return [{"x": np.full((1, 2), i, np.float32)} for i in range(n)]


def _ids(feeds) -> list[int]:
    return [int(f["x"][0, 0]) for f in feeds]


def test_the_reserve_is_every_third_feed_after_the_first_held_out_ones():
    def split(n: int) -> tuple[list[int], list[int], list[int]]:
        rest, held, reused = split_holdout(_feeds(n), 8)
        assert not reused
        reserve: list = []
        calibrated = _ids(reserve_stream(rest, reserve, after=16))
        return _ids(held), _ids(reserve), calibrated

    held, reserve, calibrated = split(120)
    assert held == list(range(0, 24, 3)) and reserve == list(range(24, 120, 3))
    assert sorted(calibrated + held + reserve) == list(range(120)) and calibrated == sorted(calibrated)
    held, reserve, calibrated = split(400)  # at most HOLDOUT_RESERVE more
    assert reserve == list(range(24, 24 + 3 * HOLDOUT_RESERVE, 3)) and len(calibrated) == 400 - 8 - HOLDOUT_RESERVE
    # too short a reserve (45 feeds: 7 past the first 24) is calibrated on after all, none lost
    held, reserve, calibrated = split(45)
    assert reserve == [] and sorted(calibrated) == sorted(set(range(45)) - set(held))
    assert len(split(46)[1]) == MIN_RESERVE


W = np.random.default_rng(5).normal(0, 1, (16, 4)).astype(np.float32)


def _classifier():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"], name="head")]
    graph = helper.make_graph(nodes, "clean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(W, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _clear_rows(rng: np.random.Generator, rows: int, gap: float) -> np.ndarray:
    """``rows`` inputs whose float top-1 leads its runner-up by at least ``gap`` (well clear of BF16's rounding)."""
    out = []
    while len(out) < rows:
        x = rng.normal(0, 1, 16).astype(np.float32)
        top = np.sort(x @ W)
        if top[-1] - top[-2] >= gap:
            out.append(x)
    return np.stack(out)


def _tied_rows(rng: np.random.Generator, rows: int) -> np.ndarray:
    """``rows`` inputs whose float top two are within 0.002 (flipped by 8-bit rounding on about half of them)."""
    out = []
    for _ in range(rows):
        x = rng.normal(0, 1, 16).astype(np.float64)
        logits = x @ W
        a, b = np.argsort(logits)[::-1][:2]
        v = (W[:, a] - W[:, b]).astype(np.float64)
        x += (0.001 - (logits[a] - logits[b])) * v / (v @ v)
        out.append(x.astype(np.float32))
    return np.stack(out)


@pytest.fixture(scope="module")
def clean_runs():
    """A classifier of 4 rows a sample, every row clear of the rounding, under BF16 (floor 0.97) on 24 samples (no
    reserve: one look) and on 96 (a reserve of 24)."""
    rng = np.random.default_rng(0)
    model, cfg = _classifier(), resolve_config("BF16")
    runs = {}
    for n in (24, 96):
        feeds = [{"x": _clear_rows(rng, 4, 0.3)} for _ in range(n)]
        runs[n] = quantize(model, cfg, feeds)
    return runs


def test_a_good_classifier_is_confirmed_by_the_second_look(clean_runs):
    one = clean_runs[24].floor  # 8 held-out samples, 32 rows all kept: 0.97 needs 54 at 90 %
    assert one.ok and one.unconfirmed == ["logits"] and one.samples == 8
    assert "second look" not in clean_runs[24].timings
    two = clean_runs[96]
    check = two.floor.outputs["logits"]
    assert two.floor.ok and not two.floor.unconfirmed, two.floor.describe()
    assert two.floor.samples == 32 and check.rows == 128 and check.top1 == 1.0
    assert two.floor.floor.confidence == SECOND_LOOK and "second look" in two.timings
    assert "32 held-out samples" in two.metrics_samples


def test_repair_uncertain_looks_again_before_it_repairs():
    """With ``repair_uncertain`` an unconfirmed share breaks the floor; the second look comes before repair, so the
    clean classifier's 128 held-out rows confirm it and nothing is kept float (one look: every node repaired)."""
    rng = np.random.default_rng(0)
    feeds = [{"x": _clear_rows(rng, 4, 0.3)} for _ in range(96)]
    result = quantize(_classifier(), resolve_config("BF16").replace(repair_uncertain=True), feeds)
    assert result.floor.ok and not result.floor.unconfirmed and result.floor.samples == 32
    assert not (result.repair or {}).get("kept_float") and not (result.repair or {}).get("stepped_up")


def test_a_break_the_first_look_missed_is_caught_by_the_second():
    """The first 8 held-out samples' rows are clear (could not confirm at the first look's 95 %), the reserve's are
    near-tied and flip under 8-bit rounding: the second look breaks the floor (repair off, so it is said)."""
    rng = np.random.default_rng(1)
    feeds = []
    for i in range(96):
        late_held = i >= 24 and i % 3 == 0  # the reserve (calibrate.reserve_stream)
        feeds.append({"x": _tied_rows(rng, 4) if late_held else _clear_rows(rng, 4, 0.5)})
    cfg = dataclasses.replace(resolve_config("A8W8"), repair=False)
    result = quantize(_classifier(), cfg, feeds)
    check = result.floor.outputs["logits"]
    assert result.floor.samples == 32 and "second look" in result.timings
    assert not result.floor.ok and check.top1 < 0.95, result.floor.describe()


def _rows(count: int, tie: float = 0.05) -> tuple[list[dict], list[dict]]:
    """One feed of ``count`` rows: class 0 leads by 4, the first 4 by ``tie``; the candidate shrinks every gap by
    0.02-0.2 and spares the near-ties (as tests/test_detsilent_row_ties.py)."""
    rng = np.random.default_rng(7)
    ref = np.zeros((count, 5), np.float32)
    ref[:, 1:] = rng.uniform(-3, 0, (count, 4))
    ref[:, 1], ref[:, 0] = 0.0, 4.0
    ref[:4, 0] = tie
    got = ref.copy()
    got[:, 0] -= np.linspace(0.02, 0.2, count).astype(np.float32)
    got[:4, 0] = ref[:4, 0] - 0.02
    return [{"logits": ref}], [{"logits": got}]


def test_a_share_no_second_look_could_confirm_has_one_look_at_ninety_percent():
    """At a first look (``FIRST_LOOK``): 40 held-out rows of a 16-bit top-1 with a reserve half as large again (60
    rows in all; 64 kept would confirm 0.97 at 92 %) are held against one bound at 90 %, as without a reserve; with
    a reserve 3 times as large (160 rows), against the first look's 95 %. The count decides, not the share."""
    rows = _rows(40, tie=3.0)
    assert share_bound(60, 60, SECOND_LOOK)[0] < 0.97 <= share_bound(64, 64, SECOND_LOOK)[0]
    short = measure(*rows, Floor("16-bit", 0.99, 0.97, confidence=FIRST_LOOK, reach=1.5), {"logits": None})
    bound = short.outputs["logits"].unconfirmed
    assert bound is not None and bound.confidence == CONFIDENT and bound.count == 40
    assert "(90% each side)" in bound.describe()
    long = measure(*rows, Floor("16-bit", 0.99, 0.97, confidence=FIRST_LOOK, reach=4.0), {"logits": None})
    assert long.outputs["logits"].unconfirmed.confidence == FIRST_LOOK


def test_the_near_tie_bound_counts_the_held_out_rows():
    """8 held-out rows (too few for the 8-bit floor's 20) pooled with 40 calibration rows, near-ties among both, under
    ``repair_uncertain``: the bound that withholds the confirmation counts the 8 held-out rows, as ``share_of`` does;
    before, the near-tie bound counted the 48 pooled rows ("0.98 on 48 rows") and stood in its place."""
    held, seen = _rows(8), _rows(40)
    said = measure(*held, Floor("8-bit", 0.98, 0.95, confirm=True), {"logits": None}, seen=seen)
    check = said.outputs["logits"]
    assert check.rows == 48 and check.seen_feeds == 1 and check.top1 == 1.0
    assert not said.ok and check.unconfirmed is not None
    assert check.unconfirmed.count == 8 and "near-ties" not in check.unconfirmed.unit


def test_margins_are_taken_only_where_the_ties_are_read(monkeypatch):
    """A broken top-1 (every row flipped) and an unconfirmed one take no margins; a confirmed one with near-ties does."""
    calls = []
    real = row_ties._top_two
    monkeypatch.setattr(row_ties, "_top_two", lambda x: calls.append(x.shape) or real(x))
    ref, got = _rows(40)
    flipped = [{"logits": got[0]["logits"][:, ::-1].copy()}]
    assert not measure(ref, flipped, Floor("8-bit", 0.98, 0.95), {"logits": None}).ok
    assert calls == []
    assert measure(*_rows(12), Floor("8-bit", 0.98, 0.95), {"logits": None}).outputs["logits"].top1_unjudged
    assert calls == []
    assert measure(*_rows(40), Floor("8-bit", 0.98, 0.95), {"logits": None}).unconfirmed == ["logits"]  # its ties read
    assert len(calls) == 2
