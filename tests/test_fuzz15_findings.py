"""Issue 27 items 1 and 3, fuzz15: the text-transformer and image-head spellings the generators draw, and the
faults their campaigns found (bench/RESULTS.md, "… attention masks, pooling, heads (fuzz15, 2026-11-29)")."""

from __future__ import annotations

import random

import numpy as np
import pytest


def _run_step(op: str, x: np.ndarray, opset: int):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from testkit.fuzz import _Builder

    elem = TensorProto.FLOAT16 if x.dtype == np.float16 else TensorProto.FLOAT
    b = _Builder(random.Random(5), elem, opset)
    b.shapes["x"] = x.shape
    out = b.step(op, "x", None)
    assert out is not None, f"{op} does not fit {x.shape}"
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", elem, list(x.shape))],
                              [helper.make_tensor_value_info(out, elem, list(b.shapes[out]))], initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return got, b


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
