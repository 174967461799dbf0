"""A thresholded map is judged at each threshold alone too, not only by the band's average (analysis/threshold_cells.py).

Why: a user reads *one* threshold we do not know. BlazeFace's short-range detector under A16W8 kept the band's
objects' F1 at 0.975 while at the package's 0.7 alone 1 of 30 objects was lost and 4 invented (F1 0.921,
bench/RESULTS.md "detectors judged at their users' thresholds"): the average over 25 thresholds dilutes a
crossing concentrated near one. The heat map here is test_floor_threshold_cells' built head (a sigmoid heat map
gating an offset map); its values are drawn: six faces a feed, all confident but one marginal one whose peak
sits just over 0.6 in float and just under it quantized, so only the threshold 0.6 sees it move.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.analysis.evidence import f1_share
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.analysis.threshold_cells import THRESHOLDS, ThresholdCells
from test_floor_threshold_cells import H, W, _head_model

SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def _outputs(marginal: int, feeds: int = 12, seed: int = 5) -> tuple[list[dict], list[dict]]:
    """Float's heat maps (``feeds`` of them, six single-cell faces each: five at 0.95, one at 0.61 in the first
    ``marginal`` feeds, 0.95 in the others) and a candidate whose marginal faces fall to 0.59; offsets equal."""
    rng = np.random.default_rng(seed)
    ref, got = [], []
    for i in range(feeds):
        z = np.full((1, 1, H, W), -4.0, np.float32)
        cells = rng.permutation(np.array([(y, x) for y in range(1, H - 1, 3) for x in range(1, W - 1, 3)]))[:6]
        for y, x in cells:
            z[0, 0, y, x] = _logit(0.95)
        gz = z.copy()
        if i < marginal:
            y, x = cells[0]
            z[0, 0, y, x], gz[0, 0, y, x] = _logit(0.61), _logit(0.59)
        offset = rng.normal(0, 1, (1, 2, H, W)).astype(np.float32)
        sig = lambda v: (1.0 / (1.0 + np.exp(-v))).astype(np.float32)  # noqa: E731
        ref.append({"heat": sig(z), "offset": offset})
        got.append({"heat": sig(gz), "offset": offset.copy()})
    return ref, got


@pytest.fixture(scope="module")
def readings():
    return readings_of(_head_model())


def test_the_band_holds_while_one_threshold_breaks(readings) -> None:
    ref, got = _outputs(marginal=10)  # 10 of 72 faces lost at 0.6 alone: F1 0.925 there
    verdict = measure(ref, got, SIXTEEN, **readings)
    check = verdict.outputs["heat"]
    decisions, f1, _ = check.thresholded
    assert decisions == 72 and f1 >= SIXTEEN.top1  # the band's average alone (the reading before) held
    worst = check.threshold
    assert worst is not None and worst.breaks and worst.threshold == pytest.approx(0.6)
    assert (worst.decisions, worst.lost, worst.invented) == (72, 10, 0) and worst.f1 == pytest.approx(124 / 134)
    assert worst.chance <= 0.1
    assert not verdict.ok and verdict.broken == ["heat"]
    assert "at threshold 0.6 alone: F1 0.9254 of 72 decisions (10 lost, 0 invented" in check.describe()


def test_one_threshold_below_the_floor_by_chance_is_named_not_judged(readings) -> None:
    ref, got = _outputs(marginal=5)  # 5 of 72 at 0.6 alone: F1 0.964, but a model at the floor errs so on 40 % of draws
    held = measure(ref, got, SIXTEEN, **readings)
    check = held.outputs["heat"]
    worst = check.threshold
    assert worst is not None and not worst.breaks and worst.f1 < SIXTEEN.top1 and worst.chance > 0.1
    assert held.ok and "heat" not in held.unjudged
    assert "that threshold NOT JUDGED alone" in check.describe()
    # the held-out feeds alone could not decide it: the calibration feeds are asked for and pooled in
    assert held.wants_calibration_feeds and check.kept_wants_seen
    more_ref, more_got = _outputs(marginal=12, seed=6)
    pooled = measure(ref, got, SIXTEEN, **readings, seen=(more_ref, more_got))
    pc = pooled.outputs["heat"]
    assert pc.seen_feeds == 12 and pc.threshold.decisions == 144 and pc.threshold.lost == 17
    assert pc.threshold.breaks and not pooled.ok  # 17 of 144 at 0.6: not chance


def test_the_f1_floor_as_a_share_of_decisions() -> None:
    for floor in (0.97, 0.95, 0.9):
        n = 10_000
        e = round(n * (1 - f1_share(floor)))
        assert 2 * (n - e) / (2 * n - e) == pytest.approx(floor, abs=1e-4)
    tally = ThresholdCells()
    tally.kept[THRESHOLDS.index(0.5)] = (100, 4, 0)  # F1 0.9796: holds the 0.97 floor
    assert tally.worst_threshold(0.97) is None
    tally.kept[THRESHOLDS.index(0.5)] = (9, 1, 0)  # F1 0.9412 on 9 decisions: one error, as a model at the floor makes often
    worst = tally.worst_threshold(0.97)
    assert worst.threshold == 0.5 and not worst.breaks and worst.chance == pytest.approx(1 - (1 - 0.06 / 1.03) ** 9)
    tally.kept[18] = (8, 1, 1)  # F1 0.875 on 9 decisions: two errors, at the floor on 9 % of draws
    worst = tally.worst_threshold(0.97)
    assert worst.threshold == pytest.approx(THRESHOLDS[18]) == pytest.approx(0.65) and worst.breaks and worst.chance < 0.1
    tally.fragments = True  # objects that are fragments of the reader's (runs of anchors): named, never broken alone
    assert not tally.worst_threshold(0.97).breaks and tally.worst_threshold(0.97).fragments


def test_a_detectors_score_levels_break_at_one_threshold_too() -> None:
    """PicoDet-style score levels (testkit/picodet.py, as tests/test_floor_det_levels.py builds them): per image four
    confident 6×6 objects and two single-cell ones at 0.61 that fall to 0.59: only the threshold 0.6 sees them go."""
    from onnxptq.sessions import open_session
    from testkit.picodet import picodet_head

    classes, size = 3, 32
    model = picodet_head(classes, size)
    session = open_session(model)
    names = [o.name for o in model.graph.output]
    rng = np.random.default_rng(3)
    ref, got = [], []
    for _ in range(8):
        x = np.full((1, classes, size, size), -5.0, np.float32)
        for r, c in ((2, 2), (2, 18), (18, 2), (18, 18)):
            x[0, int(rng.integers(classes)), r:r + 6, c:c + 6] = 3.0
        gx = x.copy()
        for r, c in ((12, 28), (28, 12)):
            cls = int(rng.integers(classes))
            x[0, cls, r, c], gx[0, cls, r, c] = _logit(0.61), _logit(0.59)
        ref.append(dict(zip(names, session.run(None, {"x": x}))))
        got.append(dict(zip(names, session.run(None, {"x": gx}))))
    verdict = measure(ref, got, SIXTEEN, **readings_of(model))
    check = verdict.outputs["levels:scores0+scores1"]
    assert check.thresholded[1] >= SIXTEEN.top1 and check.thresholded[0] >= SIXTEEN.needed  # the band's average holds
    assert check.threshold.breaks and check.threshold.threshold == pytest.approx(0.6) and check.threshold.lost == 16
    assert not verdict.ok and verdict.broken == ["levels:scores0+scores1"], verdict.describe()
