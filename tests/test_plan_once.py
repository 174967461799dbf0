"""The plan is made once per quantize: calibration makes it, ``Calibrated`` carries it, and the
delivered plan (``final_plan``) starts from a copy of it rather than planning again."""

from __future__ import annotations

import logging

from conftest import make_small_cnn, small_cnn_feeds
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.build import build_model
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.plan import make_plan


def _plan_lines(caplog) -> int:
    return sum(1 for r in caplog.records if r.name == make_plan.__module__ and r.getMessage().startswith("plan:"))


def test_one_quantize_plans_once(caplog):
    with caplog.at_level(logging.INFO, logger="onnxptq"):
        result = quantize(make_small_cnn(), "A8W8", small_cnn_feeds(4))
    assert result.plan.tensors
    assert _plan_lines(caplog) == 1  # was 2: calibrate made the plan, then build made it again


def test_the_build_starts_from_a_copy_of_the_calibrated_plan(caplog):
    cfg = get_preset("A8W8")
    calibrated = calibrate_once(make_small_cnn(), cfg, small_cnn_feeds(4))
    assert calibrated.plan is not None and calibrated.config is cfg
    before = calibrated.plan.to_json()
    with caplog.at_level(logging.INFO, logger="onnxptq"):
        plan = build_model(calibrated, cfg).plan
        again = build_model(calibrated, cfg).plan
    assert _plan_lines(caplog) == 0
    assert plan is not calibrated.plan and again is not plan  # the guard changes its plan in place
    assert calibrated.plan.to_json() == before
    assert plan.to_json() == again.to_json()
    # another config (an equal one is the same config) plans for itself
    with caplog.at_level(logging.INFO, logger="onnxptq"):
        build_model(calibrated, cfg.replace())
        assert _plan_lines(caplog) == 0
        build_model(calibrated, cfg.replace(range_guard=False))
    assert _plan_lines(caplog) == 1
