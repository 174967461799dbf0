"""Rows a graph's own NonMaxSuppression kept are judged as their reader reads them (issue 27, analysis/nms_rows.py).

TF2 RetinaFace (retinaface 1.1.1) ends in its own NMS: its output ``[faces, 16]`` is a ``Gather`` of a candidate
table's rows at the indices NMS kept, in score order. Read as one vector by its cosine, a photo whose faces scored
alike came back in another row order (or one face fewer: "its shape differs") and A8W8 broke the floor at cosine
0.9634; repair kept all 201 nodes float where plain A8W8 keeps F1 0.991 of float's faces (bench/RESULTS.md,
newmodels30). The graph here is that pattern, small: a MatMul writes each candidate's box, a value and a score
logit; the table (its score through a Sigmoid) feeds a NonMaxSuppression through column Slices, and the output is
the table's rows gathered at the kept indices. Each picture holds four objects whose scores are within 0.002 of
each other (an 8-bit table rounds them alike, so they come out in another order) and background candidates.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import Floor, measure, readings_of
from onnxptq.analysis.nms_rows import NmsRows, judge_nms_rows, nms_row_outputs, thresholds_of
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

CANDIDATES = 24
EIGHT_BIT = Floor("8-bit", 0.98, 0.95)


def _detector() -> onnx.ModelProto:
    """feat [N, 6] → MatMul (+bias) → table [N, 6] (x1 y1 x2 y2, a value, a score logit) → the score column through
    a Sigmoid → NMS on the table's column Slices → the table's rows at the kept indices ``[K, 6]``."""
    rng = np.random.default_rng(0)
    w = (np.eye(6) + rng.normal(0, 0.002, (6, 6))).astype(np.float32)
    i64 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.int64), name)  # noqa: E731
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(6, np.float32), "b"),
             i64("c0", [0]), i64("c4", [4]), i64("c5", [5]), i64("c6", [6]), i64("ax1", [1]), i64("s_m1", [0, -1]),
             i64("e_max", [2 ** 31 - 1, 2 ** 31 - 1]), i64("ax01", [0, 1]), i64("two", [2]), i64("three", [3]),
             i64("max_out", [50]), numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.5], np.float32), "score_t"), i64("ax0", [0])]
    nodes = [
        helper.make_node("MatMul", ["feat", "w"], ["mm"], name="head"),
        helper.make_node("Add", ["mm", "b"], ["raw"], name="head_bias"),
        helper.make_node("Slice", ["raw", "c0", "c5", "ax1"], ["front"], name="front"),
        helper.make_node("Slice", ["raw", "c5", "c6", "ax1"], ["logit"], name="logit"),
        helper.make_node("Sigmoid", ["logit"], ["prob"], name="sigmoid"),
        helper.make_node("Concat", ["front", "prob"], ["table"], name="table", axis=1),
        # boxes [1, N, 4] and scores [1, 1, N], each a Slice of the table's last axis (as tf2onnx writes them)
        helper.make_node("Slice", ["table", "c0", "c4", "ax1"], ["box_cols"], name="box_cols"),
        helper.make_node("Unsqueeze", ["box_cols", "ax0"], ["boxes"], name="boxes"),
        helper.make_node("Slice", ["table", "s_m1", "e_max", "ax01"], ["score_col"], name="score_col"),
        helper.make_node("Transpose", ["score_col"], ["score_row"], name="score_row", perm=[1, 0]),
        helper.make_node("Unsqueeze", ["score_row", "ax0"], ["scores"], name="scores"),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_t"], ["selected"], name="nms"),
        helper.make_node("Slice", ["selected", "two", "three", "ax1"], ["picked"], name="picked"),
        helper.make_node("Squeeze", ["picked", "ax1"], ["index"], name="index"),
        helper.make_node("Gather", ["table", "index"], ["faces"], name="rows", axis=0),
    ]
    graph = helper.make_graph(nodes, "nms_rows", [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [CANDIDATES, 6])],
                              [helper.make_tensor_value_info("faces", TensorProto.FLOAT, ["faces", 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """Pictures of 4 objects (boxes 40-90 px apart on a 600 px grid, score logits 6.0-6.002 each with a
    near-duplicate box scoring lower) among background candidates (logit -4)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feat = np.zeros((CANDIDATES, 6), np.float32)
        feat[:, :2] = rng.uniform(0, 500, (CANDIDATES, 2))
        feat[:, 2:4] = feat[:, :2] + rng.uniform(30, 90, (CANDIDATES, 2))
        feat[:, 4] = rng.uniform(-20, 20, CANDIDATES)
        feat[:, 5] = -4.0
        slots = rng.permutation(CANDIDATES)[:8]
        for k in range(4):
            x0, y0 = 150.0 * k + rng.uniform(0, 40), rng.uniform(0, 400)
            size = rng.uniform(50, 90)
            feat[slots[k], :4] = (x0, y0, x0 + size, y0 + size)
            feat[slots[k], 5] = 6.0 + rng.uniform(0, 0.002)  # the four score alike: their order is a near-tie
            feat[slots[4 + k], :4] = feat[slots[k], :4] + rng.uniform(-3, 3, 4)  # a near-duplicate NMS drops
            feat[slots[4 + k], 5] = 2.0
        out.append({"feat": feat})
    return out


