"""Calibration's peak: float's judged outputs held as they are recorded, the guard's values not copied whole (issue 26 item 4).

Two things sat at the top of PP-OCRv4 rec A8W8's calibration (its peak RSS, the quantization's):
the 32 judged calibration feeds' ``[1, 40, 6625]`` softmax outputs, recorded whole and held in the
floor's form only once the pass ended (``Calibrated.hold_float_outputs``), and the range guard's 69
thinned tensors (21.5 MiB a feed) copied whole out of onnxruntime's buffers to keep 3.2 MiB of them.
Now the held-out feeds run first, so the floor's choice (``held_form_outputs`` on their outputs) is
made before the recorded outputs come, each held as it comes (``calibrate._FloatHolding``), and the
side fetch gets onnxruntime's own arrays and copies only what it keeps. Held here: the held forms
are those the pass gave after it, field for field; they are held during the pass already; the side
fetch is handed onnxruntime's arrays and keeps memory of its own (bench/RESULTS.md, quantcpu3).
"""

from __future__ import annotations


import numpy as np
import pytest

import onnxptq.pipeline.calibrate as cal
from onnxptq.analysis.held_outputs import hold_float
from onnxptq.analysis.held_scores import is_held
from onnxptq.calibration import runner
from onnxptq.config.presets import get_preset
from onnxptq.pipeline import guard
from onnxptq.sessions import open_session
from test_floor_strings import lines, softmax_reader

FIELDS = ("top", "at", "index", "value", "p_at", "p_value")


@pytest.fixture(scope="module")
def reader():
    return softmax_reader()


def test_judged_float_outputs_are_held_as_they_are_recorded(reader, monkeypatch):
    cfg = get_preset("A8W8")
    real = cal.collect_statistics
    during: list[list[dict]] = []

    def spy(*args, **kwargs):
        stats = real(*args, **kwargs)
        during.append([dict(o) for o in kwargs["float_outputs"]])  # as the pass left them, before any later step
        return stats

    made: list[int] = []
    real_readings = cal.floor_readings

    def readings_spy(*args, **kwargs):
        made.append(1)
        return real_readings(*args, **kwargs)

    monkeypatch.setattr(cal, "collect_statistics", spy)
    monkeypatch.setattr(cal, "floor_readings", readings_spy)
    calibrated = cal.calibrate_once(reader, cfg, lines(48), holdout=8)
    assert calibrated.holdout and not calibrated.holdout_reused and calibrated.held_forms == {"probs"}
    recorded = during[0]
    assert len(recorded) == len(calibrated.float_outputs) >= 20  # the reads judgement's feeds
    assert all(is_held(o["probs"]) for o in recorded), "float's judged outputs were recorded whole"
    # the same held forms as holding the pass's whole outputs afterwards gives, field for field
    session = open_session(calibrated.prepared)
    feeds = calibrated.judged_calibration_feeds(8)
    for feed, got in zip(feeds, calibrated.float_outputs):
        want = hold_float("probs", session.run(["probs"], feed)[0])
        held = got["probs"]
        assert (held.shape, held.seq_shape, held.dtype) == (want.shape, want.seq_shape, want.dtype)
        for field in FIELDS:
            assert np.array_equal(getattr(held, field), getattr(want, field)), field
    # the readings the holding used are the calibration's own (made once, not again by Calibrated.readings)
    assert calibrated.readings["decisions"] is not None and calibrated.held_forms == {"probs"}
    assert len(made) == 1, made


def test_without_held_out_feeds_nothing_is_held_during_the_pass(reader, monkeypatch):
    """Too little data to hold feeds out (the held-out feeds are calibration feeds, read whole): no
    choice can be made before the pass and none is; the outputs stay whole as before."""
    calibrated = cal.calibrate_once(reader, get_preset("A8W8"), lines(6), holdout=8)
    assert calibrated.holdout_reused
    assert not any(is_held(v) for o in calibrated.float_outputs for v in o.values())


class _Keeper(runner.SideFetch):
    def __init__(self, outputs: list[str], feeds: int) -> None:
        self.outputs, self.feeds, self.owned = outputs, feeds, []

    def take(self, values):
        self.owned.append({k: bool(np.asarray(v).flags.owndata) for k, v in values.items()})


def test_the_side_fetch_gets_onnxruntimes_arrays_and_the_recorded_outputs_are_copies(reader):
    feeds = lines(5)
    side = _Keeper(["h1", "probs"], 2)
    recorded: list[dict] = []
    runner.collect(reader, {"h1": "minmax"}, feeds, side=side, model_outputs=recorded, model_output_batches=3)
    assert len(side.owned) == 2 and all(not any(o.values()) for o in side.owned), side.owned  # not copied for it
    assert len(recorded) == 3 and all(o["probs"].flags.owndata for o in recorded)  # kept: copies of their own


def test_the_guards_capture_keeps_memory_of_its_own():
    """A value that fits the guard's budget is its own subsample (``subsample`` returns it): kept as a
    copy, not as a view of onnxruntime's buffer."""
    from test_guard_capture import EVERY, _data, _head

    cfg = get_preset("A8W8").replace(**EVERY)
    calibrated = cal.calibrate_once(_head(), cfg, _data(12), holdout=4)
    capture = guard.CalibrationCapture(calibrated.prepared, calibrated.plan, 8)
    given = {capture.fetched[n]: np.ones((1, 2, 2, 2), np.float32) for n in capture.parts}
    capture.take(given)
    for name, parts in capture.parts.items():
        assert not np.shares_memory(parts[0], given[capture.fetched[name]]), name
        assert np.array_equal(parts[0], given[capture.fetched[name]]), name
