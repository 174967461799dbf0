"""A body's quantized weights live in that body (graph/passes/sink_initializers.py).

silero VAD holds every layer inside an ``If``. With 16-bit activations, onnxruntime 1.32 fuses a
Gemm's int8 weight ``DequantizeLinear`` towards MatMulNBits and looks the weight up in the
branch only: with the integers in the main graph, session creation failed ("Missing required
weight") and ``quantize()`` raised, so A16W8 could not deliver such a model at all.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.graph.passes.sink_initializers import sink_initializers


def _branch(prefix: str, rng: np.random.Generator) -> onnx.GraphProto:
    """Gemm -> Relu -> Gemm on the outer scope's ``x``, weights as the branch's own initializers."""
    w1 = rng.normal(0, 0.3, (16, 32)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (32, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, f"{prefix}.W1"), numpy_helper.from_array(np.full(32, 0.1, np.float32), f"{prefix}.B1"),
             numpy_helper.from_array(w2, f"{prefix}.W2"), numpy_helper.from_array(np.zeros(4, np.float32), f"{prefix}.B2")]
    nodes = [helper.make_node("Gemm", ["x", f"{prefix}.W1", f"{prefix}.B1"], [f"{prefix}.h"], name=f"{prefix}/fc1"),
             helper.make_node("Relu", [f"{prefix}.h"], [f"{prefix}.r"], name=f"{prefix}/relu"),
             helper.make_node("Gemm", [f"{prefix}.r", f"{prefix}.W2", f"{prefix}.B2"], [f"{prefix}.y"], name=f"{prefix}/fc2")]
    return helper.make_graph(nodes, prefix, [], [helper.make_tensor_value_info(f"{prefix}.y", TensorProto.FLOAT, ["N", 4])], inits)


def _if_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Greater", ["sr", "limit"], ["wide"], name="wide?"),
             helper.make_node("If", ["wide"], ["y"], name="by_rate", then_branch=_branch("hi", rng), else_branch=_branch("lo", rng))]
    graph = helper.make_graph(nodes, "rates", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16]),
                                               helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                              [numpy_helper.from_array(np.array(12000, np.int64), "limit")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (4, 16)).astype(np.float32), "sr": np.array(16000 if i % 3 else 8000, np.int64)}
            for i in range(n)]


def test_a16w8_gemms_inside_if_branches_load_and_keep_their_weights_in_the_branch():
    model = _if_model()
    # repair off: every Gemm quantized (a floor on this random regression head may keep one float)
    result = quantize(model, get_preset("A16W8").replace(repair=False), _feeds(16, 1))  # raised "cannot load" before
    q = result.model
    branches = {a.name: a.g for n in q.graph.node if n.op_type == "If" for a in n.attribute}
    for prefix, body in (("hi", branches["then_branch"]), ("lo", branches["else_branch"])):
        held = {t.name for t in body.initializer}
        assert f"{prefix}.W1_quantized" in held and f"{prefix}.W2_quantized" in held, sorted(held)
        assert {t.name for t in q.graph.initializer}.isdisjoint(held)
    float_run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    quant_run = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in _feeds(6, 2):
        want, got = float_run.run(None, feed)[0], quant_run.run(None, feed)[0]
        assert np.abs(got - want).max() < 0.02 * np.abs(want).max(), (feed["sr"], np.abs(got - want).max())


def test_sink_moves_to_the_innermost_graph_holding_every_reader():
    """Read in one nested body: moves there. Read in both branches, or in the main graph: stays."""
    inner = helper.make_graph([helper.make_node("Add", ["x", "c_inner"], ["yi"])], "inner", [],
                              [helper.make_tensor_value_info("yi", TensorProto.FLOAT, [2])])
    inner_else = helper.make_graph([helper.make_node("Add", ["x", "c_both"], ["ye"])], "inner_else", [],
                                   [helper.make_tensor_value_info("ye", TensorProto.FLOAT, [2])])
    outer_then = helper.make_graph([helper.make_node("Add", ["x", "c_both"], ["t0"]),
                                    helper.make_node("If", ["flag"], ["t"], then_branch=inner, else_branch=inner_else)],
                                   "outer_then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    outer_else = helper.make_graph([helper.make_node("Add", ["x", "c_main"], ["e"])], "outer_else", [],
                                   [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "c_main"], ["m"]),
         helper.make_node("If", ["flag"], ["y"], then_branch=outer_then, else_branch=outer_else)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("m", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.full(2, v, np.float32), n) for n, v in (("c_inner", 1), ("c_both", 2), ("c_main", 3), ("c_other", 4))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    before = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert sink_initializers(model, {"c_inner", "c_both", "c_main"}) == 2
    onnx.checker.check_model(model)
    then = next(a.g for a in model.graph.node[1].attribute if a.name == "then_branch")
    nested = next(a.g for a in then.node[1].attribute if a.name == "then_branch")
    assert [t.name for t in nested.initializer] == ["c_inner"]
    assert [t.name for t in then.initializer] == ["c_both"]  # its own node and its else body read it
    assert sorted(t.name for t in model.graph.initializer) == ["c_main", "c_other"]  # c_other: not named
    after = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([0.5, -1.0], np.float32)
    for flag in (True, False):
        feed = {"x": x, "flag": np.array(flag)}
        for a, b in zip(before.run(None, feed), after.run(None, feed)):
            np.testing.assert_array_equal(a, b)
