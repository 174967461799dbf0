"""The waveform upstream of a log spectrum stays float (graph/logdomain.py, ``_waveform_chain``), and a
waveform output is judged by its log-power spectrum (analysis/waveform_reads.py) — issue 27.

The front end is kaldi's (onnx-asr's ``kaldi_conv``) at a small size: DC removal (``x − ReduceMean(x)``),
pre-emphasis (``x[t] − 0.97·x[t−1]`` as Slices, a Mul and a Sub, the first sample Concat'ed back), a
window multiplied into the signal, the DFT as one strided Conv1d (real and imaginary kernels), power,
a mel filterbank, Clip(ε) and Log (nats). Before the walk followed the waveform through those
elementwise ops, BF16 rounded the samples: an 8-bit mantissa is a noise floor ~54 dB under each
sample, spread by the DFT over every bin, and the quiet bands drowned (onnx-asr's kaldi: 0.959 of the
log-mel bins within 1 dB).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq.graph.logdomain as logdomain
from onnxptq.analysis.declared_readings import declared_readings
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.analysis.waveform_reads import is_waveform, spectrum_share, waveform_outputs
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from testkit.audio import triangular_mel

SR, LENGTH, N_FFT, HOP, MELS = 16000, 4000, 256, 128, 24
NAT_1DB = 0.1 * np.log(10.0)  # 1 dB of mel power in the Log's nats


def _mel(bins: int) -> np.ndarray:
    return triangular_mel(bins, MELS)


def _kaldi_front_end() -> onnx.ModelProto:
    """waveform [1, L] → DC removal → pre-emphasis → Unsqueeze → DFT Conv1d (Hann) → re²+im² → mel MatMul → Clip → Log."""
    n = np.arange(N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    k = np.arange(N_FFT // 2 + 1)[:, None]
    dft = np.concatenate([np.cos(2 * np.pi * k * n / N_FFT) * window, -np.sin(2 * np.pi * k * n / N_FFT) * window])
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    i64 = lambda a: np.asarray(a, np.int64)  # noqa: E731
    inits = [numpy_helper.from_array(v, name) for name, v in (
        ("dft", f32(dft[:, None, :])), ("melW", _mel(N_FFT // 2 + 1)), ("coef", f32(0.97)), ("eps", f32(1e-10)),
        ("gain", f32(32768.0)), ("ax1", i64([1])), ("zero", i64([0])), ("one", i64([1])), ("minus1", i64([-1])),
        ("end", i64([LENGTH])), ("split", i64([N_FFT // 2 + 1, N_FFT // 2 + 1])))]
    nodes = [
        helper.make_node("ReduceMean", ["wave"], ["dc"], axes=[1], keepdims=1, name="dc"),
        helper.make_node("Sub", ["wave", "dc"], ["centred"], name="remove_dc"),
        helper.make_node("Slice", ["centred", "zero", "one", "ax1"], ["first"], name="first"),
        helper.make_node("Slice", ["centred", "one", "end", "ax1"], ["later"], name="later"),
        helper.make_node("Slice", ["centred", "zero", "minus1", "ax1"], ["earlier"], name="earlier"),
        helper.make_node("Mul", ["coef", "earlier"], ["scaled"], name="preemph_mul"),
        helper.make_node("Sub", ["later", "scaled"], ["emphasised"], name="preemph_sub"),
        helper.make_node("Concat", ["first", "emphasised"], ["pre"], axis=1, name="preemph_cat"),
        helper.make_node("Mul", ["pre", "gain"], ["int16_scale"], name="to_int16_scale"),
        helper.make_node("Unsqueeze", ["int16_scale", "ax1"], ["frames_in"], name="unsqueeze"),
        helper.make_node("Conv", ["frames_in", "dft"], ["spec"], strides=[HOP], name="dft_conv"),
        helper.make_node("Split", ["spec", "split"], ["re", "im"], axis=1, name="split"),
        helper.make_node("Mul", ["re", "re"], ["re2"], name="re2"), helper.make_node("Mul", ["im", "im"], ["im2"], name="im2"),
        helper.make_node("Add", ["re2", "im2"], ["power"], name="power"),
        helper.make_node("Transpose", ["power"], ["power_t"], perm=[0, 2, 1], name="transpose"),
        helper.make_node("MatMul", ["power_t", "melW"], ["mel"], name="mel"),
        helper.make_node("Clip", ["mel", "eps"], ["mel_floor"], name="clip"),
        helper.make_node("Log", ["mel_floor"], ["fbank"], name="log"),
    ]
    graph = helper.make_graph(nodes, "kaldi_small", [helper.make_tensor_value_info("wave", TensorProto.FLOAT, [1, LENGTH])],
                              [helper.make_tensor_value_info("fbank", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _speech(seed: int, count: int, length: int = LENGTH) -> list[dict[str, np.ndarray]]:
    """A loud voiced stand-in (harmonics under 1 kHz) over quiet high bands 50-70 dB down and a −100 dB floor, with
    a DC offset: a clip whose log spectrum spans ~80 dB."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / SR
    feeds = []
    for _ in range(count):
        f0 = rng.uniform(100, 200)
        x = sum(0.3 / h * np.sin(2 * np.pi * h * f0 * t + rng.uniform(0, 6)) for h in range(1, 6))
        x = x + sum(10 ** (-rng.uniform(50, 70) / 20) * np.sin(2 * np.pi * rng.uniform(2000, 7500) * t) for _ in range(4))
        x = x + rng.normal(0, 1e-5, length) + rng.uniform(-0.02, 0.02)
        feeds.append({"wave": x[None].astype(np.float32)})
    return feeds


