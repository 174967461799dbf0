"""A centre-point heat map read by its peaks: a cell equal to its 3×3 neighbourhood's max, at a score.

Why: lineless_table_rec's LORE cell detector (bench/newmodels.py, ``lore_detect``) writes ``hm``, logits whose
background sits near −3·10⁴ and whose cells' centres sit near 0. Its package decodes it as CenterNet does:
``sigmoid(hm)``, a 3×3 max-pool NMS (**a cell is a peak where it equals its neighbourhood's max**), the top
3 000, score ≥ 0.15. Under A8W8, repair's 16-bit rung held the declared ``logits`` reading (the objects its
thresholds keep, analysis/threshold_cells.py) at F1 0.992 while the package's peaks kept F1 0.837: the output
Conv's 16-bit step over the background's range (~0.9 logit) rounds a peak's neighbours to its code, and each
tie is one more peak (float's 205 peaks on 8 pages became 285; bench/RESULTS.md, "LORE A8W8: why repair does
not reach the output Conv"). Objects cannot see a tie; peaks can. The graph cannot show that a map is read
so (its max-pool is the package's), so the user declares it (``--floor-reading hm=peaks``,
config/floor_readings.py).

How the map is read: every axis but the last two indexes maps (batch, channel: each channel's peaks are
its own class's); the last two are the map's rows and columns. A peak is a cell whose value equals the max
of its 3×3 neighbourhood (cells outside the map do not count) and whose sigmoid score is at least the
score: the decoders' max-pool NMS, ties included, as they keep them. Logits or probabilities are told by
float's values: a map whose float values all lie in [0, 1] over the feeds judged is probabilities (a
sigmoid in the graph: CenterFace's ``537``), any other is logits (its reader applies the sigmoid); a heat
map's logits have a background far below 0, so they never all lie in [0, 1]. The peaks are found on the
output's own values (the sigmoid is monotone, so the same cells), the score compared in the output's
domain (the score's logit for logits). Ties a reader's sigmoid adds by saturating (float32 at logits over
~17, CenterNet's clamp at 1 − 10⁻⁴) are not counted: they are the reader's, in float and quantized alike.

What agrees: float's peaks are matched one to one with the quantized model's in the same map within one
cell (the 3×3 neighbourhood; the package's own F1 matches within 1.5 cells, the same cells): first those
at the same cell, then those at each of the 8 neighbours in turn. A float peak with no match is lost, a
quantized one with none invented; the decisions are the peaks of both, the kept ones the matched of both,
so their share is the peaks' F1 (2·matched / (float's + quantized's)). Each channel (axis −3) is judged
alone and the worst is the verdict's: a channel is one class of objects, and its reader may read one alone
(lore_detect's package reads channel 0, cell centres, 205 peaks on 8 pages; channel 1 has 5 986, and pooled
they held the 16-bit rung at 0.990 while channel 0 kept 0.837). Where no score is declared the F1 is
pooled over :data:`~onnxptq.config.floor_readings.PEAK_SCORES` (0.1-0.5, as threshold_cells.py judges a
band): a reader's threshold anywhere in it; the decisions counted are the lowest score's peaks, the most
there are, each scored by the band's F1. The share is held against the top-1 floor with the evidence rule
(floor._judge_declared_peaks).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..errors import UsageError

__all__ = ["channels", "is_probabilities", "peak_mask", "peaks_agree", "peak_maps"]

#: the 8 neighbours a peak may move to and still match, nearest (edge-sharing) first
_NEIGHBOURS = ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1))


def peak_maps(name: str, values: np.ndarray) -> np.ndarray:
    """``values`` of output ``name`` as ``[maps, H, W]`` float64 (module docstring); raises
    :class:`UsageError` naming the output and its shape where it has fewer than 2 axes or a map
    axis of 1 (a vector or a row has no 3×3 neighbourhood: not a heat map)."""
    arr = np.asarray(values)
    if arr.ndim < 2 or arr.shape[-1] < 2 or arr.shape[-2] < 2:
        raise UsageError(f"floor_output_reading declares output {name!r} peaks, but its shape {tuple(arr.shape)} is no "
                         "heat map: a peaks reading needs its last two axes rows and columns of at least 2 "
                         "(e.g. [N, C, H, W]); declare 'logits' or 'values' for other outputs")
    return arr.reshape(-1, arr.shape[-2], arr.shape[-1]).astype(np.float64)


def is_probabilities(refs: Sequence[np.ndarray]) -> bool:
    """Whether float's maps ``refs`` are probabilities (all their values in [0, 1]) rather than logits."""
    return all(float(np.min(r)) >= 0.0 and float(np.max(r)) <= 1.0 for r in refs if np.asarray(r).size)


