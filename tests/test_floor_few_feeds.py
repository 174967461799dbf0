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
    """ddddocr_ocr and the first 12 of the zoo's calibration captchas: a user's small data (the zoo
    itself calibrates on 48 since zoodata17, so its floor judges every preset)."""
    model = zoo.get("ddddocr_ocr")
    return model, list(model.samples("calibration"))[:12]


def test_a16w8_reads_are_judged_on_calibration_captchas_by_their_strings(captchas):
    """A16W8 flips one frame of a calibration captcha (the held-out ones show nothing). Judged by
    decision positions that broke the floor and repair kept 12 nodes float; the flip moves a
    blank/character edge and the string stays float's, so the strings of the 12 captchas hold as
    far as 12 can say: not judged, and said (tests/test_floor_strings.py). On the zoo's 192
    captchas 11 of A16W8's 12 changed strings change only where float is unsure (bench/RESULTS.md,
    "Readers judged by their strings")."""
    model, feeds = captchas
    assert len(feeds) == 12
    result = quantize(str(model.path()), resolve_config("A16W8").replace(repair=False), data=feeds)
    (name, check), = result.floor.outputs.items()
    assert result.floor.ok and check.positions is not None and check.seen_feeds == 8 and check.positions.strings
    assert check.positions.reads == 12 and check.positions.harmless >= 1 and check.positions.changed == 0
    assert result.floor.unjudged == [name] and "could NOT judge" in result.summary()
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
    assert f"NOT JUDGED: {name}" in text and "could NOT judge" in text and "needs 34" in text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name.endswith("repair")]
    assert len(warnings) == 1 and "could NOT judge" in warnings[0] and "12 reads" in warnings[0]


def test_enough_reads_judge_a_fine_reader_to_hold():
    """The same judgement is a verdict, not a warning, once the reads are enough: a reader whose
    A8W8 reads hold (the planted outlier of test_floor_sequences taken out). On 18 feeds (6 held
    out, 12 calibration feeds judged beside them: 18 reads, the 8-bit floor needs 20) it is unjudged
    and the warning says how much data would judge it; on 48 feeds with the defaults the floor keeps
    the 32 calibration feeds that confirm it (calibrate.reads_feeds, Floor.reads_wanted) and the reads hold — before, the first
    eval_samples (8) were all it judged, so no amount of data could judge a one-read-per-feed model."""
    model, a8w8 = ctc_reader(outlier=1.0), resolve_config("A8W8")
    few = quantize(model, a8w8.replace(repair=False), glyph_feeds(18))
    assert few.floor.ok and few.floor.unjudged == ["logits"] and few.floor.outputs["logits"].positions.reads == 18
    assert "give at least 20 samples of data" in few.summary()
    many = quantize(model, a8w8.replace(repair=False), glyph_feeds(48))
    check = many.floor.outputs["logits"]
    assert many.floor.ok and not many.floor.unjudged and check.positions.reads == 40 and check.seen_feeds == 32
    assert "NOT JUDGED" not in many.summary() and np.isclose(check.top1, check.positions.agreement)


def _classifier(seed: int = 3):
    """A batch-1 classifier (``MatMul → Relu → Gemm`` to 10 classes, ``[1, 10]``): one row per sample."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.normal(0, 0.3, (32, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (64, 10)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.normal(0, 0.1, (10,)).astype(np.float32), "b2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"])]
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], [w1, w2, b2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_a_batch_one_classifier_is_judged_once_the_data_is_enough():
    """Rows are judged on the calibration feeds too where the held-out ones are too few: a batch-1
    classifier has one row per sample, the held-out feeds at most 8, and the 16-bit floor needs 34.
    Before, it was "too few rows to judge" with any amount of data (fewfeeds made that a warning:
    every such model warned). On 12 samples it is unjudged and the summary says how much data
    would judge it; on 48 the floor keeps the 32 calibration feeds there are (of the 54 that would confirm a
    share: Floor.reads_wanted; 8 more are the second look's reserve, calibrate.reserve_stream, not run here: 16
    held-out rows could not confirm a share either) and judges 40 rows."""
    model = _classifier()
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.normal(0, 1, (1, 32)).astype(np.float32)} for _ in range(48)]
    few = quantize(model, resolve_config("BF16").replace(repair=False), feeds[:12])
    assert few.floor.unjudged == ["logits"] and few.floor.outputs["logits"].rows == 12
    assert "give at least 34 samples of data" in few.summary()
    many = quantize(model, resolve_config("BF16").replace(repair=False), feeds)
    check = many.floor.outputs["logits"]
    assert many.floor.ok and not many.floor.unjudged and check.rows == 40 and check.seen_feeds == 32
    assert many.floor.samples == 8 and "second look" not in many.timings
    assert "NOT JUDGED" not in many.summary() and "calibration samples" in check.describe()
