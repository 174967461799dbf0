"""Tests for graph.check: checker errors name the source, float detection, feed validation."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.check import ModelCheckError, check_model


def _model(dtype: int = TensorProto.FLOAT, weight_dtype: int | None = None, nodes: bool = True) -> onnx.ModelProto:
    weight_dtype = dtype if weight_dtype is None else weight_dtype
    w = numpy_helper.from_array(np.ones((4, 4), helper.tensor_dtype_to_np_dtype(weight_dtype)), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])] if nodes else [],
        "g",
        [helper.make_tensor_value_info("x", dtype, [1, 4])],
        [helper.make_tensor_value_info("y", dtype, [1, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_valid_model_passes() -> None:
    check_model(_model(), "tiny.onnx")


def test_empty_graph_names_source() -> None:
    with pytest.raises(ModelCheckError, match="empty.onnx.*no nodes"):
        check_model(_model(nodes=False), "empty.onnx")


def test_checker_failure_names_source() -> None:
    model = _model()
    model.graph.node[0].input[1] = "missing"
    with pytest.raises(ModelCheckError, match="broken.onnx: the model fails the ONNX checker"):
        check_model(model, "broken.onnx")


def test_integer_model_rejected() -> None:
    with pytest.raises(ModelCheckError, match="ints.onnx.*no float32/float16"):
        check_model(_model(TensorProto.INT32), "ints.onnx")


def test_paddle_constant_weights_count_as_float() -> None:
    model = _model()
    w = model.graph.initializer.pop()
    model.graph.node.insert(0, helper.make_node("Constant", [], ["W"], value=w))
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT64  # only the Constant is float
    model.graph.node[1].op_type = "Gather"  # keep the model valid with an int index input
    model.graph.node[1].input[:] = ["W", "x"]
    check_model(model, "paddle.onnx")  # raises "no float32/float16 inputs or weights" if the Constant were not counted
