"""The log-domain rule (graph/logdomain.py) on a realistic small audio front end.

The graph is the openWakeWord melspectrogram's structure at a tenth of its size: audio at int16
scale → Unsqueeze → two Conv1d holding a windowed DFT (real, imaginary) → Pow 2 → Add → MatMul by
a triangular mel filterbank → Clip(1e-10) → Log → ·10 → /ln 10 (dB) → Clip. Its power spans ~1e10 down
to the noise floor, read clipped at −80 dB; the metric is the model's own: mel bins within 1 dB of float.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import NothingToQuantizeError
from onnxptq.graph.logdomain import log_domain_float_tensors

N_FFT, HOP, BINS, MELS = 128, 40, 65, 16


def _front_end() -> onnx.ModelProto:
    n = np.arange(N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    k = np.arange(BINS)[:, None]
    real = (np.cos(2 * np.pi * k * n / N_FFT) * window)[:, None, :].astype(np.float32)
    imag = (-np.sin(2 * np.pi * k * n / N_FFT) * window)[:, None, :].astype(np.float32)
    mel = np.zeros((BINS, MELS), np.float32)
    edges = np.linspace(0, BINS - 1, MELS + 2)
    for m in range(MELS):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        f = np.arange(BINS)
        mel[:, m] = np.clip(np.minimum((f - lo) / (mid - lo), (hi - f) / (hi - mid)), 0, None)
    inits = [numpy_helper.from_array(real, "dft.real"), numpy_helper.from_array(imag, "dft.imag"),
             numpy_helper.from_array(mel, "melW"), numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-10, np.float32), "eps"),
             numpy_helper.from_array(np.array(1e12, np.float32), "big"),
             numpy_helper.from_array(np.array(10.0, np.float32), "ten"),
             numpy_helper.from_array(np.array(np.log(10.0), np.float32), "ln10"),
             numpy_helper.from_array(np.array(-80.0, np.float32), "db_lo"),
             numpy_helper.from_array(np.array(200.0, np.float32), "db_hi")]
    nodes = [
        helper.make_node("Unsqueeze", ["audio", "axis1"], ["frames_in"], name="Unsqueeze_0"),
        helper.make_node("Conv", ["frames_in", "dft.real"], ["re"], name="Conv_re", strides=[HOP]),
        helper.make_node("Conv", ["frames_in", "dft.imag"], ["im"], name="Conv_im", strides=[HOP]),
        helper.make_node("Transpose", ["re"], ["re_t"], name="T_re", perm=[0, 2, 1]),
        helper.make_node("Transpose", ["im"], ["im_t"], name="T_im", perm=[0, 2, 1]),
        helper.make_node("Pow", ["re_t", "two"], ["re2"], name="Pow_re"),
        helper.make_node("Pow", ["im_t", "two"], ["im2"], name="Pow_im"),
        helper.make_node("Add", ["re2", "im2"], ["power"], name="Add_power"),
        helper.make_node("MatMul", ["power", "melW"], ["mel"], name="MatMul_mel"),
        helper.make_node("Clip", ["mel", "eps", "big"], ["mel_floor"], name="Clip_floor"),
        helper.make_node("Log", ["mel_floor"], ["ln"], name="Log_0"),
        helper.make_node("Mul", ["ln", "ten"], ["ln10x"], name="Mul_10"),
        helper.make_node("Div", ["ln10x", "ln10"], ["db"], name="Div_ln10"),
        helper.make_node("Clip", ["db", "db_lo", "db_hi"], ["db_out"], name="Clip_db"),
    ]
    graph = helper.make_graph(nodes, "front_end", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1600])],
                              [helper.make_tensor_value_info("db_out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _audio(seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """Tones and noise at int16 scale, some loud, some near silence (a speech recording's range)."""
    rng = np.random.default_rng(seed)
    t = np.arange(1600) / 16000
    feeds = []
    for _ in range(count):
        x = sum(rng.uniform(100, 20000) * np.sin(2 * np.pi * rng.uniform(100, 7000) * t) for _ in range(3))
        x = x * (np.arange(1600) < rng.integers(400, 1600))  # a silent tail
        x = x + rng.normal(0, rng.uniform(1, 30), 1600)
        feeds.append({"audio": x[None].astype(np.float32)})
    return feeds


def _within_1db(model: onnx.ModelProto, quantized: onnx.ModelProto, feeds) -> float:
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(quantized.SerializeToString())
    errors = [np.abs(ref.run(None, f)[0] - got.run(None, f)[0]) for f in feeds]
    return float(np.mean(np.concatenate([e.ravel() for e in errors]) <= 1.0))


def test_the_walk_finds_the_linear_domain_and_the_ln_to_db_chain():
    why = log_domain_float_tensors(_front_end())
    # Linear domain: the DFT's inputs (samples, weights), its outputs, the power, the filterbank.
    for name in ("audio", "frames_in", "dft.real", "dft.imag", "re", "im_t", "re2", "power", "melW", "mel", "mel_floor"):
        assert name in why and "linear-domain input of Log" in why[name], name
    # The ln → dB chain: its inside stays float, its end ("db") is what gets the quantizer.
    assert "ln" in why and "ln10x" in why and "chain" in why["ln"]
    assert "db" not in why


def test_a_log_of_probabilities_stops_at_the_softmax():
    """Log(Softmax(Gemm(x))): the walk stays on the Softmax's output; the classifier is quantized."""
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    nodes = [helper.make_node("Gemm", ["x", "w"], ["logits"]), helper.make_node("Softmax", ["logits"], ["p"]),
             helper.make_node("Log", ["p"], ["logp"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("logp", TensorProto.FLOAT, [2, 4])], [w])
    assert set(log_domain_float_tensors(helper.make_model(graph))) == {"p"}


@pytest.mark.parametrize("preset", ["FP16", "A16W8", "MXINT8", "BF16"])
def test_front_end_keeps_its_db_within_1db(preset):
    """MXINT8 with its default placement encodes dot-product operands only, which here all read
    the linear domain (kept float): the preset refuses the model, naming why; the every-op
    placement (``int_block_dot_operands_only=False``) quantizes the dB chain's end."""
    model = _front_end()
    config = resolve_config(preset).replace(repair=False)
    if preset == "MXINT8":
        with pytest.raises(NothingToQuantizeError, match="dot product"):
            quantize(model, config, _audio(0, 8))
        config = config.replace(int_block_dot_operands_only=False)
    result = quantize(model, config, _audio(0, 8))
    assert _within_1db(model, result.model, _audio(1, 8)) >= 0.97
    assert "power" in result.plan.float_tensors


def test_without_the_rule_the_front_end_loses_its_quiet_bins(monkeypatch):
    """The failure the rule exists for (so the test above cannot pass by accident)."""
    import onnxptq.pipeline.plan.rules as rules

    monkeypatch.setattr(rules, "log_domain_float_tensors", lambda model: {})
    model = _front_end()
    result = quantize(model, resolve_config("A16W8").replace(repair=False), _audio(0, 8))
    assert _within_1db(model, result.model, _audio(1, 8)) < 0.9


def test_a_db_output_is_judged_on_its_linear_values():
    """The floor's cosine of dB values is blind to dB errors; in the linear domain they show."""
    from onnxptq.analysis.floor import Floor, measure
    from onnxptq.analysis.log_outputs import log_domain_outputs

    model = _front_end()
    scales = log_domain_outputs(model)
    assert scales == {"db_out": pytest.approx(10 / np.log(10))}
    rng = np.random.default_rng(0)
    ref = [{"db_out": rng.uniform(-80, 60, (1, 38, MELS)).astype(np.float32)} for _ in range(4)]
    # E4M3-like: 3 mantissa bits on values of 32-64 dB: rounding errors up to ±4 dB on the loud bins
    got = [{"db_out": np.where(r["db_out"] > 32, r["db_out"] + rng.uniform(-4, 4, r["db_out"].shape), r["db_out"])
            .astype(np.float32)} for r in ref]
    floor = Floor("8-bit", 0.98, 0.95)
    assert measure(ref, got, floor).ok  # dB values: cosine 0.99+
    verdict = measure(ref, got, floor, log_scales=scales)
    assert not verdict.ok and "linear values" in verdict.describe()


def test_mxfp8_front_end_is_repaired_on_its_db_output():
    """E4M3 on the dB values (the chain's end): 42 % of the bins within 1 dB with repair=False; the
    floor judges the output in its linear domain, breaks, and repair keeps the dB step float.

    The MXFP8 preset itself no longer quantizes the dB values (an FP-element MX format encodes only
    what a dot product reads, pipeline/plan/fp_blocks.py; here both dot products read the linear
    domain, so the preset refuses the model); ``fp_block_dot_operands_only=False`` quantizes the
    vector ops too, as before."""
    model = _front_end()
    with pytest.raises(NothingToQuantizeError, match="dot product"):
        quantize(model, "MXFP8_E4M3", _audio(0, 16))
    config = resolve_config("MXFP8_E4M3").replace(fp_block_dot_operands_only=False)
    plain = quantize(model, config.replace(repair=False), _audio(0, 16))
    assert _within_1db(model, plain.model, _audio(1, 8)) < 0.8
    result = quantize(model, config, _audio(0, 16))
    assert _within_1db(model, result.model, _audio(1, 8)) >= 0.95
    assert result.repair and result.repair["kept_float"]
