"""A detector's candidates are judged by the detections its reader keeps after NMS (analysis/det_nms.py).

Why: the DocLayNet YOLOv8 layout detector broke the floor on a score field's cosine (A16W8 0.9886,
A8W8 0.9012) while its boxes after NMS held (F1 1.000 and 0.963-0.997): a confident anchor's score
falls to zero and its neighbour, with the same box, keeps the detection. The built head here is a
DocLayNet-shaped ``[1, 4 + C, N]`` output (cxcywh boxes, sigmoid class rows) drawn with two objects of
class 0 and one of class 1 per image, each object a few neighbouring anchors. An anchor swap must
hold; a lost second object of a class, boxes moved beyond IoU 0.5 and a class swap must break; on
too few images the detections are not judged and the field cosines judge as before.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.det_nms import detections, judge_detections
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of

S = 16
CLASSES = 3
EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def _head(extra: int = 0) -> onnx.ModelProto:
    """``output0 [1, 4 + CLASSES, S·S] = Concat(boxes, Sigmoid(classes))`` after one shared Conv; with
    ``extra``, that many more rows after the scores (YOLOv8-seg's mask coefficients)."""
    rng = np.random.default_rng(1)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)) * 0.2, "b1": np.zeros(8),
             "wc": rng.standard_normal((CLASSES, 8, 1, 1)) * 0.1, "bc": np.full(CLASSES, -3.0),
             "wb": rng.standard_normal((4, 8, 1, 1)), "bb": np.zeros(4)}
    tensors = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()]
    tensors += [numpy_helper.from_array(np.array(v, np.int64), n)
                for n, v in (("cls_shape", [1, CLASSES, S * S]), ("box_shape", [1, 4, S * S]))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["h"]),
             helper.make_node("Conv", ["h", "wc", "bc"], ["cl"]),
             helper.make_node("Reshape", ["cl", "cls_shape"], ["clr"]),
             helper.make_node("Sigmoid", ["clr"], ["scores"]),
             helper.make_node("Conv", ["h", "wb", "bb"], ["bo"]),
             helper.make_node("Reshape", ["bo", "box_shape"], ["boxes"]),
             helper.make_node("Concat", ["boxes", "scores"] + (["coefs"] if extra else []), ["output0"], axis=1)]
    if extra:
        tensors += [numpy_helper.from_array(rng.standard_normal((extra, 8, 1, 1)).astype(np.float32), "wm"),
                    numpy_helper.from_array(np.array([1, extra, S * S], np.int64), "coef_shape")]
        nodes[-1:-1] = [helper.make_node("Conv", ["h", "wm"], ["co"]), helper.make_node("Reshape", ["co", "coef_shape"], ["coefs"])]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, S, S])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + CLASSES + extra, "anchors"])],
                              tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _outputs(change: str, feeds: int = 10, extra: int = 0) -> tuple[list[dict], list[dict]]:
    """Float's and a candidate's ``output0``: background scores ~0.01 and random boxes; per image two
    objects of class 0 (anchors at 0.9/0.85/0.8 and the second at 0.7/0.65/0.6) and one of class 1, each
    object three neighbouring anchors with boxes a pixel apart (cxcywh). ``swap``: the second object's
    best anchor falls to 0.0 in half the images (its neighbours keep it); ``lost``: the second object of
    class 0 falls under every threshold; ``drift``: every box moves by its width; ``class``: class 1's
    object reads as class 2. ``extra``: that many rows of random values after the scores, alike in both."""
    rng = np.random.default_rng(7)
    ref, got = [], []
    for image in range(feeds):
        out = np.zeros((1, 4 + CLASSES + extra, S * S), np.float32)
        out[0, 4 + CLASSES:] = rng.standard_normal((extra, S * S))
        out[0, :2] = rng.uniform(0, 512, (2, S * S))
        out[0, 2:4] = rng.uniform(4, 40, (2, S * S))
        out[0, 4:4 + CLASSES] = rng.uniform(0.0, 0.02, (CLASSES, S * S))
        starts = rng.choice(np.arange(0, S * S - 3, 8), 3, replace=False)
        objects = []
        for start, cls, top in zip(starts, (0, 0, 1), (0.9, 0.7, 0.9)):
            box = np.array([rng.uniform(60, 450), rng.uniform(60, 450), rng.uniform(40, 100), rng.uniform(40, 100)])
            anchors = np.arange(start, start + 3)
            for k, a in enumerate(anchors):
                out[0, :4, a] = box + k
                out[0, 4 + cls, a] = top - 0.05 * k
            objects.append((anchors, cls))
        g = out.copy()
        if change == "swap" and image % 2 == 0:
            g[0, 4, objects[1][0][0]] = 0.0
        elif change == "lost":
            g[0, 4, objects[1][0]] = 0.1
        elif change == "drift":
            g[0, 0] += g[0, 2]
        elif change == "class":
            anchors = objects[2][0]
            g[0, 6, anchors], g[0, 5, anchors] = g[0, 5, anchors], 0.01
        ref.append({"output0": out})
        got.append({"output0": g})
    return ref, got


