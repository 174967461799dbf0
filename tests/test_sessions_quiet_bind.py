"""sessions.run_feeds' bound outputs on a graph whose output is shaped by its values: no onnxruntime ERROR line.

A detector with its NMS inside the graph (retinaface 1.1.1's TF2 RetinaFace: NonMaxSuppression's indices gather the
kept boxes, one row a face) returns as many rows as the picture has faces. ``run_feeds`` binds the outputs of the
runs after the first to arrays shaped as the first run's (IOBinding); on a feed with another count onnxruntime
refuses the buffer, ``_Bound`` runs the feed as given (the outputs are right), but onnxruntime had logged the refusal
as an ERROR on stderr first: every quantize of such a model printed "[E:onnxruntime ... Non-zero status code returned
while running Gather node" lines (bench/RESULTS.md, newmodels30). The bound try now runs with a FATAL-only log.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from onnxptq.sessions import run_feeds


def _nms_detector() -> bytes:
    """boxes [1, 6, 4], scores [1, 1, 6] -> NonMaxSuppression (IoU 0.5, score >= 0.5) -> the kept boxes [K, 4]."""
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_t"], ["sel"]),
        helper.make_node("Gather", ["sel", "col"], ["idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["flat"]),
        helper.make_node("Gather", ["flat", "idx"], ["kept"], axis=0),
    ]
    inits = [helper.make_tensor("max_out", TensorProto.INT64, [1], [6]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
             helper.make_tensor("score_t", TensorProto.FLOAT, [1], [0.5]),
             helper.make_tensor("col", TensorProto.INT64, [], [2]),
             helper.make_tensor("zero", TensorProto.INT64, [1], [0])]
    graph = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]),
                                             helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 6])],
                              [helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["k", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_value_shaped_outputs_run_as_given_without_an_error_line(capfd):
    boxes = np.array([[[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7], [8, 8, 9, 9], [0, 0, 1.02, 1]]], np.float32)
    faces = ([0.9, 0.1, 0.1, 0.1, 0.1, 0.8], [0.1, 0.9, 0.1, 0.1, 0.1, 0.1], [0.9, 0.9, 0.9, 0.1, 0.1, 0.1],
             [0.9, 0.9, 0.9, 0.9, 0.9, 0.1])  # kept: 1, 1, 3, 5 boxes
    feeds = [{"boxes": boxes, "scores": np.array([[s]], np.float32)} for s in faces]
    session = ort.InferenceSession(_nms_detector(), providers=["CPUExecutionProvider"])
    capfd.readouterr()
    got = run_feeds(session, ["kept"], feeds)
    err = capfd.readouterr().err
    assert [g[0].shape[0] for g in got] == [1, 1, 3, 5]
    for feed, (kept,) in zip(feeds, got):
        np.testing.assert_array_equal(kept, session.run(["kept"], feed)[0])
    assert "E:onnxruntime" not in err and "Non-zero status code" not in err, err[:400]
