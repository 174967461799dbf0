"""Tests for prepare: both real PP-OCR models, and small If/Loop models that must stay valid."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.pipeline.prepare import prepare
from testkit.models import model_path


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module", params=["cls", "rec"])
def real(request: pytest.FixtureRequest) -> tuple[str, onnx.ModelProto, onnx.ModelProto]:
    model = onnx.load(str(model_path(request.param)))
    return request.param, model, prepare(model)


@pytest.mark.slow
def test_real_model_prepared(real: tuple[str, onnx.ModelProto, onnx.ModelProto]) -> None:
    name, model, prepared = real
    ops = [n.op_type for n in prepared.graph.node]
    assert "Constant" not in ops and "Identity" not in ops
    assert len(ops) < len(model.graph.node) // 2 + 10
    if name == "cls":
        assert "BatchNormalization" not in ops
    assert [o.name for o in prepared.graph.output] == [o.name for o in model.graph.output]
    rng = np.random.default_rng(0)
    widths = (192,) if name == "cls" else (192, 320)
    a, b = _session(model), _session(prepared)
    for w in widths:
        x = rng.random((2, 3, 48, w), dtype=np.float32)
        np.testing.assert_allclose(b.run(None, {"x": x})[0], a.run(None, {"x": x})[0], atol=1e-4)


@pytest.mark.slow
def test_real_model_opset_21() -> None:
    model = onnx.load(str(model_path("cls")))
    prepared = prepare(model, opset=21)
    assert prepared.opset_import[0].version == 21 and prepared.ir_version == 10
    x = np.random.default_rng(1).random((1, 3, 48, 192), dtype=np.float32)
    np.testing.assert_allclose(_session(prepared).run(None, {"x": x})[0], _session(model).run(None, {"x": x})[0], atol=1e-4)


def _vi(name: str, shape: list, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _if_model() -> onnx.ModelProto:
    """Conv+BN, Dropout, a Constant weight, and an If whose branches read outer-scope tensors."""
    rng = np.random.default_rng(0)
    then_g = helper.make_graph(
        [
            helper.make_node("Constant", [], ["tc"], value=numpy_helper.from_array(np.float32([2.0]), "tc")),
            helper.make_node("Mul", ["d", "tc"], ["t0"]),
            helper.make_node("Add", ["t0", "bias"], ["t_out"]),
        ],
        "then",
        [],
        [_vi("t_out", [1, 2, 4, 4])],
    )
    else_g = helper.make_graph([helper.make_node("Identity", ["d"], ["e_out"])], "else", [], [_vi("e_out", [1, 2, 4, 4])])
    inits = [
        numpy_helper.from_array(rng.standard_normal((2, 3, 1, 1)).astype(np.float32), "W"),
        numpy_helper.from_array(np.float32([1.0, 1.5]), "gamma"),
        numpy_helper.from_array(np.float32([0.1, -0.1]), "beta"),
        numpy_helper.from_array(np.float32([0.2, 0.3]), "mean"),
        numpy_helper.from_array(np.float32([0.5, 2.0]), "var"),
    ]
    nodes = [
        helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.float32([0.25]), "b")),
        helper.make_node("Conv", ["x", "W"], ["c"]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Dropout", ["bn"], ["d"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes, "g", [_vi("x", [1, 3, 4, 4]), _vi("cond", [], TensorProto.BOOL)], [_vi("y", [1, 2, 4, 4])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _loop_model() -> onnx.ModelProto:
    """A Loop whose body reads an outer weight computed from Constants (folded by prepare)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.float32(2.0), "two")),
            helper.make_node("Mul", ["w", "two"], ["w2"]),
            helper.make_node("MatMul", ["acc_in", "w2"], ["acc_out"]),
        ],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [1, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [1, 3])],
    )
    w = np.random.default_rng(1).standard_normal((3, 3)) / 3
    nodes = [
        helper.make_node("Constant", [], ["w64"], value=numpy_helper.from_array(w, "w64")),
        helper.make_node("Constant", [], ["trips"], value=numpy_helper.from_array(np.array(3, np.int64), "t")),
        helper.make_node("Constant", [], ["true"], value=numpy_helper.from_array(np.array(True), "c")),
        helper.make_node("Cast", ["w64"], ["w"], to=TensorProto.FLOAT),
        helper.make_node("Loop", ["trips", "true", "x"], ["y"], body=body),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", [1, 3])], [_vi("y", [1, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.mark.parametrize("opset", [None, 21])
def test_if_model(opset: int | None) -> None:
    model = _if_model()
    prepared = prepare(model, opset=opset)
    ops = [n.op_type for n in prepared.graph.node]
    assert ops == ["Conv", "If"]
    x = np.random.default_rng(2).standard_normal((1, 3, 4, 4)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        np.testing.assert_allclose(_session(prepared).run(None, feeds)[0], _session(model).run(None, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [None, 21])
def test_loop_model(opset: int | None) -> None:
    model = _loop_model()
    prepared = prepare(model, opset=opset)
    assert [n.op_type for n in prepared.graph.node] == ["Loop"]
    x = np.float32([[1.0, -2.0, 0.5]])
    np.testing.assert_allclose(_session(prepared).run(None, {"x": x})[0], _session(model).run(None, {"x": x})[0], rtol=1e-6)


def test_input_untouched() -> None:
    model = _if_model()
    before = model.SerializeToString()
    prepare(model, merge_matmuls=True)
    assert model.SerializeToString() == before
