"""Tests for cleanup (CSE, unused removal, topological sort) and shape inference."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import eliminate_common_subexpressions, infer_shapes, remove_unused, topological_sort


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _model(nodes: list[onnx.NodeProto], inits: list = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def test_cse_merges_duplicates() -> None:
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Relu", ["x"], ["b"]),
            helper.make_node("Add", ["a", "b"], ["y"]),
        ]
    )
    out = eliminate_common_subexpressions(model)
    assert [n.op_type for n in out.graph.node] == ["Relu", "Add"]
    np.testing.assert_array_equal(_run(out, {"x": X})[0], _run(model, {"x": X})[0])


def test_unused_nodes_and_initializers_removed() -> None:
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "unused"), numpy_helper.from_array(np.ones(4, np.float32), "one")]
    model = _model(
        [
            helper.make_node("Sigmoid", ["x"], ["dead"]),
            helper.make_node("Add", ["x", "one"], ["y"]),
        ],
        inits,
    )
    out = remove_unused(model)
    assert [n.op_type for n in out.graph.node] == ["Add"]
    assert [t.name for t in out.graph.initializer] == ["one"]


def test_topological_sort() -> None:
    model = _model([helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])])
    out = topological_sort(model)
    assert [n.op_type for n in out.graph.node] == ["Relu", "Neg"]
    onnx.checker.check_model(out)
    np.testing.assert_array_equal(_run(out, {"x": X})[0], -np.maximum(X, 0))


def test_shape_inference_gives_dtypes() -> None:
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT),
        ]
    )
    out = infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in out.graph.value_info}
    assert types == {"h": TensorProto.FLOAT16, "r": TensorProto.FLOAT16}
