"""The DB text-detector harness (``testkit.dbdet``, used by ``bench/det_hmean.py``) on the real
PP-OCRv4 det: the package's post-processing finds the rendered lines, and the hmean can fail."""

from __future__ import annotations

import numpy as np
import pytest

from testkit import dbdet
from testkit.models import model_path
from testkit.zoo import session_runner


@pytest.fixture(scope="module")
def pages():
    feeds, truth, sizes = dbdet.pages(2, 3, hard=True)
    return feeds, truth, sizes, session_runner(model_path("ch_PP-OCRv4_det_infer.onnx"))


def test_float_detector_finds_the_rendered_lines(pages):
    feeds, truth, sizes, run = pages
    found = dbdet.detect(run, feeds, sizes)
    p, r, h = dbdet.hmean(truth, found)
    assert h >= 0.9, (p, r, h)
    assert dbdet.hmean(found, found) == (1.0, 1.0, 1.0)


def test_hmean_fails_on_wrong_boxes(pages):
    feeds, truth, sizes, run = pages
    blank = dbdet.detect(lambda f: [np.zeros_like(run(f)[0])], feeds, sizes)
    assert dbdet.hmean(truth, blank)[2] == 0.0
    shifted = [t + np.array([1, 0, 1, 0]) * (t[:, 2:3] - t[:, 0:1]) for t in truth]  # one box width right
    assert dbdet.hmean(truth, shifted)[2] < 0.1
    half = [t[::2] for t in truth]
    assert dbdet.hmean(truth, half)[2] == pytest.approx(2 * 0.5 / 1.5, abs=0.05)
