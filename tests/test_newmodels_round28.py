"""bench/newmodels.py round 28 feeds and readings, on made-up signals and outputs (the packages stay out of the tests).

resemblyzer's mel frames are librosa's melspectrogram (Slaney filters, power 2, centred frames); torchcrepe's frames are
normalised 1024-sample windows and its weighted_argmax decoding turns 360 bin probabilities into a pitch; each is
checked against an independent computation here.
"""

from __future__ import annotations

import numpy as np

from bench import newmodels as nm


def test_mel_filters_are_slaney_triangles_of_unit_area():
    """Slaney normalisation makes each triangle's area over frequency 1 (height 2 / (upper - lower edge)); the
    centres of the 40 filters rise strictly from 0 towards 8 kHz."""
    w = nm._mel_basis()
    assert w.shape == (40, 201)
    hz_per_bin = 8000 / 200
    area = w.sum(axis=1) * hz_per_bin
    # a triangle sampled at 40 Hz steps integrates exactly only when it spans many bins: the wide high filters
    assert np.allclose(area[28:], 1.0, atol=0.005) and np.allclose(area[10:], 1.0, atol=0.05)
    centres = np.argmax(w, axis=1)
    assert np.all(np.diff(centres) > 0) and 180 < centres[-1] < 200   # the top filter centres near 7.4 kHz


def test_mel_of_a_tone_peaks_in_the_filter_around_its_frequency():
    t = np.arange(16000) / 16000
    mel = nm._rsz_mel((0.3 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32))
    assert mel.shape == (101, 40)                      # 1 + 16000 // 160 centred frames
    band = int(np.argmax(mel[50]))
    w = nm._mel_basis()
    assert w[band, 25] > 0                             # FFT bin 25 = 1000 Hz lies inside the loudest filter


def test_partials_follow_resemblyzer_slices():
    """compute_partial_slices at rate 1.3: a frame step of 77; a 3 s utterance (301 frames) gives partials starting
    at 0, 77, 154 (the last, from 231, covers 0.44 < 0.75 of its frames and is dropped)."""
    p = nm._rsz_partials(np.random.default_rng(0).normal(0, 0.1, 48000).astype(np.float32))
    assert p.shape == (3, 160, 40)


def test_crepe_frames_are_centred_and_unit_deviation():
    audio = np.random.default_rng(1).normal(0.2, 0.5, 3200).astype(np.float32)
    frames = nm._crepe_frames(audio)
    assert frames.shape == (21, 1024)                  # 1 + 3200 // 160, zero-padded 512 each side
    assert np.allclose(frames.mean(axis=1), 0, atol=1e-5)
    assert np.allclose(frames.std(axis=1, ddof=1), 1, atol=1e-4)


def test_crepe_decode_reads_the_peak_bin_and_its_neighbours():
    """A symmetric peak at bin 100 decodes to bin 100's frequency (10 * 2^((20 * 100 + 1997.38) / 1200) Hz); a peak
    below fmin (50 Hz is bin 39) is masked, so the arg-max moves to the largest bin inside the range."""
    probs = np.full((2, 360), 0.01, np.float32)
    probs[0, 98:103] = (0.3, 0.6, 0.9, 0.6, 0.3)
    probs[1, 10] = 0.95
    probs[1, 200] = 0.4
    f0, periodicity = nm._crepe_decode(probs)
    assert np.isclose(f0[0], 10 * 2 ** ((20 * 100 + 1997.3794084376191) / 1200), rtol=1e-6)
    assert np.isclose(periodicity[0], 0.9)
    assert np.isclose(periodicity[1], 0.4)
    assert abs(1200 * np.log2(f0[1] / (10 * 2 ** ((20 * 200 + 1997.3794084376191) / 1200)))) < 20


def test_crepe_reading_counts_voicing_and_pitch_flips():
    base = np.full((4, 360), 0.01, np.float32)
    base[:, 150] = 0.8
    moved = base.copy()
    moved[1, 150], moved[1, 160] = 0.01, 0.8          # 10 bins = 200 cents away: a pitch flip
    moved[2, 150] = 0.1                               # below 0.21: unvoiced
    ref, test = (lambda f: [base]), (lambda f: [moved])
    assert nm.crepe_pitch_frames(ref, test, [{}], None) == 0.5
