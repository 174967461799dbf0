"""A8W8: an activation a per-group normalizer reads is judged group by group (issue 27, branch terrain8).

adaptive-terrain-diffusion's consistency U-Net feeds its GroupNorms (Reshape [0, 32, -1] →
InstanceNormalization) from a residual stream whose groups' spreads differ ×20-×400 within one
tensor; under A8W8's per-tensor uint8 the quiet groups drown, each normalizer scales that noise
back to unit size, and the plain build's output cosine was 0.42. The graphs here are that shape in
small: a convolution whose output channels span two decades (two quiet channels of 32: too few for
the range guard's channel-fraction rule), a normalizer of it (written-out GroupNorm, or a plain
InstanceNormalization), a second convolution.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.norm_groups import group_sqnr, normalizer_groups
from onnxptq.pipeline.plan.select import _Graph
from _model_runs import pooled_output_cosine

CHANNELS, QUIET = 32, (4, 5)  # channels 4 and 5 (one group of 2 in the grouped graph) at 1/100 of the rest


def _spread_norm_model(grouped: bool, quiet_gain: float = 1e-2) -> onnx.ModelProto:
    """x [N, 4, 16, 16] → Conv (output channels 4, 5 scaled by ``quiet_gain``) → ``spread`` →
    normalizer → Conv, plus a 1×1 skip Conv of ``spread`` (a residual reader, as the U-Net's
    ResBlocks: the normalizer is not its only reader) → Add → y. ``grouped``: GroupNorm as PyTorch
    exports it below opset 18 (Reshape [0, 16, -1] → InstanceNormalization → Reshape back →
    per-channel Mul/Add); else InstanceNormalization."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((CHANNELS, 4, 3, 3)).astype(np.float32) / 3
    w1[list(QUIET)] *= quiet_gain
    w2 = (rng.standard_normal((4, CHANNELS, 3, 3)) / 8).astype(np.float32)
    w3 = (rng.standard_normal((4, CHANNELS, 1, 1)) / 16).astype(np.float32)
    groups = CHANNELS // 2 if grouped else CHANNELS
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(w3, "w3"),
             numpy_helper.from_array(np.ones(groups, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(groups, np.float32), "beta")]
    if grouped:
        inits += [numpy_helper.from_array(np.array([0, groups, -1], np.int64), "to_groups"),
                  numpy_helper.from_array(np.array([0, CHANNELS, 16, 16], np.int64), "back"),
                  numpy_helper.from_array(np.full((CHANNELS, 1, 1), 1.5, np.float32), "scale"),
                  numpy_helper.from_array(np.full((CHANNELS, 1, 1), 0.1, np.float32), "shift")]
        norm = [helper.make_node("Reshape", ["spread", "to_groups"], ["grouped"], name="to_groups"),
                helper.make_node("InstanceNormalization", ["grouped", "gamma", "beta"], ["gnormed"], name="norm"),
                helper.make_node("Reshape", ["gnormed", "back"], ["ungrouped"], name="back"),
                helper.make_node("Mul", ["ungrouped", "scale"], ["scaled"], name="affine_mul"),
                helper.make_node("Add", ["scaled", "shift"], ["normed"], name="affine_add")]
    else:
        norm = [helper.make_node("InstanceNormalization", ["spread", "gamma", "beta"], ["normed"], name="norm")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["spread"], name="conv1", pads=[1, 1, 1, 1]), *norm,
             helper.make_node("Conv", ["normed", "w2"], ["h"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["spread", "w3"], ["skip"], name="skip"),
             helper.make_node("Add", ["h", "skip"], ["y"], name="residual")]
    graph = helper.make_graph(nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 4, 16, 16)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("grouped", [True, False], ids=["groupnorm", "instancenorm"])
def test_a8w8_steps_a_normalizer_input_with_a_drowned_group_to_16_bits(grouped):
    model = _spread_norm_model(grouped)
    cfg = dataclasses.replace(resolve_config("A8W8"), repair=False)
    result = quantize(model, cfg, data=_feeds(12))
    plan = result.plan
    # the normalizer's input is on a 16-bit grid, with the reason
    assert plan.tensors["spread"].quant.format == "uint16"
    assert plan.guard["spread"]["action"] == "16-bit"
    if grouped:  # the grouping Reshape's copy is inside the written-out GroupNorm (graph/structure.py): float
        assert "grouped" not in plan.tensors and "written-out GroupNorm" in plan.float_tensors["grouped"]
    # the rest stays 8-bit; repair off: the delivered model itself holds (without the rule: 0.979 grouped, 0.982 not)
    assert plan.tensors["x"].quant.format == "uint8" and plan.tensors["normed"].quant.format == "uint8"
    assert pooled_output_cosine(model, result.model, _feeds(4, seed=7)) > 0.995


def test_a8w8_plan_of_a_normalizer_input_without_a_quiet_group_is_unchanged():
    """The rule reads the groups' SQNR only: the same graph with every channel at one scale keeps
    its 8-bit grid."""
    model = _spread_norm_model(grouped=True, quiet_gain=1.0)
    cfg = dataclasses.replace(resolve_config("A8W8"), repair=False)
    result = quantize(model, cfg, data=_feeds(12))
    assert result.plan.tensors["spread"].quant.format == "uint8"
    assert "spread" not in result.plan.guard


def test_normalizer_groups_by_structure_and_group_sqnr_by_hand():
    g = _Graph(_spread_norm_model(grouped=True))
    assert normalizer_groups("spread", g) == [(16, 1e-5)]
    assert normalizer_groups("normed", g) == []  # read by a Conv only
    assert normalizer_groups("spread", _Graph(_spread_norm_model(grouped=False))) == [(None, 1e-5)]
    # two samples, two groups of two channels: the rounding error of group 1 is 1/10 of its spread
    x = np.zeros((2, 4, 8), np.float64)
    x[:, :2] = np.linspace(-1, 1, 16).reshape(2, 8)
    x[:, 2:] = np.linspace(-0.01, 0.01, 16).reshape(2, 8)
    err = np.tile([0.001, -0.001], 8).reshape(2, 8)
    q = x.copy()
    q[0, 2:] += err
    expect = 10 * np.log10((np.var(x[0, 2:]) + 1e-5) / np.var(err))
    assert group_sqnr(x, q, 2, 1e-5) == pytest.approx(expect)
    assert group_sqnr(x, q, 3, 1e-5) is None  # four channels do not split into three groups
