"""The accuracy floor on small data: reads judged on calibration feeds too, or said to be unjudged (issue 27).

A user with 12 samples gives the floor 4 held-out ones (``calibrate.split_holdout``). ddddocr's
captcha reader (zoo; CNN + BiLSTM + CTC ``Gemm`` head) changes 6 % of its strings on 192 other
captchas under A16W8, yet on those 4 captchas no character flips: the old floor said "holds" (or
"too few positions") and nothing else. Its reads are now judged on the held-out *and* the first
calibration feeds (the rounding of a format's grid flips a near-tie on any feed), broken on either,
and a verdict that holds on fewer than ``1 / (1 − top1)`` reads says "could NOT judge" in the
warning, the summary and the plan instead of "holds" (analysis/floor.py ``_judge_reads``).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from onnxptq.algorithms.repair import REASON
from onnxptq.analysis.floor import floor_for, measure, readings_of
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, split_holdout
from test_floor_sequences import ctc_reader, glyph_feeds
from testkit import zoo


@pytest.fixture(scope="module")
def captchas():
    """ddddocr_ocr and the zoo's 12 calibration captchas: a user's small data."""
    model = zoo.get("ddddocr_ocr")
    return model, list(model.samples("calibration"))


def test_a16w8_reads_break_on_calibration_captchas_where_the_held_out_ones_saw_nothing(captchas):
    model, feeds = captchas
    assert len(feeds) == 12
    result = quantize(str(model.path()), resolve_config("A16W8").replace(repair=False), data=feeds)
    (name, check), = result.floor.outputs.items()
    assert not result.floor.ok and check.positions is not None and check.seen_feeds == 8
    assert check.positions.reads == 12 and check.positions.flipped >= 1 and check.top1 < 0.97
    assert "BROKEN" in result.summary() and "NOT within the floor" in result.summary()
    # What the floor saw before: the 4 held-out captchas alone, where no read changed.
    _, held, _ = split_holdout(feeds, DEFAULT_HOLDOUT)
    ref, got = zoo.session_runner(model.path()), zoo.session_runner(result.model)
    alone = measure([{name: ref(f)[0]} for f in held], [{name: got(f)[0]} for f in held], floor_for(result.config),
                    **readings_of(__import__("onnx").load(str(model.path()))))
    assert len(held) == 4 and alone.ok and alone.outputs[name].positions.flipped == 0
    assert alone.unjudged == [name]  # ... and now says it could not judge them


def test_a_fine_preset_is_not_repaired_and_the_unjudged_reads_are_said(captchas, caplog):
    model, feeds = captchas
    with caplog.at_level(logging.WARNING):
        result = quantize(str(model.path()), resolve_config("BF16"), data=feeds)  # defaults: repair on
    (name, check), = result.floor.outputs.items()
    assert result.floor.ok and check.positions.flipped == 0 and result.floor.unjudged == [name]
    assert not (result.repair or {}).get("kept_float") and REASON not in result.plan.skipped_nodes.values()  # repair did not act
    assert result.plan.to_json()["repair"]["unjudged"] == [name]
    text = result.summary()
    assert "top-1 NOT JUDGED" in text and "could NOT judge" in text and "needs 34" in text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.endswith("repair")]
    assert len(warnings) == 1 and "could NOT judge" in warnings[0] and "12 reads" in warnings[0]


def test_enough_reads_judge_a_fine_reader_to_hold():
    """The same judgement is a verdict, not a warning, once the reads are enough: a reader whose
    A8W8 reads hold (the planted outlier of test_floor_sequences taken out) on 8 held-out and 8
    calibration feeds (16 reads, the 8-bit floor needs 20) is unjudged; with 30 calibration feeds
    judged beside them it holds."""
    model, a8w8 = ctc_reader(outlier=1.0), resolve_config("A8W8")
    few = quantize(model, a8w8.replace(repair=False), glyph_feeds(48))
    assert few.floor.ok and few.floor.unjudged == ["logits"] and few.floor.outputs["logits"].positions.reads == 16
    many = quantize(model, a8w8.replace(repair=False), glyph_feeds(48), eval_samples=30)
    check = many.floor.outputs["logits"]
    assert many.floor.ok and not many.floor.unjudged and check.positions.reads == 38 and check.seen_feeds == 30
    assert "NOT JUDGED" not in many.summary() and np.isclose(check.top1, check.positions.agreement)
