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
from testkit.audio import triangular_mel
from onnxptq.pipeline.calibrate import NothingToQuantizeError
from onnxptq.graph.logdomain import log_domain_float_tensors

N_FFT, HOP, BINS, MELS = 128, 40, 65, 16


def _front_end() -> onnx.ModelProto:
    n = np.arange(N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    k = np.arange(BINS)[:, None]
    real = (np.cos(2 * np.pi * k * n / N_FFT) * window)[:, None, :].astype(np.float32)
    imag = (-np.sin(2 * np.pi * k * n / N_FFT) * window)[:, None, :].astype(np.float32)
    mel = triangular_mel(BINS, MELS)
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
    floor judges the output in its linear domain, breaks, and repair takes the dB step off E4M3: up
    its own family's ladder (MXFP8_E4M3 → MXINT8, algorithms/step_up.py) where that holds, else float.

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
    assert result.repair
    moved = {**result.repair["kept_float"], **result.repair["stepped_up"]}
    assert "Clip_db" in moved, moved


# --- a constant-Q front end (basic-pitch's, as tf2onnx writes nnAudio's CQT2010v2) ------------------
#
# The log-domain rule on a constant-Q front end written as tf2onnx writes nnAudio's CQT2010v2
# (basic-pitch's): two octaves, each a reflect Pad → a real and an imaginary Conv1d (the imaginary
# one through Neg), the second octave on the signal decimated by a low-pass Conv1d of stride 2 (with
# its own zero Pad); the octaves Concat'ed, scaled per bin, magnitude (Mul·self → ReduceSum →
# Sqrt), power (Mul·self) + eps → Log → ·10/ln 10 (dB).
# Before the walk crossed Neg/Concat/Slice/Pad and the decimation low-pass, it stopped at the
# octaves' Concat: the CQT convolutions' outputs and the signal they read were quantized, and
# BF16 kept 65 %, A16W8 49 % of the dB bins within 1 dB (basic-pitch's notes: BF16 F1 0.93).

CQT_SR, CQT_N, CQT_K, CQT_BINS = 8000, 4096, 128, 12


def _kernels(f_lo: float, sr: float) -> tuple[np.ndarray, np.ndarray]:
    n = np.arange(CQT_K) - CQT_K / 2
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(CQT_K) / CQT_K)
    freqs = f_lo * 2 ** (np.arange(CQT_BINS) / CQT_BINS)
    re = np.stack([np.cos(2 * np.pi * f * n / sr) * win for f in freqs])[:, None, :] / CQT_K
    im = np.stack([np.sin(2 * np.pi * f * n / sr) * win for f in freqs])[:, None, :] / CQT_K
    return re.astype(np.float32), im.astype(np.float32)


