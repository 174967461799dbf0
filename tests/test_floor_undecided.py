"""A detector whose images hold no decision says so instead of holding (issue 27 item 2).

captcha-recognizer's slider-gap detector finds one gap per captcha. On the floor's 42 captchas
(48 feeds) float's best candidate scored 0.94 or more on every one, above every threshold a reader
might set (0.2-0.8 of float's best), and BF16, A16W8 and MXINT8 "held" there while the bench's 32
other captchas lost 1-2 each: candidates at 0.50-0.63 crossing the package's 0.5 (bench/RESULTS.md,
floorsee3). No image held a decision a format could flip. A threshold decides only where float
keeps candidates on both sides of it; where none of the band does (``maps.undecided``), a verdict
that holds is *not judged* and the summary names why.

The head is test_floor_few_detections' YOLOv8-seg export; its images hold one blob each, bright
enough that every best candidate scores about 0.9 or more (nothing planted: BF16's own rounding).
"""

from __future__ import annotations

import numpy as np

from onnxptq.analysis.maps import MIN_KEPT, kept_agreement, undecided
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from test_floor_few_detections import S, images, seg_head

BF16 = resolve_config("BF16")


def one_gap(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Noisy images with exactly one bright blob each: the detector always finds it, confidently."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:S, 0:S]
    feeds = []
    for _ in range(n):
        x = 0.1 * rng.standard_normal((1, 3, S, S))
        r, c, s = rng.uniform(3, S - 3), rng.uniform(3, S - 3), rng.uniform(1.5, 2.0)
        x[0] += rng.uniform(1.0, 2.0) * np.exp(-((yy - r) ** 2 + (xx - c) ** 2) / (2 * s * s))
        feeds.append({"x": x.astype(np.float32)})
    return feeds


def test_a_detector_whose_every_best_candidate_passes_every_threshold_is_not_judged():
    result = quantize(seg_head(), BF16.replace(repair=False), one_gap(48))
    check = result.floor.outputs["output0"]
    # main: judged on 48 images (kept F1 ≈ 1 from shifts no threshold meets) and "holds"
    assert check.undecided is not None
    count, lowest, low, high = check.undecided
    assert count == check.images >= 34 and lowest > high
    assert result.floor.ok and result.floor.unjudged == ["output0"]
    summary = result.summary()
    assert "could NOT judge the detections of output0: float's best candidate scores" in summary
    assert "hold no decision a format could flip" in summary


def test_images_where_float_decides_are_still_judged():
    # blobs of 0.4-1.2: some images' best candidate falls below the band's thresholds
    result = quantize(seg_head(), BF16.replace(repair=False), images(48))
    check = result.floor.outputs["output0"]
    assert check.undecided is None and check.kept is not None and not check.top1_unjudged


def test_undecided_and_kept_agreement_on_scores():
    rng = np.random.default_rng(0)
    high = rng.uniform(0.9, 0.99, 60)
    shifted = 1 / (1 + np.exp(-(np.log(high / (1 - high)) + rng.normal(0, 0.3, 60))))
    assert undecided(high) == (60, float(high.min()), 0.2 * high.max(), 0.8 * high.max())
    # the kept set still agrees (every candidate kept at every level): a figure that says nothing
    kept_high = kept_agreement(high, shifted, f1=True)
    assert kept_high is not None and kept_high.kept == kept_high.candidates == 60
    # a few candidates below the band: still undecided (fewer than MIN_KEPT below any threshold)
    few_low = np.concatenate([high, np.full(MIN_KEPT - 1, 0.05)])
    assert undecided(few_low) is not None
    # as many below as the band needs on each side: decided, and judged
    mixed = np.concatenate([high, rng.uniform(0.01, 0.3, 20)])
    assert undecided(mixed) is None
    kept = kept_agreement(mixed, np.concatenate([shifted, mixed[60:]]), f1=True)
    assert kept is not None and kept.figure > 0.9
    # float keeps too few anywhere: a different lack, not "undecided"
    assert undecided(np.array([0.9, 0.9, 0.01, 0.02, 0.03])) is None
