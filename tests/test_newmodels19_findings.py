"""Round 19 of outside models (issue 27 item 5): what the new models broke, held on small models.

onnx-asr's whisper front end (``whisper80_conv.onnx``) computes its power spectrum as one Conv holding cos and sin
rows, Reshape → ReduceSumSquare over the (re, im) axis, then Transpose and a **Slice** dropping the last frame before
the mel MatMul, Clip and Log. The log-domain walk (graph/logdomain.py) asks whether a filterbank's input is a power
(non-negative by construction) to walk on through it; a Slice was not known to keep the sign, so the spectrum was
taken for the signal, the DFT Conv and its weights were quantized, and A8W8 kept 68 % of the log-mel bins within
1 dB (A16W8 95 %), silently. The graph below is that structure at a small size.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from testkit.audio import triangular_mel
from onnxptq.graph.logdomain import log_domain_float_tensors

N_FFT, HOP, BINS, MELS = 128, 40, 65, 16


def _sliced_front_end() -> onnx.ModelProto:
    """audio → Unsqueeze → Conv (cos rows then −sin rows, Hann window) → Reshape [1, 2, BINS, T] → ReduceSumSquare
    (axis 1) → Transpose [1, T, BINS] → Slice (all frames but the last) → MatMul (triangular mel) → Clip 1e-10 → Log
    → dB (·10/ln 10) → Max −100 dB."""
    n = np.arange(N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)
    k = np.arange(BINS)[:, None]
    dft = np.concatenate([np.cos(2 * np.pi * k * n / N_FFT) * window, -np.sin(2 * np.pi * k * n / N_FFT) * window])
    mel = triangular_mel(BINS, MELS)
    inits = [numpy_helper.from_array(dft[:, None, :].astype(np.float32), "dft"),
             numpy_helper.from_array(mel, "melW"), numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array([1, 2, BINS, -1], np.int64), "shape"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"), numpy_helper.from_array(np.array([-1], np.int64), "e1"),
             numpy_helper.from_array(np.array(1e-10, np.float32), "eps"),
             numpy_helper.from_array(np.array(10.0 / np.log(10.0), np.float32), "db_per_nat"),
             numpy_helper.from_array(np.array(-100.0, np.float32), "db_lo")]
    nodes = [
        helper.make_node("Unsqueeze", ["audio", "axis1"], ["frames_in"]),
        helper.make_node("Conv", ["frames_in", "dft"], ["image"], strides=[HOP]),
        helper.make_node("Reshape", ["image", "shape"], ["reim"]),
        helper.make_node("ReduceSumSquare", ["reim"], ["power"], axes=[1], keepdims=0),
        helper.make_node("Transpose", ["power"], ["power_t"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["power_t", "s0", "e1", "axis1", "axis1"], ["spectrum"]),
        helper.make_node("MatMul", ["spectrum", "melW"], ["mel"]),
        helper.make_node("Clip", ["mel", "eps"], ["mel_floor"]),
        helper.make_node("Log", ["mel_floor"], ["ln"]),
        helper.make_node("Mul", ["ln", "db_per_nat"], ["db"]),
        helper.make_node("Max", ["db", "db_lo"], ["db_out"]),
    ]
    graph = helper.make_graph(nodes, "sliced_front_end", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1600])],
                              [helper.make_tensor_value_info("db_out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _speechlike(seed: int, count: int) -> list[dict[str, np.ndarray]]:
    """Tones in [-1, 1] with a silent tail and a noise floor 30-60 dB down (a recording's range)."""
    rng = np.random.default_rng(seed)
    t = np.arange(1600) / 16000
    feeds = []
    for _ in range(count):
        x = sum(rng.uniform(0.02, 0.3) * np.sin(2 * np.pi * rng.uniform(100, 7000) * t) for _ in range(3))
        x = x * (np.arange(1600) < rng.integers(400, 1600)) + rng.normal(0, 10 ** -rng.uniform(1.5, 3), 1600) * 0.1
        feeds.append({"audio": x[None].astype(np.float32)})
    return feeds


def test_a_slice_between_power_and_filterbank_keeps_the_walk_going():
    why = log_domain_float_tensors(_sliced_front_end())
    for name in ("spectrum", "power_t", "power", "reim", "image", "dft", "melW"):
        assert name in why and "linear-domain input of Log" in why[name], name


def test_the_sliced_front_end_keeps_its_log_mel_within_1db():
    """Without the Slice rule A16W8 quantized the DFT Conv (weights and output) and lost the quiet bins; with it only
    the dB end is quantized."""
    model = _sliced_front_end()
    result = quantize(model, resolve_config("A16W8").replace(repair=False), _speechlike(0, 8))
    assert {"image", "dft"} <= set(result.plan.float_tensors)
    ref, got = ort.InferenceSession(model.SerializeToString()), ort.InferenceSession(result.model.SerializeToString())
    held = _speechlike(1, 8)
    err = np.concatenate([np.abs(ref.run(None, f)[0] - got.run(None, f)[0]).ravel() for f in held])
    assert float(np.mean(err <= 1.0)) >= 0.97
