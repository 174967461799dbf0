"""Low-dimensional regression scores (a mean opinion score, a quality rating) judged per sample.

Why: a score output is a few numbers per sample on one scale (speechmos's PLCMOS: one MOS per
call, rank 0; DNSMOS P.835: ``[N, 3]`` SIG/BAK/OVRL). Its values share a large offset (every MOS
lies in 1–5), so the vector of scores over the held-out feeds is nearly parallel to the all-ones
vector and a 0.1–0.4 MOS error barely turns it: PLCMOS A8W8 agreed with float on 0.875 of 32 clips
(within 0.1 MOS) at a pooled cosine of 0.9993, DNSMOS MXFP8_E4M3 on 0.406 at 0.9991; even the
cosine of the centred values passed (PLCMOS A8W8 0.983; bench/RESULTS.md, "More models outside
the zoo, fifth round"). The bad rows were a few samples off while most stayed close, so the judgement
is per sample: the share of samples every value of which stays within :data:`TOLERANCE` of float's
spread over the samples (per column: the range of its central 90 %, :func:`spread`), held against
the family's top-1 floor.

Recognized by structure and data, never by names (:func:`score_values`): at most :data:`MAX_SCORES`
values per sample (rank 0: one per feed; rank 1: one sample of ``k``; rank 2: ``[rows, k]``), not a
probability (float's values not all within [0, 1]: a sigmoid's or softmax's output is judged by its
thresholds or arg-max elsewhere), and, where the graph's head reads as class scores
(``class_scores.class_like_outputs``), on a positive scale (no value ≤ 0: logits straddle zero, a
score scale does not).

**Rows that are entities, not a batch** (:attr:`ScoreAgreement.entity_rows`): a graph model's
per-node regression (caustic-nmr's ``pred_mean [num_residues, 6]``: six chemical shifts per
residue of a peptide) has a leading axis whose length is its input's, not a batch's: it differs
from feed to feed (10-24 residues on the bench's peptides). Each row is one entity a user reads
(a residue's shifts), so it is judged per row as a sample is, and not capped at :data:`MAX_ROWS`:
a protein of 65 residues or more fell out of this reading and was judged by its cosine alone
(BF16 0.99999 on the peptides, where 0.13 of its shifts are off by more than 0.3 ppm). The cap
stays where the rows are as many on every feed (a detector's anchors, ``[896, 16]``), and a
one-column ``[T, 1]`` is left to a curve's reading (analysis/curves.py). The tolerance is the one
above, per column over every row of every feed: the quantity's own range over the entities
(caustic's carbonyl C: 4.0 ppm from the 5th to the 95th percentile over 122 residues of 8 peptides,
so 0.2 ppm; CA 12.2 ppm, 0.6 ppm; a 13C assignment matches within 0.3 ppm). Measured there without
repair, it gives the verdicts the users' 0.3 ppm gives on every preset (bench/RESULTS.md, seqreads2).

The tolerance, from data: the speechmos packages' results are read to one decimal, so 0.1 MOS is
the error that changes a verdict; float's spread of a MOS over varied clips is about 2 MOS (the
speech mixes of 0–35 dB SNR, clipped, low-passed, packet-lossy: RESULTS.md's section of this
branch gives the measured spreads), so 0.1 MOS is 0.05 of it. A spread of zero (one sample, or a
constant output) leaves nothing to judge.

Why the central 90 % and not max − min: one extreme clip sets max − min. On AECMOS's 28 floor
samples (48 feeds: 8 held-out + 20 calibration) one clip widened the echo MOS's max − min to 3.68
where the other 27 spanned about 2.3 (the bench's 32 held-out clips: 2.41), so the tolerance was
0.18 MOS, 3 clips off by 0.1-0.21 MOS counted as 1, and MXFP8_E4M3 "held" at 0.964 while 4 of 32
held-out clips were off by more than 0.1 MOS (bench/RESULTS.md, "Speech-quality scores, second
round"). The 5th-95th percentile range is 2.31 there (2.24 on the 32 clips): 2 counted, broken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["CENTRAL", "MAX_ROWS", "MAX_SCORES", "TOLERANCE", "ScoreAgreement", "entity_values", "score_values", "spread_of"]

#: values per sample a score output may have (DNSMOS P.835: 3; AECMOS: 4)
MAX_SCORES = 8
#: rows per feed of a rank-2 score output (a batch of samples, not a list of candidates)
MAX_ROWS = 64
#: the error a sample may keep, as a share of float's spread of that value over the samples (module docstring)
TOLERANCE = 0.05


def score_values(r: np.ndarray) -> np.ndarray | None:
    """``r`` as ``[samples, values]`` where its shape is a score output's (module docstring), else None."""
    r = np.asarray(r)
    if not np.issubdtype(r.dtype, np.floating) or r.ndim > 2:
        return None
    if r.ndim == 0:
        return r.reshape(1, 1)
    if r.ndim == 1:
        return r.reshape(1, -1) if 1 <= r.shape[0] <= MAX_SCORES else None
    return r if 1 <= r.shape[1] <= MAX_SCORES and 1 <= r.shape[0] <= MAX_ROWS else None


