"""bench/newmodels.py round 29 feeds and readings, on made-up signals and outputs (the packages stay out of the tests).

fpkws's MFCC is torchaudio's (HTK mel triangles, an orthonormal DCT-II, 10·log10 with an 80 dB floor); musicnn's frames
are librosa's mel power through a float16 store and log10(10000 x + 1). Each is checked against an independent
computation or a property the definition forces.
"""

from __future__ import annotations

import random

import numpy as np

from bench import newmodels as nm


def test_dct_is_orthonormal_as_torchaudio_ortho():
    """create_dct(norm="ortho") makes the DCT-II rows orthonormal: D^T D = I for the 41 kept of 128, and row 0 is the
    constant 1/sqrt(128)."""
    d = nm._dct_ortho()
    assert d.shape == (128, 41)
    assert np.allclose(d.T @ d, np.eye(41), atol=1e-10)
    assert np.allclose(d[:, 0], 1 / np.sqrt(128))


def test_htk_triangles_peak_at_their_mel_centres():
    """Each of the 128 HTK triangles rises to 1 at its centre (mel_to_hz of the evenly spaced mel points): the bin
    nearest the centre holds the filter's maximum, and neighbouring filters' centres step up."""
    fb = nm._htk_mel_fbanks()
    assert fb.shape == (241, 128)
    mel_max = 2595 * np.log10(1 + 8000 / 700)
    centres_hz = 700 * (10 ** (np.linspace(0, mel_max, 130)[1:-1] / 2595) - 1)
    peaks = np.argmax(fb, axis=0)
    assert np.all(np.diff(peaks) >= 0)
    wide = centres_hz > 1500                            # above 1.5 kHz a triangle spans several 33 Hz bins
    assert np.all(np.abs(peaks[wide] * (8000 / 240) - centres_hz[wide]) <= 8000 / 240)
    assert fb.max() <= 1.0 + 1e-12


def test_kws_transform_removes_each_coefficient_mean_and_pads_to_70():
    """A 0.3 s clip has 31 frames: centred into 70 columns, zero on both sides; each coefficient's mean over its own
    frames is 0 (the package subtracts it); a louder copy gives the same MFCC (Normalize divides by the 99.9th
    percentile)."""
    rng = np.random.default_rng(0)
    t = np.arange(4800) / 16000
    clip = (0.2 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.normal(size=4800)).astype(np.float32)
    m = nm._kws_transform(clip)
    assert m.shape == (40, 70) and m.dtype == np.float32
    inside = m[:, 19:50]
    assert np.all(m[:, :19] == 0) and np.all(m[:, 50:] == 0)
    assert np.allclose(inside.mean(axis=1), 0, atol=1e-6)
    assert np.allclose(nm._kws_transform(clip * 3), m, atol=1e-5)
    long = nm._kws_transform(np.tile(clip, 4))       # 121 frames: the middle 70 kept
    assert long.shape == (40, 70)


def test_kws_probability_prefers_the_nearer_centre():
    """calculate_probability: softmax of minus the distances, the unknown centre's divided by gamma 3: an embedding
    on the keyword's centre gets p > 0.5, one on the unknown centre p < 0.5."""
    centres = np.array([[0.0, 0.0], [6.0, 0.0]])
    for e, above in ((np.array([0.0, 0.0]), True), (np.array([6.0, 0.0]), False)):
        d = -np.linalg.norm(e[None, None] - centres[None], axis=2) / np.array([1.0, 3.0])
        p = np.exp(d) / np.exp(d).sum()
        assert (p[0, 0] > 0.5) == above


def test_musicnn_logmel_is_log10_of_scaled_mel_power():
    """Silence gives log10(1) = 0; a tone's frames peak in the mel band around its frequency; 3.1 s gives at least the
    187 frames of one patch."""
    assert np.all(nm._musicnn_logmel(np.zeros(16000, np.float32)) == 0)
    t = np.arange(49600) / 16000
    rep = nm._musicnn_logmel((0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))
    assert rep.shape[1] == 96 and rep.shape[0] >= 187
    band = int(np.argmax(rep[100]))
    assert nm._mel_basis(16000, 512, 96)[band, 32] > 0   # FFT bin 32 = 1000 Hz


def test_music_clips_are_bounded_and_differ():
    a = nm._music_clip(random.Random(3))
    b = nm._music_clip(random.Random(4))
    assert a.shape == b.shape == (49600,)
    assert 0.29 <= np.abs(a).max() <= 0.91 and not np.allclose(a, b)