def test_an_anchor_swap_holds_where_the_score_field_cosine_broke_it() -> None:
    model = _head()
    readings = readings_of(model)
    assert "output0" in readings["score_rows"] and readings["field_axes"].get("output0") == 1
    ref, got = _outputs("swap")
    check = measure(ref, got, EIGHT, **readings).outputs["output0"]
    assert check.ok, check.describe()
    assert check.detections is not None and check.detections.f1 == 1.0 and check.detections.float_count == 90
    assert not check.top1_unjudged  # 10 images, fewer than the 20 the floor needs, but 30 detections judge it
    # main's judgement: class 0's field cosine on the confident candidates breaks (the same outputs)
    from onnxptq.analysis.fields import FieldCosines
    from onnxptq.analysis.threshold_cells import confident_only
    fields = FieldCosines(1, 4 + CLASSES)
    for r, g in zip(ref, got):
        fields.add(*confident_only(r["output0"], g["output0"], readings["score_rows"]["output0"]))
    assert fields.worst()[0] == 4 and fields.worst()[1] < EIGHT.cosine


def test_a_lost_second_object_moved_boxes_and_a_class_swap_break() -> None:
    readings = readings_of(_head())
    for change, lost in (("lost", 30), ("drift", 90), ("class", 30)):
        ref, got = _outputs(change)
        check = measure(ref, got, EIGHT, **readings).outputs["output0"]
        assert not check.ok, (change, check.describe())
        assert check.detections is not None and check.detections.lost == lost and check.detections.f1 < EIGHT.top1, change


def test_too_few_detections_are_not_judged_and_the_fields_judge() -> None:
    readings = readings_of(_head())
    ref, got = _outputs("swap", feeds=4)  # 12 float detections, the 8-bit floor needs 20
    assert judge_detections([f["output0"] for f in ref], [f["output0"] for f in got], readings["score_rows"]["output0"],
                            EIGHT.needed) is None
    check = measure(ref, got, EIGHT, **readings).outputs["output0"]
    assert check.detections is None and not check.ok and check.worst_field[1] == 4


def test_nms_keeps_one_box_per_object_and_class() -> None:
    scores = np.array([[0.9, 0.8, 0.3, 0.1], [0.0, 0.0, 0.6, 0.95]])
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10], [50, 50, 60, 60]], float)
    cls, kept = detections(scores, boxes, 0.25)
    # candidate 1 overlaps 0 (IoU 0.68 > 0.6): suppressed; candidate 2 is class 1 (its best), not suppressed by class 0
    assert sorted(zip(cls.tolist(), kept[:, 0].tolist())) == [(0, 0.0), (1, 0.0), (1, 50.0)]
    assert len(detections(scores, boxes, 0.92)[0]) == 1


def test_four_box_rows_beside_mask_coefficients_are_judged_without_fields() -> None:
    """A YOLOv8-seg head (captcha-recognizer's slider: 4 box rows, the scores, 32 mask coefficients) has more
    rows than fields: its detections are judged beside the pooled cosine, the box rows being the one
    four-row input."""
    readings = readings_of(_head(extra=32))
    assert readings["score_rows"]["output0"].boxes == ((0, 4), (4 + CLASSES, 4 + CLASSES + 32))
    assert "output0" not in readings["field_axes"]
    ref, got = _outputs("swap", extra=32)
    check = measure(ref, got, EIGHT, **readings).outputs["output0"]
    assert check.ok and check.detections is not None and check.detections.f1 == 1.0, check.describe()
    ref, got = _outputs("lost", extra=32)
    check = measure(ref, got, EIGHT, **readings).outputs["output0"]
    assert not check.ok and check.detections.lost == 30 and check.cosine >= EIGHT.cosine, check.describe()


def test_a_chaotic_kept_set_is_not_judged() -> None:
    """Clusters of near-tied (0.500-0.501) overlapping boxes: NMS's kept set in each moves under float's own
    jitter, so its F1 would measure the chaos, not the format; random boxes overlapping everywhere (the range
    guard's built head) are one object per class and image, too few to judge at all."""
    readings = readings_of(_head())
    rows = readings["score_rows"]["output0"]
    rng = np.random.default_rng(5)
    ref, blob = [], []
    for _ in range(10):
        out = np.zeros((1, 4 + CLASSES, S * S), np.float32)
        out[0, :2] = rng.uniform(0, 2000, (2, S * S))
        out[0, 2:4] = 4.0
        for k in range(4):  # four clusters of 8 boxes, far apart: 40 objects
            idx = np.arange(k * 64, k * 64 + 8)
            out[0, 0, idx] = 200 + 400 * k + rng.uniform(-12, 12, 8)
            out[0, 1, idx] = 300 + rng.uniform(-12, 12, 8)
            out[0, 2, idx], out[0, 3, idx] = rng.uniform(30, 50, 8), rng.uniform(30, 50, 8)
            out[0, 4, idx] = rng.uniform(0.5, 0.501, 8)
        ref.append(out)
        overlapping = out.copy()
        overlapping[0, :2] = rng.uniform(100, 140, (2, S * S))
        overlapping[0, 2:4] = rng.uniform(20, 60, (2, S * S))
        overlapping[0, 4:] = rng.uniform(0.0, 1.0, (CLASSES, S * S))
        blob.append(overlapping)
    found = judge_detections(ref, ref, rows, EIGHT.needed)
    assert found is not None and not found.judged and found.stable < 1 - 1 / (4 * EIGHT.needed), found
    calm = judge_detections(*(([f["output0"] for f in side]) for side in _outputs("swap")), rows, EIGHT.needed)
    assert calm.judged and calm.stable == 1.0
    check = measure([{"output0": r} for r in ref], [{"output0": r * 0.98} for r in ref], EIGHT, **readings).outputs["output0"]
    assert check.detections is None and "not judged: float's own kept set moves" in check.note, check.describe()
    # overlapping everywhere: each class's detections of an image are one object, 3 an image: 18 < 20 on 6 images
    assert judge_detections(blob[:6], blob[:6], rows, EIGHT.needed) is None
