"""bench/newmodels.py round 24 readings and feeds, on made-up outputs and rendered captchas (the packages stay out of
the tests), and bench/round24_search.py's summary filter.

The readings are the packages' own: vk_captcha's VkCaptchaSolver.get_result (arg-max per step, repeats and the two
special classes 0 and len(characters) + 1 dropped, at most 7 characters), pysjtu's NNRecognizer._tensor_to_captcha
(one letter per head, class 26 = no letter); pysjtu's binarisation is its table ``[0] * 156 + [1] * 100``.
"""

from __future__ import annotations

import random

import numpy as np

from bench import newmodels as nm
from bench import round24_search


def _steps(classes: list[int], n: int = 23) -> np.ndarray:
    """A [1, T, n] output whose arg-max at step t is classes[t]."""
    out = np.full((1, len(classes), n), 0.01, np.float32)
    out[0, np.arange(len(classes)), classes] = 0.9
    return out


def test_vk_read_is_the_package_ctc_decode():
    blank = len(nm._VK_CHARS) + 1  # 22: the CTC blank; 0 is the lookup's out-of-vocabulary class
    z, s, h = 1, 2, 3  # 'z', 's', 'h'
    assert nm._vk_read(_steps([z, z, blank, z, s, s, 0, h, blank])) == "zzsh"
    # at most 7 characters, as get_result cuts
    assert nm._vk_read(_steps([1, blank, 2, blank, 3, blank, 4, blank, 5, blank, 6, blank, 7, blank, 8])) == "zshqdv2"


def test_vk_reads_counts_exact_answers():
    a, b = _steps([1, 22, 2]), _steps([1, 22, 3])
    feeds = [{"image": np.zeros(1)}, {"image": np.ones(1)}]
    ref = lambda f: [a]  # noqa: E731
    test = lambda f: [a if f["image"].sum() == 0 else b]  # noqa: E731
    assert nm.vk_reads(ref, test, feeds, None) == 0.5


def test_pysjtu_reads_join_the_five_heads_and_drop_class_26():
    def heads(letters: str, fifth: int) -> list[np.ndarray]:
        outs = [np.eye(26, dtype=np.float32)[[ord(c) - 97]] for c in letters]
        return outs + [np.eye(27, dtype=np.float32)[[fifth]]]

    feeds = [{"x": np.zeros(1)}, {"x": np.ones(1)}]
    ref = lambda f: heads("abcd", 26)  # noqa: E731  "abcd", no fifth letter
    same = lambda f: heads("abcd", 26)  # noqa: E731
    fifth = lambda f: heads("abcd", 4 if f["x"].sum() else 26)  # noqa: E731  "abcde" on the second feed
    assert nm.pysjtu_nn_reads(ref, same, feeds, None) == 1.0
    assert nm.pysjtu_nn_reads(ref, fifth, feeds, None) == 0.5


def test_jaccount_feeds_are_the_package_binary_image():
    img = nm._jaccount_captcha(random.Random(0))
    assert img.size == (110, 40)
    grey = np.asarray(img.convert("L"))
    binary = np.array(nm._jaccount_binary(img), dtype=np.float32)
    assert np.array_equal(binary, (grey >= 156).astype(np.float32))  # pysjtu's table: 0 below 156, 1 from it
    assert 0.02 < 1 - binary.mean() < 0.4  # ink, but mostly paper
    feed = nm.pysjtu_nn_feeds(1, 0)[0]["input.1"]
    assert feed.shape == (1, 1, 40, 110) and feed.dtype == np.float32 and set(np.unique(feed)) <= {0.0, 1.0}


def test_svm_feeds_are_centred_20x20_letter_pieces():
    feeds = nm.pysjtu_svm_feeds(12, 0)
    assert len(feeds) == 12
    for f in feeds:
        x = f["float_input"]
        assert x.shape == (400,) and set(np.unique(x)) <= {0.0, 255.0}
        ink = (x.reshape(20, 20) == 0)
        assert ink.any() and ink[0].sum() + ink[-1].sum() < ink.sum()  # a piece, pasted inside the canvas


def test_vk_feeds_are_width_first_bgr_in_unit_range():
    x = nm.vk_captcha_feeds(1, 0)[0]["image"]
    assert x.shape == (1, 130, 50, 3) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    # the background is light and grey-ish, the ink dark: BGR order changes nothing there, the transpose does
    assert x[0, :, :5].mean() > 0.7


def test_bundling_search_reads_summaries_not_names():
    hit = round24_search.BUNDLING.search
    assert hit("Khmer OCR (CRNN + CTC) with bundled weights and old Khmer inscription fonts")
    assert hit("Offline CPU OCR with 3.10 MB of bundled PaddleOCR-derived ONNX models")
    assert hit("Self-contained XFeat feature extraction model and corresponding LighterGlue matcher.")
    assert not hit("An ONNX model zoo downloader")
    assert not hit("Matplotlib themes")
