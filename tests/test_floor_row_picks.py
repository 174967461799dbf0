"""A one-column score over several rows a sample is advised on as a pick across the rows
(analysis/row_picks.py): the floor cannot know a caller picks the best row (CapSpot's icon matcher:
``[N, 1]`` Sigmoid, arg-max across the rows; 1-2 of 32 picks moved under BFP16/MX9/MXINT8 while
the floor held, bench/RESULTS.md branch slanet), so it says so, names float's thinnest picks and
how to tell it; told (``floor_output_agreement``), it judges the picks and says nothing more.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure
from onnxptq.analysis.row_picks import judge_picks
from onnxptq.config.presets import get_preset

FLOOR = Floor("16-bit", *FAMILY_FLOORS["16-bit"])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _samples(n: int, seed: int, shift: float) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """Float's scores of 4 candidates a sample, one clear best row, and on every other sample a
    runner-up within 0.05 logits; the candidate model moves each logit by up to ``shift``."""
    rng = np.random.default_rng(seed)
    ref, got = [], []
    for i in range(n):
        logits = rng.normal(-2.0, 1.0, 4)
        logits[0] = 3.0
        if i % 2:
            logits[1] = 3.0 - 0.03
        ref.append({"score": _sigmoid(logits)[:, None].astype(np.float32)})
        got.append({"score": _sigmoid(logits + rng.uniform(-shift, shift, 4))[:, None].astype(np.float32)})
    return ref, got


def test_picks_across_rows_are_advised_on_and_name_the_thin_ones() -> None:
    ref, got = _samples(4, 0, 0.2)
    verdict = measure(ref, got, FLOOR)
    assert verdict.ok  # the floor cannot know the reading: it does not break
    advice = verdict.outputs["score"].advisory
    assert advice is not None and "picks the row with the highest score" in advice, verdict.describe()
    # no pick moved on these 4 samples; the margins' estimate says they would (0.03-logit runner-ups, 0.2-logit moves)
    assert "floor_output_agreement={'score':" in advice and "below the top-1 floor" in advice and "0 of 4 seen to move" in advice
    picks = judge_picks([r["score"] for r in ref], [g["score"] for g in got])
    assert picks is not None and picks.thin[0][0] - picks.thin[0][1] < 0.01  # the 0.03-logit runner-ups named first
    assert f"{picks.thin[0][0]:.4f}/{picks.thin[0][1]:.4f}" in advice
    # a rounding far below the margins: nothing to estimate below, and 4 samples cannot say the picks hold
    small = measure(*_samples(4, 0, 0.01), FLOOR).outputs["score"].advisory
    assert small is not None and "NOT JUDGED on 4 samples (a top-1 floor of 0.97 needs 34)" in small


def test_told_reading_replaces_the_advice_and_is_judged() -> None:
    ref, got = _samples(4, 0, 0.2)
    pick = lambda r, g: float(r.argmax() == g.argmax())  # noqa: E731 (the docs' reading)
    moved = sum(1 - pick(r["score"], g["score"]) for r, g in zip(ref, got))
    verdict = measure(ref, got, FLOOR, agreements={"score": pick})
    check = verdict.outputs["score"]
    assert check.advisory is None and check.user_agreement == (1.0 - moved / 4, 4)
    assert verdict.ok == (moved == 0)


def test_no_advice_for_one_row_or_several_columns() -> None:
    ref, got = _samples(4, 0, 0.2)
    one_row = measure([{"score": r["score"][:1]} for r in ref], [{"score": g["score"][:1]} for g in got], FLOOR)
    assert one_row.outputs["score"].advisory is None
    two_cols = measure([{"score": np.repeat(r["score"], 2, 1)} for r in ref], [{"score": np.repeat(g["score"], 2, 1)} for g in got], FLOOR)
    assert two_cols.outputs["score"].advisory is None


def test_quantize_warns_on_a_matcher_shaped_model(caplog) -> None:
    """The pipeline's warning reaches the log and the summary on a built ``[N, 1]`` Sigmoid scorer."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 1, (16, 1)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["z"]), helper.make_node("Sigmoid", ["z"], ["score"])], "m",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["N", 1])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    data = [{"x": rng.normal(0, 1, (4, 16)).astype(np.float32)} for _ in range(12)]
    with caplog.at_level(logging.WARNING, logger="onnxptq"):
        result = onnxptq.quantize(model, get_preset("BF16"), data=data)
    assert any("picks the row with the highest score" in r.getMessage() for r in caplog.records)
    assert "A pick across rows" in result.summary()
