"""A log-spectrogram MOS regressor, DNSMOS P.835's shape at a small size, and speech-like clips for it
(tests/test_speech_scores.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


SR, N_FFT, HOP = 8000, 128, 64


def _log_spectrogram_mos(seed: int = 0) -> onnx.ModelProto:
    """DNSMOS P.835's shape, small: ``wave [1, L] → STFT as two Conv1d (Hann · cos/sin) → re² + im² →
    Max(ε) → Log → ÷ ln 10 → Unsqueeze → Conv 3×3 (16 edge/onset detectors: zero-mean taps) → Relu →
    Conv 3×3 → Relu → global max → Gemm → + 3 → [1, 3]`` (three MOS values)."""
    rng = np.random.default_rng(seed)
    n = np.arange(N_FFT)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    k = np.arange(N_FFT // 2 + 1)[:, None]
    re = (win * np.cos(2 * np.pi * k * n / N_FFT))[:, None, :]
    im = (-win * np.sin(2 * np.pi * k * n / N_FFT))[:, None, :]
    k1 = rng.standard_normal((16, 1, 3, 3))
    k1 -= k1.mean(axis=(2, 3), keepdims=True)  # spectral edge/onset detectors: taps that cancel
    k1 += 0.05 * rng.standard_normal((16, 1, 1, 1))
    k2 = rng.standard_normal((16, 16, 3, 3)) * np.sqrt(2 / 144)
    wd = rng.standard_normal((16, 3)) * 0.3
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(f32(v), name) for name, v in (
        ("re", re), ("im", im), ("eps", 1e-12), ("ln10", np.log(10.0)), ("k1", k1), ("b1", 0.1 * np.ones(16)),
        ("k2", k2), ("b2", np.zeros(16)), ("wd", wd), ("bd", [3.0, 3.2, 2.8]))]
    inits += [numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    nodes = [
        helper.make_node("Unsqueeze", ["wave", "ax1"], ["w3"]),
        helper.make_node("Conv", ["w3", "re"], ["xr"], strides=[HOP], name="stft_real"),
        helper.make_node("Conv", ["w3", "im"], ["xi"], strides=[HOP], name="stft_imag"),
        helper.make_node("Mul", ["xr", "xr"], ["pr"]), helper.make_node("Mul", ["xi", "xi"], ["pi"]),
        helper.make_node("Add", ["pr", "pi"], ["pw"]), helper.make_node("Max", ["pw", "eps"], ["pm"]),
        helper.make_node("Log", ["pm"], ["lg"], name="log"), helper.make_node("Div", ["lg", "ln10"], ["l10"]),
        helper.make_node("Unsqueeze", ["l10", "ax1"], ["spec"]),
        helper.make_node("Conv", ["spec", "k1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "k2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("ReduceMax", ["r2"], ["gm"], axes=[2, 3], keepdims=0),
        helper.make_node("Gemm", ["gm", "wd", "bd"], ["mos"], name="dense"),
    ]
    graph = helper.make_graph(nodes, "log_spectrogram_mos", [helper.make_tensor_value_info("wave", TensorProto.FLOAT, [1, SR])],
                              [helper.make_tensor_value_info("mos", TensorProto.FLOAT, [1, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _clips(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """1 s of a voiced-speech stand-in: a glottal pulse train (90-250 Hz, vibrato) through two moving
    formant resonances, in noise at 0-30 dB SNR, at a loudness that varies by 30 dB (as the bench's
    clips do)."""
    rng = np.random.default_rng(seed)
    t = np.arange(SR) / SR
    out = []
    for _ in range(n):
        f0 = rng.uniform(90, 250) * (1 + 0.03 * np.sin(2 * np.pi * rng.uniform(3, 6) * t))
        phase = 2 * np.pi * np.cumsum(f0) / SR
        voiced = sum(np.sin(h * phase) / h for h in range(1, 30) if h * f0.max() < SR / 2)
        for fc in (rng.uniform(300, 900), rng.uniform(1000, 2500)):  # a resonance: a decaying cosine's response
            ir = 0.97 ** np.arange(256) * np.cos(2 * np.pi * fc / SR * np.arange(256))
            y = np.convolve(voiced, ir)[:SR]
            voiced = y / np.abs(y).max()
        envelope = (np.sin(2 * np.pi * rng.uniform(2, 5) * t) > -0.3).astype(float)
        noise = rng.standard_normal(SR) * 10 ** (-rng.uniform(0, 30) / 20)
        x = (voiced * envelope + noise) * 10 ** (-rng.uniform(0, 30) / 20) * 0.5
        out.append({"wave": x[None].astype(np.float32)})
    return out
