"""Per-tensor streaming statistics for calibration.

Calibration is one pass over the data (see DESIGN.md): each batch a tensor produces is folded into
a fixed-size summary and dropped, so memory is O(tensors x bins) and never O(samples). Every
collector here therefore has

- ``update(batch)``: fold one array in (any shape, any float dtype; NaN and +-Inf are *counted*
  and otherwise ignored, because one bad value would otherwise poison a whole range), and
- ``merge(other)``: fold another collector of the same kind in, so calibration can be split over
  workers and the partial results combined.

The kinds:

:class:`MinMaxCollector`
    running min/max plus the sums of per-batch minima/maxima (the reference tool's "moving
    average" is the mean of per-batch extremes) and the finite-value count. No moments: their
    float64 pass over every tensor cost more than the min/max themselves on PP-OCRv4 rec, and the
    Distribution method takes them from the histogram as the reference does.

:class:`HistogramCollector`
    everything :class:`MinMaxCollector` keeps plus one *signed* histogram on a grid that is
    symmetric about zero with zero on a bin edge. That single layout serves every histogram method:
    folding it at zero gives exactly the histogram of ``|x|`` that the reference Percentile method
    uses (same bin width), and it is exactly onnxruntime's signed histogram for Entropy. The grid
    grows by whole bins of the same width on both sides when a later batch exceeds it (as
    onnxruntime does), and once it would exceed ``max_bins`` adjacent bins are merged in pairs (the
    width doubles), which is exact and keeps the size bounded however wide later data is.

:class:`TailCollector`
    what Percentile needs at high percentiles, without a histogram pass over every value: the
    extremes, the count, the grid geometry a :class:`HistogramCollector` would have reached, and
    the exact largest and smallest values seen (per batch the runner fetches only the top-k and
    bottom-k, reduced inside onnxruntime). The percentile bin lies in that tail, so the histogram
    percentile is reproduced from it (:func:`onnxptq.calibration.methods.compute_range`), and
    whether the retained tail was deep enough is known, not guessed.

:class:`TailHistogramCollector`
    a :class:`TailCollector` whose grid also counts every value (the tensor fetched whole), for the
    few tensors whose percentile range may be replaced by the window of least error on the counts.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol, runtime_checkable

import numpy as np

log = logging.getLogger(__name__)

__all__ = [
    "Collector",
    "CollectorFactory",
    "HistogramCollector",
    "MinMaxCollector",
    "SignedHistogram",
    "TailCollector",
    "TailHistogramCollector",
    "as_float_array",
]


def as_float_array(batch: Any, name: str = "tensor") -> np.ndarray:
    """Return ``batch`` flattened as a float32/float64 array (float16 is widened to float32).

    Why: NumPy reductions on float16 are slow and lose precision; integer or bool tensors have no
    meaningful quantization range, so they are refused with the tensor named.
    """
    arr = np.asarray(batch)
    if arr.dtype == np.float64 or arr.dtype == np.float32:
        return arr.reshape(-1)
    if arr.dtype.kind == "f" or arr.dtype.name in ("bfloat16",):
        return arr.astype(np.float32).reshape(-1)
    raise TypeError(f"calibration of {name!r}: expected a floating-point array, got dtype {arr.dtype}")


@runtime_checkable
class Collector(Protocol):
    """What the runner and :func:`onnxptq.calibration.methods.compute_range` rely on."""

    count: int
    nan_count: int
    inf_count: int

    def update(self, batch: np.ndarray) -> None:
        """Fold one batch of values in."""

    def merge(self, other: Any) -> None:
        """Fold another collector of the same kind in (in place)."""


class CollectorFactory(Protocol):
    """A callable returning a fresh collector (the runner makes one per tensor)."""

    def __call__(self) -> Collector: ...


#: How many calibration batches must reach a value before a clipping range method (percentile) has
#: to keep it: ``MinMaxCollector.batch_highs``/``batch_lows`` hold that many per-batch extremes.
RECURRING_BATCHES = 3


class MinMaxCollector:
    """Running extremes and per-batch extreme sums of the finite values seen.

    ``min``/``max`` are ``+inf``/``-inf`` until a finite value is seen. ``batch_min_sum`` and
    ``batch_max_sum`` over ``batches`` (batches that held at least one finite value) give the
    reference tool's moving-average range without storing per-batch values. ``batch_highs`` /
    ``batch_lows`` are the :data:`RECURRING_BATCHES` largest per-batch maxima / smallest per-batch
    minima (ascending): what more than one batch reaches is a recurring value, not a one-off
    outlier (``methods.compute_range``'s ``recurring`` option).
    """

    def __init__(self, name: str = "tensor") -> None:
        self.name = name
        self.min = math.inf
        self.max = -math.inf
        self.count = 0
        self.nan_count = 0
        self.inf_count = 0
        self.batches = 0
        self.batch_min_sum = 0.0
        self.batch_max_sum = 0.0
        self.skipped_batches = 0
        self.batch_highs: list[float] = []
        self.batch_lows: list[float] = []
        #: the smallest non-zero per-batch peak magnitude max(|min|, |max|) (+inf before one): how
        #: quiet the quietest calibration batch is against the whole range (pipeline/quiet_batches.py;
        #: an all-zero batch is held exactly by any grid and says nothing of the scale)
        self.quietest_peak = math.inf

    # -- updating ---------------------------------------------------------------------------
    def update(self, batch: np.ndarray) -> None:
        """Fold ``batch`` in; NaN/Inf are counted and skipped."""
        self._update_finite(*self._finite(batch))

    def _finite(self, batch: np.ndarray) -> tuple[np.ndarray, float | None, float | None]:
        """``(x, lo, hi)``: the flattened finite values of ``batch`` and their extremes (None where
        there are none); counts the others.

        The min/max of the raw array reveal non-finite values (NaN propagates, Inf is extreme), so
        the usual all-finite case costs no extra mask pass, and they are its extremes: callers take
        no second min/max pass (the histogram tensors are fetched whole every feed: PP-OCRv4 rec
        A8W8, 16 MinMSE tensors of ~230 K values, 56 feeds; the second pass was a fifth of their
        folding).
        """
        x = as_float_array(batch, self.name)
        if x.size == 0:
            return x, None, None
        lo, hi = float(x.min()), float(x.max())
        if math.isfinite(lo) and math.isfinite(hi):
            return x, lo, hi
        nan = np.isnan(x)
        inf = np.isinf(x)
        self.nan_count += int(nan.sum())
        self.inf_count += int(inf.sum())
        x = x[~(nan | inf)]
        return (x, float(x.min()), float(x.max())) if x.size else (x, None, None)

    def _update_finite(self, x: np.ndarray, lo: float | None, hi: float | None) -> None:
        """Fold in :meth:`_finite`'s ``(x, lo, hi)`` (nothing where ``x`` is empty)."""
        if lo is not None and hi is not None:
            self.update_extremes(lo, hi, count=int(x.size))

    def update_extremes(self, lo: float, hi: float, count: int = 0) -> None:
        """Fold in a batch known only by its extremes (in-graph ReduceMin/ReduceMax).

        Non-finite extremes mean the batch held NaN/Inf; without the tensor its finite values are
        unknown, so the whole batch is skipped and counted in ``skipped_batches``.
        """
        if not (math.isfinite(lo) and math.isfinite(hi)):
            self.skipped_batches += 1
            return
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)
        if lo != 0.0 or hi != 0.0:
            self.quietest_peak = min(self.quietest_peak, max(abs(lo), abs(hi)))
        self.batch_min_sum += lo
        self.batch_max_sum += hi
        self._keep_batch_extremes([hi], [lo])
        self.batches += 1
        self.count += count

    def merge(self, other: MinMaxCollector) -> None:
        """Fold ``other`` in: extremes, sums and counts all combine exactly."""
        if not isinstance(other, MinMaxCollector):
            raise TypeError(f"cannot merge {type(other).__name__} into {type(self).__name__} ({self.name!r})")
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count
        self.nan_count += other.nan_count
        self.inf_count += other.inf_count
        self.batches += other.batches
        self.batch_min_sum += other.batch_min_sum
        self.batch_max_sum += other.batch_max_sum
        self.skipped_batches += other.skipped_batches
        self.quietest_peak = min(self.quietest_peak, getattr(other, "quietest_peak", math.inf))
        self._keep_batch_extremes(other.batch_highs, other.batch_lows)

    def _keep_batch_extremes(self, highs: list[float], lows: list[float]) -> None:
        """Fold per-batch maxima/minima into the kept few (exact under merge: the k largest of a
        union are among the k largest of each part)."""
        self.batch_highs = sorted(self.batch_highs + list(highs))[-RECURRING_BATCHES:]
        self.batch_lows = sorted(self.batch_lows + list(lows))[:RECURRING_BATCHES]

    # -- results ----------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        """True when no finite value has been seen."""
        return self.batches == 0

    @property
    def abs_max(self) -> float:
        return max(abs(self.min), abs(self.max)) if not self.empty else 0.0

    def nbytes(self) -> int:
        """Bytes held by array state (none: this collector is a handful of scalars)."""
        return 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, min={self.min}, max={self.max}, count={self.count})"


