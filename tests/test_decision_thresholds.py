"""A tensor the graph compares with a constant keeps the constant inside its quantized range.

openWakeWord's heads decide inside the graph: ``GreaterOrEqual(Sigmoid(logit), 0.5) → If``. With
calibration clips that never reach the threshold, the Sigmoid output's int8 range ended at 0.493
and every wake was lost (pipeline/plan/thresholds.py). The head is built here the same way: a
Gemm scorer whose calibration inputs all score below 0.5, held-out inputs on both sides.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.plan.thresholds import MAX_STRETCH, widen_to_cover

D = 16


def _head(threshold: float = 0.5) -> onnx.ModelProto:
    """``x [N, D] → Gemm → Relu → Gemm → Sigmoid → p``; ``fires = Cast(GreaterOrEqual(p, threshold))``."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((D, D)).astype(np.float32) / 4
    w2 = np.abs(rng.standard_normal((D, 1))).astype(np.float32) / 2
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(np.zeros(D, np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.array([-2.5], np.float32), "b2"),
             numpy_helper.from_array(np.array(threshold, np.float32), "t")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="Gemm_1"),
             helper.make_node("Relu", ["h"], ["r"], name="Relu_2"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["logit"], name="Gemm_3"),
             helper.make_node("Sigmoid", ["logit"], ["p"], name="Sigmoid_4"),
             helper.make_node("GreaterOrEqual", ["p", "t"], ["ge"], name="Ge_5"),
             helper.make_node("Cast", ["ge"], ["fires"], name="Cast_6", to=TensorProto.INT64)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", D])],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 1]),
                               helper.make_tensor_value_info("fires", TensorProto.INT64, ["N", 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(model: onnx.ModelProto, count: int, seed: int, below: bool) -> list[dict[str, np.ndarray]]:
    """Inputs scored by the float model: all below 0.5 (``below``, as hey_jarvis's clips: ≤ 0.493),
    or as they come (about a third fire)."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    feeds: list[dict[str, np.ndarray]] = []
    while len(feeds) < count:
        x = rng.standard_normal((1, D)).astype(np.float32)
        p = float(sess.run(["p"], {"x": x})[0].ravel()[0])
        if p < 0.5 or not below:
            feeds.append({"x": x})
    return feeds


def _decisions(model: onnx.ModelProto, feeds) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.array([int(sess.run(["fires"], f)[0].ravel()[0]) for f in feeds])


def test_a_compared_tensor_reaches_the_threshold_without_a_positive_in_calibration():
    model = _head()
    calibration, heldout = _feeds(model, 24, 1, below=True), _feeds(model, 40, 2, below=False)
    config = resolve_config("A8W8").replace(repair=False)
    result = quantize(model, config, data=calibration)
    covered = {t.name: t.covers for t in result.plan.tensors.values() if t.covers is not None}
    # the Sigmoid output holds the threshold itself, the logit its logit (0), back through Sigmoid
    assert covered.get("p") == (0.5, 0.5) and covered.get("logit") == (0.0, 0.0), covered
    float_fires, quant_fires = _decisions(model, heldout), _decisions(result.model, heldout)
    assert float_fires.sum() >= 5  # the held-out inputs do fire
    # without the rule the quantized model fires on none of them (its range ends below 0.5)
    assert quant_fires[float_fires == 1].mean() >= 0.8, (float_fires, quant_fires)
    assert np.mean(float_fires == quant_fires) >= 0.9, (float_fires, quant_fires)


def test_a_threshold_far_outside_the_range_is_not_covered():
    lo, hi = widen_to_cover(0.0, 0.49, (0.5, 0.5))
    assert lo == 0.0 and 0.5 < hi < 0.52  # covered, a step beyond
    assert widen_to_cover(0.0, 0.49, (1e3, 1e3)) == (0.0, 0.49)  # a sentinel test: range kept
    far = 0.49 * MAX_STRETCH  # just past the stretch limit: kept; just inside: widened
    assert widen_to_cover(0.0, 0.49, (far * 1.01, far * 1.01)) == (0.0, 0.49)
    assert widen_to_cover(0.0, 0.49, (far * 0.9, far * 0.9))[1] > far * 0.9
    assert widen_to_cover(0.0, 1.0, (0.5, 0.5)) == (0.0, 1.0)  # already inside
    lo, hi = widen_to_cover(np.array([0.0, -1.0]), np.array([1.0, 0.2]), (0.5, 0.5))
    assert hi.tolist()[0] == 1.0 and hi.tolist()[1] > 0.5 and lo.tolist() == [0.0, -1.0]