def test_the_rows_an_nms_kept_are_found_by_structure():
    found = nms_row_outputs(_detector())
    assert found == {"faces": NmsRows("nms", (0, 4), (-1, 2 ** 31 - 1), False, 0.5)}
    assert found["faces"].columns(6) == ([0, 1, 2, 3], 5)
    assert thresholds_of(found["faces"]) == (0.5, 0.75, 0.95)
    assert "nms_rows" in readings_of(_detector()) and readings_of(_detector())["nms_rows"] == found
    plain = _detector()
    plain.graph.node[-1].input[1] = "c0"  # a constant row: no NMS's indices, nothing found
    assert nms_row_outputs(plain) == {}


def test_rows_in_another_order_are_the_same_objects_and_a_lost_one_counts():
    found = nms_row_outputs(_detector())["faces"]
    session = ort.InferenceSession(_detector().SerializeToString(), providers=["CPUExecutionProvider"])
    ref = [session.run(None, f)[0] for f in _feeds(8)]
    assert all(r.shape == (4, 6) for r in ref)
    shuffled = [r[::-1] + np.float32(0.5) for r in ref]  # another order, every value moved half a pixel
    same = judge_nms_rows(ref, shuffled, found, 20)
    assert same.judged and same.f1 == 1.0 and same.objects == 32 and same.cosine > 0.9999
    dropped = [r[1:] if i < 2 else r for i, r in enumerate(ref)]  # two pictures lose a row: 2 of 32 at every threshold
    lost = judge_nms_rows(ref, dropped, found, 20)
    assert lost.lost == 6 and lost.invented == 0 and lost.recounted == 2
    assert abs(lost.f1 - 2 * 90 / (2 * 90 + 6)) < 1e-12
    few = judge_nms_rows(ref[:2], shuffled[:2], found, 20)  # 8 objects: the floor needs 20
    assert not few.judged and "NOT JUDGED" in few.describe()
    from onnxptq.analysis.floor import unjudged_text
    verdict = measure([{"faces": r} for r in ref[:2]], [{"faces": g} for g in shuffled[:2]], Floor("16-bit", 0.99, 0.97),
                      nms_rows={"faces": found})
    assert verdict.ok and verdict.unjudged == ["faces"]  # could not judge, said with the rows it had and needs
    assert "NonMaxSuppression kept: 8 float rows at scores ≥ 0.5" in unjudged_text(verdict) and "needs 34" in unjudged_text(verdict)


def test_a8w8_keeps_the_objects_and_the_floor_holds_without_repair():
    """On main the rows' cosine (reordered rows, a vector of unrelated boxes) broke the floor and repair stepped
    nodes up; the objects are all kept: F1 1.0."""
    model, feeds = _detector(), _feeds(48)
    result = quantize(model, resolve_config("A8W8"), feeds)
    check = result.floor.outputs["faces"]
    assert result.floor.ok and check.nms_rows is not None and check.nms_rows.judged and check.nms_rows.f1 >= 0.95
    assert not (result.repair or {}).get("kept_float") and not (result.repair or {}).get("stepped_up")
    assert "rows its NonMaxSuppression kept" in result.summary()
    # the rows did move: float's order is not kept on every picture (what broke the vector reading)
    float_s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    quant_s = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    moved = sum(not np.allclose(float_s.run(None, f)[0][:, :4], quant_s.run(None, f)[0][:, :4], atol=5) for f in feeds[:16])
    assert moved >= 4
    verdict = measure([{"faces": float_s.run(None, f)[0]} for f in feeds[:16]],
                      [{"faces": quant_s.run(None, f)[0]} for f in feeds[:16]], EIGHT_BIT, nms_rows={})
    assert not verdict.ok  # the same rows read as one vector: broken (main's reading)
