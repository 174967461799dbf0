"""A heat map no sigmoid bounds is judged by its thresholded regions (issue 27 item 2, branch floorsee3).

CRAFT's ``[N, 2, H, W]`` region and affinity maps end in a ``Conv`` (values −0.03 to 0.98, regressed
toward Gaussian targets) and its package reads them at 0.4. With no ``Sigmoid`` to mark them the
floor judged them by cosine (0.9946 at MXFP8_E4M3: "holds") while the regions above 0.4 kept an
IoU of 0.820 with float's (bench/RESULTS.md, "More models outside the zoo, sixth round"). The maps
here are built as CRAFT's are distributed: Gaussian blobs on a near-zero background, two channels.
"""

from __future__ import annotations

import numpy as np

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def _craft_like(seed: int, channels: int = 2, size: int = 64) -> np.ndarray:
    """``[1, channels, size, size]``: 10 Gaussian blobs per channel (peaks 0.75-0.98, σ 2-4 cells) over
    a background of ±0.02, as a regression head leaves it (slightly below 0, never 1)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    out = rng.uniform(-0.02, 0.01, (1, channels, size, size))
    for c in range(channels):
        for _ in range(10):
            cy, cx, s, peak = rng.uniform(6, size - 6), rng.uniform(6, size - 6), rng.uniform(2, 4), rng.uniform(0.75, 0.98)
            out[0, c] = np.maximum(out[0, c], peak * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s)))
    return out.astype(np.float32)


def _verdict(refs: list[np.ndarray], gots: list[np.ndarray]):
    return measure([{"y": r} for r in refs], [{"y": g} for g in gots], EIGHT)


def test_a_heat_map_whose_peaks_sink_breaks_the_floor_its_cosine_does_not_see():
    refs = [_craft_like(s) for s in range(4)]
    gots = [0.85 * r for r in refs]  # every blob 15 % lower: its region above a high level shrinks
    verdict = _verdict(refs, gots)
    check = verdict.outputs["y"]
    assert check.cosine > 0.9999  # a gain leaves the cosine at 1: what the floor judged before
    assert not verdict.ok
    assert check.regions is not None and check.regions[0] < EIGHT.top1


def test_a_heat_map_with_small_errors_holds():
    rng = np.random.default_rng(9)
    refs = [_craft_like(s) for s in range(4)]
    gots = [(r + rng.uniform(-0.004, 0.004, r.shape)).astype(np.float32) for r in refs]
    verdict = _verdict(refs, gots)
    assert verdict.ok and verdict.outputs["y"].regions is not None and verdict.outputs["y"].regions[0] >= 0.99


def test_a_one_channel_heat_map_is_judged_by_its_masks():
    refs = [_craft_like(s, channels=1) for s in range(4)]
    gots = [0.85 * r for r in refs]
    verdict = _verdict(refs, gots)
    check = verdict.outputs["y"]
    assert check.mask is not None and check.mask[1] < EIGHT.top1 and not verdict.ok


def test_maps_outside_the_unit_range_stay_judged_by_cosine():
    """Features (a ReLU's 0-6), signed maps and a map shifted by more than the margin are no heat maps."""
    for shift, gain in ((0.0, 6.0), (-0.5, 1.0), (0.15, 1.0)):
        refs = [(gain * _craft_like(s) + shift).astype(np.float32) for s in range(4)]
        gots = [(0.85 * (r - shift) + shift).astype(np.float32) for r in refs]
        check = _verdict(refs, gots).outputs["y"]
        assert check.regions is None and check.mask is None


def test_class_probabilities_summing_to_one_are_no_heat_map():
    """czann's ``[1, H, W, 2]`` nucleus/background cells (no Softmax node the floor recognizes) are read
    by arg-max: judged by their regions, FP16 (task IoU 0.994) broke at F1 0.956."""
    refs = []
    for s in range(4):
        p = np.clip(_craft_like(s, channels=1)[0, 0], 0.0, 1.0)
        refs.append(np.stack([1.0 - p, p], axis=-1)[None].astype(np.float32))
    gots = [np.stack([1.0 - 0.85 * r[..., 1], 0.85 * r[..., 1]], axis=-1).astype(np.float32) for r in refs]
    check = _verdict(refs, gots).outputs["y"]
    assert check.regions is None and check.mask is None
