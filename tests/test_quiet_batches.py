"""A noise level's preconditioning scalars stay float where an integer grid flushes quiet batches (issue 26/27, branch terrain).

A diffusion denoiser computes ``c_in = 1/√(σ² + σd²)`` and ``c_skip = σd²/(σ² + σd²)`` from its
noise-level input inside the graph; between a σ = 80 call and a σ = 0.4 call they move by two to
five decades, and one per-tensor grid leaves the quiet calls 0-2 codes (adaptive-terrain-diffusion's
U-Net under A16W8: σ² of 0.16 at 1.6 codes of 65536 over 6400). The graph here is that
preconditioning around three convolutions, fed as the package feeds it (noise·σ, σ alternating 100 and 0.4).

Must-nots (pipeline/quiet_batches.py's two conditions): a scalar read additively (a scorer's logit
into a ``Sigmoid``, one value per sample, all calibration logits below 0 with one near 0) and a
scalar that changes sign keep their quantizers, as the built-graph heads of test_decision_thresholds
and test_floor_scores need.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.calibration.collectors import MinMaxCollector
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.quiet_batches import _Graph, read_as_factor


def _edm_model() -> onnx.ModelProto:
    """y = c_skip·x + Conv3(Relu(Conv2(c_in·Relu(Conv1(x))))), c_* from sigma [N] (σd = 0.5): the
    noise level's scalars scale features between convolutions, as a U-Net's conditioning does."""
    rng = np.random.default_rng(0)
    ws = {f"w{i}": (rng.standard_normal((4, 4, 3, 3)) / 6).astype(np.float32) for i in (1, 2, 3)}
    inits = [numpy_helper.from_array(v, k) for k, v in ws.items()]
    inits += [numpy_helper.from_array(np.array([-1, 1, 1, 1], np.int64), "shape4")]
    inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in {"sd2": 0.25, "one": 1.0}.items()]
    conv = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Mul", ["sigma", "sigma"], ["s2"], name="square"),
             helper.make_node("Add", ["s2", "sd2"], ["d"], name="plus_sd2"),
             helper.make_node("Sqrt", ["d"], ["root"], name="root"),
             helper.make_node("Div", ["one", "root"], ["c_in"], name="c_in"),
             helper.make_node("Div", ["sd2", "d"], ["c_skip"], name="c_skip"),
             helper.make_node("Reshape", ["c_in", "shape4"], ["c_in4"], name="c_in4"),
             helper.make_node("Reshape", ["c_skip", "shape4"], ["c_skip4"], name="c_skip4"),
             helper.make_node("Conv", ["x", "w1"], ["h1"], name="conv1", **conv),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Mul", ["r1", "c_in4"], ["scaled"], name="scale_in"),
             helper.make_node("Conv", ["scaled", "w2"], ["h2"], name="conv2", **conv),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["f"], name="conv3", **conv),
             helper.make_node("Mul", ["x", "c_skip4"], ["skip"], name="skip"),
             helper.make_node("Add", ["skip", "f"], ["y"], name="out")]
    graph = helper.make_graph(nodes, "edm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 16, 16]),
                                             helper.make_tensor_value_info("sigma", TensorProto.FLOAT, ["N"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sigma = np.float32(100.0 if i % 2 == 0 else 0.4)
        out.append({"x": (rng.standard_normal((2, 4, 16, 16)) * sigma).astype(np.float32), "sigma": np.full(2, sigma, np.float32)})
    return out


def _loud_call_error(model: onnx.ModelProto, quantized: onnx.ModelProto) -> float:
    """Relative RMS error of the output on σ = 100 calls, where c_in is 0.01, 1.6 codes of an 8-bit
    grid up to 1.56 (read as 2 codes: +22 %) (a cosine would not see it: a wrong c_in scales a sample's output as a whole)."""
    import onnxruntime as ort

    a = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = _feeds(8, 7)[0::2]
    x = np.concatenate([a.run(None, f)[0].ravel() for f in feeds]).astype(np.float64)
    y = np.concatenate([b.run(None, f)[0].ravel() for f in feeds]).astype(np.float64)
    return float(np.linalg.norm(y - x) / np.linalg.norm(x))


def test_a8w8_keeps_the_noise_level_scalars_float_and_the_loud_calls_hold():
    model = _edm_model()
    result = quantize(model, dataclasses.replace(resolve_config("A8W8"), repair=False), data=_feeds(12, 1))
    assert _loud_call_error(model, result.model) < 0.05
    kept = {n for n, why in result.plan.float_tensors.items() if "quiet_batches" in why}
    assert {"c_in4", "c_skip4"} & kept or {"c_in", "c_skip"} & kept
    # the feature maps (thousands of values per batch) keep their 8-bit grids
    assert "scaled" in result.plan.tensors and "r1" in result.plan.tensors


def test_collector_keeps_the_quietest_batch_peak_through_merges():
    a, b = MinMaxCollector(), MinMaxCollector()
    a.update(np.array([-3.0, 2.0], np.float32))
    a.update(np.array([0.01, -0.02], np.float32))
    b.update(np.array([5.0, 0.5], np.float32))
    assert a.quietest_peak == np.float32(0.02)
    b.merge(a)
    assert b.quietest_peak == np.float32(0.02) and b.batches == 3
    b.update(np.zeros(4, np.float32))  # an all-zero batch is exact on any grid: not a quiet one
    assert b.quietest_peak == np.float32(0.02) and b.batches == 4


def test_factors_are_found_through_data_movement_and_arithmetic_and_additive_reads_are_not_factors():
    g = _Graph(_edm_model())
    assert read_as_factor("c_in", g) and read_as_factor("c_skip", g)  # through their Reshapes
    # σ² + σd² → √ → 1/· → c_in → ·features: a square, an offset and a reciprocal carry the relative error
    assert read_as_factor("sigma", g) and read_as_factor("s2", g) and read_as_factor("d", g)
    assert not read_as_factor("h2", g) and not read_as_factor("f", g)  # a Relu's, a residual Add's operand
    assert not read_as_factor("logit", _Graph(_scorer()[0]))  # into a Sigmoid, then out


def _scorer() -> tuple[onnx.ModelProto, np.ndarray]:
    """``x [1, 8] → Gemm → logit [1, 1] → Sigmoid → p``: one value per sample, read additively."""
    w = np.random.default_rng(2).standard_normal((8, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(1, np.float32), "b")]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["logit"], name="score"),
             helper.make_node("Sigmoid", ["logit"], ["p"], name="sigmoid")]
    graph = helper.make_graph(nodes, "scorer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w


def _scorer_feeds(w: np.ndarray, signed: bool) -> list[dict[str, np.ndarray]]:
    """Inputs whose logits are -10 ... -0.01 (log-spaced: a quiet batch of 0.26 steps of an 8-bit
    grid over 10), or those with alternating signs."""
    logits = -np.geomspace(10.0, 0.01, 12)
    if signed:
        logits[::2] *= -1
    return [{"x": (v * w.T / float((w.T @ w).item())).astype(np.float32)} for v in logits]


def test_a_logit_read_by_a_sigmoid_or_changing_sign_keeps_its_quantizer():
    """Both conditions at once (the rule before them kept this logit float: the floor and threshold
    tests' heads are such logits)."""
    a8w8 = dataclasses.replace(resolve_config("A8W8"), repair=False)
    model, w = _scorer()
    for signed in (False, True):
        result = quantize(model, a8w8, data=_scorer_feeds(w, signed), eval_samples=0)
        assert "logit" in result.plan.tensors, (signed, result.plan.float_tensors.get("logit"))
        assert not any("quiet_batches" in why for why in result.plan.float_tensors.values())


def test_a_tensor_sharing_its_sources_scale_does_not_go_float_alone():
    """NPU placement: ``part = Slice(Relu(h))`` gates ``z`` (a factor, one sign, quiet on the 1× calls
    beside the 100× ones) and takes ``Relu(h)``'s int8 scale (plan/rules.py: onnxruntime needs the
    requantization after an int8 tensor's data move). Kept float alone it gave a model onnxruntime
    refuses ("output_dtype INT8 does not match y_zero_point type UINT8"); it follows its source."""
    from onnxptq.compat import QuantizationConfig
    from onnxptq.compat.options import parse

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 6)).astype(np.float32), "WA"),
             numpy_helper.from_array(rng.normal(0, 0.5, (8, 3)).astype(np.float32), "WB"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"), numpy_helper.from_array(np.array([3], np.int64), "s1"),
             numpy_helper.from_array(np.array([2], np.int64), "ax")]
    nodes = [helper.make_node("MatMul", ["x", "WA"], ["h"], name="mm_a"), helper.make_node("Relu", ["h"], ["hr"], name="relu"),
             helper.make_node("Slice", ["hr", "s0", "s1", "ax"], ["part"], name="slice"),
             helper.make_node("MatMul", ["x", "WB"], ["z"], name="mm_b"), helper.make_node("Mul", ["part", "z"], ["y"], name="gate")]
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = [{"x": (rng.normal(0, 1, (1, 4, 8)) * (100.0 if i % 2 else 1.0)).astype(np.float32)} for i in range(8)]
    cfg, _ = parse(QuantizationConfig(extra_options={"TargetRuntime": "npu"}))
    result = quantize(model, cfg, feeds, eval_samples=0)  # loads in onnxruntime (finish checks it)
    assert result.plan.tensors["part"].share_with == "hr" and "part" not in result.plan.float_tensors
