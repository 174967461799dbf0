"""Speech-quality scores, second round (issue 27, branch audiofloor): what the floor and calibration
do for a low-dimensional score output (a MOS per call) beyond judging it (tests/test_floor_scores.py).

The MOS head is the one tests/test_floor_scores.py rebuilds from speechmos's PLCMOS
(``Gemm → Relu → Gemm → Sigmoid → ·4 + 1 → Reshape []``), fed clip features whose loudness varies.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import reads_feeds, score_outputs

from test_floor_scores import _feeds, _mos_head


def test_enough_feeds_judge_a_score_output_and_few_say_not_judged():
    """With 48 feeds a MOS head is judged (8 held-out + 34 calibration samples); before, calibration kept
    8 calibration feeds for the floor whatever the data, so it stayed "not judged" (16 of 34 samples),
    as DNSMOS MXINT8 and AECMOS MXFP8_E4M3 did on 48 clips (bench/RESULTS.md, "Speech-quality scores,
    second round"). With 12 feeds it still says "not judged"."""
    cfg = resolve_config("BF16")
    model = _mos_head()
    assert score_outputs(model) == ["mos"] and reads_feeds(model, cfg) == 34
    result = quantize(model, cfg, _feeds(48))
    check = result.floor.outputs["mos"]
    assert check.scores is not None, check.describe()
    assert check.scores[1] >= 34 and not check.top1_unjudged and result.floor.ok, result.floor.describe()
    few = quantize(model, cfg, _feeds(12)).floor
    assert few.ok and few.unjudged == ["mos"], few.describe()


def test_a_probability_is_no_score_output_even_through_an_if():
    """A sigmoid's probability (a wake-word score) is judged by its thresholds: no feeds are kept for it,
    also where the graph reads it through reshapes and an ``If`` (openWakeWord's ``If(…, Sigmoid)``)."""
    model = _mos_head()
    g = model.graph
    out = g.output[0]
    for n in list(g.node):
        if n.op_type in ("Mul", "Add", "Reshape"):
            g.node.remove(n)
    then_g = helper.make_graph([helper.make_node("Identity", ["p"], ["t"])], "then", [], [helper.make_tensor_value_info("t", 1, None)])
    else_g = helper.make_graph([helper.make_node("Sigmoid", ["logit"], ["e"])], "else", [], [helper.make_tensor_value_info("e", 1, None)])
    g.initializer.append(helper.make_tensor("yes", 9, [], [True]))
    g.node.extend([helper.make_node("If", ["yes"], ["pp"], then_branch=then_g, else_branch=else_g),
                   helper.make_node("Reshape", ["pp", "scalar"], ["mos"])])
    assert score_outputs(model) == [] and out.name == "mos"
    assert reads_feeds(model, resolve_config("BF16")) == 0
