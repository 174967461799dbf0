"""Bias correction removes the mean shift a layer's own 8-bit input quantizer adds, not only its
rounded weights': the reference tool's A8W8 (MinMax, symmetric int8 activations, per-tensor weights)
on a SiLU → Conv pattern, where the symmetric grid sized by a few large activations rounds the
many small ones (SiLU's dip and its small positives) with a mean error per channel. YOLOv8n under
that preset lost most of its box agreement this way (bench/RESULTS.md, "A8W8 and its peers on
issue 27 item 6")."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from testkit.reference import quantize_reference

C_IN, C_OUT, SIZE = 8, 6, 10


def _model(rng: np.random.Generator) -> onnx.ModelProto:
    """x → Sigmoid, Mul (SiLU written out, as YOLO exports it) → Conv 3×3 with a bias → y."""
    w = rng.standard_normal((C_OUT, C_IN, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(C_OUT).astype(np.float32) * 0.1
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["a"], name="silu"),
             helper.make_node("Conv", ["a", "W", "B"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "silu_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", C_IN, SIZE, SIZE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", C_OUT, SIZE, SIZE])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Pre-activations mostly in [-3, 1] (SiLU's dip and small positives), one channel with rare
    peaks near 40 that set the symmetric MinMax step to ~0.3: most values lie within one step of 0."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(-0.8, 1.0, (1, C_IN, SIZE, SIZE)).astype(np.float32)
        x[0, 0, rng.integers(SIZE), rng.integers(SIZE)] = 40.0
        out.append({"x": x})
    return out


def _run(model, feeds) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # Q/DQ in float: exact sums on any CPU
    sess = ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, f)[0] for f in feeds])


def test_the_correction_removes_the_mean_shift_of_the_layers_own_input_quantizer(tmp_path):
    rng = np.random.default_rng(3)
    model = _model(rng)
    src = tmp_path / "silu_conv.onnx"
    onnx.save(model, src)
    calib, held = _feeds(12, 1), _feeds(8, 2)
    out = tmp_path / "ref_a8w8.onnx"
    quantize_reference(src, out, calib, "A8W8", repair=False)

    # The delivered quantizer of the SiLU output (symmetric int8, the step a few peaks set).
    q = onnx.load(out)
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    qnode = next(n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "a")
    step, zp = float(inits[qnode.input[1]]), inits[qnode.input[2]]
    info = np.iinfo(zp.dtype)
    lo, hi = info.min - int(zp), info.max - int(zp)  # the grid in steps around real 0
    assert zp.dtype.itemsize == 1 and int(zp) in (0, 128) and step > 0.2  # symmetric 8-bit, int8 or uint8 around 128

    # Independent reference (NumPy): what rounding the conv input on that grid does to the mean of
    # each output channel, on the held-out samples: a 3x3 conv of zero-padded E[Q(a) - a] maps.
    a = np.concatenate([f["x"] * (1 / (1 + np.exp(-f["x"]))) for f in held]).astype(np.float64)
    da = np.clip(np.round(a / step), lo, hi) * step - a
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    pad = np.pad(da, ((0, 0), (0, 0), (1, 1), (1, 1)))
    shift = np.zeros(C_OUT)
    for i in range(3):
        for j in range(3):
            shift += w[:, :, i, j] @ pad[:, :, i:i + SIZE, j:j + SIZE].mean(axis=(0, 2, 3))
    spread = _run(src.as_posix(), held).std(axis=(0, 2, 3))
    assert np.abs(shift).max() > 0.02 * spread.max(), (shift, spread)  # a shift worth removing

    err = (_run(out.as_posix(), held) - _run(src.as_posix(), held)).mean(axis=(0, 2, 3))
    # Left uncorrected, the quantized model's mean error per channel would be about ``shift``;
    # corrected on the calibration samples, what is left on held-out ones is a small part of it.
    assert np.abs(err).max() < 0.25 * np.abs(shift).max(), (err, shift)
    assert np.linalg.norm(err) < 0.25 * np.linalg.norm(shift), (err, shift)