def _fbank_within_1db(model: onnx.ModelProto, quantized: onnx.ModelProto, feeds) -> float:
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    errors = [np.abs(ref.run(None, f)[0] - got.run(None, f)[0]).ravel() for f in feeds]
    return float(np.mean(np.concatenate(errors) <= NAT_1DB))


def test_the_walk_follows_the_waveform_through_dc_removal_and_pre_emphasis():
    why = logdomain.log_domain_float_tensors(_kaldi_front_end())
    for name in ("wave", "dc", "centred", "first", "later", "earlier", "scaled", "emphasised", "pre", "int16_scale",
                 "coef", "gain"):
        assert name in why and "the waveform feeding its spectrum" in why[name], name
    assert "linear-domain input of Log" in why["power"]


def test_a_waveform_computed_by_a_network_is_not_followed():
    """A signal that is a computation's output (here through a Relu) is not the model's input: the chain is refused and
    the walk keeps its old stop at the DFT's direct input."""
    model = _kaldi_front_end()
    relu = helper.make_node("Relu", ["wave"], ["rectified"], name="relu")
    model.graph.node.insert(0, relu)
    for node in model.graph.node[1:]:
        node.input[:] = ["rectified" if i == "wave" else i for i in node.input]
    why = logdomain.log_domain_float_tensors(model)
    assert "centred" not in why and "rectified" not in why and "int16_scale" in why