def entity_values(r: np.ndarray) -> np.ndarray | None:
    """``r`` where it may be a per-entity regression of more than :data:`MAX_ROWS` rows (module
    docstring, "Rows that are entities"): a float ``[rows, k]`` of 2 to :data:`MAX_SCORES` columns;
    whether its rows are entities the feeds' row counts say (:attr:`ScoreAgreement.entity_rows`)."""
    r = np.asarray(r)
    ok = np.issubdtype(r.dtype, np.floating) and r.ndim == 2 and r.shape[0] > MAX_ROWS and 2 <= r.shape[1] <= MAX_SCORES
    return r if ok else None


#: the central share of float's values whose range is the spread (module docstring)
CENTRAL = 0.90


def spread_of(values: np.ndarray) -> np.ndarray:
    """Per column of ``values [samples, k]``: the range of the central :data:`CENTRAL` share of
    float's values (5th to 95th percentile, interpolated): one extreme sample does not set it."""
    tail = 50.0 * (1.0 - CENTRAL)
    percentile = np.nanpercentile if np.isnan(values).any() else np.percentile  # NaN: values float leaves undefined
    low, high = percentile(values, [tail, 100.0 - tail], axis=0)
    return np.nan_to_num(high - low)  # a column float never defines: no spread


@dataclass
class ScoreAgreement:
    """Per-sample agreement of a score output, collected feed by feed (held-out, then calibration)."""

    refs: list[np.ndarray] = field(default_factory=list)
    gots: list[np.ndarray] = field(default_factory=list)
    #: per feed, the rows a sibling two-class head gives the object (analysis/row_gates.py), or None
    keeps: list[np.ndarray | None] = field(default_factory=list)
    #: False once a feed's values are not a score output's
    valid: bool = True
    #: per feed, the rows (a rank-2 output's leading axis): more than :data:`MAX_ROWS` are read only as entities
    rows: list[int] = field(default_factory=list)

    def add(self, r: np.ndarray, g: np.ndarray, keep: np.ndarray | None = None, undefined: np.ndarray | None = None) -> None:
        """One feed's float and quantized values; ``keep``: the rows that are read (a gated regression:
        analysis/row_gates.py), None where every row is; ``undefined``: the values float leaves
        non-finite (a residue without that atom), left out of the judgement (NaN here, on both sides)."""
        rr, gg = score_values(r), score_values(g)
        if rr is None and gg is None:
            rr, gg = entity_values(r), entity_values(g)
        if rr is None or gg is None or rr.shape != gg.shape or (self.refs and rr.shape[1] != self.refs[0].shape[1]):
            self.valid = False
            return
        self.rows.append(rr.shape[0])
        rr, gg = rr.astype(np.float64), gg.astype(np.float64)
        if undefined is not None:
            hole = np.asarray(undefined, bool).reshape(rr.shape)
            rr[hole] = gg[hole] = np.nan
        if np.isfinite(rr).all() and np.isfinite(gg).all() or undefined is not None and np.isfinite(gg[~hole]).all():
            self.refs.append(rr)
            self.gots.append(gg)
            self.keeps.append(None if keep is None or keep.shape != (rr.shape[0],) else np.asarray(keep, bool))

    @property
    def entity_rows(self) -> bool:
        """Whether the rows are entities, not a batch: their count differs between the feeds (a
        residue, atom or node axis as long as the input's); read so, more than :data:`MAX_ROWS` rows are judged."""
        return len(set(self.rows)) > 1

    @property
    def gated(self) -> bool:
        """Whether every feed came with the rows that are read (then only those are judged)."""
        return bool(self.keeps) and all(k is not None for k in self.keeps)

    def is_scores(self, positive: bool) -> bool:
        """Whether float's values read as scores on one scale: not all in [0, 1] (a probability), and
        all above zero where ``positive`` (the head reads as class scores: logits straddle zero)."""
        if not self.valid or not self.refs or (max(self.rows) > MAX_ROWS and not self.entity_rows):
            return False  # many rows, as many on every feed: candidates or anchors, not samples
        r = np.concatenate(self.refs)
        if float(np.nanmin(r)) >= 0.0 and float(np.nanmax(r)) <= 1.0:
            return False
        return not positive or float(np.nanmin(r)) > 0.0

    def judge(self) -> tuple[float, int, int, float] | None:
        """``(share of samples within tolerance, samples, samples off, worst error / spread)``; None
        where float's values do not spread (nothing to hold an error against). A gated output
        (:attr:`gated`) is judged on the rows that are read, its spread taken over every row (the
        scale of the quantity: analysis/row_gates.py)."""
        r, g = np.concatenate(self.refs), np.concatenate(self.gots)
        spread = spread_of(r)
        if r.shape[0] < 2 or not (spread > 0).any():
            return None
        if self.gated:
            read = np.concatenate([k for k in self.keeps if k is not None])
            r, g = r[read], g[read]
            if r.shape[0] == 0:
                return None
        defined = ~np.isnan(r).all(axis=1)  # rows float defines no value of are no samples
        r, g = r[defined], g[defined]
        if r.shape[0] == 0:
            return None
        live = spread > 0
        rel = np.abs(g - r)[:, live] / spread[live]
        off = int(np.sum((rel > TOLERANCE).any(axis=1)))  # an undefined value (NaN) is never off
        return (r.shape[0] - off) / r.shape[0], r.shape[0], off, float(np.nanmax(rel, initial=0.0))