def _cqt_front_end() -> onnx.ModelProto:
    lowpass = (np.sinc(np.arange(-32, 33) / 2) * np.hanning(65) / 2).astype(np.float32)[None, None, :]
    re1, im1 = _kernels(CQT_SR / 4, CQT_SR)          # octave 1: the upper octave on the full-rate signal
    re2, im2 = _kernels(CQT_SR / 4, CQT_SR / 2)      # octave 2: the same kernels on the decimated signal
    scale = np.linspace(1.0, 2.0, 2 * CQT_BINS).astype(np.float32)[None, :, None]
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (re1, "re1"), (im1, "im1"), (re2, "re2"), (im2, "im2"), (lowpass, "lowpass"), (scale, "bin_scale"),
        (np.array([1, 1, CQT_N], np.int64), "shape3"), (np.array([0], np.int64), "s0"), (np.array([CQT_N], np.int64), "s1"),
        (np.array([2], np.int64), "ax2"), (np.array([0, 0, CQT_K // 2, 0, 0, CQT_K // 2], np.int64), "reflect"),
        (np.array([0, 0, 32, 0, 0, 32], np.int64), "lp_pad"), (np.array([-1], np.int64), "last"),
        (np.array(1e-9, np.float32), "eps"), (np.array(10 / np.log(10), np.float32), "to_db"))]
    node = helper.make_node
    nodes = [
        node("Reshape", ["audio", "shape3"], ["flat"], name="flatten"),
        node("Slice", ["flat", "s0", "s1", "ax2"], ["sig1"], name="slice_signal"),
        node("Pad", ["sig1", "reflect"], ["sig1_r"], name="reflection_pad1d", mode="reflect"),
        node("Conv", ["sig1_r", "re1"], ["o1_re"], name="conv1d", strides=[64]),
        node("Conv", ["sig1_r", "im1"], ["o1_im_"], name="conv1d_1", strides=[64]),
        node("Neg", ["o1_im_"], ["o1_im"], name="Neg"),
        node("Pad", ["sig1", "lp_pad"], ["sig1_p"], name="Pad"),
        node("Conv", ["sig1_p", "lowpass"], ["sig2"], name="conv1d_2", strides=[2]),
        node("Pad", ["sig2", "reflect"], ["sig2_r"], name="reflection_pad1d_1", mode="reflect"),
        node("Conv", ["sig2_r", "re2"], ["o2_re"], name="conv1d_4", strides=[32]),
        node("Conv", ["sig2_r", "im2"], ["o2_im_"], name="conv1d_3", strides=[32]),
        node("Neg", ["o2_im_"], ["o2_im"], name="Neg_1"),
        node("Concat", ["o2_re", "o1_re"], ["cqt_re"], name="stack_re", axis=1),
        node("Concat", ["o2_im", "o1_im"], ["cqt_im"], name="stack_im", axis=1),
        node("Unsqueeze", ["cqt_re", "last"], ["re_u"], name="expand_re"),
        node("Unsqueeze", ["cqt_im", "last"], ["im_u"], name="expand_im"),
        node("Concat", ["re_u", "im_u"], ["ri"], name="stack_ri", axis=-1),
        node("Mul", ["ri", "bin_scale_u"], ["ri_s"], name="mul_1"),
        node("Mul", ["ri_s", "ri_s"], ["ri2"], name="Pow"),
        node("ReduceSum", ["ri2", "last"], ["mag2"], name="Sum", keepdims=0),
        node("Sqrt", ["mag2"], ["mag"], name="Sqrt_1"),
        node("Mul", ["mag", "mag"], ["power"], name="Square"),
        node("Add", ["power", "eps"], ["power_eps"], name="add"),
        node("Log", ["power_eps"], ["ln"], name="Log"),
        node("Mul", ["ln", "to_db"], ["db"], name="mul_db"),
    ]
    nodes.insert(0, node("Unsqueeze", ["bin_scale", "last"], ["bin_scale_u"], name="scale_u"))
    graph = helper.make_graph(nodes, "cqt", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, CQT_N, 1])],
                              [helper.make_tensor_value_info("db", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _music(seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """Chords of harmonic tones with decays over a quiet noise floor (basic-pitch's input range, ±1)."""
    rng = np.random.default_rng(seed)
    t = np.arange(CQT_N) / CQT_SR
    feeds = []
    for _ in range(count):
        x = rng.normal(0, 1e-3, CQT_N)
        for _ in range(3):
            f0 = 110 * 2 ** (rng.integers(0, 36) / 12)
            x += rng.uniform(0.05, 0.3) * sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 5) if f0 * h < CQT_SR / 2) \
                * np.exp(-rng.uniform(0.5, 4) * t)
        feeds.append({"audio": (x / np.abs(x).max() * 0.8)[None, :, None].astype(np.float32)})
    return feeds


def _cqt_within_1db(model, quantized, feeds) -> float:
    ref, got = ort.InferenceSession(model.SerializeToString()), ort.InferenceSession(quantized.SerializeToString())
    err = np.concatenate([np.abs(ref.run(None, f)[0] - got.run(None, f)[0]).ravel() for f in feeds])
    return float(np.mean(err <= 1.0))




def test_the_walk_crosses_the_octaves_of_a_cqt():
    why = log_domain_float_tensors(_cqt_front_end())
    # Both octaves' real/imaginary outputs (through Neg and the Concats), the kernels, the signal
    # each octave reads (through the reflect Pads), the decimation low-pass and its input, the audio.
    for name in ("o1_re", "o1_im_", "o1_im", "o2_re", "o2_im", "cqt_re", "cqt_im", "re1", "im2", "sig1_r", "sig2_r",
                 "sig2", "lowpass", "sig1_p", "sig1", "flat", "audio", "power_eps"):
        assert name in why and "linear-domain input of Log" in why[name], name
    assert "db" not in why


@pytest.mark.parametrize("preset", ["BF16", "A16W8"])
def test_cqt_front_end_keeps_its_db_within_1db(preset):
    model = _cqt_front_end()
    result = quantize(model, resolve_config(preset).replace(repair=False), _music(0, 8))
    assert _cqt_within_1db(model, result.model, _music(1, 8)) >= 0.99
