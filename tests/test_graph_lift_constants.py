"""Tests for lift_constants: Paddle-style Constant weights and tiny shape constants become initializers."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import lift_constants


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _paddle_like() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Constant", [], ["W"], value=w),
        helper.make_node("Constant", [], ["shape"], value_ints=[2, 3, 2]),  # tiny shape constant
        helper.make_node("Constant", [], ["scale"], value_float=0.5),
        helper.make_node("MatMul", ["x", "W"], ["mm"]),
        helper.make_node("Mul", ["mm", "scale"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "paddle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def test_all_constants_lifted_and_model_runs() -> None:
    model = _paddle_like()
    before = model.SerializeToString()
    lifted = lift_constants(model)
    assert model.SerializeToString() == before, "input model must be untouched"
    assert not [n for n in lifted.graph.node if n.op_type == "Constant"]
    inits = {t.name: numpy_helper.to_array(t) for t in lifted.graph.initializer}
    assert inits["shape"].tolist() == [2, 3, 2] and inits["shape"].dtype == np.int64
    assert inits["scale"].dtype == np.float32
    onnx.checker.check_model(lifted)
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_array_equal(_run(lifted, {"x": x})[0], _run(model, {"x": x})[0])


def test_constant_that_is_graph_output_stays() -> None:
    model = _paddle_like()
    model.graph.output.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [3]))
    lifted = lift_constants(model)
    assert [n.output[0] for n in lifted.graph.node if n.op_type == "Constant"] == ["shape"]
    x = np.zeros((3, 6), np.float32)
    assert _run(lifted, {"x": x})[1].tolist() == [2, 3, 2]


def test_constant_inside_if_branch() -> None:
    c = numpy_helper.from_array(np.float32([1.0, 2.0]), "c")
    then_g = helper.make_graph(
        [helper.make_node("Constant", [], ["tc"], value=c), helper.make_node("Add", ["x", "tc"], ["t_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, [2])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e_out"])], "else", [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, [2])]
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)],
        "if",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    lifted = lift_constants(model)
    onnx.checker.check_model(lifted)
    then_branch = lifted.graph.node[0].attribute[0].g
    assert not [n for n in then_branch.node if n.op_type == "Constant"]
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": np.float32([3.0, 4.0])}
        np.testing.assert_array_equal(_run(lifted, feeds)[0], _run(model, feeds)[0])
