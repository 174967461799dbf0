"""Tests for fold_constants: constant chains and static Shape become initializers; random ops do not."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import fold_constants


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _vi(name: str, shape: list, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_paddle_style_chains_fold() -> None:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float64), "w64"),
        numpy_helper.from_array(np.float32(4.0), "four"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        # weight behind Cast and Div on constants
        helper.make_node("Cast", ["w64"], ["w32"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["w32", "four"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        # Shape -> Slice -> Concat -> Reshape on a static shape
        helper.make_node("Shape", ["mm"], ["shp"]),
        helper.make_node("Slice", ["shp", "zero", "minus_one"], ["lead"]),
        helper.make_node("Concat", ["lead", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["mm", "new_shape"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 3, 4])], [_vi("y", [2, 3, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    folded = fold_constants(model)
    onnx.checker.check_model(folded)
    assert _ops(folded) == ["MatMul", "Reshape"]
    inits_out = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    assert inits_out["new_shape"].tolist() == [2, 3, -1]
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(_run(folded, {"x": x})[0], _run(model, {"x": x})[0])


def test_dynamic_shape_random_qdq_and_size_limit_not_folded() -> None:
    inits = [
        numpy_helper.from_array(np.array([1000, 1000], np.int64), "big_shape"),
        numpy_helper.from_array(np.float32([1.0, 2.0]), "w"),
        numpy_helper.from_array(np.int8([10, 20]), "wq"),
        numpy_helper.from_array(np.float32(0.1), "scale"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),  # x has a dynamic batch dim
        helper.make_node("Reshape", ["x", "shp"], ["x2"]),
        helper.make_node("ConstantOfShape", ["big_shape"], ["big"]),  # 1e6 elements > limit
        helper.make_node("ReduceSum", ["big"], ["big_sum"], keepdims=0),
        helper.make_node("RandomUniformLike", ["w"], ["noise"]),
        helper.make_node("DequantizeLinear", ["wq", "scale"], ["wdq"]),
        helper.make_node("Add", ["noise", "wdq"], ["nw"]),
        helper.make_node("Mul", ["x2", "nw"], ["m"]),
        helper.make_node("Add", ["m", "big_sum"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", ["N", 2])], [_vi("y", ["N", 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    folded = fold_constants(model, size_limit=1000)
    onnx.checker.check_model(folded)
    assert sorted(_ops(folded)) == sorted(_ops(model))
    assert _run(folded, {"x": np.ones((3, 2), np.float32)})[0].shape == (3, 2)


def test_loop_model_stays_valid() -> None:
    # The body reads the outer 'w', which is itself folded from a constant chain: the folded
    # initializer must keep its name for the body.
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mul", ["x", "w"], ["step"]),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        ],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("acc_in", [2])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [2])],
    )
    inits = [
        numpy_helper.from_array(np.float64([1.5, 2.5]), "w64"),
        numpy_helper.from_array(np.array(3, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "true"),
        numpy_helper.from_array(np.float32([0.0, 0.0]), "acc0"),
    ]
    nodes = [
        helper.make_node("Cast", ["w64"], ["w"], to=TensorProto.FLOAT),
        helper.make_node("Loop", ["trips", "true", "acc0"], ["y"], body=body),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", [2])], [_vi("y", [2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    folded = fold_constants(model)
    onnx.checker.check_model(folded)
    assert _ops(folded) == ["Loop"]
    x = np.float32([1.0, -2.0])
    np.testing.assert_array_equal(_run(folded, {"x": x})[0], _run(model, {"x": x})[0])


def test_negative_dim_value_is_dynamic_not_folded() -> None:
    """Old paddle2onnx (PP-OCRv3 rec, opset 10) declares dynamic axes as dim_value -1: a Shape of such an input
    must stay a Shape. Folded, the flatten target became [-1, -1, -1] and onnxruntime refused the model."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Slice", ["shp", "zero", "two"], ["lead"]),
        helper.make_node("Concat", ["lead", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", [-1, 3, -1, 4])], [_vi("y", [-1, 3, -1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    folded = fold_constants(model)
    assert "Shape" in _ops(folded)
    x = np.ones((2, 3, 5, 4), np.float32)
    assert _run(folded, {"x": x})[0].shape == (2, 3, 20)


_NUMPY_FOLD_SCRIPT = r"""
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnxptq.graph.passes import fold_constants

w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(2, 3, 4), "w")
shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
k = numpy_helper.from_array(np.arange(-6, 6, dtype=np.int64), "k")
nodes = [helper.make_node("Reshape", ["w", "shape"], ["w2"]),  # 0 keeps dim 0: (2, 12)
         helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
         helper.make_node("Reshape", ["kf", "one"], ["kf1"]),
         helper.make_node("MatMul", ["x", "w2"], ["xw"]),
         helper.make_node("Add", ["xw", "kf1"], ["y"])]
one = numpy_helper.from_array(np.array([1, 12], np.int64), "one")
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])], [w, shape, k, one])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
folded = fold_constants(model)
print(sorted(n.op_type for n in folded.graph.node), "onnx.reference" in sys.modules)
"""


def test_reshape_and_cast_fold_without_the_reference_evaluator() -> None:
    """Reshape/Cast of constants fold in NumPy, so the reference's ~17 MiB op list is never imported
    (PP-OCR cls/rec's preparation folds only these: A8W8's peak, issue 26 item 4); results as ORT's."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _NUMPY_FOLD_SCRIPT], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "['Add', 'MatMul'] False", out.stdout + out.stderr


def test_numpy_fold_matches_the_reference() -> None:
    """The NumPy folds give the reference's arrays: Reshape's 0 rule, -1, allowzero, plain Casts."""
    from onnx.reference import ReferenceEvaluator

    from onnxptq.graph.passes._common import to_ir
    from onnxptq.graph.passes.fold_constants import _numpy_fold

    rng = np.random.default_rng(1)
    data = rng.standard_normal((2, 3, 4)).astype(np.float32) * 300
    cases = [("Reshape", [data, np.array([0, -1], np.int64)], {}),
             ("Reshape", [data, np.array([0, 4, -1], np.int64)], {}),
             ("Reshape", [data.reshape(24), np.array([6, 4], np.int64)], {"allowzero": 1}),
             ("Cast", [data], {"to": TensorProto.INT8}), ("Cast", [data], {"to": TensorProto.FLOAT16}),
             ("Cast", [data], {"to": TensorProto.UINT16}), ("Cast", [data > 0], {"to": TensorProto.INT64})]
    for op, inputs, attrs in cases:
        names = [f"i{j}" for j in range(len(inputs))]
        node = helper.make_node(op, names, ["o"], **attrs)
        graph = helper.make_graph([node], "g", [], [_vi("o", None)],
                                  [numpy_helper.from_array(a, n) for a, n in zip(inputs, names)])
        ir_node = next(iter(to_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])).graph))
        got = _numpy_fold(ir_node, inputs)
        want = ReferenceEvaluator(node, opsets={"": 19}).run(None, dict(zip(names, inputs)))
        assert got is not None, (op, attrs)
        assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape, (op, attrs)
        assert got[0].tobytes() == np.asarray(want[0]).tobytes(), (op, attrs)