def _is_pow2_ratio(ratio: float) -> bool:
    """True when ``ratio`` is (to float precision) a power of two >= 1."""
    if ratio < 1.0:
        return False
    e = math.log2(ratio)
    return abs(e - round(e)) < 1e-9


class SignedHistogram:
    """Counts on the grid ``edges[j] = (j - half) * width``, ``j = 0 .. 2*half``.

    Zero is always the middle edge, so the histogram folds exactly into a histogram of ``|x|``
    with the same width. Counts are float64 (merged counts of billions of values stay exact up to
    2**53). ``width == 0`` means "not yet initialised": zeros seen before any non-zero value are
    kept in ``pending_zeros`` and placed once the grid exists.
    """

    def __init__(self, num_bins: int, max_bins: int) -> None:
        if num_bins < 2 or num_bins % 2:
            raise ValueError(f"num_bins must be an even number >= 2, got {num_bins}")
        if max_bins < num_bins:
            raise ValueError(f"max_bins ({max_bins}) must be >= num_bins ({num_bins})")
        self.num_bins = num_bins
        self.max_bins = max_bins
        self.width = 0.0
        self.counts = np.zeros(0, dtype=np.float64)
        self.pending_zeros = 0.0

    # -- geometry ---------------------------------------------------------------------------
    @property
    def half(self) -> int:
        return self.counts.size // 2

    @property
    def threshold(self) -> float:
        """Outer edge: the grid spans ``[-threshold, threshold]``."""
        return self.half * self.width

    @property
    def edges(self) -> np.ndarray:
        return (np.arange(self.counts.size + 1, dtype=np.float64) - self.half) * self.width

    @property
    def centres(self) -> np.ndarray:
        return (np.arange(self.counts.size, dtype=np.float64) - self.half + 0.5) * self.width

    @property
    def total(self) -> float:
        return float(self.counts.sum()) + self.pending_zeros

    # -- growth -----------------------------------------------------------------------------
    def _init(self, amax: float) -> None:
        self.width = 2.0 * amax / self.num_bins
        self.counts = np.zeros(self.num_bins, dtype=np.float64)
        if self.pending_zeros:
            self.counts[self.half] += self.pending_zeros
            self.pending_zeros = 0.0

    def _coarsen(self) -> None:
        """Merge bins in pairs (width doubles); pad one empty bin per side if ``half`` is odd."""
        counts = self.counts
        if self.half % 2:
            counts = np.concatenate(([0.0], counts, [0.0]))
        self.counts = counts.reshape(-1, 2).sum(axis=1)
        self.width *= 2.0

    def _extend(self, k: int) -> None:
        pad = np.zeros(k, dtype=np.float64)
        self.counts = np.concatenate((pad, self.counts, pad))

    def cover(self, amax: float, exact_edge: bool = False) -> None:
        """Grow the grid so that ``[-amax, amax]`` lies inside it.

        Same growth rule as onnxruntime (``floor((amax - T) / width) + 1`` whole bins per side), so
        results agree with it while the grid is below ``max_bins``; beyond, coarsen first.
        ``exact_edge=True`` (merging grids) adds no extra bin when ``amax`` falls on an edge.
        """
        if amax <= 0.0:
            return
        if self.width == 0.0:
            self._init(amax)
            return
        if amax <= self.threshold:
            return
        while True:
            if exact_edge:
                k = max(math.ceil((amax - self.threshold) / self.width - 1e-9), 1)
            else:
                k = int((amax - self.threshold) // self.width) + 1
            if self.counts.size + 2 * k > self.max_bins:
                # Coarsen before the rounding guard below: for a value far outside the grid
                # (1e25 against bins of 1e-3, as damaged data gives) k passes 2**53, where k += 1
                # no longer changes (half + k) * width and the guard would never end.
                self._coarsen()
                continue
            while (self.half + k) * self.width < amax:  # guard against float rounding
                k += 1
            if self.counts.size + 2 * k <= self.max_bins:
                self._extend(k)
                return
            self._coarsen()

    # -- counting ---------------------------------------------------------------------------
    def add(self, x: np.ndarray, amax: float) -> None:
        """Count finite values ``x`` whose largest magnitude is ``amax``."""
        if x.size == 0:
            return
        self.cover(amax)
        if self.width == 0.0:  # all zeros so far
            self.pending_zeros += float(x.size)
            return
        # One multiply-add, a truncating cast and a bincount: several times faster than
        # np.histogram, which dominated calibration time. The values are finite and inside
        # [-t, t] (cover() saw amax), so the index only needs clipping at the right edge, where
        # np.histogram also counts the edge into the last bin.
        n = self.counts.size
        pos = grid_positions(x, n, self.threshold)
        # Truncation toward zero maps the (rounding-induced) tiny negatives to bin 0; the right
        # edge (and rounding just past it) lands in extra bins folded into the last one. No
        # clipping passes over the data.
        # Cast straight to the platform index type: bincount converts anything else to it first
        # (one more pass over the positions); truncation is the same for the positions' range.
        counts = np.bincount(pos.astype(np.intp).ravel(), minlength=n)
        counts[n - 1] += counts[n:].sum()
        self.counts += counts[:n]

    def merge(self, other: SignedHistogram) -> None:
        """Fold ``other`` in.

        Grids that share a width up to a power of two merge exactly (coarsen the finer one, pad
        the narrower one). Otherwise the other histogram is re-binned by linear interpolation of
        its cumulative counts (uniform density within a bin), an error below one bin.
        """
        if other.width == 0.0:
            if self.width == 0.0:
                self.pending_zeros += other.pending_zeros
            else:
                self.counts[self.half] += other.pending_zeros
            return
        other_counts = other.counts.copy()
        other_width = other.width
        if self.width == 0.0:
            zeros = self.pending_zeros
            self.width, self.counts, self.pending_zeros = other.width, other.counts.copy(), 0.0
            self.max_bins = max(self.max_bins, other.max_bins)
            self.counts[self.half] += zeros
            return
        # Make our grid cover other's range (may coarsen); coarsen further when the other grid is
        # coarser by a power of two, so the merge stays exact.
        self.cover(other.threshold, exact_edge=True)
        while other_width / self.width > 1.5 and _is_pow2_ratio(other_width / self.width):
            self._coarsen()
        ratio = self.width / other_width
        if ratio >= 1 and _is_pow2_ratio(ratio):
            factor = int(round(ratio))
            ohalf = other_counts.size // 2
            pad = (-ohalf) % factor
            if pad:
                other_counts = np.concatenate((np.zeros(pad), other_counts, np.zeros(pad)))
            merged = other_counts.reshape(-1, factor).sum(axis=1)
            mhalf = merged.size // 2
            self.counts[self.half - mhalf : self.half + mhalf] += merged
            return
        o_edges = (np.arange(other_counts.size + 1, dtype=np.float64) - other_counts.size // 2) * other_width
        cum = np.concatenate(([0.0], np.cumsum(other_counts)))
        at = np.interp(self.edges, o_edges, cum)
        self.counts += np.diff(at)

    # -- derived histograms -----------------------------------------------------------------
    def folded(self) -> tuple[np.ndarray, np.ndarray]:
        """``(counts, edges)`` of ``|x|`` on ``[0, threshold]`` with the same width (exact)."""
        h = self.half
        counts = self.counts[h:] + self.counts[:h][::-1]
        if self.pending_zeros and counts.size:
            counts = counts.copy()
            counts[0] += self.pending_zeros
        edges = np.arange(h + 1, dtype=np.float64) * self.width
        return counts, edges

    def nbytes(self) -> int:
        return int(self.counts.nbytes)


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def grid_positions(x: np.ndarray, n: int, threshold: float) -> np.ndarray:
    """``x``'s positions on a signed grid of ``n`` bins over ``[-threshold, threshold]`` (bin ``i``
    holds ``[i, i + 1)``): ``x · n / (2 · threshold) + n / 2``, in float32 (one pass, the
    histogram's and the tail collector's bins alike).

    In float64 where the factor ``n / (2 · threshold)`` does not fit a float32: a tensor whose
    values are all subnormal (a weight row of ~1e-40, a dead channel) has a grid a few 1e-43
    wide, the factor overflowed to inf, ``0 · inf`` gave NaN and the cast to bins negative
    numbers, and the histogram raised "'list' argument must have no negative elements" from
    ``np.bincount`` (PP-OCRv4 rec with ``weight_minmse=True``; bench/RESULTS.md, branch
    recmemory). Every grid whose factor fits keeps the float32 arithmetic, bit for bit."""
    factor = n / (2.0 * threshold)
    if factor <= _FLOAT32_MAX:
        return x.astype(np.float32, copy=False) * np.float32(factor) + np.float32(n / 2.0)
    return x.astype(np.float64) * factor + n / 2.0


class HistogramCollector(MinMaxCollector):
    """:class:`MinMaxCollector` plus a bounded, growing :class:`SignedHistogram`.

    ``num_bins`` is the number of signed bins the first non-zero batch is spread over (on
    ``[-max|x|, max|x|]``). ``max_bins`` (default ``4 * num_bins``) bounds the memory: past it the
    grid coarsens instead of growing.
    """

    def __init__(self, num_bins: int = 2048, max_bins: int | None = None, name: str = "tensor") -> None:
        super().__init__(name)
        self.hist = SignedHistogram(num_bins, max_bins if max_bins is not None else 4 * num_bins)

    @property
    def num_bins(self) -> int:
        return self.hist.num_bins

    def update(self, batch: np.ndarray) -> None:
        """Fold ``batch`` in: extremes, moments and histogram counts."""
        x, lo, hi = self._finite(batch)
        if lo is None or hi is None:
            return
        self._update_finite(x, lo, hi)
        self.hist.add(x, max(abs(lo), abs(hi)))

    def merge(self, other: MinMaxCollector) -> None:
        if not isinstance(other, HistogramCollector):
            raise TypeError(
                f"cannot merge {type(other).__name__} into HistogramCollector ({self.name!r}): "
                "a histogram cannot be rebuilt from extremes"
            )
        super().merge(other)
        self.hist.merge(other.hist)

    def nbytes(self) -> int:
        return self.hist.nbytes()

    def __repr__(self) -> str:
        return (
            f"HistogramCollector({self.name!r}, min={self.min}, max={self.max}, count={self.count}, "
            f"bins={self.hist.counts.size}, width={self.hist.width:.6g})"
        )


class PerChannelMinMaxCollector(MinMaxCollector):
    """Running min/max per channel (along ``axis``), plus the global extremes of the base class.

    Used for activations quantized per channel: those read only by depthwise convolutions, where
    a per-channel input scale folds exactly into the depthwise weights, so hardware pays nothing
    for it. Memory is two vectors of the channel count, whatever the number of batches.
    """

    def __init__(self, axis: int = 1, name: str = "tensor") -> None:
        super().__init__(name)
        self.axis = axis
        self.channel_min: np.ndarray | None = None
        self.channel_max: np.ndarray | None = None

    def update(self, batch: np.ndarray) -> None:
        arr = np.asarray(batch)
        x = as_float_array(arr, self.name).reshape(arr.shape)
        if x.size == 0:
            return
        if x.ndim <= self.axis:
            raise ValueError(f"per-channel calibration of {self.name!r}: rank {x.ndim} has no axis {self.axis}")
        moved = np.moveaxis(x, self.axis, 0).reshape(x.shape[self.axis], -1)
        if not np.all(np.isfinite(moved)):
            finite = np.isfinite(moved)
            self.nan_count += int(np.isnan(moved).sum())
            self.inf_count += int(np.isinf(moved).sum())
            lo = np.where(finite, moved, np.inf).min(axis=1)
            hi = np.where(finite, moved, -np.inf).max(axis=1)
        else:
            lo, hi = moved.min(axis=1), moved.max(axis=1)
        self._fold_channels(lo, hi)
        finite_lo, finite_hi = lo[np.isfinite(lo)], hi[np.isfinite(hi)]
        if finite_lo.size:
            self.update_extremes(float(finite_lo.min()), float(finite_hi.max()), count=int(x.size))

    def _fold_channels(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Fold one batch's per-channel extremes into the running ones (same channel count)."""
        if self.channel_min is None:
            self.channel_min, self.channel_max = lo.astype(np.float64), hi.astype(np.float64)
            return
        if lo.shape != self.channel_min.shape:
            raise ValueError(f"per-channel calibration of {self.name!r}: {lo.size} channels after {self.channel_min.size}")
        np.minimum(self.channel_min, lo, out=self.channel_min)
        np.maximum(self.channel_max, hi, out=self.channel_max)

    def update_channel_extremes(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Fold in one batch known by its per-channel extremes (in-graph ReduceMin/ReduceMax).

        A channel whose extremes are not finite held NaN/Inf: it is left out of this batch (its
        finite values are unknown) and the batch counts in ``skipped_batches``.
        """
        lo = np.asarray(lo, dtype=np.float64).reshape(-1)
        hi = np.asarray(hi, dtype=np.float64).reshape(-1)
        ok = np.isfinite(lo) & np.isfinite(hi)
        if not ok.all():
            self.skipped_batches += 1
            lo, hi = np.where(ok, lo, np.inf), np.where(ok, hi, -np.inf)
        self._fold_channels(lo, hi)
        if ok.any():
            self.update_extremes(float(lo[ok].min()), float(hi[ok].max()))

    def merge(self, other: MinMaxCollector) -> None:
        if not isinstance(other, PerChannelMinMaxCollector):
            raise TypeError(f"cannot merge {type(other).__name__} into PerChannelMinMaxCollector ({self.name!r})")
        super().merge(other)
        if other.channel_min is None:
            return
        if self.channel_min is None:
            self.channel_min, self.channel_max = other.channel_min.copy(), other.channel_max.copy()
        else:
            np.minimum(self.channel_min, other.channel_min, out=self.channel_min)
            np.maximum(self.channel_max, other.channel_max, out=self.channel_max)

    def nbytes(self) -> int:
        return 0 if self.channel_min is None else self.channel_min.nbytes * 2


class _ValueBuffer:
    """A growable float32 array filled in place.

    Why: appending each batch's tail with ``np.concatenate`` allocated a new array per batch and
    tensor, which cost more than the in-graph TopK on small tensors (PP-OCRv4 rec: 130 tensors a
    line); keeping the per-batch arrays instead held onnxruntime's output buffers alive (+110 MiB
    at 512 lines). Copying into one buffer does neither.
    """

    __slots__ = ("_data", "size", "limit")

    def __init__(self, limit: int) -> None:
        self._data = np.empty(0, dtype=np.float32)
        self.size = 0
        #: the size the owner trims at: growth stops there unless one append needs more
        self.limit = int(limit)

    @property
    def values(self) -> np.ndarray:
        return self._data[: self.size]

    def append(self, values: np.ndarray) -> None:
        end = self.size + values.size
        if end > self._data.size:
            grown = np.empty(max(end, min(max(2 * self._data.size, 256), self.limit)), dtype=np.float32)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : end] = values
        self.size = end

    def keep_largest(self, count: int) -> float:
        """Drop all but the ``count`` largest values; return the largest value dropped."""
        cut = self.size - count
        part = np.partition(self.values, cut)
        dropped = float(part[:cut].max())
        self._data[:count] = part[cut:]
        self.size = count
        return dropped

    def keep_smallest(self, count: int) -> float:
        """Drop all but the ``count`` smallest values; return the smallest value dropped."""
        part = np.partition(self.values, count - 1)
        dropped = float(part[count:].min())
        self._data[:count] = part[:count]
        self.size = count
        return dropped


class TailCollector(MinMaxCollector):
    """Extremes, count, histogram grid geometry and the exact tails of the values seen.

    Why: a 99.999th percentile of ``N`` values depends only on the grid (which follows the
    per-batch ``max|x|``) and on the ``~1e-5 N`` values beyond it. Histogramming every value in
    NumPy was 60% of PP-OCRv4 rec's calibration time; onnxruntime's ``TopK`` over the same tensor
    costs a fifth of it and nothing but ``k`` values crosses into Python.

    Invariant: every value seen that is ``> top_floor`` is in ``top``, every value ``<
    bottom_ceiling`` is in ``bottom`` (``top_floor`` rises when a batch is cut to its top-k or the
    buffer drops values; likewise ``bottom_ceiling``). So the counts of the histogram bins beyond
    those levels are exact, which is all the percentile needs when it falls there; when it does
    not, :func:`~onnxptq.calibration.methods.compute_range` says so in a warning.

    Memory: at most ``1.25 * capacity`` values per side (plus one batch's), whatever the number
    of batches.
    """

    def __init__(
        self,
        num_bins: int = 2048,
        max_bins: int | None = None,
        tail_fraction: float = 1e-5,
        min_batch_k: int = 64,
        capacity: int = 8192,
        name: str = "tensor",
    ) -> None:
        super().__init__(name)
        if not 0.0 <= tail_fraction < 1.0:
            raise ValueError(f"tail collector of {name!r}: tail_fraction must be in [0, 1), got {tail_fraction}")
        self.grid = SignedHistogram(num_bins, max_bins if max_bins is not None else 4 * num_bins)
        self.tail_fraction = float(tail_fraction)
        self.min_batch_k = int(min_batch_k)
        self.capacity = int(capacity)
        self._trim_at = self.capacity + self.capacity // 4
        self._top = _ValueBuffer(self._trim_at + 2 * self.min_batch_k)
        self._bottom = _ValueBuffer(self._trim_at + 2 * self.min_batch_k)
        self.top_floor = -math.inf
        self.bottom_ceiling = math.inf

    @property
    def num_bins(self) -> int:
        return self.grid.num_bins

    @property
    def batch_divisor(self) -> int:
        """``k = max(min_batch_k, n // batch_divisor)`` values per side per batch of ``n`` values:
        four times the batch's share of the tail, so a batch has to hold four times its share of
        outliers before the cut to its top-k matters."""
        return max(1, int(1.0 / (4.0 * self.tail_fraction))) if self.tail_fraction > 0 else 2**62

    def batch_k(self, n: int) -> int:
        return min(n, max(self.min_batch_k, n // self.batch_divisor))

    def update(self, batch: np.ndarray) -> None:
        """Fold ``batch`` in (NumPy path: graph inputs, or ``minmax_in_graph=False``)."""
        x, lo, hi = self._finite(batch)
        if x.size == 0:
            return
        self._fold(x, lo, hi)

    def _fold(self, x: np.ndarray, lo: float, hi: float) -> None:
        """The batch's ``batch_k`` largest and smallest finite values folded into the tails."""
        n = int(x.size)
        k = self.batch_k(n)
        largest = np.partition(x, n - k)[n - k :] if k < n else x
        smallest = np.partition(x, k - 1)[:k] if k < n else x
        self.update_tails(largest, smallest, n, lo, hi)

    @property
    def top(self) -> np.ndarray:
        """The retained largest values (unordered)."""
        return self._top.values

    @property
    def bottom(self) -> np.ndarray:
        """The retained smallest values (unordered)."""
        return self._bottom.values

    def update_tails(self, largest: np.ndarray, smallest: np.ndarray, n: int, lo: float | None = None,
                     hi: float | None = None, *, ordered: bool = False) -> None:
        """Fold in one batch known by its ``n``, extremes and (up to) ``k`` largest/smallest values.

        ``largest``/``smallest`` hold the whole batch when they have ``n`` values. ``lo``/``hi``
        default to the extremes of the tails. ``ordered=True`` says ``largest`` is descending and
        ``smallest`` ascending (TopK ``sorted=1``), so extremes and levels are read at the ends.
        Non-finite extremes mean the batch held NaN/Inf: skipped whole, as in-graph min/max does.
        """
        largest = np.asarray(largest, dtype=np.float32).reshape(-1)
        smallest = np.asarray(smallest, dtype=np.float32).reshape(-1)
        if ordered:
            lo = float(smallest[0]) if lo is None else lo
            hi = float(largest[0]) if hi is None else hi
            if np.isnan(largest).any() or np.isnan(smallest).any():  # TopK may place a NaN anywhere
                lo = math.nan
        else:
            lo = float(smallest.min()) if lo is None else lo
            hi = float(largest.max()) if hi is None else hi
        if not (math.isfinite(lo) and math.isfinite(hi)):
            self.skipped_batches += 1
            return
        self.update_extremes(lo, hi, count=int(n))
        self.grid.cover(max(-lo, hi, 0.0))
        if largest.size < n:
            self.top_floor = max(self.top_floor, float(largest[-1] if ordered else largest.min()))
        if smallest.size < n:
            self.bottom_ceiling = min(self.bottom_ceiling, float(smallest[-1] if ordered else smallest.max()))
        self._top.append(largest)
        self._bottom.append(smallest)
        self._trim()

    def _trim(self) -> None:
        """Keep at most ``capacity`` values per side once a side holds a quarter more (amortised:
        a partition of ``1.25 * capacity`` values every ``capacity / 4`` appended)."""
        cap = self.capacity
        if self._top.size > self._trim_at:
            self.top_floor = max(self.top_floor, self._top.keep_largest(cap))
        if self._bottom.size > self._trim_at:
            self.bottom_ceiling = min(self.bottom_ceiling, self._bottom.keep_smallest(cap))

    def merge(self, other: MinMaxCollector) -> None:
        if not isinstance(other, TailCollector):
            raise TypeError(f"cannot merge {type(other).__name__} into TailCollector ({self.name!r})")
        super().merge(other)
        self.grid.merge(other.grid)
        self._top.append(other.top)
        self._bottom.append(other.bottom)
        self.top_floor = max(self.top_floor, other.top_floor)
        self.bottom_ceiling = min(self.bottom_ceiling, other.bottom_ceiling)
        self._trim()

    def nbytes(self) -> int:
        return int(self.top.nbytes + self.bottom.nbytes + self.grid.nbytes())

    def __repr__(self) -> str:
        return (
            f"TailCollector({self.name!r}, min={self.min}, max={self.max}, count={self.count}, "
            f"top={self.top.size}, bottom={self.bottom.size}, width={self.grid.width:.6g})"
        )


class TailHistogramCollector(TailCollector):
    """A :class:`TailCollector` whose grid also counts every value: the percentile comes from the
    exact tails as before, and the counts let a range be judged by the rounding and clipping error
    it causes (``methods.compute_range``'s ``tail_search``, pipeline/plan/heavy_tails.py).

    Why one collector and not a tail collector beside a histogram: both follow the same grid (the
    running ``max|x|``), so the histogram costs one ``bincount`` per batch and
    ``grid.counts`` (the bins the tail collector already sizes) and nothing else. The tensor is
    fetched whole (no in-graph reduction has a histogram), so only the tensors a plan rule names
    get one. Memory: the tail collector's plus ``max_bins`` float64 counts, whatever the number of
    batches.
    """

    def update(self, batch: np.ndarray) -> None:
        """Fold ``batch`` in: its tails (:meth:`TailCollector.update`'s values) and its counts."""
        x, lo, hi = self._finite(batch)
        if lo is None or hi is None:  # no finite value
            return
        self._fold(x, lo, hi)
        self.grid.add(x, max(-lo, hi, 0.0))

    def merge(self, other: MinMaxCollector) -> None:
        if not isinstance(other, TailHistogramCollector):
            raise TypeError(f"cannot merge {type(other).__name__} into TailHistogramCollector ({self.name!r}): "
                            "its grid holds no counts")
        super().merge(other)

    @property
    def counted(self) -> bool:
        """Whether the grid holds counts of the values seen (not only zeros)."""
        return self.grid.counts.size > 0 and float(self.grid.counts.sum()) > 0.0

    def __repr__(self) -> str:
        return super().__repr__().replace("TailCollector(", "TailHistogramCollector(", 1)
