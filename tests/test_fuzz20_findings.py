"""fuzz20's findings (issue 27 items 1 and 3), each on a small synthetic graph that failed before.

* ``Gemm``'s C need only broadcast to (M, N). Keras through tf2onnx writes it as a row (1, N), other exporters
  as a scalar. The int32 bias of the integer presets took a per-channel axis 0 (a Conv's bias is 1-D), so a
  (1, N) row met N scales on an axis of length 1 and emit raised a raw ``ValueError`` ("per-channel scale must be
  1-D of length 1") under A8W8 and A16W8. A row now takes its channels on its last axis; a C that is not one
  value per output channel (a scalar) stays float with the reason in the plan.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize

D, N = 8, 16


def _gemms() -> onnx.ModelProto:
    """x → Gemm(W (N, D), C (1, N), transB=1, alpha 0.5, beta 2) → Relu → Transpose → Gemm(transA=1, C a scalar,
    alpha 1.5, beta 0.5) → Relu → Gemm(transB=1, alpha 2, no C)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (N, D)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (1, N)).astype(np.float32), "c_row"),
             numpy_helper.from_array(rng.normal(0, 0.4, (N, D)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.asarray(0.3, np.float32), "c_scalar"),
             numpy_helper.from_array(rng.normal(0, 0.4, (4, D)).astype(np.float32), "w3")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "c_row"], ["g1"], transB=1, alpha=0.5, beta=2.0, name="row_bias"),
             helper.make_node("Relu", ["g1"], ["r1"], name="act1"),
             helper.make_node("Transpose", ["r1"], ["t1"], perm=[1, 0], name="flip"),
             helper.make_node("Gemm", ["t1", "w2", "c_scalar"], ["g2"], transA=1, alpha=1.5, beta=0.5, name="scalar_bias"),
             helper.make_node("Relu", ["g2"], ["r2"], name="act2"),
             helper.make_node("Gemm", ["r2", "w3"], ["y"], transB=1, alpha=2.0, name="head")]
    graph = helper.make_graph(nodes, "gemms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.normal(0, 1, (2, D)) * np.linspace(0.5, 2, D)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_a_gemm_row_bias_is_int32_on_its_last_axis_and_a_scalar_c_stays_float(preset: str, tmp_path) -> None:
    model = _gemms()
    out = tmp_path / "q.onnx"
    res = quantize(model, get_preset(preset).replace(repair=False), data=_feeds(16, 0), output=str(out))
    row = res.plan.tensors["c_row"]
    assert (row.quant.format, row.axis) == ("int32", 1)
    assert "c_scalar" not in res.plan.tensors and "one value per channel" in res.plan.float_tensors["c_scalar"]
    f = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ref = np.concatenate([f.run(None, fd)[0].ravel() for fd in _feeds(8, 1)])
    got = np.concatenate([q.run(None, fd)[0].ravel() for fd in _feeds(8, 1)])
    assert ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)) > 0.99
