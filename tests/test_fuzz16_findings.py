"""Issue 27 items 1 and 3, fuzz16: the recurrent, convolution, normalization, activation and weight-path spellings
the op-set generator draws, and the faults their campaigns found (bench/RESULTS.md, "… composed blocks, odd dtypes
and shapes (fuzz16, 2026-11-29)")."""

from __future__ import annotations


import numpy as np
import pytest


def _run_step(op: str, x: np.ndarray, opset: int, seed: int = 7):
    """testkit's step alone, run: (output, initializers by name, builder)."""
    import onnx

    from testkit.fuzz import run_step

    got, b = run_step(op, x, opset, seed)
    return got, {t.name: onnx.numpy_helper.to_array(t) for t in b.inits}, b


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _gru_reference(x: np.ndarray, w: np.ndarray, r: np.ndarray, bias: np.ndarray, h0: np.ndarray, reverse: bool) -> np.ndarray:
    """ONNX's GRU (gates z, r, h; linear_before_reset=1) for one direction, batch 1, written from the operator's
    definition: z = σ(Wz x + Rz h + bz), r = σ(...), n = tanh(Wn x + r ⊙ (Rn h + Rbn) + Wbn), h' = (1 − z) n + z h."""
    hsize = r.shape[-1]
    wz, wr, wn = np.split(w, 3)
    rz, rr, rn = np.split(r, 3)
    wbz, wbr, wbn, rbz, rbr, rbn = np.split(bias, 6)
    h = h0.astype(np.float64)
    out = np.zeros((x.shape[0], hsize))
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for t in steps:
        xt = x[t].astype(np.float64)
        z = _sigmoid(wz @ xt + rz @ h + wbz + rbz)
        rg = _sigmoid(wr @ xt + rr @ h + wbr + rbr)
        n = np.tanh(wn @ xt + rg * (rn @ h + rbn) + wbn)
        h = (1 - z) * n + z * h
        out[t] = h
    return out


