"""Repair's measure of an undecided output reads it as the floor did (algorithms/repair_measure.py, ``class_reads``).

uvdoc (round 20) MX9: the page grid ``output`` ``[1, 2, 45, 31]`` is read by the floor as points that move within
a pixel, "could not judge" on 12 samples; repair's measure took its last axis for 31 classes, whose near-equal
neighbours have no margins to speak of, so every candidate "lost" 0.28-0.32 of such reads, and the ends trial that
held the floor was ruled out against the whole plan in BF16 (bench/RESULTS.md, repairmin): 108 of 108 nodes
delivered in BF16. Now an output the floor read otherwise than as classes on its last axis is measured by its
cosine, and a candidate far within the floor there is not held to the best one.
"""

from __future__ import annotations

import numpy as np

from onnxptq.algorithms.repair_measure import class_reads, measure_outputs, undecided, worse
from onnxptq.analysis.floor import Floor, OutputCheck, Verdict

SIXTEEN_BIT = Floor("16-bit", 0.99, 0.97)


def _grids(noise: float, feeds: int = 12, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """A sampling grid per feed (x and y in [-1, 1], a little warped per feed) and a candidate off by ``noise``."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(feeds):
        ys, xs = np.meshgrid(np.linspace(-1, 1, 9), np.linspace(-1, 1, 31), indexing="ij")
        grid = np.stack([xs, ys])[None] + rng.normal(0, 0.01, (1, 2, 9, 31))
        refs.append({"grid": grid.astype(np.float32)})
        gots.append({"grid": (grid + rng.normal(0, noise, grid.shape)).astype(np.float32)})
    return refs, gots


def _verdict(**reading) -> Verdict:
    check = OutputCheck("grid", 1.0, 1.0, top1=1.0, rows=12, top1_unjudged=True, **reading)
    return Verdict(SIXTEEN_BIT, {"grid": check}, samples=12)


def test_a_grid_read_as_points_is_measured_by_its_cosine():
    verdict = _verdict(points=0.002, points_in_units=True)
    assert undecided(verdict) == ["grid"]
    assert class_reads(verdict, ["grid"]) == frozenset()
    refs, best = _grids(2e-4)
    _, more = _grids(4e-4, seed=0)
    classes = class_reads(verdict, ["grid"])
    m_best = measure_outputs(["grid"], refs, best, SIXTEEN_BIT, classes)["grid"]
    m_more = measure_outputs(["grid"], refs, more, SIXTEEN_BIT, classes)["grid"]
    assert m_best.cosine and m_more.cosine
    assert m_more.mean > m_best.mean  # worse, but far within the cosine floor: not held to the best one
    assert not worse(m_more, m_best)
    # read by its shape alone, the grid's columns were classes of no margin: the same candidate ruled out
    s_best = measure_outputs(["grid"], refs, best, SIXTEEN_BIT)["grid"]
    s_more = measure_outputs(["grid"], refs, more, SIXTEEN_BIT)["grid"]
    assert not s_best.cosine and s_more.mean > 0.05 and worse(s_more, s_best)


def test_an_output_read_as_classes_keeps_its_margins():
    verdict = _verdict()  # top-1 rows, no other reading: classes on the last axis
    assert class_reads(verdict, ["grid"]) == frozenset({"grid"})
    refs, best = _grids(2e-4)
    assert not measure_outputs(["grid"], refs, best, SIXTEEN_BIT, class_reads(verdict, ["grid"]))["grid"].cosine
