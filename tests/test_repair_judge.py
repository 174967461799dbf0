"""Repair never accepts a candidate on an output it could not judge by its reads alone (issue 27, repairjudge).

On an output whose reads are too few to judge ("NOT JUDGED") or to ever confirm a share, the floor's verdict
holds for nearly any candidate, and the search kept handing nodes back while it held. Now such an output is
measured by its margins on every judged sample (algorithms/repair_measure.py), and a candidate worse there
than one accepted before by more than the paired noise is not accepted.

The planted model: test_floor_sequences' CTC reader (the int8 weight grid of ``MatMul_2`` crushed by an
outlier row) with its head's glyph columns blurred halfway to their mean, so its decision margins are half
as wide and an 8-bit head flips glyphs the few feeds do not show. On 18 captchas (6 held out, 12 calibration
captchas pooled: 18 reads, the 8-bit floor needs 20) plain A8W8 breaks; before, repair handed the head back
to 8 bits on the unjudged reads (3 nodes stepped to 16 bits), delivering reads that keep float's on 0.897 of
300 fresh captchas; now that candidate is ruled out by its margins (0.040 reads lost against 0.011 with
everything stepped, ±0.003) and the whole plan at 16 bits is delivered: 1.000, in the same 4 builds.

Also here: which feeds confirm a share (``floor.share_of``): the held-out feeds' reads alone; calibration
feeds pooled into a judgement may break it or be shown, never confirm it.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.algorithms.repair_measure import Measure, measure_outputs, undecided, worse
from onnxptq.analysis.floor import Floor, measure
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.sessions import open_session

from test_floor_sequences import C, T, ctc_reader, glyph_feeds

EIGHT_BIT = Floor("8-bit", 0.98, 0.95)


@pytest.fixture(scope="module")
def planted():
    model = ctc_reader(blur=0.5)  # margins half as wide
    return model, quantize(model, resolve_config("A8W8"), glyph_feeds(18))


def test_an_unjudged_output_picks_the_better_measured_candidate(planted):
    model, res = planted
    rep = res.repair
    assert rep["before"]["ok"] is False and res.floor.unjudged == ["logits"]  # the delivered reads: too few to judge
    assert rep["ruled_by_measure"] >= 1 and rep["measured_outputs"] == ["logits"]
    assert "Gemm_head" in rep["stepped_up"]  # before: handed back to 8 bits on the unjudged reads
    assert rep["evaluations"] <= rep["allowance"]
    fresh = glyph_feeds(300, seed=99)
    f, q = open_session(model), open_session(res.model)
    same = np.mean([(f.run(None, x)[0].argmax(-1) == q.run(None, x)[0].argmax(-1)).all() for x in fresh])
    assert same >= 0.95  # before: 0.897 of 300 fresh captchas, below the 8-bit floor


def _reads(flip_margin: float, feeds: int = 12, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Feeds of ``[T, 1, C]`` class scores (a blank at most steps) and a candidate that takes ``flip_margin``
    of each glyph step's margin away (1.0 and more flips it)."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(feeds):
        r = rng.normal(0, 0.3, (T, 1, C))
        r[:, 0, 0] += 3.0
        steps = rng.choice(T, 6, replace=False)
        r[steps, 0, rng.integers(1, C, 6)] += 3.0 + rng.uniform(0.5, 3.0, 6)
        g = r.copy()
        top = r[steps, 0].argmax(-1)
        margin = np.sort(r[steps, 0], -1)[:, -1] - np.sort(r[steps, 0], -1)[:, -2]
        g[steps, 0, top] -= flip_margin * margin
        refs.append({"logits": r.astype(np.float32)})
        gots.append({"logits": g.astype(np.float32)})
    return refs, gots


def test_the_margins_measure_counts_what_a_candidate_takes_of_float_margins():
    refs, same = _reads(0.0)
    none = measure_outputs(["logits"], refs, same, EIGHT_BIT)["logits"]
    assert none.losses.shape == (12,) and none.mean == 0.0 and not none.cosine
    _, some = _reads(0.3)
    _, more = _reads(0.6)
    some_m = measure_outputs(["logits"], refs, some, EIGHT_BIT)["logits"]
    more_m = measure_outputs(["logits"], refs, more, EIGHT_BIT)["logits"]
    assert 0.0 < some_m.mean < more_m.mean < 1.0
    # the reads' layout is the floor's: [T, 1, C] is one read of T steps a feed, so a feed's loss is a read's
    assert np.all(more_m.losses <= 1.0) and more_m.allowed == pytest.approx(0.05)
    assert worse(more_m, some_m) and not worse(some_m, more_m) and not worse(some_m, some_m)


def test_worse_is_beyond_the_paired_noise_and_not_surely_within_the_floor():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.02, 0.06, 32)
    assert not worse(Measure(base + rng.normal(0, 0.002, 32), 0.03), Measure(base, 0.03))  # noise around it
    assert worse(Measure(base + 0.01 + rng.normal(0, 0.002, 32), 0.03), Measure(base, 0.03))
    assert not worse(Measure(base / 10 + 0.001, 0.2), Measure(base / 10, 0.2))  # 0.005 lost: twice that and its noise within 0.2
    assert not worse(Measure(base[:8] + 0.01, 0.03), Measure(base, 0.03))  # measured on other feeds: not compared


def test_undecided_outputs_are_the_unjudged_and_the_unconfirmable():
    few = measure(*_rows_pair(0, 12), EIGHT_BIT, {"logits": None})  # 12 rows < 20: not judged
    assert few.ok and few.unjudged == ["logits"] and undecided(few) == ["logits"]
    unsure = measure(*_rows_pair(0, 24), EIGHT_BIT, {"logits": None})  # 24 rows all kept: bound 0.949, none confirms
    assert unsure.ok and unsure.unconfirmed == ["logits"] and undecided(unsure) == ["logits"]
    confirmable = measure(*_rows_pair(2, 64), EIGHT_BIT, {"logits": None})  # 64 rows could confirm: the bound rule's
    assert confirmable.unconfirmed == ["logits"] and undecided(confirmable) == []
    sure = measure(*_rows_pair(0, 400), EIGHT_BIT, {"logits": None})
    assert undecided(sure) == []


def _rows_pair(flipped: int, count: int, feeds: int = 1) -> tuple[list[dict], list[dict]]:
    """``feeds`` feeds of ``count`` class rows in all, the candidate keeping float's arg-max on all but ``flipped``."""
    rng = np.random.default_rng(0)
    ref = rng.normal(0, 1, (count, 10)).astype(np.float32)
    ref[:, 0] += 4.0
    got = ref + rng.normal(0, 1e-3, ref.shape).astype(np.float32)
    got[:flipped, 1] = got[:flipped, 0] + 1.0
    refs, gots = np.array_split(ref, feeds), np.array_split(got, feeds)
    return [{"logits": r} for r in refs], [{"logits": g} for g in gots]


