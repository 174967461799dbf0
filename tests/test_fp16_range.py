"""FP16: an activation beyond fp16's range on calibration data stays float (issue 27, branch terrain).

adaptive-terrain-diffusion's consistency U-Net lets its residual stream grow between
InstanceNorms to 2.9e11; the FP16 preset clamped 395 of its tensors at 65504, the normalizations
after them divided by a flattened spread, and the output's cosine fell to 0.23 (repair kept 705 of
1880 nodes float and stopped at 0.551 of its height cells). The graph here is that shape in small:
a convolution whose output reaches ~1e6, an InstanceNormalization of it, a second convolution.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.fp16_range import HEADROOM, keep_overflowing_float, saturating_activations
from _model_runs import pooled_output_cosine


def _loud_norm_model(gain: float) -> onnx.ModelProto:
    """x [N, 4, 16, 16] → Conv (weights ±gain/4..gain) → InstanceNormalization → Conv → y: the first
    Conv's output reaches ~5·gain, the norm brings it back to unit scale."""
    rng = np.random.default_rng(0)
    # fp16-exact weights (multiples of 1/4 of the gain): the weights fit fp16, the sums they make do not
    w1 = (rng.choice([-1.0, -0.5, -0.25, 0.25, 0.5, 1.0], (8, 4, 3, 3)) * gain).astype(np.float32)
    w2 = (rng.standard_normal((4, 8, 3, 3)) / 6).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.ones(8, np.float32), "gamma"), numpy_helper.from_array(np.zeros(8, np.float32), "beta")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["loud"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("InstanceNormalization", ["loud", "gamma", "beta"], ["normed"], name="norm"),
             helper.make_node("Conv", ["normed", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "loud", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((1, 4, 16, 16)).astype(np.float32)} for _ in range(n)]


def test_fp16_keeps_an_activation_beyond_its_range_float_and_the_output_holds():
    model = _loud_norm_model(gain=3e4)
    cfg = dataclasses.replace(resolve_config("FP16"), repair=False)
    result = quantize(model, cfg, data=_feeds(12))
    # repair off: the delivered model itself holds (without the rule the clamp at 65504 flattens the norm's input: cosine 0.90)
    assert pooled_output_cosine(model, result.model, _feeds(4)) > 0.999
    assert result.floor is not None and result.floor.ok
    # the loud Conv output is left float, with the reason, and nothing else is
    assert "loud" not in result.plan.tensors
    assert "fp16" in result.plan.float_tensors.get("loud", "") and "fp16_range" in result.plan.float_tensors["loud"]
    assert "normed" in result.plan.tensors and "x" in result.plan.tensors


def test_fp16_plan_of_a_model_within_range_is_unchanged():
    """The rule reads ranges only: the same graph at unit gain keeps every planned tensor."""
    model = _loud_norm_model(gain=1.0)  # the same graph, ~1: nothing near fp16's limit
    cfg = dataclasses.replace(resolve_config("FP16"), repair=False)
    result = quantize(model, cfg, data=_feeds(12))
    assert "loud" in result.plan.tensors
    assert not any("fp16_range" in why for why in result.plan.float_tensors.values())


def test_headroom_and_statistics_rule():
    """Only unscaled fp16 activations are asked for ranges; the headroom is one binade below 65504;
    a tensor without statistics (no data) keeps its plan."""
    from onnxptq.calibration.collectors import MinMaxCollector
    from onnxptq.config.schema import TensorQuant
    from onnxptq.pipeline.plan import Plan, TensorPlan

    fp16, scaled, bf16 = TensorQuant(format="fp16"), TensorQuant(format="fp16", scaled=True), TensorQuant(format="bf16")
    plan = Plan(tensors={"a": TensorPlan("a", "activation", fp16), "b": TensorPlan("b", "activation", fp16),
                         "c": TensorPlan("c", "activation", fp16), "s": TensorPlan("s", "activation", scaled),
                         "h": TensorPlan("h", "activation", bf16), "w": TensorPlan("w", "weight", fp16)}, nodes=[])
    assert saturating_activations(plan) == ["a", "b", "c"]

    def seen(lo: float, hi: float) -> MinMaxCollector:
        c = MinMaxCollector()
        c.update(np.array([lo, hi], np.float32))
        return c

    limit = 65504.0
    stats = {"a": seen(-1.0, limit / HEADROOM * 0.99), "b": seen(-limit / HEADROOM * 1.01, 3.0)}  # c: no statistics
    why = keep_overflowing_float(plan, stats)
    assert set(why) == {"b"} and set(plan.tensors) == {"a", "c", "s", "h", "w"}
