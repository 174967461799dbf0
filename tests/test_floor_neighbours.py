"""Rows of a wide vector ranked against each other by cosine: the floor warns where the nearest-other picks
are surely below its top-1 floor (analysis/neighbours.py; minimol MXFP8_E4M3: every fingerprint kept a cosine
of 0.996, 57 of the floor's 64 molecules kept float's nearest other, the task 0.949 against 0.95)."""

from __future__ import annotations

import numpy as np

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure
from onnxptq.analysis.neighbours import neighbours

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
RNG = np.random.default_rng(0)
# 8 feeds of 8 rows, 64-wide: 16 families of 4 close analogues (0.02 apart around their centre), as a generator of
# drug-like molecules makes them: each row's nearest other is one of its family, the top two close
BASE = np.repeat(RNG.normal(size=(16, 64)), 4, axis=0)
ROWS = (BASE + 0.02 * RNG.normal(size=BASE.shape))[RNG.permutation(64)].astype(np.float32)


def feeds(rows: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{"fp": rows[8 * i:8 * i + 8]} for i in range(8)]


def test_a_ranking_that_moves_under_a_high_cosine_is_warned():
    # a rounding of 0.01 per value: every row's cosine with float's about 0.99999, the families' rankings reshuffled
    got = ROWS + 0.01 * RNG.normal(size=ROWS.shape).astype(np.float32)
    v = measure(feeds(ROWS), feeds(got), EIGHT)
    assert v.outputs["fp"].cosine >= EIGHT.cosine and v.ok  # the cosine alone holds: never broken, never repaired
    found = neighbours([f["fp"] for f in feeds(ROWS)], [f["fp"] for f in feeds(got)])
    assert found is not None and found.rows == 64 and found.kept < 64 * EIGHT.top1
    assert len(v.advisories) == 1 and "nearest other row is kept on" in v.advisories[0]


def test_a_ranking_kept_and_exact_duplicates_say_nothing():
    rows = ROWS.copy()
    rows[1] = rows[0]  # a duplicate: the rows whose nearest is either copy tie exactly
    got = rows + 1e-4 * RNG.normal(size=rows.shape).astype(np.float32)
    v = measure(feeds(rows), feeds(got), EIGHT)
    assert v.ok and not v.advisories
    found = neighbours([f["fp"] for f in feeds(rows)], [f["fp"] for f in feeds(got)])
    assert found.kept == found.rows == 64


def test_narrow_rows_are_no_gallery():
    boxes = RNG.normal(size=(64, 4)).astype(np.float32)
    assert neighbours([f["fp"] for f in feeds(boxes)], [f["fp"] for f in feeds(boxes[::-1].copy())]) is None


def test_thousands_of_rows_are_positions_not_a_gallery():
    many = np.zeros((8, 300, 16), np.float32)  # 2400 pooled rows: no 2400x2400 similarity matrix is taken
    assert neighbours(list(many), list(many)) is None
