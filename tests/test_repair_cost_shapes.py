"""Repair's work estimate counts what follows a Reshape whose target the graph computes from shapes (issue 27 item 2;
algorithms/repair_cost.py ``_fold_shape_values``).

ddddocr_ocr (opset 12) reshapes its CNN's features for its two LSTMs with a target built as ``Shape → Gather →
Unsqueeze(axes=[0]) → Concat``; onnx's data propagation carries nothing through opset 12's ``Unsqueeze``, so shape
inference stopped there and the LSTMs and the classifier's Gemm after them had no shapes: the LSTMs counted one step,
the Gemm its weights × K (8.6 G MACs where a run does 0.21 G; bench/RESULTS.md, costfit22). The same spelling in
miniature, counted by hand.

Fails on main ``679201e2``: the LSTM and the Gemm have no shapes there (the LSTM counted as one step, the Gemm as its
weights × K); the second test fails on its fallback (the weights × K).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from onnxptq.algorithms import repair_cost

T, B, C, H, W_, HID, OUT = 1, 1, 4, 2, 6, 8, 5  # a [1, 4, 2, 6] feature map read as 6 steps of 8 features


def _model():
    i64 = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[3, 0, 1, 2]),  # [W, N, C, H]
        helper.make_node("Shape", ["t"], ["s"]),
        i64("i0", 0), i64("i1", 1), i64("i2", 2), i64("i3", 3),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
        helper.make_node("Gather", ["s", "i2"], ["d2"], axis=0),
        helper.make_node("Gather", ["s", "i3"], ["d3"], axis=0),
        helper.make_node("Mul", ["d2", "d3"], ["d23"]),
        helper.make_node("Unsqueeze", ["d0"], ["u0"], axes=[0]),  # opset 12: axes an attribute
        helper.make_node("Unsqueeze", ["d1"], ["u1"], axes=[0]),
        helper.make_node("Unsqueeze", ["d23"], ["u2"], axes=[0]),
        helper.make_node("Concat", ["u0", "u1", "u2"], ["target"], axis=0),
        helper.make_node("Reshape", ["t", "target"], ["seq"]),  # [W, N, C·H]
        helper.make_node("LSTM", ["seq", "lw", "lr"], ["hs"], hidden_size=HID),  # [W, 1, N, HID]
        helper.make_node("Squeeze", ["hs"], ["h"], axes=[1]),
        helper.make_node("Flatten", ["h"], ["flat"], axis=2),
        helper.make_node("Reshape", ["flat", "two"], ["rows"]),  # [W·N, HID]
        helper.make_node("Gemm", ["rows", "gw"], ["y"], transB=1),  # [W·N, OUT]
    ]
    inits = [numpy_helper.from_array(np.zeros((1, 4 * HID, C * H), np.float32), "lw"),
             numpy_helper.from_array(np.zeros((1, 4 * HID, HID), np.float32), "lr"),
             numpy_helper.from_array(np.array([-1, HID], np.int64), "two"),
             numpy_helper.from_array(np.zeros((OUT, HID), np.float32), "gw")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


def test_a_reshape_target_computed_from_shapes_is_folded_and_what_follows_is_counted():
    feed = {"x": np.zeros((1, C, H, W_), np.float32)}
    work = repair_cost.graph_work(_model(), feed)
    steps = W_ * 1  # sequence length × batch
    lstm = steps * (4 * HID * C * H + 4 * HID * HID)
    gemm = steps * OUT * HID
    assert work.macs == lstm + gemm, work
    # a wider input: more steps, counted as such (the fold follows the feed's shapes, not the first one's)
    wide = repair_cost.graph_work(_model(), {"x": np.zeros((1, C, H, 2 * W_), np.float32)})
    assert wide.macs == 2 * (lstm + gemm), wide


def test_a_matmul_without_shapes_counts_each_weight_once():
    """Where nothing can give a product's output shape (a data-dependent row count), its weights count once (one
    output row), not its weights × K (the old fallback: ddddocr_ocr's Gemm 41× its run's MACs)."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["idx"]),
             helper.make_node("Cast", ["idx"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["f", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.zeros((2, 64), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert repair_cost.graph_work(model, {"x": np.zeros((3, 4), np.float32)}).macs == 2 * 64
