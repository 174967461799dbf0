"""Tests for fold_batchnorm: Conv / ConvTranspose (grouped) / Gemm + BN fold within float tolerance."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import fold_batchnorm

RNG = np.random.default_rng(0)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _bn_inits(c: int) -> list[onnx.TensorProto]:
    return [
        numpy_helper.from_array((RNG.random(c) + 0.5).astype(np.float32), "gamma"),
        numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "beta"),
        numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32), "mean"),
        numpy_helper.from_array((RNG.random(c) + 0.1).astype(np.float32), "var"),
    ]


def _model(producer: onnx.NodeProto, inits: list, x_shape: list[int], c: int, y_shape: list[int]) -> onnx.ModelProto:
    nodes = [producer, helper.make_node("BatchNormalization", ["p", "gamma", "beta", "mean", "var"], ["y"], epsilon=1e-3)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], outputs, inits + _bn_inits(c)
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def _conv(bias: bool) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")]
    inputs = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "B"))
        inputs.append("B")
    return _model(helper.make_node("Conv", inputs, ["p"], pads=[1, 1, 1, 1]), inits, [2, 3, 8, 8], 4, [2, 4, 8, 8])


def _conv_transpose() -> onnx.ModelProto:
    # group 2: weight (C_in=4, C_out/group=3, k, k) -> 6 output channels
    inits = [numpy_helper.from_array(RNG.standard_normal((4, 3, 2, 2)).astype(np.float32), "W")]
    node = helper.make_node("ConvTranspose", ["x", "W"], ["p"], group=2, strides=[2, 2])
    return _model(node, inits, [1, 4, 5, 5], 6, [1, 6, 10, 10])


def _gemm(trans_b: int, with_c: bool) -> onnx.ModelProto:
    w = RNG.standard_normal((5, 7) if trans_b else (7, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W")]
    inputs = ["x", "W"]
    if with_c:
        inits.append(numpy_helper.from_array(RNG.standard_normal(5).astype(np.float32), "C"))
        inputs.append("C")
    node = helper.make_node("Gemm", inputs, ["p"], transB=trans_b, alpha=0.5, beta=2.0)
    return _model(node, inits, [3, 7], 5, [3, 5])


@pytest.mark.parametrize(
    "model",
    [_conv(True), _conv(False), _conv_transpose(), _gemm(0, True), _gemm(1, False)],
    ids=["conv_bias", "conv_nobias", "convtranspose_group2", "gemm_c", "gemm_transB_noC"],
)
def test_fold_matches_original(model: onnx.ModelProto) -> None:
    folded = fold_batchnorm(model)
    onnx.checker.check_model(folded)
    ops = [n.op_type for n in folded.graph.node]
    assert "BatchNormalization" not in ops and len(ops) == 1
    assert [o.name for o in folded.graph.output] == ["y"]
    assert {t.name for t in folded.graph.initializer}.isdisjoint({"gamma", "beta", "mean", "var"})
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_run(folded, {"x": x})[0], _run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_not_folded_when_producer_output_is_shared() -> None:
    model = _conv(True)
    model.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 4, 8, 8]))
    folded = fold_batchnorm(model)
    assert [n.op_type for n in folded.graph.node] == ["Conv", "BatchNormalization"]


def test_shared_weight_is_not_modified_under_another_node() -> None:
    model = _conv(True)
    model.graph.node.append(helper.make_node("Conv", ["x", "W", "B"], ["q"], pads=[1, 1, 1, 1]))
    model.graph.output.append(helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 4, 8, 8]))
    folded = fold_batchnorm(model)
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    got, want = _run(folded, {"x": x}), _run(model, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got[1], want[1])
