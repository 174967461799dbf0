"""The range-mismatch guard on a hand-built detector head: Concat(boxes 0–600, Sigmoid scores 0–1).

Without the guard one shared int8 scale (or one BFP/MX exponent per block across the channel axis)
flushes the score channels; with it every channel keeps an error within its format's bound.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest

from _box_score_head import box_score_head
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.guard import channel_sqnr
from onnxptq.pipeline.tails import TAIL_REASON, postprocessing_tail
from onnxptq.sessions import open_session

BOX_CHANNELS, SCORE_CHANNELS = 4, 2
#: largest per-channel error allowed, as a fraction of that channel's float range: a few steps of
#: an 8-bit grid (or of a 7-bit mantissa) the channel owns, against ≈ 1.0 for a flushed channel
BOUND = {"A8W8": 4 / 255, "BFP16": 2.0**-5, "MX9": 2.0**-5, "MXINT8": 2.0**-5}


def head_model() -> onnx.ModelProto:
    """x [N,4,8,8] in 0..1 → boxes = Relu(Conv) in 0..600 pixels, scores = Sigmoid(Conv); Concat on axis 1."""
    return box_score_head(BOX_CHANNELS, SCORE_CHANNELS)

def _data(seed: int, n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0.0, 1.0, size=(1, 4, 8, 8)).astype(np.float32)} for _ in range(n)]


def _channel_errors(model: onnx.ModelProto, quantized: onnx.ModelProto) -> np.ndarray:
    """Max |error| of each output channel as a fraction of its float range, over fresh data."""
    feeds = _data(1, 4)
    ref = np.concatenate([open_session(model).run(None, f)[0] for f in feeds])
    got = np.concatenate([open_session(quantized).run(None, f)[0] for f in feeds])
    err = np.abs(got - ref).max(axis=(0, 2, 3))
    span = np.abs(ref).max(axis=(0, 2, 3))
    return err / span


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return head_model()


@pytest.mark.parametrize("preset", sorted(BOUND))
def test_guard_keeps_every_channel_of_a_mixed_range_concat(model, preset):
    # The decode tail is quantized on purpose here: the guard, not the tail rule, must save it.
    # Block formats: the every-op placement, where the Concat's output is quantized (by default
    # they encode dot-product operands only, and no dot product reads it).
    # Repair off: the guard's own effect (the floor now sees the flushed scores through the head's
    # detections after NMS, analysis/det_nms.py, and repair would step the Concat up to 16 bits).
    every = dict(quantize_postprocessing=True, int_block_dot_operands_only=False, repair=False)
    off = get_preset(preset).replace(range_guard=False, **every)
    on = get_preset(preset).replace(**every)  # the guard is on by default
    flushed = _channel_errors(model, quantize(model, off, data=_data(0, 8)).model)
    result = quantize(model, on, data=_data(0, 8))
    kept = _channel_errors(model, result.model)

    # Without the guard the score channels are lost (error about their whole range)...
    assert flushed[BOX_CHANNELS:].min() > 0.3, flushed
    # ...with it every channel, boxes and scores, is within the format's bound.
    assert kept.max() <= BOUND[preset], kept
    assert "y" in result.plan.guard, result.plan.guard
    decision = result.plan.guard["y"]
    assert decision["action"] in ("split", "block-axis", "float")
    assert decision["axis"] == 1 and decision["worst_channel"] >= BOX_CHANNELS
    assert json.loads(json.dumps(result.plan.to_json()))["guard"]["y"]["reason"]


def test_guard_off_by_config_changes_nothing(model):
    cfg = get_preset("A8W8").replace(quantize_postprocessing=True, range_guard=False)
    assert quantize(model, cfg, data=_data(0, 4)).plan.guard == {}


def test_tail_rule_leaves_the_decode_float_by_default(model):
    tail = postprocessing_tail(model)
    assert tail == {"sigmoid", "concat"}  # Relu is not decode arithmetic; the Convs are weighted
    plan = quantize(model, "A8W8", data=_data(0, 4)).plan
    assert plan.skipped_nodes["concat"] == TAIL_REASON and plan.skipped_nodes["sigmoid"] == TAIL_REASON
    on = quantize(model, get_preset("A8W8").replace(quantize_postprocessing=True), data=_data(0, 4)).plan
    assert "concat" in on.nodes and "sigmoid" in on.nodes


def test_channel_sqnr_names_the_flushed_channel():
    x = np.stack([np.linspace(0, 600, 50), np.linspace(0, 1, 50)])[None]
    q = x.copy()
    q[:, 1] = 0.0
    sqnr, live = channel_sqnr(x, q, axis=1)
    assert live.all() and sqnr[0] >= 100 and sqnr[1] <= 0.5


def test_report_says_where_the_guard_acted_and_why(model, tmp_path):
    cfg = get_preset("A8W8").replace(quantize_postprocessing=True)
    result = quantize(model, cfg, data=_data(0, 8), report_path=tmp_path / "report.html")
    from onnxptq.analysis.report import compute_report

    report = compute_report(model, result.model, _data(2, 2), plan=result.plan)
    assert report.guard["y"]["action"] == "split" and "below the SQNR bound" in report.guard["y"]["reason"]
    rows = {t.name: t for t in report.tensors}
    assert rows["scores"].guard.startswith("guard split at y") and "[guard split" in rows["scores"].format
    assert "Range-mismatch guard" in (tmp_path / "report.html").read_text()
    assert json.loads(json.dumps(report.to_json()))["guard"]["y"]["inputs"] == ["boxes", "scores"]


def test_cli_flags_reach_the_config(model, tmp_path):
    from onnxptq.cli import main

    onnx.save(model, tmp_path / "head.onnx")
    np.savez(tmp_path / "calib.npz", x=np.concatenate([d["x"] for d in _data(0, 8)]))
    plans = {}
    for flags in ([], ["--quantize-postprocessing"], ["--quantize-postprocessing", "--no-range-guard"]):
        key = " ".join(flags)
        out = tmp_path / f"plan{len(plans)}.json"
        assert main(["quantize", str(tmp_path / "head.onnx"), "-o", str(tmp_path / "q.onnx"), "--data",
                     str(tmp_path / "calib.npz"), "--no-progress", "--plan", str(out), *flags]) == 0
        plans[key] = json.loads(out.read_text())
    assert plans[""]["skipped_nodes"]["concat"] == TAIL_REASON and "guard" not in plans[""]
    assert plans["--quantize-postprocessing"]["guard"]["y"]["action"] == "split"  # the guard is on by default
    off = plans["--quantize-postprocessing --no-range-guard"]
    assert "guard" not in off and "concat" in off["nodes"]


def test_mixed_precision_search_scores_with_the_guard_decisions(model):
    """The automatic search scores every candidate with the guard decisions the delivered model
    gets: a switch-model score equals the score of the model ``build_model`` emits for that set,
    also where the guard splits the Concat (A8W8 on the mixed-range Concat) and where it does not
    (A16W8 keeps the scores: one int16 step of 600 is 0.02)."""
    from itertools import combinations

    from onnxptq.algorithms.mixed_precision import L2Target, _Evaluator
    from onnxptq.pipeline.build import build_model
    from onnxptq.pipeline.calibrate import calibrate_once

    high = get_preset("A16W8").replace(quantize_postprocessing=True)
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    low = get_preset("A8W8")
    pair = (low.activation, low.weight)
    nodes = ["conv_box", "conv_score", "concat"]
    feeds = _data(0, 6)
    cal = calibrate_once(model, high, feeds, eval_samples=6, also_for=[high.replace(op_type_overrides={
        op: pair for op in ("Conv", "Concat", "Sigmoid", "Relu")})])

    def config_for(flipped):
        return high.replace(node_overrides={n: pair for n in flipped})

    sets = [frozenset(c) for k in range(4) for c in combinations(nodes, k)]
    evaluator = _Evaluator(cal, config_for, nodes, L2Target(1.0), 2, incremental=False)
    try:
        acted = []
        for s in sets:
            plan, _, built, _ = build_model(cal, config_for(s))
            acted.append(bool(plan.guard))
            assert evaluator._evaluate(s) == pytest.approx(evaluator.exact(built), rel=1e-6, abs=1e-9), sorted(s)
        assert any(acted) and not all(acted), acted
    finally:
        evaluator.close()
