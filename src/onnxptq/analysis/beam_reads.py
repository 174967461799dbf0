"""A decoder step's next-token scores read by a beam search: each row's top-k, not its top-1.

Why: arabic-name-romanizer's Persian decoder is one GRU step with attention (``prefix`` ids →
``logprobs [B, 148]`` over the same 148 characters), called inside the package's beam search of
width 2, which extends every beam row by its best *two* next characters. Under MXFP8_E4M3 each
row's top-1 kept float's on 0.982 of the floor's rows, so the floor (top-1 of class rows) held,
while float's top two were kept on only 0.871 of 512 rows: the row was silent (bench/RESULTS.md,
"The fifteenth round of outside models"). The Arabic decoder at the same preset broke its top-1
and was repaired.

What the graph shows and what it cannot: the output scores the vocabulary its integer input reads
(analysis/token_heads.py, ``NEXT``: the class count is the row count of the table that embeds the
``prefix`` ids), so its caller feeds a chosen token back: greedy decoding reads the top-1, a beam
search of width K the top K, sampling the whole distribution. The beam width is the caller's and
no part of the graph. So:

- **said** (:func:`beam_advisory`): where a rank-2 next-token output keeps float's top-1 but not
  float's top two on as many rows as the top-1 floor asks (2, the narrowest beam), a warning says
  so, with the figure, and how to declare the reading; never repaired on its own, as greedy callers
  read the top-1 the floor already judges (the zoo's romanizer decoder). Said only where the rows
  lost are unlikely at the floor's own rate (analysis/evidence.py): 2 of 64 held-out rows (0.969)
  warned on the Persian decoder under A16W8 and BFP16, whose 512 other rows kept 0.990 / 0.982;
  13 of 64 under MXFP8_E4M3 (0.797; 0.871 of 512) is said;
- **judged** where the user declares it (``--floor-reading OUTPUT=topk:K``,
  analysis/declared_readings.py): each row keeps float's top-1 and float's set of the top K
  (:func:`top_k_rows`), held against the top-1 floor by the same evidence (``floor._judge_declared_top_k``);
  repair answers a break.

A row agrees when float's best class is the quantized model's best and float's K best are its K
best (in any order below the first): at K = 2 exactly "the top two next characters equal float's".
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .evidence import surely_below

__all__ = ["BEAM", "beam_advisory", "beam_undecided", "top_k_rows"]

#: the narrowest beam, whose reading the warning checks
BEAM = 2


def top_k_rows(reference: np.ndarray, candidate: np.ndarray, k: int) -> tuple[int, int]:
    """``(rows that agree, rows)`` of one feed's ``[..., C]`` scores (module docstring); ``k`` is capped at ``C``."""
    r = np.asarray(reference, np.float64).reshape(-1, reference.shape[-1])
    g = np.asarray(candidate, np.float64).reshape(-1, candidate.shape[-1])
    k = max(1, min(int(k), r.shape[-1]))
    top = np.argmax(r, -1) == np.argmax(g, -1)
    if k == 1:
        return int(top.sum()), r.shape[0]
    best_r = np.sort(np.argpartition(-r, k - 1, axis=-1)[:, :k], -1)
    best_g = np.sort(np.argpartition(-g, k - 1, axis=-1)[:, :k], -1)
    return int((top & (best_r == best_g).all(-1)).sum()), r.shape[0]


def _rows(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> tuple[int, int]:
    """``(rows that keep float's top-1 and top two, rows)`` over the feeds' finite rank-2 scores."""
    agree = rows = 0
    for r, g in zip(reference, candidate):
        r, g = np.asarray(r), np.asarray(g)
        if r.ndim != 2 or r.shape != g.shape or r.shape[-1] <= BEAM or not (np.isfinite(r).all() and np.isfinite(g).all()):
            continue
        a, n = top_k_rows(r, g, BEAM)
        agree, rows = agree + a, rows + n
    return agree, rows


def beam_undecided(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], top1: float) -> bool:
    """Whether the held-out rows keep float's top two on a share below ``top1`` by losses that could be
    chance: the calibration feeds' rows would judge them too (``floor.Verdict.wants_calibration_feeds``)."""
    agree, rows = _rows(reference, candidate)
    return bool(rows) and agree / rows < top1 and not surely_below(agree, rows, top1)


def beam_advisory(name: str, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], top1: float,
                  seen: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] = ((), ())) -> str | None:
    """The warning on a rank-2 next-token output whose rows keep float's top-1 but lose float's top two
    (module docstring), or None: said where the rows lost say the share is below ``top1``
    (:func:`onnxptq.analysis.evidence.surely_below`: on 64 rows at 0.97, 5 lost; a lone lost row among
    few, or 2 of 64, could be chance), on the held-out feeds' rows or on them and the calibration
    feeds' rows ``seen`` (float's, the candidate's) together. What it cannot see: arabic-name-romanizer's
    Arabic decoder under MXFP8_E4M3, its top-1 repaired, keeps the top two on 59 of 64 held-out rows
    (0.922, as a model at 0.95 does on 22 % of draws) and 183 of 192 with the calibration rows (0.953),
    so nothing is said, where 512 other rows read 0.906 (by point estimate on the 64, it was said)."""
    agree, rows = _rows(reference, candidate)
    if not rows:
        return None
    where = ""
    if not surely_below(agree, rows, top1):
        more, more_rows = _rows(*seen)
        if not more_rows or not surely_below(agree + more, rows + more_rows, top1):
            return None
        agree, rows, where = agree + more, rows + more_rows, f" (the held-out and {len(seen[0])} calibration samples)"
    share, lost = agree / rows, rows - agree
    return (f"next-token scores over the tokens an integer input reads (a decoder step: analysis/token_heads.py); a beam "
            f"search of width {BEAM} extends each row by its best {BEAM}: float's top {BEAM} kept on {share:.4f} of "
            f"{rows} rows{where} ({lost} changed), below the top-1 floor {top1:g}. If a beam search "
            f"calls this model, declare it (--floor-reading {name}=topk:K, K the beam width) and the floor judges "
            f"and repairs it; a greedy caller reads the top-1 only")
