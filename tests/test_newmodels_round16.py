"""bench/newmodels.py's sixteenth round reads two of madmom's models through the package's decoders, ported because
madmom does not import here (its Cython parts are unbuilt): ConditionalRandomField.process (the chord CRFs over the
chord CNN's features and the deep chroma) and NotePeakPickingProcessor's defaults (the piano-note BRNN). Each port is
held against an independent reference: the CRF's best path against every path scored by brute force, the note
picking against the events madmom's combine_events('left') keeps, written out by hand."""

from __future__ import annotations

import itertools

import numpy as np

from bench.newmodels import _crf_viterbi, _madmom_notes


def _path_score(crf: dict[str, np.ndarray], obs: np.ndarray, path: tuple[int, ...]) -> float:
    """madmom's CRF score of one label path as its process() computes it: its Viterbi starts from ``pi`` and takes a
    transition ``A`` into the first step too (so ``pi`` scores a state before it, the best one), ``tau`` at the end,
    ``A`` between steps, ``c + x W`` at each step."""
    s = max(crf["pi"][k] + crf["A"][k, path[0]] for k in range(len(crf["pi"]))) + crf["tau"][path[-1]]
    s += sum(crf["c"][y] + obs[i] @ crf["W"][:, y] for i, y in enumerate(path))
    return float(s + sum(crf["A"][a, b] for a, b in zip(path, path[1:])))


def test_crf_viterbi_is_the_best_path():
    rng = np.random.default_rng(0)
    for _ in range(5):
        crf = {"pi": rng.normal(size=3), "tau": rng.normal(size=3), "c": rng.normal(size=3),
               "A": rng.normal(size=(3, 3)), "W": rng.normal(size=(4, 3))}
        obs = rng.normal(size=(5, 4))
        best = max(itertools.product(range(3), repeat=5), key=lambda p: _path_score(crf, obs, p))
        assert tuple(int(y) for y in _crf_viterbi(crf, obs)) == best


def test_note_picking_merges_within_30_ms_per_pitch():
    act = np.zeros((40, 88), np.float32)
    act[[10, 11, 12, 13, 14, 30], 40] = 0.9  # 10-13 within 30 ms of 10 (kept); 14 starts a new note; 30 another
    act[11, 41] = 0.5  # exactly at the threshold: a note
    act[20, 42] = 0.49  # below it: none
    assert _madmom_notes(act) == [40 * 1_000_000 + 10, 40 * 1_000_000 + 14, 40 * 1_000_000 + 30, 41 * 1_000_000 + 11]
