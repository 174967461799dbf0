"""Issue 27 items 1 and 3, fuzz15: the text-transformer and image-head spellings the generators draw, and the
faults their campaigns found (bench/RESULTS.md, "… attention masks, pooling, heads (fuzz15, 2026-11-29)")."""

from __future__ import annotations


import numpy as np
import pytest


def _run_step(op: str, x: np.ndarray, opset: int):
    from testkit.fuzz import run_step

    return run_step(op, x, opset, seed=5)


@pytest.mark.parametrize("opset", [14, 18])
def test_the_drawn_mask_and_head_spellings_compute_what_they_name(opset):
    """testkit's causal Softmax (Trilu → Cast bool → Where lowest → Softmax), masked mean pooling (int64
    mask Cast/Unsqueeze, ΣxM ÷ max(ΣM, 1e-9)), Einsum projection and DepthToSpace → Clip, run by
    onnxruntime, against NumPy written from their definitions."""
    from onnx import numpy_helper

    x = np.random.default_rng(3).normal(0.3, 1.5, (2, 5, 5)).astype(np.float32)
    got, _ = _run_step("CausalSoftmax", x, opset)
    s = np.where(np.tril(np.ones((5, 5), bool)), x.astype(np.float64), -np.inf)
    want = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert np.all(np.triu(got[0], 1) == 0)

    x = np.random.default_rng(4).normal(0.3, 1.5, (2, 5, 3)).astype(np.float32)
    got, _ = _run_step("MaskedMeanPool", x, opset)
    keep = (np.arange(5) < 3).astype(np.float64)[:, None]
    np.testing.assert_allclose(got, x + (x * keep).sum(-2, keepdims=True) / keep.sum(), rtol=1e-5, atol=1e-5)

    got, b = _run_step("EinsumMatMul", x, opset)
    w = numpy_helper.to_array(b.inits[-1]).astype(np.float64)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)

    x = np.random.default_rng(5).normal(0.5, 0.6, (1, 8, 3, 3)).astype(np.float32)
    got, _ = _run_step("DepthToSpaceClip", x, opset)
    # CRD: out[n, c, 2h + i, 2w + j] = in[n, 4c + 2i + j, h, w]
    want = x.reshape(1, 2, 2, 2, 3, 3).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 6, 6)
    np.testing.assert_array_equal(got, np.clip(want, 0, 1))


def _fp16_layernorm_without_scale(opset: int = 17):
    """A float16 graph with LayerNorm written out and no scale or shift (Pow/ReduceMean/Sqrt/Div, as the
    TorchScript exporter writes ``(x − μ)/√(var + ε)`` in an fp16 model), then a MatMul."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    h = np.float16
    w = np.random.default_rng(0).normal(0, 0.3, (8, 4)).astype(h)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mu"], axes=[-1], keepdims=1),
        helper.make_node("Sub", ["x", "mu"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["d", "sd"], ["n"]),
        helper.make_node("MatMul", ["n", "w"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.asarray(2.0, h), "two"), numpy_helper.from_array(np.asarray(1e-5, h), "eps"),
             numpy_helper.from_array(w, "w")]
    graph = helper.make_graph(nodes, "ln16", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["b", 5, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["b", 5, 4])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize("preset", ["FP16", "A8W8"])
def test_an_fp16_layernorm_without_scale_fuses_in_its_own_type(tmp_path, preset):
    """Found by fuzz_silent seed 17 (TorchScript 17, fp16 ``ln_fp16_forms``): prepare fused the written-out
    LayerNorm into ``LayerNormalization`` with a float32 ones scale in a float16 graph, and FP16 — the
    preset that keeps an fp16 model in fp16 — raised ``ModelRuntimeError: onnxruntime cannot load the model
    for calibration … (T) bound to different types`` on a model onnxruntime runs. The scale now takes the
    normalized tensor's type."""
    import onnx
    import onnxruntime as ort

    import onnxptq

    model = _fp16_layernorm_without_scale()
    src = tmp_path / "ln16.onnx"
    onnx.save(model, src)
    rng = np.random.default_rng(1)
    feeds = [{"x": (rng.normal(0, 1, (1, 5, 8)) * np.linspace(0.5, 3, 8)).astype(np.float16)} for _ in range(24)]
    res = onnxptq.quantize(str(src), preset, data=feeds, output=str(tmp_path / "q.onnx"))
    fused = [n for n in res.model.graph.node if n.op_type == "LayerNormalization"]
    assert fused, "the written-out LayerNorm was not fused"
    q = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.concatenate([f.run(None, d)[0].ravel() for d in feeds]).astype(np.float64)
    b = np.concatenate([q.run(None, {"x": d["x"].astype(np.float16 if q.get_inputs()[0].type == "tensor(float16)" else np.float32)})[0].ravel()
                        for d in feeds]).astype(np.float64)
    assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.99
