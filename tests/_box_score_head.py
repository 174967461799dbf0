"""A detector head whose Concat joins box channels in 0..600 with sigmoid scores in 0..1.

Why one builder: the range guard's tests (test_range_guard, test_guard_capture, test_quantize_cost)
each need this head, the case a shared scale or block exponent across the Concat flushes the
scores, and each had its own copy of the same six nodes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def box_score_head(boxes: int, scores: int, hw: int = 8, next_channels: int = 0) -> onnx.ModelProto:
    """x [N,4,hw,hw] → Relu(Conv) boxes (weights 0..150) and Sigmoid(Conv) scores, Concat on axis 1
    into ``y``; with ``next_channels``, a 3×3 Conv reads ``y`` into the output ``z`` (the Concat is
    then an inner tensor, shapes inferred). Weights from ``default_rng(0)``, boxes first."""
    rng = np.random.default_rng(0)
    w_box = rng.uniform(0.0, 150.0, size=(boxes, 4, 1, 1)).astype(np.float32)
    w_score = rng.uniform(-2.0, 2.0, size=(scores, 4, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w_box"], ["box_pre"], name="conv_box"),
        helper.make_node("Relu", ["box_pre"], ["boxes"], name="relu_box"),
        helper.make_node("Conv", ["x", "w_score"], ["score_pre"], name="conv_score"),
        helper.make_node("Sigmoid", ["score_pre"], ["scores"], name="sigmoid"),
        helper.make_node("Concat", ["boxes", "scores"], ["y"], name="concat", axis=1),
    ]
    inits = [numpy_helper.from_array(w_box, "w_box"), numpy_helper.from_array(w_score, "w_score")]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", boxes + scores, hw, hw])
    if next_channels:
        w_next = rng.uniform(-1.0, 1.0, size=(next_channels, boxes + scores, 3, 3)).astype(np.float32)
        nodes.append(helper.make_node("Conv", ["y", "w_next"], ["z"], name="conv_next", pads=[1, 1, 1, 1]))
        inits.append(numpy_helper.from_array(w_next, "w_next"))
        output = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", next_channels, hw, hw])
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, hw, hw])],
                              [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model) if next_channels else model