def test_calibration_rows_pooled_into_a_judgement_never_confirm_its_share():
    """8 held-out rows of a batch-1 classifier (too few: 20 needed) judged with 60 calibration rows: 68 rows all
    kept. Before, the bound was taken over the 68 (0.976 ≥ 0.95: "holds"); now over the 8 held-out ones (0.830):
    the share holds on its figure, "could NOT confirm", with the held-out count said."""
    held = _rows_pair(0, 8, feeds=8)
    seen_ref, seen_got = _rows_pair(0, 60, feeds=60)
    verdict = measure(*held, EIGHT_BIT, {"logits": None}, seen=(seen_ref, seen_got))
    check = verdict.outputs["logits"]
    assert verdict.ok and check.rows == 68 and check.seen_feeds == 60 and not check.top1_unjudged
    assert verdict.unconfirmed == ["logits"] and check.unconfirmed.count == 8
    assert check.unconfirmed.low == pytest.approx(8 / (8 + 1.2815515655446004 ** 2))
    broken = measure(*held, EIGHT_BIT, {"logits": None}, seen=_rows_pair(10, 60, feeds=60))  # they may still break it
    assert not broken.ok


def test_calibration_reads_pooled_into_a_judgement_never_confirm_its_share():
    """A CTC reader's reads on 48 captchas: 8 held out, 32 calibration captchas pooled (40 reads, all kept, as
    test_floor_few_feeds has it). The bound counts the 8 held-out reads: "could NOT confirm"."""
    many = quantize(ctc_reader(outlier=1.0), resolve_config("A8W8").replace(repair=False), glyph_feeds(48))
    check = many.floor.outputs["logits"]
    assert many.floor.ok and check.positions.reads == 40 and check.seen_feeds == 32 and not many.floor.unjudged
    assert many.floor.unconfirmed == ["logits"] and check.unconfirmed.count == 8 and check.held_count == 8
