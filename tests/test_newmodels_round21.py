"""bench/newmodels.py round 21 readings, on made-up outputs (the wheels stay out of the tests).

mk8dx-table-reader decodes its digit CRNN greedily (blank 10, repeats merged); decibri's FastEnhancer-T is read
streamed, each model carrying its own caches, by the share of speech-active 256-sample blocks within 20 dB SNR.
"""

from __future__ import annotations

import numpy as np

from bench import newmodels as nm


def test_ctc_digits_drops_blank_and_merges_repeats():
    steps = [10, 3, 3, 10, 3, 7, 10]  # "3", "3" merged, blank splits the second "3", then "7"
    logits = np.full((1, len(steps), 11), -5.0, np.float32)
    logits[0, np.arange(len(steps)), steps] = 5.0
    assert nm._ctc_digits([logits]) == "337"
    assert nm._ctc_digits([np.eye(11, dtype=np.float32)[[10] * 7][None]]) == ""


def _toy_enhancer(noise_db: float | None, seed: int = 0):
    """A 'model' with decibri's interface: the hop's new 256 samples out (the caches carried unchanged); with
    ``noise_db``, white noise that many dB under each chunk's power added from the second half of the clip on."""
    rng = np.random.default_rng(seed)
    calls = {"n": 0}

    def run(feed):
        out = feed["wav_in"][:, 256:].astype(np.float64)
        calls["n"] += 1
        if noise_db is not None and calls["n"] > 20:
            out = out + rng.normal(0, 1, out.shape) * np.sqrt((out ** 2).mean() / 10 ** (noise_db / 10))
        return [out.astype(np.float32), feed["cache_in_0"], feed["cache_in_1"], feed["cache_in_2"]]

    return run


def test_fastenhancer_blocks_counts_blocks_within_20_db():
    clip = (np.sin(np.arange(40 * 256) * 0.05) * 0.3).astype(np.float32)
    feed = {"wav_in": np.zeros((1, 512), np.float32)}
    nm._FE_CLIPS[id(feed["wav_in"])] = clip
    ref = _toy_enhancer(None)
    assert nm.fastenhancer_blocks(ref, _toy_enhancer(None), [feed], None) == 1.0
    assert nm.fastenhancer_blocks(ref, _toy_enhancer(30.0), [feed], None) == 1.0  # 30 dB under: within 20 dB
    share = nm.fastenhancer_blocks(ref, _toy_enhancer(10.0), [feed], None)  # 10 dB under from call 21 of 40 on
    assert abs(share - 20 / 40) <= 1 / 40