def test_frames_cut_by_a_scan_are_the_signal_too():
    """wespeaker's framing: a Scan whose body only concatenates the previous hop with the current one and slices
    the next state out. The walk crosses it, and the body's tensors stay float with the frames (onnx-asr's wespeaker:
    the body's inputs rounded to BF16 kept 0.984 of its fbank bins within 1 dB)."""
    hop, bins = 64, 65
    n = np.arange(2 * hop)
    k = np.arange(bins)[:, None]
    dft = np.concatenate([np.cos(2 * np.pi * k * n / (2 * hop)), -np.sin(2 * np.pi * k * n / (2 * hop))]).T
    inits = [numpy_helper.from_array(v, name) for name, v in (
        ("init", np.zeros((1, hop), np.float32)), ("shape", np.array([1, 8, hop], np.int64)),
        ("dftW", dft.astype(np.float32)), ("melW", _mel(2 * bins)), ("eps", np.array(1e-10, np.float32)),
        ("from", np.array([hop], np.int64)), ("to", np.array([2 * hop], np.int64)), ("last", np.array([-1], np.int64)))]
    f = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("Concat", ["prev", "curr"], ["frame"], axis=-1),
         helper.make_node("Slice", ["frame", "from", "to", "last"], ["next"])],
        "sliding_buffer", [f("prev", [1, hop]), f("curr", [1, hop])], [f("next", [1, hop]), f("frame", [1, 2 * hop])])
    nodes = [helper.make_node("Reshape", ["wave", "shape"], ["hops"]),
             helper.make_node("Scan", ["init", "hops"], ["state", "frames"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_output_axes=[1]),
             helper.make_node("MatMul", ["frames", "dftW"], ["spec"]), helper.make_node("Mul", ["spec", "spec"], ["power"]),
             helper.make_node("MatMul", ["power", "melW"], ["mel"]), helper.make_node("Clip", ["mel", "eps"], ["floored"]),
             helper.make_node("Log", ["floored"], ["fbank"])]
    graph = helper.make_graph(nodes, "framed", [f("wave", [1, 8 * hop])], [f("fbank", None)], inits)
    why = logdomain.log_domain_float_tensors(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    for name in ("wave", "hops", "frames", "prev", "curr", "frame"):
        assert name in why and "the waveform feeding its spectrum" in why[name], name


@pytest.fixture(scope="module")
def bf16_runs():
    model = _kaldi_front_end()
    config = resolve_config("BF16").replace(repair=False)
    after = quantize(model, config, _speech(0, 8))
    saved = logdomain._waveform_chain
    logdomain._waveform_chain = lambda *args, **kwargs: []  # the walk as it was: stop at the DFT's direct input
    try:
        before = quantize(model, config, _speech(0, 8))
    finally:
        logdomain._waveform_chain = saved
    return model, before, after


def test_bf16_front_end_holds_its_fbank_after_the_rule_and_not_before(bf16_runs):
    model, before, after = bf16_runs
    held = _speech(1, 6)
    floor = FAMILY_FLOORS["16-bit"][1]
    assert _fbank_within_1db(model, before.model, held) < floor  # the failure the rule exists for
    assert _fbank_within_1db(model, after.model, held) >= floor
    assert "the waveform feeding its spectrum" in after.plan.float_tensors["emphasised"]


# --- a waveform output: a resampler whose log spectrum the next model reads ---------------------------------------------

def _low_pass(length: str | int = "samples") -> onnx.ModelProto:
    """wave [batch, T] → Unsqueeze → a 31-tap windowed-sinc low-pass Conv1d (same padding) → Squeeze → out [batch, T]."""
    taps = np.sinc(0.45 * np.arange(-15, 16)) * np.hamming(31) * 0.45
    inits = [numpy_helper.from_array(taps[None, None].astype(np.float32), "fir"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    nodes = [helper.make_node("Unsqueeze", ["wave", "ax1"], ["w3"]),
             helper.make_node("Conv", ["w3", "fir"], ["y3"], pads=[15, 15], name="fir"),
             helper.make_node("Squeeze", ["y3", "ax1"], ["out"])]
    graph = helper.make_graph(nodes, "low_pass", [helper.make_tensor_value_info("wave", TensorProto.FLOAT, ["batch", length])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", length])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _noisy_copies(feeds, noise_db: float, seed: int = 3):
    """Float's outputs (the input itself: a stand-in for the filtered signal) and a copy with white noise ``noise_db``
    under each row's RMS, as a rounded waveform carries."""
    rng = np.random.default_rng(seed)
    ref, got = [], []
    for f in feeds:
        x = f["wave"].astype(np.float64)
        rms = np.sqrt(np.mean(x ** 2))
        ref.append({"out": x.astype(np.float32)})
        got.append({"out": (x + rng.normal(0, rms * 10 ** (noise_db / 20), x.shape)).astype(np.float32)})
    return ref, got


def test_a_waveform_output_is_found_by_structure_and_judged_by_its_spectrum():
    readings = readings_of(_low_pass())
    assert readings["waveforms"] == {"out"}
    assert waveform_outputs(_low_pass(LENGTH)) == set()  # a fixed width is no signal of symbolic length
    floor = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
    ref, got = _noisy_copies(_speech(4, 4), -50.0)
    verdict = measure(ref, got, floor, **readings)
    check = verdict.outputs["out"]
    assert check.cosine >= 0.9999  # the cosine reads this as float
    assert not verdict.ok and check.spectrum is not None and check.spectrum[0] < floor.top1
    assert "log-power spectrum" in check.describe()
    ref, got = _noisy_copies(_speech(4, 4), -110.0)  # below every bin the reading resolves: holds
    held = measure(ref, got, floor, **readings)
    assert held.ok and held.outputs["out"].spectrum[0] >= floor.top1


def test_a_track_that_does_not_swing_about_zero_is_no_waveform():
    envelope = [np.abs(f["wave"]) for f in _speech(5, 2)]
    assert not is_waveform(envelope) and is_waveform([f["wave"] for f in _speech(5, 2)])
    assert spectrum_share([(np.zeros((1, 100)), np.zeros((1, 100)))]) is None  # shorter than a frame: nothing read


def test_a_declared_waveform_is_judged_by_its_spectrum():
    """A fixed-width output the structure does not take for a signal: its user declares it (``--floor-reading out=waveform``)."""
    model = _low_pass(LENGTH)
    readings = readings_of(model)
    assert readings["waveforms"] == set()
    floor = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
    ref, got = _noisy_copies(_speech(6, 4), -50.0)
    assert measure(ref, got, floor, **readings).ok  # by cosine alone: silent
    declared = dict(readings, declared=declared_readings({"out": "waveform"}, ["out"]))
    verdict = measure(ref, got, floor, **declared)
    assert not verdict.ok and "declared a waveform" in verdict.outputs["out"].describe()
    # shorter than a frame: a chunk, read by its SNR (analysis/waveform_reads.py, "Chunks"); too short for that: said
    short = measure([{"out": r["out"][:, :100]} for r in ref], [{"out": g["out"][:, :100]} for g in got], floor, **declared)
    assert short.outputs["out"].chunks is not None and "within 20 dB SNR" in short.outputs["out"].describe()
    tiny = measure([{"out": r["out"][:, :40]} for r in ref], [{"out": g["out"][:, :40]} for g in got], floor, **declared)
    assert "no row holds one 512-sample frame" in tiny.outputs["out"].describe()
    # a scalar declared a waveform (a user's slip): said, not a crash (IndexError on shape[-1] before)
    scalar = measure([{"out": np.float32(r["out"].sum())} for r in ref], [{"out": np.float32(g["out"].sum())} for g in got],
                     floor, **declared)
    assert "no row holds one 512-sample frame" in scalar.outputs["out"].describe()


def test_bf16_low_pass_is_named_below_its_floor_and_fp16_holds():
    """End to end (repair off: the floor names it): BF16 keeps the filtered waveform's cosine at 0.99999 while its
    quiet bands drown under the rounding's noise floor (0.41 of the bins within 1 dB); FP16's 11-bit mantissa holds."""
    feeds = _speech(7, 8)
    bf16 = quantize(_low_pass(), resolve_config("BF16").replace(repair=False), feeds)
    check = bf16.floor.outputs["out"]
    assert check.cosine >= 0.9999 and check.spectrum is not None
    assert not bf16.floor.ok and check.spectrum[0] < FAMILY_FLOORS["16-bit"][1]
    fp16 = quantize(_low_pass(), resolve_config("FP16").replace(repair=False), feeds)
    assert fp16.floor.ok and fp16.floor.outputs["out"].spectrum[0] >= FAMILY_FLOORS["16-bit"][1]
