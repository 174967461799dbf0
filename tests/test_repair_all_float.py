"""Repair that keeps every node float says so (issue 27, isbnx's end-to-end YOLO).

isbnx's ``best.onnx`` ends in ``TopK`` over its candidates' scores and gathers the boxes of the
chosen 300 rows: 299 of them are background candidates whose order shuffles under any rounding, so
the output compared position by position breaks the floor for every preset and repair kept all
nodes float — the warning read like a successful repair. The graph below is that tail: per-candidate
scores and boxes from two MatMuls, ``TopK`` over the scores, ``GatherElements`` of the boxes.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset
from onnxptq.api import quantize

N, F, K = 256, 8, 100


def _topk_tail() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((F, 1)).astype(np.float32), "ws"),
             numpy_helper.from_array(rng.standard_normal((F, 4)).astype(np.float32), "wb"),
             numpy_helper.from_array(np.array([1, N], np.int64), "flat"),
             numpy_helper.from_array(np.array([K], np.int64), "k"),
             numpy_helper.from_array(np.array([1, K, 1], np.int64), "col"),
             numpy_helper.from_array(np.array([1, K, 4], np.int64), "wide")]
    nodes = [
        helper.make_node("MatMul", ["x", "ws"], ["s3"], name="score_head"),
        helper.make_node("Reshape", ["s3", "flat"], ["s"], name="flatten"),
        helper.make_node("TopK", ["s", "k"], ["top", "idx"], name="topk", axis=1),
        helper.make_node("MatMul", ["x", "wb"], ["boxes"], name="box_head"),
        helper.make_node("Reshape", ["idx", "col"], ["idx3"], name="idx3"),
        helper.make_node("Expand", ["idx3", "wide"], ["idx4"], name="idx4"),
        helper.make_node("GatherElements", ["boxes", "idx4"], ["chosen"], name="gather", axis=1),
    ]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N, F])],
                              [helper.make_tensor_value_info("chosen", TensorProto.FLOAT, [1, K, 4])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, N, F)).astype(np.float32)} for _ in range(12)]


def test_rows_a_topk_chose_are_compared_as_a_set_and_the_model_stays_quantized():
    """analysis/selection.py: each float row faces its nearest quantized row, so a reordering of
    near-equal candidates is no loss; position by position this output broke every floor."""
    from onnxptq.analysis.selection import match_rows, selected_outputs

    assert selected_outputs(_topk_tail()) == {"chosen"}
    result = quantize(_topk_tail(), "A8W8", data=_feeds())
    assert result.floor.ok and result.repair is None, result.summary()
    assert {"score_head", "box_head"} <= set(result.plan.nodes)
    ref = np.arange(12, dtype=np.float32).reshape(1, 4, 3)
    assert np.array_equal(match_rows(ref, ref[:, ::-1]), ref)  # a reversed order is matched back
    assert np.array_equal(match_rows(ref, ref + 100), ref + 100)  # nothing near: every row still paired once


def test_repair_that_keeps_everything_float_says_the_model_is_not_quantized(caplog):
    feeds = _feeds()
    with caplog.at_level(logging.WARNING, logger="onnxptq"):
        # a floor no quantized model can hold (cosine 1.0): repair ends with every node float (a count of
        # builds that lets the search finish: the default's six go to the rungs, the probes and the mixed rung)
        result = quantize(_topk_tail(), get_preset("A8W8").replace(floor_cosine=1.0, repair_budget=50.0), data=feeds)
    rep = result.repair
    assert rep is not None and set(rep["kept_float"]) == {"score_head", "box_head"}
    assert "the delivered model is not quantized" in rep["note"]
    assert "the delivered model is not quantized" in result.summary()
    assert any("the delivered model is not quantized" in r.getMessage() for r in caplog.records)
