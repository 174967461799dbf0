"""bench/newmodels.py round 22 readings, on made-up inputs and outputs (the wheels stay out of the tests).

DeepFilterNet3's features and output stage are computed here the way libDF computes them (its ERB band widths are spec
values of DeepFilterNet3's config: 48 kHz, fft 960, 32 bands of at least 2 bins); immaculate's copy decision is the
package's cosine >= 0.75 on the L2-normalised embeddings.
"""

from __future__ import annotations

import numpy as np

from bench import newmodels as nm

#: libDF erb_fb(48000, 960, 32, 2), as DeepFilterNet3 runs it
DFN3_ERB_WIDTHS = [2] * 13 + [5, 5, 7, 7, 8, 10, 12, 13, 15, 18, 20, 24, 28, 31, 37, 42, 50, 56, 67]


def test_erb_widths_are_libdf_s():
    widths = nm._df_erb_widths()
    assert widths.tolist() == DFN3_ERB_WIDTHS
    assert widths.sum() == 481  # fft 960: 481 bins


def test_features_put_a_tone_in_its_bin_and_normalise():
    t = np.arange(3 * 48000) / 48000
    spec, feat_erb, feat_spec = nm._dfn_features(0.5 * np.sin(2 * np.pi * 1000 * t))  # 1 kHz: bin 20 of 50 Hz bins
    assert spec.shape[1] == 481 and feat_erb.shape == (1, 1, len(spec), 32) and feat_spec.shape == (1, 2, len(spec), 96)
    assert np.all(np.abs(spec[5:290]).argmax(1) == 20)
    # a steady tone: the ERB features' running mean catches up (alpha 0.99: 1 s); a bin divided by the root of its
    # running magnitude tends to the root of its magnitude (libDF's band_unit_norm), here 1 - 0.99^281 of the way
    assert abs(feat_erb[0, 0, 280]).max() < 0.1 * abs(feat_erb[0, 0, 5]).max()
    ratio = np.hypot(feat_spec[0, 0, 280, 20], feat_spec[0, 1, 280, 20]) / np.sqrt(abs(spec[280, 20]))
    assert 1.0 < ratio < 1.06


def test_enhance_applies_mask_gains_and_the_deep_filter():
    rng = np.random.default_rng(0)
    spec = rng.normal(size=(12, 481)) + 1j * rng.normal(size=(12, 481))
    ones, identity = np.ones((1, 1, 12, 32)), np.zeros((1, 12, 96, 10))
    identity[0, :, :, 2 * 2] = 1.0  # tap k = 2 (order 5 - 1 - lookahead 2): the current frame, real part 1
    assert np.allclose(nm._dfn_enhance(spec, ones, identity), spec)
    half = nm._dfn_enhance(spec, 0.5 * ones, np.zeros((1, 12, 96, 10)))
    assert np.allclose(half[:, 96:], 0.5 * spec[:, 96:]) and np.allclose(half[:, :96], 0)
    ahead = np.zeros((1, 12, 96, 10))
    ahead[0, :, :, 2 * 4 + 1] = 1.0  # tap k = 4: two frames ahead, times i
    out = nm._dfn_enhance(spec, ones, ahead)
    assert np.allclose(out[:10, :96], 1j * spec[2:, :96]) and np.allclose(out[10:, :96], 0)


def test_sscd_pairs_counts_flipped_copy_decisions():
    feeds = [{"image": np.zeros((1, 4, 4, 3), np.uint8)} for _ in range(8)]
    for i, f in enumerate(feeds):
        nm._SSCD_GROUP[id(f["image"])] = i // 4  # two groups of an original and three copies
    base = np.eye(8)[[0, 0, 0, 0, 4, 4, 4, 4]] + 0.1 * np.eye(8)
    emb = {id(f["image"]): base[i] for i, f in enumerate(feeds)}

    def runner(moved: dict[int, np.ndarray]):
        return lambda f: [moved.get(id(f["image"]), emb[id(f["image"])])[None]]

    assert nm.sscd_pairs(runner({}), runner({}), feeds, None) == 1.0
    # copy 3 of group 0 turned away from its original: its 3 in-group decisions flip (of 12 + 8 pairs judged)
    moved = {id(feeds[3]["image"]): np.eye(8)[7]}
    assert nm.sscd_pairs(runner({}), runner(moved), feeds, None) == 1 - 3 / 20


def test_emb_frames_30db():
    a = np.ones((1, 10, 512), np.float32)
    b = a.copy()
    b[0, :3] += 0.05  # 26 dB under: out;  the rest exact
    b[0, 3:5] += 0.02  # 34 dB under: in
    assert nm._emb_frames_30db(a, b) == 0.7
