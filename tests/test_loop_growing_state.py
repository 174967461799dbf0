"""A Loop whose loop-carried value grows each step (a greedy decoder accumulating its logits by Concat, as a scripted
PyTorch loop exports it: g2p_en's ``predict``, bench/RESULTS.md round 32) must not break calibration.

Calibration passes body tensors out of a Loop as extra scan outputs, which onnxruntime stacks over the iterations; a
tensor whose shape changes between iterations cannot be stacked ("Inconsistent shape in loop output"), and FP16 (which
asks for every activation's range) raised ``ModelRuntimeError`` from its own augmented model. Such tensors are now left
uncalibrated with the reason, as an If inside a Loop body is.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq import quantize
from onnxptq.calibration import bodies


def _growing_loop(seed: int = 0) -> onnx.ModelProto:
    """x [1, 8] -> Loop of 4 steps: h = Tanh(h @ W), acc = Concat(acc, h); outputs the last h and acc [4, 8]."""
    rng = np.random.default_rng(seed)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["mm"], name="mm"),
         helper.make_node("Tanh", ["mm"], ["h_out"], name="tanh"),
         helper.make_node("Concat", ["acc_in", "h_out"], ["acc_out"], name="grow", axis=0),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [None, 8])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "cond", "x", "acc0"], ["h", "acc"], name="loop", body=body)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [None, 8])],
        [numpy_helper.from_array((rng.normal(size=(8, 8)) * 0.5).astype(np.float32), "W"),
         numpy_helper.from_array(np.array(4, np.int64), "trips"), numpy_helper.from_array(np.array(True), "cond"),
         numpy_helper.from_array(np.zeros((0, 8), np.float32), "acc0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(1, 8)).astype(np.float32)} for _ in range(n)]


def test_grown_loop_state_is_not_stacked_and_the_rest_is_exposed():
    model = _growing_loop()
    exposed = bodies.expose(model, ["mm", "acc_in", "acc_out"])
    assert set(exposed.unreachable) == {"acc_in", "acc_out"}
    assert all("grows each step" in why and "'grow'" in why for why in exposed.unreachable.values())
    assert set(exposed.outer) == {"mm"}
    # the copy runs, and the exposed body tensor is stacked over the 4 steps
    sess = ort.InferenceSession(exposed.model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run([exposed.outer["mm"]], _feeds(1, 3)[0])[0]
    assert got.shape == (4, 1, 8)


def test_fp16_quantizes_a_loop_with_a_grown_state(tmp_path, caplog):
    model = _growing_loop()
    path, out = tmp_path / "loop.onnx", tmp_path / "loop.fp16.onnx"
    onnx.save(model, str(path))
    with caplog.at_level(logging.WARNING):
        quantize(str(path), "FP16", data=_feeds(16, 1), output=str(out))
    assert any("'acc_in' cannot be calibrated" in r.getMessage() and "grows each step" in r.getMessage()
               for r in caplog.records)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    test = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for feed in _feeds(4, 2):
        for a, b in zip(ref.run(None, feed), test.run(None, feed)):
            assert a.shape == b.shape == (a.shape[0], 8)
            assert np.abs(a - b).max() < 5e-3


def test_a_sliding_window_state_keeps_its_shape_and_is_exposed():
    """Concat of a *slice* of the carried value (drop the oldest row, append the new one): the shape stays, so the
    state is stacked as before."""
    model = _growing_loop()
    body = model.graph.node[0].attribute[0].g
    grow = next(n for n in body.node if n.name == "grow")
    body.node.insert(0, helper.make_node("Slice", ["acc_in", "one", "big", "zero"], ["older"], name="window"))
    body.initializer.extend([numpy_helper.from_array(np.array([v], np.int64), n)
                             for n, v in (("one", 1), ("big", 1 << 30), ("zero", 0))])
    grow.input[0] = "older"
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.zeros((3, 8), np.float32), "acc0"))
    exposed = bodies.expose(model, ["acc_in", "acc_out"])
    assert not exposed.unreachable and set(exposed.outer) == {"acc_in", "acc_out"}
    sess = ort.InferenceSession(exposed.model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run([exposed.outer["acc_out"]], _feeds(1, 3)[0])[0].shape == (4, 3, 8)