@pytest.mark.parametrize("opset", [14, 18])
def test_the_drawn_recurrent_and_norm_spellings_compute_what_they_name(opset):
    """testkit's GRU op (constant sequence_lens, initial_h, one or two directions), GroupNorm by Reshape →
    InstanceNormalization → Reshape, dilated Conv, HardSigmoid gate, per-channel PRelu, min-only Clip, a weight
    through Identity → Transpose → Cast and one initializer both a MatMul weight and an Add operand, run by
    onnxruntime, against NumPy written from the operators' definitions."""
    x = np.random.default_rng(1).normal(0, 1, (5, 4)).astype(np.float32)
    directions = set()
    for seed in range(4):  # seeds 0-3 draw both one and two directions
        got, inits, b = _run_step("GRUSeqLens", x, opset, seed)
        node = next(n for n in b.nodes if n.op_type == "GRU")
        w, r, bias, h0 = (inits[name] for name in (node.input[1], node.input[2], node.input[3], node.input[5]))
        dirs = w.shape[0]
        directions.add(dirs)
        want = np.concatenate([_gru_reference(x, w[k], r[k], bias[k], h0[k, 0], reverse=k == 1) for k in range(dirs)], axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert directions == {1, 2}

    x = np.random.default_rng(2).normal(0.5, 2.0, (1, 4, 3, 3)).astype(np.float32)
    got, inits, b = _run_step("GroupNormInstNorm", x, opset)
    scale = next(v for k, v in inits.items() if v.shape == (4, 1, 1) and b.nodes[-2].input[1] == k)
    shift = inits[b.nodes[-1].input[1]]
    g = x.astype(np.float64).reshape(1, 2, -1)
    normed = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(got, normed * scale + shift, rtol=1e-4, atol=1e-4)

    x = np.random.default_rng(3).normal(0, 1, (1, 2, 5, 5)).astype(np.float32)
    got, inits, b = _run_step("DilatedConv", x, opset)
    k = inits[b.nodes[-1].input[1]].astype(np.float64)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (2, 2), (2, 2)))
    want = np.zeros(got.shape)
    for i in range(5):
        for j in range(5):
            patch = padded[0, :, i:i + 5:2, j:j + 5:2]  # 3 taps 2 apart
            want[0, :, i, j] = np.tensordot(k, patch, axes=([1, 2, 3], [0, 1, 2]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    x = np.linspace(-4, 4, 12, dtype=np.float32).reshape(2, 6)
    got, _, _ = _run_step("HardSigmoidMul", x, opset)
    np.testing.assert_allclose(got, x * np.clip(0.2 * x + 0.5, 0, 1), rtol=1e-6, atol=1e-7)
    got, _, _ = _run_step("ClipMin", x, opset)
    np.testing.assert_array_equal(got, np.maximum(x, np.float32(-0.5)))
    got, inits, b = _run_step("PReluChannel", x.reshape(1, 2, 2, 3), opset)
    slope = inits[b.nodes[-1].input[1]]
    np.testing.assert_allclose(got, np.where(x.reshape(1, 2, 2, 3) < 0, x.reshape(1, 2, 2, 3) * slope, x.reshape(1, 2, 2, 3)), rtol=1e-6)

    x = np.random.default_rng(4).normal(0, 1, (2, 3, 4)).astype(np.float32)
    got, inits, b = _run_step("WeightViaCast", x, opset)
    stored = next(v for v in inits.values() if v.dtype == np.float16)
    np.testing.assert_allclose(got, x.astype(np.float64) @ stored.astype(np.float64).T, rtol=1e-5, atol=1e-5)
    assert [n.op_type for n in b.nodes] == ["Identity", "Transpose", "Cast", "MatMul"]

    x = np.random.default_rng(5).normal(0, 1, (1, 2, 4, 4)).astype(np.float32)
    got, inits, b = _run_step("SharedWeightAdd", x, opset)
    (w,) = inits.values()
    np.testing.assert_allclose(got, x.astype(np.float64) @ w + w, rtol=1e-5, atol=1e-5)
    assert b.nodes[0].input[1] == b.nodes[1].input[1]  # the same initializer, two roles


def _input_handed_back():
    """x → MatMul → Relu → MatMul → y, with the graph input ``x`` itself a second graph output (a model that
    hands its input back beside its result) and an initializer a third."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (8, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.4, (8, 4)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.linspace(0, 1, 6, dtype=np.float32).reshape(3, 2), "anchors")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5, 4]),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, 8]),
                               helper.make_tensor_value_info("anchors", TensorProto.FLOAT, [3, 2])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_outputs_bound_by_run_feeds_include_a_graph_input_handed_back():
    """sessions.run_feeds binds its outputs to arrays of its own after the first runs (IOBinding); onnxruntime
    does not write a graph input handed back as an output into its bound buffer, so the floor judged np.empty's
    garbage as that output (cosine ~0 'even with every node float'). The input comes back as it went in."""
    import onnxruntime as ort

    from onnxptq.sessions import run_feeds

    session = ort.InferenceSession(_input_handed_back().SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = [{"x": np.random.default_rng(i).normal(0, 1, (1, 5, 8)).astype(np.float32)} for i in range(6)]
    for feed, (y, x, anchors) in zip(feeds, run_feeds(session, ["y", "x", "anchors"], feeds)):
        np.testing.assert_array_equal(x, feed["x"])
        np.testing.assert_array_equal(y, session.run(["y"], feed)[0])
        np.testing.assert_array_equal(anchors, np.linspace(0, 1, 6, dtype=np.float32).reshape(3, 2))


@pytest.mark.parametrize("preset", ["A8W8", "MX9"])
def test_a_graph_input_handed_back_as_an_output_quantizes_and_passes_through(preset):
    """A8W8 (every integer and 16-bit preset) raised 'the quantized model fails the ONNX checker … input
    x_QuantizeLinear_Input … is not output of any previous nodes': emit renames a quantized graph output's
    producer, and a graph input has none. MX9 quantized but its floor broke on the garbage of the bound output
    above and repair went looking. Now the quantized value goes to the MatMul only (plan/corners.py
    passthrough_outputs), the output ``x`` is the input bit for bit, and the floor holds."""
    import logging

    import onnxruntime as ort

    from onnxptq import quantize

    logging.disable(logging.WARNING)
    try:
        feeds = [{"x": (np.random.default_rng(i).normal(0, 1, (1, 5, 8)) * np.linspace(0.5, 2, 8)).astype(np.float32)}
                 for i in range(24)]
        result = quantize(_input_handed_back(), preset, feeds)
    finally:
        logging.disable(logging.NOTSET)
    assert result.floor is not None and not result.floor.broken, result.floor.broken
    assert [o.name for o in result.model.graph.output] == ["y", "x", "anchors"]
    assert any(n.input[0] != "x" for n in result.model.graph.node if n.op_type == "MatMul")  # a quantized MatMul input
    q = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    f = ort.InferenceSession(_input_handed_back().SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"x": np.random.default_rng(99).normal(0, 1, (2, 5, 8)).astype(np.float32)}
    y, x, anchors = q.run(None, feed)
    np.testing.assert_array_equal(x, feed["x"])
    np.testing.assert_array_equal(anchors, f.run(None, feed)[2])
    ref = f.run(None, feed)[0].ravel()
    assert float(ref @ y.ravel() / np.linalg.norm(ref) / np.linalg.norm(y)) > 0.99