def peak_mask(maps: np.ndarray, threshold: float) -> np.ndarray:
    """The peaks of ``maps`` ``[maps, H, W]``: cells equal to their 3×3 neighbourhood's max and at least
    ``threshold`` (in the maps' own domain). A cell that is not finite is no peak."""
    pad = np.pad(maps, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    h, w = maps.shape[1:]
    most = np.max([pad[:, dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)], axis=0)
    return np.isfinite(maps) & (maps == most) & (maps >= threshold)


def _matched(ref: np.ndarray, got: np.ndarray) -> int:
    """Float's peaks ``ref`` matched one to one with ``got``'s within one cell (module docstring)."""
    ref, got = ref.copy(), got.copy()
    same = ref & got
    count = int(same.sum())
    ref &= ~same
    got &= ~same
    h, w = ref.shape[1:]
    for dy, dx in _NEIGHBOURS:
        if not ref.any() or not got.any():
            break
        # a float peak at (y, x) meets a quantized one at (y + dy, x + dx): one shift is one to one
        rs = ref[:, max(0, -dy):h - max(0, dy), max(0, -dx):w - max(0, dx)]
        gs = got[:, max(0, dy):h - max(0, -dy), max(0, dx):w - max(0, -dx)]
        hit = rs & gs
        count += int(hit.sum())
        rs &= ~hit  # views: clears them in ref and got
        gs &= ~hit
    return count


def channels(values: np.ndarray) -> int:
    """The channels of a heat map: its third axis from the end (1 for a single ``[H, W]`` map)."""
    return int(np.shape(values)[-3]) if np.ndim(values) >= 3 else 1


def peaks_agree(name: str, reference: np.ndarray, candidate: np.ndarray, scores: Sequence[float],
                probabilities: bool, channel: int | None = None) -> tuple[int, int] | None:
    """``(kept, decisions)`` of one feed's output ``name`` (module docstring): the peaks at the lowest of
    ``scores`` of float and of the candidate, and as many of them times the peaks' F1 pooled over
    ``scores`` (rounded); None where neither has a peak at any score. A candidate that is not finite
    keeps none of float's. ``channel``: that channel's maps alone (axis −3; None: every map). Float's and the
    candidate's shapes are one (floor._judge_declared skips others)."""
    if channel is not None and np.ndim(reference) >= 3:
        reference, candidate = np.asarray(reference)[..., channel, :, :], np.asarray(candidate)[..., channel, :, :]
    r, g = peak_maps(name, reference), peak_maps(name, candidate)
    cuts = [s if probabilities else math.log(s / (1.0 - s)) for s in sorted(scores)]
    if not np.isfinite(g).all():
        lost = int(peak_mask(r, cuts[0]).sum())
        return (0, lost) if lost else (0, 1)
    matched = peaks = 0
    lowest = None
    for cut in cuts:
        a, b = peak_mask(r, cut), peak_mask(g, cut)
        n = int(a.sum()) + int(b.sum())
        lowest = n if lowest is None else lowest
        matched, peaks = matched + 2 * _matched(a, b), peaks + n
    if not peaks or not lowest:
        return None
    return int(round(lowest * matched / peaks)), lowest
