"""``grid_scales_zero_points`` (the MinMSE search's candidate grids, all at once) against
``grid_scale_zero_point`` one range at a time: the same float64 bits, tiny scales and -0.0 included."""

from __future__ import annotations

import numpy as np
import pytest

from onnxptq.formats.integer import grid_scale_zero_point, grid_scales_zero_points


@pytest.mark.parametrize("qmin,qmax", [(0, 255), (-128, 127), (0, 65535)])
@pytest.mark.parametrize("symmetric", [False, True])
def test_candidates_match_one_at_a_time(qmin: int, qmax: int, symmetric: bool) -> None:
    rng = np.random.default_rng(qmax + symmetric)
    fractions = np.arange(100, 0, -1, dtype=np.float64) / 100
    # ranges from subnormal (scales below FLT_MIN: (1, 0)) to large, one side zero or -0.0 too
    ranges = [(-abs(rng.standard_normal()) * 10 ** rng.uniform(-45, 3) * rng.integers(0, 2),
               abs(rng.standard_normal()) * 10 ** rng.uniform(-45, 3) * rng.integers(0, 2)) for _ in range(10)]
    ranges += [(-0.0, 0.0), (-1e-44, 3e-44), (-3.0, 0.0), (0.0, 5.0), (-0.4 * 255 / 127.6, 1.0)]
    tiny = 0
    for lo, hi in ranges:
        scales, zps = grid_scales_zero_points(fractions * lo, fractions * hi, qmin, qmax, symmetric)
        pairs = [grid_scale_zero_point(f * lo, f * hi, qmin, qmax, symmetric) for f in fractions]
        assert scales.tobytes() == np.array([p[0] for p in pairs]).tobytes(), (lo, hi)
        assert zps.tobytes() == np.array([p[1] for p in pairs], dtype=np.float64).tobytes(), (lo, hi)
        tiny += int(np.sum(scales == 1.0))
    assert tiny > 0  # the tiny-scale branch was reached
