"""A detector's one-class score vector beside its box output is judged by the objects its thresholds keep
(analysis/anchor_scores.py).

Why: MediaPipe BlazeFace's ``scores`` ``[1, 896]`` sits beside ``regression`` ``[1, 896, 16]``; under A16W8 a face
dropped from 0.740 under its reader's 0.7 and a non-face rose over it (face F1 0.966 < 0.97) while the floor read
the score vector by its cosine over every anchor (0.998) and held: silent. The built head here
(testkit/anchor_head.py: two levels of 2 and 6 anchors per cell, the face logits drawn as the input) has three
confident faces and one marginal one per image. A quantized copy whose marginal face drops under every
threshold must break; one whose background anchors moved far below every threshold must hold, though the
whole vector's cosine is what moved.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.analysis.anchor_scores import anchor_probabilities, anchor_score_outputs
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.sessions import open_session
from testkit.anchor_head import anchor_head

SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
SIZE = 8


def _logits(change: str, images: int = 4) -> list[np.ndarray]:
    """Per image three 2×2 faces at logit 3 (0.95) and one at logit 1 (0.73; ``flip``: -1.5, 0.18; ``edge_ref``: 0.61,
    ``edge``: 0.59), the background at -6 (0.0025; ``far``: -2.5, 0.076: far below every threshold still)."""
    out = []
    for _ in range(images):
        x = np.full((1, 1, SIZE, SIZE), -2.5 if change == "far" else -6.0, np.float32)
        for r, c in ((0, 0), (0, 4), (4, 2)):
            x[0, 0, r:r + 2, c:c + 2] = 3.0
        x[0, 0, 4:6, 6:8] = {"flip": -1.5, "edge_ref": np.log(0.61 / 0.39), "edge": np.log(0.59 / 0.41)}.get(change, 1.0)
        out.append(x)
    return out


@pytest.fixture(scope="module")
def head():
    model = anchor_head(SIZE)
    session = open_session(model)
    names = [o.name for o in model.graph.output]
    same = [session.run(None, {"x": x})[names.index("boxes")] for x in _logits("none")]

    def outputs(change: str) -> list[dict[str, np.ndarray]]:
        """The head's outputs on the changed logits, its boxes float's (only the scores are judged here)."""
        runs = [dict(zip(names, session.run(None, {"x": x}))) for x in _logits(change)]
        return [{**run, "boxes": boxes.copy()} for run, boxes in zip(runs, same)]

    return model, outputs


def test_the_score_vector_is_found_by_structure_with_or_without_its_sigmoid(head):
    model, outputs = head
    found = anchor_score_outputs(model)
    assert found["scores"].siblings == ("boxes",) and found["scores"].logits
    ref = outputs("none")[0]
    assert ref["scores"].shape == (1, 8 * 8 * 2 + 4 * 4 * 6) and ref["boxes"].shape == (1, 224, 16)
    probs = anchor_probabilities(ref["scores"], ref["boxes"], True)
    assert probs.shape == (1, 1, 224) and np.allclose(probs[0, 0], 1 / (1 + np.exp(-ref["scores"][0])))
    assert anchor_probabilities(ref["boxes"], ref["scores"], True) is None  # the box output is no score vector
    with_sigmoid = anchor_score_outputs(anchor_head(SIZE, sigmoid=True, trailing_one=True))
    assert with_sigmoid["scores"].siblings == ("boxes",) and not with_sigmoid["scores"].logits
    assert anchor_probabilities(np.full((1, 224, 1), 0.5, np.float32), ref["boxes"], False).shape == (1, 1, 224)
    assert anchor_probabilities(np.full((1, 224, 1), 2.0, np.float32), ref["boxes"], False) is None  # no probabilities


def test_a_lost_face_breaks_a_background_moved_far_below_the_thresholds_holds(head):
    model, outputs = head
    readings = readings_of(model)
    ref = outputs("none")
    flipped = measure(ref, outputs("flip"), SIXTEEN, **readings)
    assert flipped.broken == ["scores"], flipped.describe()
    decisions, f1, _ = flipped.outputs["scores"].thresholded
    assert decisions >= SIXTEEN.needed and f1 < SIXTEEN.top1
    assert "analysis/anchor_scores.py" in flipped.outputs["scores"].note
    far = measure(ref, outputs("far"), SIXTEEN, **readings)
    assert far.ok, far.describe()
    assert far.outputs["scores"].thresholded[1] == pytest.approx(1.0)
    without = {k: v for k, v in readings.items() if k != "anchor_scores"}
    # the whole vector's cosine (the reading before) is carried by the background: it broke on the far move
    assert not measure(ref, outputs("far"), SIXTEEN, **without).ok


def test_the_boxes_are_read_at_the_anchors_whose_score_passes():
    """BlazeFace's sigmoid in the graph: its boxes judged at the anchors whose float score passes 0.5, as a value map at
    its heat map's cells (analysis/spatial_gates.py); a background anchor's boxes moved are never read."""
    model = anchor_head(SIZE, sigmoid=True)
    session = open_session(model)
    names = [o.name for o in model.graph.output]
    ref = [dict(zip(names, session.run(None, {"x": x}))) for x in _logits("none")]
    readings = readings_of(model)
    probs = [f["scores"] for f in ref]

    def moved(where: str) -> list[dict[str, np.ndarray]]:
        """Float's outputs with the boxes of the background anchors (``where="background"``) or of the faces' moved."""
        out = []
        for f, p in zip(ref, probs):
            rows = (p < 0.5) if where == "background" else (p >= 0.5)
            boxes = f["boxes"].copy()
            boxes[rows] += 3.0 * np.abs(boxes[rows]) + 1.0
            out.append({**f, "boxes": boxes})
        return out

    background = measure(ref, moved("background"), SIXTEEN, **readings)
    assert background.ok, background.describe()
    assert background.outputs["boxes"].heat_cells == (sum(int((p >= 0.5).sum()) for p in probs), "scores")
    faces = measure(ref, moved("faces"), SIXTEEN, **readings)
    assert faces.broken == ["boxes"], faces.describe()


def test_a_crossing_at_one_threshold_is_named_not_broken_where_objects_are_runs_of_anchors(head):
    """A face whose score crosses 0.6 alone (0.61 → 0.59) on every image: at that threshold 12 of 48 anchor runs lost
    (F1 0.857), the band's average 0.995. The runs are fragments of the reader's faces (a 2×2 face is two grid rows
    at one level and a cell at the other: three runs), so the threshold is named, not judged alone
    (analysis/threshold_cells.py, "One threshold at a time"); a heat map's objects would break there
    (tests/test_floor_threshold_alone.py)."""
    model, outputs = head
    verdict = measure(outputs("edge_ref"), outputs("edge"), SIXTEEN, **readings_of(model))
    check = verdict.outputs["scores"]
    worst = check.threshold
    assert worst is not None and worst.threshold == pytest.approx(0.6) and (worst.decisions, worst.lost) == (48, 12)
    assert worst.fragments and not worst.breaks and worst.chance < 0.001
    assert verdict.ok and check.thresholded[1] >= SIXTEEN.top1, verdict.describe()
    assert "its objects fragments of the reader's (runs of anchors): that threshold NOT JUDGED alone" in check.describe()
