"""A16W8 MatMuls run on their 16-bit activations in a default onnxruntime session.

Why: onnxruntime 1.32 fuses an int8 ``DequantizeLinear`` weight into ``MatMulNBits``, which
quantizes the activations to 8 bits on the fly, whatever Q/DQ the activation had
(graph/passes/exact_int_weights.py). The delivered A16W8 model must compute what its Q/DQ say: the
same as a session that fuses nothing. A8W8 keeps its integer kernel (QLinearMatMul).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.graph.passes.exact_int_weights import exact_int_weights

K = 256


def _chain(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "x"
    for i in range(3):
        inits.append(numpy_helper.from_array((rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float32), f"W{i}"))
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Tanh", [f"m{i}"], [f"t{i}"], name=f"th{i}")]
        x = f"t{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, K])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [8, K])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((8, K)) * 2).astype(np.float32)} for _ in range(n)]


def _session(model: onnx.ModelProto, level: ort.GraphOptimizationLevel, path: str | None = None) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    if path:
        so.optimized_model_filepath = path
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_a16w8_matmuls_compute_on_their_16_bit_activations(tmp_path):
    out = tmp_path / "a16w8.onnx"
    onnxptq.quantize(_chain(), get_preset("A16W8"), data=_feeds(16, 1), output=str(out))
    model = onnx.load(out)
    weights = [t for t in model.graph.initializer if list(t.dims) == [K, K]]
    assert len(weights) == 3 and all(t.data_type == TensorProto.INT8 for t in weights)  # the file keeps int8
    runs = str(tmp_path / "runs.onnx")
    default = _session(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, runs)
    assert "MatMulNBits" not in {n.op_type for n in onnx.load(runs).graph.node}
    plain = _session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for feed in _feeds(4, 2):
        a, b = default.run(None, feed)[0], plain.run(None, feed)[0]
        # the same up to 16-bit codes a different summation order tips over (max 1.5e-4 of the
        # output's scale, mean 1.3e-6 to 1.6e-5); fused into MatMulNBits (8-bit activations, main
        # before the pass): max 1.5e-2 to 2.2e-2, mean 7.8e-3 to 8.2e-3
        assert np.abs(a - b).max() <= 1e-3 * np.abs(b).max()
        assert np.mean(np.abs(a - b)) <= 1e-4 * np.mean(np.abs(b))


def test_a8w8_keeps_its_integer_kernel(tmp_path):
    out = tmp_path / "a8w8.onnx"
    onnxptq.quantize(_chain(), get_preset("A8W8"), data=_feeds(16, 1), output=str(out))
    runs = str(tmp_path / "runs.onnx")
    _session(onnx.load(out), ort.GraphOptimizationLevel.ORT_ENABLE_ALL, runs)
    ops = [n.op_type for n in onnx.load(runs).graph.node]
    assert "QLinearMatMul" in ops and "Cast" not in ops


@pytest.mark.parametrize("scale_type", [TensorProto.FLOAT, TensorProto.FLOAT16])
@pytest.mark.parametrize("zero", [0, 3])
def test_the_decoded_weight_is_dequantize_linears_bit_for_bit(scale_type, zero):
    """Per-channel scales along either axis, a zero point or none, float32 or float16 scales: the
    rewritten weight equals ``DequantizeLinear``'s output bit for bit."""
    rng = np.random.default_rng(3)
    np_type = helper.tensor_dtype_to_np_dtype(scale_type)
    for axis in (0, 1):
        w = rng.integers(-128, 127, (6, 10)).astype(np.int8)
        scale = (rng.random(w.shape[axis]) * 0.37 + 1e-3).astype(np_type)
        inputs = ["W", "s"] + (["z"] if zero else [])
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(scale, "s")]
        if zero:
            inits.append(numpy_helper.from_array(np.full(w.shape[axis], zero, np.int8), "z"))
        nodes = [helper.make_node("DequantizeLinear", inputs, ["wd"], axis=axis, name="dq"),
                 helper.make_node("MatMul", ["x", "wd"], ["y"], name="mm")]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", scale_type, [2, 6])],
                                  [helper.make_tensor_value_info("y", scale_type, [2, 10]),
                                   helper.make_tensor_value_info("wd", scale_type, [6, 10])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        reference = _session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        rewritten = onnx.ModelProto()
        rewritten.CopyFrom(model)
        assert exact_int_weights(rewritten) == 1
        assert "DequantizeLinear" not in {n.op_type for n in rewritten.graph.node}
        onnx.checker.check_model(rewritten, full_check=True)
        got = _session(rewritten, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        feed = {"x": rng.standard_normal((2, 6)).astype(np_type)}
        want = reference.run(["wd"], feed)[0]
        assert np.array_equal(got.run(["wd"], feed)[0].view(np.uint16 if np_type == np.float16 else np.uint32),
                              want.view(np.uint16 if np_type == np.float16 else np.uint32))


def test_a_body_weight_is_rewritten_beside_a_main_graph_one():
    """A main-graph target and a Loop body's: the main graph's rewrite re-adds its nodes as copies, and a body rewritten
    after it was a detached copy (mk8dx's LSTM MatMuls stayed DequantizeLinear -> MatMulNBits, on 8-bit activations)."""
    rng = np.random.default_rng(0)

    def weight(name: str) -> list[onnx.TensorProto]:
        return [numpy_helper.from_array(rng.integers(-127, 128, (4, 4)).astype(np.int8), f"{name}_q"),
                numpy_helper.from_array(np.float32(0.01), f"{name}_s")]

    body = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["u_q", "u_s"], ["u"], name="dq_u"),
         helper.make_node("MatMul", ["h_in", "u"], ["h_out"], name="mm_u"),
         helper.make_node("Identity", ["c"], ["c_out"], name="go")],
        "step", [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, 4])],
        weight("u"))
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], name="dq_w"),
         helper.make_node("MatMul", ["x", "w"], ["h0"], name="mm_w"),
         helper.make_node("Loop", ["n", "", "h0"], ["y"], body=body, name="steps")],
        "main", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        weight("w") + [numpy_helper.from_array(np.array(3, np.int64), "n")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feed = {"x": rng.normal(0, 1, (1, 4)).astype(np.float32)}
    plain = _session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0]
    assert exact_int_weights(model) == 2
    loop_body = next(a.g for a in model.graph.node[-1].attribute if a.name == "body")
    assert [n.op_type for n in loop_body.node if n.op_type == "DequantizeLinear"] == []
    assert [n.op_type for n in model.graph.node if n.op_type == "DequantizeLinear"] == []
    assert _session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feed)[0].tobytes() == plain.tobytes()
