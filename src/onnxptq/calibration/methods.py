"""From collected statistics to a calibrated range ``(rmin, rmax)``, one function per method.

The quantizer calls :func:`make_collector` (through the runner) for each tensor, then
:func:`compute_range` on what was collected. Methods follow the reference tool (spec §5) so that
the same data gives the same ranges, with the differences listed in :data:`DIFFERENCES`:

- ``minmax``: exact extremes (``symmetric`` -> +-max|x|, ``moving_average`` -> mean of per-batch
  extremes).
- ``percentile``: symmetric = histogram of ``|x|`` (2048 bins), threshold at the left edge of the
  bin where the CDF reaches ``p/100``, then clamped to the data's min/max (so a ReLU output gives
  ``(0, t)``); asymmetric = signed histogram cut ``(100-p)/200`` on each side, clamped.
- ``entropy``: onnxruntime's KL-divergence search over windows centred on zero (128/128 bins),
  vectorised per candidate so that 2048-bin histograms stay fast; ``ort_compatible=False`` drops
  onnxruntime's integer truncation of the expanded ``q`` and its unbalanced last bin.
- ``minmse``: power of two (the reference ``PowerOfTwoMethod.MinMSE``): from the min/max
  power-of-two scale ``2^-pos`` try ``2^-(pos-1) .. 2^-(pos+3)`` keeping the zero point, minimise
  ``sum count * (centre - fq(centre))**2`` over the histogram; float scale: shrink the window
  ``[f*rmin, f*rmax]`` (``f`` in ``(0, 1]``) and minimise the same error.
- ``nonoverflow``: the smallest power-of-two scale that does **not** clip ``[min, max]`` (the
  reference rounds the exponent to nearest and may clip: spec §9.6 item 3).
- ``distribution``: +-max|x|; :func:`distribution_stats` gives the histogram mean/std.
- ``layerwise_percentile``: percentile per candidate ``p``, keep the candidate whose asymmetric
  float-scale fake quantization has the smallest mean error (``mae``/``mse``) on the histogram.

Methods that depend on the target integer grid take it as ``qmin``/``qmax`` (or ``qtype`` with
``reduce_range``), plus ``symmetric``.
"""

from __future__ import annotations

import logging
import math
from enum import Enum
from typing import Any, Mapping

import numpy as np

from onnxptq.calibration.collectors import (RECURRING_BATCHES, Collector, HistogramCollector, MinMaxCollector, TailCollector,
                                           TailHistogramCollector, grid_positions)
from onnxptq.formats import integer
from onnxptq.formats.integer import grid_fake_quantize as fake_quantize
from onnxptq.formats.integer import grid_pow2_scale as pow2_scale
from onnxptq.formats.integer import grid_scale_zero_point as scale_zero_point
from onnxptq.formats.integer import grid_scales_zero_points

log = logging.getLogger(__name__)

__all__ = [
    "DIFFERENCES",
    "Method",
    "REFERENCE_NAMES",
    "compute_range",
    "distribution_stats",
    "entropy_threshold",
    "fake_quantize",
    "make_collector",
    "pow2_scale",
    "qrange",
    "resolve_method",
    "scale_zero_point",
    "tail_errors",
    "tail_kurtosis",
    "tail_peak_ratio",
    "tail_window",
]

#: Percentiles whose tail (per side) is at most this fraction of the values are collected as a
#: tail (:class:`TailCollector`): 1e-5 is the reference default 99.999 symmetric; deeper tails
#: would need buffers that outgrow a histogram.
TAIL_MAX_FRACTION = 1e-5

FLT_MIN = float(np.finfo(np.float32).tiny)
FLT_MAX = float(np.finfo(np.float32).max)


class Method(str, Enum):
    """Calibration methods; the values are the names accepted everywhere as plain strings."""

    MINMAX = "minmax"
    PERCENTILE = "percentile"
    ENTROPY = "entropy"
    MINMSE = "minmse"
    NONOVERFLOW = "nonoverflow"
    DISTRIBUTION = "distribution"
    LAYERWISE_PERCENTILE = "layerwise_percentile"


#: Reference-tool enum names -> (our method, the options that name implies, with its defaults).
#: Both the bare member name ("MinMax") and the qualified one ("CalibrationMethod.MinMax") work.
REFERENCE_NAMES: dict[str, tuple[Method, dict[str, Any]]] = {
    "CalibrationMethod.MinMax": (Method.MINMAX, {"symmetric": False, "moving_average": False}),
    "CalibrationMethod.Entropy": (Method.ENTROPY, {"symmetric": False, "num_bins": 128, "num_quantized_bins": 128}),
    "CalibrationMethod.Percentile": (Method.PERCENTILE, {"symmetric": True, "num_bins": 2048, "percentile": 99.999}),
    "CalibrationMethod.Distribution": (Method.DISTRIBUTION, {"num_bins": 2048, "scenario": "same"}),
    "PowerOfTwoMethod.NonOverflow": (Method.NONOVERFLOW, {"symmetric": True}),
    "PowerOfTwoMethod.MinMSE": (Method.MINMSE, {"symmetric": True, "power_of_two": True, "num_bins": 2048}),
    "ExtendedCalibrationMethod.MinMSE": (Method.MINMSE, {"power_of_two": False, "num_bins": 2048}),
    "LayerWiseMethod.LayerWisePercentile": (
        Method.LAYERWISE_PERCENTILE,
        {
            "symmetric": True,
            "num_bins": 2048,
            "percentile_candidates": (99.99, 99.999, 99.99999),
            "metric": "mae",
        },
    ),
}
_SHORT = {key.split(".", 1)[1]: value for key, value in REFERENCE_NAMES.items()}
_SHORT["MinMSE"] = REFERENCE_NAMES["PowerOfTwoMethod.MinMSE"]  # the reference's calibrate_method MinMSE

#: Default histogram sizes when the caller gives none (number of |x| bins for symmetric
#: percentile, signed bins otherwise), following spec §5.
_DEFAULT_BINS = {
    Method.PERCENTILE: 2048,
    Method.ENTROPY: 128,
    Method.MINMSE: 2048,
    Method.DISTRIBUTION: 2048,
    Method.LAYERWISE_PERCENTILE: 2048,
}

#: Where we knowingly differ from the reference tool (also in the module docstring).
DIFFERENCES = (
    "nonoverflow: scale exponent rounded up, never clips (reference rounds to nearest and may clip).",
    "nonoverflow/minmse with a target grid return the power-of-two grid range [(qmin-zp)s, (qmax-zp)s].",
    "percentile: |x| histogram starts at 0 (onnxruntime starts at the first batch's min|x|).",
    "distribution: range is exactly +-max|x| (reference: outer histogram edges, up to one bin wider).",
    "histograms coarsen (bin pairs merge) instead of growing past max_bins, so memory stays bounded.",
    "NaN/Inf are counted and ignored (reference: nanmin/nanmax, Inf kept).",
    "percentile >= 99.999 is computed from exact streamed tails (TailCollector): the histogram's range, "
    "except one bin where its float CDF rounds at an integer rank.",
)


def resolve_method(name: str | Method) -> tuple[Method, dict[str, Any]]:
    """Map our names or the reference tool's names to ``(Method, implied options)``.

    Accepts ``"minmax"``, ``Method.MINMAX``, ``"MinMax"``, ``"CalibrationMethod.MinMax"``,
    ``"PowerOfTwoMethod.MinMSE"``, ... (case-sensitive for the reference names, as in its enums).
    """
    if isinstance(name, Method):
        return name, {}
    text = str(name).strip()
    try:
        return Method(text.lower()), {}
    except ValueError:
        pass
    if text in REFERENCE_NAMES:
        method, opts = REFERENCE_NAMES[text]
        return method, dict(opts)
    if text in _SHORT:
        method, opts = _SHORT[text]
        return method, dict(opts)
    choices = [m.value for m in Method] + sorted(REFERENCE_NAMES)
    raise ValueError(f"unknown calibration method {name!r}; expected one of {', '.join(choices)}")


def make_collector(
    method: str | Method,
    *,
    num_bins: int | None = None,
    symmetric: bool | None = None,
    max_bins: int | None = None,
    percentile: float | None = None,
    histogram: bool = False,
    name: str = "tensor",
    **_ignored: Any,
) -> MinMaxCollector:
    """The collector ``method`` needs, sized as the reference tool sizes it.

    MinMax and NonOverflow need only extremes; the rest need a histogram. Symmetric Percentile
    (the default) and LayerWisePercentile count ``num_bins`` bins of ``|x|``, which the signed
    histogram provides by folding, so it gets ``2 * num_bins`` signed bins. Extra options (e.g.
    ``percentile``) are accepted and ignored so one option dict can serve both this function and
    :func:`compute_range`.

    Percentile given a ``percentile`` whose tail is at most :data:`TAIL_MAX_FRACTION` of the
    values gets a :class:`TailCollector` instead: the same range from the retained tail, at a
    fraction of the cost (see its docstring); lower percentiles keep the histogram. ``histogram=True``
    (percentile with ``tail_search``, pipeline/plan/heavy_tails.py) makes that a
    :class:`TailHistogramCollector`: the same tails, and the counts the search reads.
    """
    m, implied = resolve_method(method)
    if m in (Method.MINMAX, Method.NONOVERFLOW):
        return MinMaxCollector(name=name)
    bins = int(num_bins if num_bins is not None else implied.get("num_bins", _DEFAULT_BINS[m]))
    if bins < 1:
        raise ValueError(f"calibration of {name!r}: num_bins must be >= 1, got {bins}")
    sym = symmetric if symmetric is not None else implied.get("symmetric", m is not Method.ENTROPY)
    if m is Method.DISTRIBUTION and bins < 512:
        raise ValueError(f"distribution calibration of {name!r}: num_bins must be >= 512, got {bins}")
    if m in (Method.PERCENTILE, Method.LAYERWISE_PERCENTILE) and sym:
        bins *= 2
    bins += bins % 2  # the signed grid needs zero on an edge
    if m is Method.PERCENTILE and percentile is not None:
        fraction = (100.0 - float(percentile)) / 100.0 / (1.0 if sym else 2.0)
        if 0.0 <= fraction <= TAIL_MAX_FRACTION * (1 + 1e-9):  # 99.999 is not exact in binary
            kind = TailHistogramCollector if histogram else TailCollector
            return kind(
                num_bins=bins, max_bins=max_bins if max_bins is None else max(max_bins, bins),
                tail_fraction=fraction, name=name,
            )
    return HistogramCollector(num_bins=bins, max_bins=max_bins if max_bins is None else max(max_bins, bins), name=name)


# -- integer grids ------------------------------------------------------------------------------
def qrange(qtype: str, symmetric: bool = False, reduce_range: bool = False) -> tuple[int, int]:
    """``(qmin, qmax)`` of an integer type (``"int8"``, ``"QUInt8"``, ...): the formats' one rule."""
    key = str(qtype).lower().removeprefix("q")
    try:
        return integer.qrange(key, symmetric, reduce_range)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"qtype {qtype!r} has no integer range: {exc}") from exc


# -- entropy -------------------------------------------------------------------------------------
def _smooth(p: np.ndarray, eps: float, dtype: type) -> np.ndarray | None:
    """onnxruntime's ``smooth_distribution``: move ``eps`` mass onto the empty bins."""
    zeros = p == 0
    n_zeros = int(zeros.sum())
    n_nonzeros = p.size - n_zeros
    if not n_nonzeros:
        return None
    eps1 = eps * n_zeros / n_nonzeros
    out = p.astype(dtype) + np.where(zeros, dtype(eps), dtype(-eps1)).astype(dtype)
    if (out <= 0).any():  # onnxruntime asserts here; a candidate that cannot be smoothed loses
        return None
    return out


def _kl(p: np.ndarray, q: np.ndarray, dtype: type) -> float:
    p = p / p.sum()
    q = q / q.sum()
    return float(np.sum(p * np.log(p / q), dtype=dtype))


def entropy_threshold(
    counts: np.ndarray, edges: np.ndarray, num_quantized_bins: int = 128, ort_compatible: bool = True
) -> tuple[float, float]:
    """onnxruntime's KL-divergence threshold search on a signed histogram centred on zero.

    Candidate ``i`` (``num_quantized_bins//2 .. num_bins//2``) is the window of bins
    ``[zero - i, zero + i + 1)``; outliers are folded into its end bins (``p``), the window is
    merged into ``num_quantized_bins`` bins and expanded back (``q``); the window with the smallest
    KL(p || q) wins (first on ties). Each candidate is vectorised, so 2048 bins cost about a
    thousand small NumPy passes instead of onnxruntime's per-bin Python loops.

    ``ort_compatible=True`` keeps onnxruntime's quirks (``q`` truncated to integers and spread over
    empty bins too, leftover bins all added to the last merged bin but not expanded, float32 KL).
    ``False`` spreads the window evenly over the merged bins, keeps ``q`` fractional, puts mass
    only where ``p`` is non-zero and sums in float64 - sound for any bin count.
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.size
    zero = n // 2
    nq_half = num_quantized_bins // 2
    if zero < nq_half:
        # Fewer bins than quantized bins: the whole histogram is the only sensible window.
        return float(edges[0]), float(edges[-1])
    dtype = np.float32 if ort_compatible else np.float64
    cum = np.concatenate(([0.0], np.cumsum(counts)))
    total = cum[-1]
    best_i, best_kl = nq_half, math.inf
    for i in range(nq_half, zero + 1):
        start, end = zero - i, min(zero + i + 1, n)
        sliced = counts[start:end]
        p = sliced.copy()
        p[0] += cum[start]
        p[-1] += total - cum[end]
        nonzero = p != 0
        size = sliced.size
        if ort_compatible:
            m = size // num_quantized_bins
            body = num_quantized_bins * m
            merged = sliced[:body].reshape(num_quantized_bins, m).sum(axis=1)
            merged[-1] += sliced[body:].sum()
            norm = nonzero[:body].reshape(num_quantized_bins, m).sum(axis=1)
            per_bin = np.where(norm != 0, np.floor(merged / np.maximum(norm, 1)), 0.0)
            q = np.zeros(size)
            q[:body] = np.repeat(per_bin, m)
        else:
            bounds = np.linspace(0, size, num_quantized_bins + 1).astype(np.int64)
            group = np.repeat(np.arange(num_quantized_bins), np.diff(bounds))
            merged = np.bincount(group, weights=sliced, minlength=num_quantized_bins)
            norm = np.bincount(group, weights=nonzero.astype(np.float64), minlength=num_quantized_bins)
            per_bin = np.where(norm != 0, merged / np.maximum(norm, 1), 0.0)
            q = np.where(nonzero, per_bin[group], 0.0)
        ps = _smooth(p, 0.0001, dtype)
        qs = _smooth(q, 0.0001, dtype)
        kl = math.inf if ps is None or qs is None else _kl(ps, qs, dtype)
        if ort_compatible:
            kl = float(np.float32(kl))
        if kl < best_kl:
            best_i, best_kl = i, kl
    start, end = zero - best_i, min(zero + best_i + 1, n)
    return float(edges[start]), float(edges[end])


# -- helpers on collectors -------------------------------------------------------------------------
def _need_hist(collector: Collector, method: Method) -> HistogramCollector:
    if not isinstance(collector, HistogramCollector):
        raise TypeError(
            f"{method.value} calibration of {getattr(collector, 'name', 'tensor')!r} needs a histogram; "
            f"got {type(collector).__name__} (create it with make_collector({method.value!r}))"
        )
    return collector


def _grid(options: dict[str, Any], method: Method, name: str) -> tuple[int, int, bool]:
    """``(qmin, qmax, symmetric)`` from ``qmin``/``qmax`` or ``qtype`` (+ ``reduce_range``)."""
    symmetric = bool(options.get("symmetric", True))
    if options.get("qmin") is not None and options.get("qmax") is not None:
        qmin, qmax = int(options["qmin"]), int(options["qmax"])
    elif options.get("qtype") is not None:
        qmin, qmax = qrange(options["qtype"], symmetric, bool(options.get("reduce_range", False)))
    else:
        raise ValueError(
            f"{method.value} calibration of {name!r} needs the target integer grid: pass qmin= and qmax= "
            "(or qtype=, e.g. 'int8')"
        )
    if qmin >= qmax:
        raise ValueError(f"{method.value} calibration of {name!r}: qmin ({qmin}) must be < qmax ({qmax})")
    return qmin, qmax, symmetric


def _percentile_range(h: HistogramCollector, percentile: float, symmetric: bool, clamp: bool) -> tuple[float, float]:
    if not 0.0 <= percentile <= 100.0:
        raise ValueError(f"percentile calibration of {h.name!r}: percentile must be in [0, 100], got {percentile}")
    if symmetric:
        counts, edges = h.hist.folded()
        t = float(edges[min(_cdf_index(counts, percentile / 100.0), edges.size - 1)])
        lo, hi = -t, t
    else:
        counts, edges = h.hist.counts, h.hist.edges
        cut = (100.0 - percentile) / 200.0
        lo = float(edges[min(_cdf_index(counts, cut), edges.size - 1)])
        hi = float(edges[min(_cdf_index(counts, 1.0 - cut), edges.size - 1)])
    if clamp:
        lo, hi = max(lo, h.min), min(hi, h.max)
    return lo, hi


def _cdf_index(counts: np.ndarray, q: float) -> int:
    """First bin where the normalised cumulative count reaches ``q`` (the histogram rule)."""
    return int(np.searchsorted(np.cumsum(counts / counts.sum()), q))


def _signed_bins(c: TailCollector, values: np.ndarray) -> np.ndarray:
    """Signed-grid bin of each value, computed as :meth:`SignedHistogram.add` computes it."""
    n = c.grid.counts.size
    pos = grid_positions(np.asarray(values), n, c.grid.threshold)
    return np.minimum(pos.astype(np.int32), n - 1)


def _signed_bin(c: TailCollector, value: float) -> int:
    return int(_signed_bins(c, np.array([value]))[0])


def _tail_percentile_range(c: TailCollector, percentile: float, symmetric: bool, clamp: bool) -> tuple[float, float]:
    """:func:`_percentile_range` of the histogram ``c`` would have built, from its tails.

    Bins beyond the collector's completeness levels get their exact counts from the tail values;
    all other values are lumped into the bin at the level. The cumulative search therefore lands
    where the full histogram's would whenever it lands beyond the level (checked); otherwise the
    result is the nearest bound the tail supports, and a warning names the tensor.
    """
    if not 0.0 <= percentile <= 100.0:
        raise ValueError(f"percentile calibration of {c.name!r}: percentile must be in [0, 100], got {percentile}")
    g = c.grid
    total = float(c.count)
    if g.width == 0.0 or total == 0.0:  # only zeros seen
        lo, hi = 0.0, 0.0
        return (max(lo, c.min), min(hi, c.max)) if clamp else (lo, hi)
    n, half = g.counts.size, g.half
    inexact = []
    if symmetric:
        pos = c.top[c.top >= 0]
        neg = c.bottom[c.bottom < 0]
        fold_pos = _signed_bins(c, pos) - half
        fold_neg = half - 1 - _signed_bins(c, neg)
        level = -1
        if c.top_floor >= 0:
            level = max(level, _signed_bin(c, c.top_floor) - half)
        if c.bottom_ceiling < 0:
            level = max(level, half - 1 - _signed_bin(c, c.bottom_ceiling))
        folded = np.concatenate((fold_pos, fold_neg))
        counts = np.bincount(folded[folded > level], minlength=half).astype(np.float64)
        counts[max(level, 0)] += total - counts.sum()
        idx = _cdf_index(counts, percentile / 100.0)
        # At the level bin itself the answer stands if the known values from there up already
        # exceed the tail; below it, it is only a bound.
        if idx < level or (idx == level and not np.count_nonzero(folded >= level) > (1.0 - percentile / 100.0) * total):
            inexact.append("upper")
        t = float(min(idx, half) * g.width)
        lo, hi = -t, t
    else:
        cut = (100.0 - percentile) / 200.0
        edges = (np.arange(n + 1, dtype=np.float64) - half) * g.width
        top_level = _signed_bin(c, c.top_floor) if math.isfinite(c.top_floor) else -1
        top_bins = _signed_bins(c, c.top)
        counts = np.bincount(top_bins[top_bins > top_level], minlength=n).astype(np.float64)
        counts[max(top_level, 0)] += total - counts.sum()
        hi_idx = _cdf_index(counts, 1.0 - cut)
        if hi_idx < top_level or (hi_idx == top_level and not np.count_nonzero(top_bins >= top_level) > cut * total):
            inexact.append("upper")
        bottom_level = _signed_bin(c, c.bottom_ceiling) if math.isfinite(c.bottom_ceiling) else n
        bottom_bins = _signed_bins(c, c.bottom)
        counts = np.bincount(bottom_bins[bottom_bins < bottom_level], minlength=n).astype(np.float64)
        counts[min(bottom_level, n - 1)] += total - counts.sum()
        lo_idx = _cdf_index(counts, cut)
        if lo_idx > bottom_level or (lo_idx == bottom_level and not np.count_nonzero(bottom_bins <= bottom_level) >= cut * total):
            inexact.append("lower")
        lo, hi = float(edges[min(lo_idx, n)]), float(edges[min(hi_idx, n)])
    if inexact:
        _warn_once(
            c, "inexact",
            "percentile %.6g of %r: the %s threshold lies deeper than the %d values per side kept of %d; "
            "using the nearest bound the kept tail supports (a histogram method, e.g. percentile < %.6g, is exact)",
            percentile, c.name, " and ".join(inexact), c.capacity, int(total), 100.0 - 100.0 * TAIL_MAX_FRACTION,
        )
    if clamp:
        lo, hi = max(lo, c.min), min(hi, c.max)
    return lo, hi


def _cover_recurring(c: MinMaxCollector, lo: float, hi: float, symmetric: bool) -> tuple[float, float]:
    """``(lo, hi)`` widened to the :data:`RECURRING_BATCHES`-th largest per-batch maximum and
    smallest per-batch minimum (no change with fewer batches than that).

    Why: a percentile counts values, not samples. A detector's object peaks or a feature map's
    strongest responses are a handful of values in each image, so pooled over the calibration set
    they are "rare" and a 99.9999 percentile clips them, although several images reach that far
    (an isbnx YOLO detector, 8 calibrated images: a backbone activation clipped to 9.3 where 3 of
    them peak at 10.7-11.5, its score branch by up to 36 %). An outlier the percentile is meant to
    drop is a value one or two batches alone reach; what more batches reach, held-out data reaches
    too, and clipping it saturates real signal. Three batches, not two: at two, a DB text
    detector lost 0.011 mask IoU (its 2nd-largest page maxima are still rare extremes); at three
    it kept its figure while the detector and a file-type classifier kept their gains
    (bench/RESULTS.md, "A8W8 against NNCF on the zoo and outside models").
    """
    if len(c.batch_highs) < RECURRING_BATCHES or len(c.batch_lows) < RECURRING_BATCHES:
        return lo, hi
    high, low = c.batch_highs[0], c.batch_lows[-1]
    if symmetric:  # the percentile's own (lo, hi) may be lopsided: widen, never narrow, either side
        t = max(-lo, hi, high, -low)
        return -t, t
    return min(lo, low), max(hi, high)


def _weighted_errors(
    centres: np.ndarray, counts: np.ndarray, scales: np.ndarray, zps: np.ndarray, qmin: int, qmax: int, power: int
) -> np.ndarray:
    """Sum of ``count * |c - fq(c)|**power`` for each candidate (rows), vectorised."""
    keep = counts > 0
    c, w = centres[keep], counts[keep]
    fq = fake_quantize(c[None, :], scales[:, None], zps[:, None], qmin, qmax)
    err = np.abs(c[None, :] - fq)
    return (err**power * w[None, :]).sum(axis=1)


def _finish(lo: float, hi: float, method: Method, symmetric: bool) -> tuple[float, float]:
    if symmetric:
        a = max(abs(lo), abs(hi))
        return -a, a
    return lo, hi


def _warn_once(collector: Any, key: str, message: str, *args: Any) -> None:
    """A warning about one collector's statistics, said once: the range guard simulates the solved
    quantizer (the same :func:`compute_range`) before solve runs it, and the CLI printed the same
    warning twice per call."""
    said = collector.__dict__.setdefault("_warned", set()) if hasattr(collector, "__dict__") else set()
    if key in said:
        return
    said.add(key)
    log.warning(message, *args)


def compute_range(collector: Collector, method: str | Method, **options: Any) -> tuple[float, float]:
    """Calibrated ``(rmin, rmax)`` of one tensor from its collector (memoised: :func:`_memo_key`).

    Options (unknown ones raise ``TypeError``; defaults are the reference tool's, spec §5, where a
    reference name such as ``"PowerOfTwoMethod.MinMSE"`` is given its implied options apply):

    - minmax: ``symmetric=False``, ``moving_average=False``
    - percentile: ``percentile=99.999``, ``symmetric=True``, ``clamp=True``, ``recurring=False``
      (True: never clip a value that :data:`~onnxptq.calibration.collectors.RECURRING_BATCHES`
      calibration batches reach, :func:`_cover_recurring`; the presets' pipeline sets it),
      ``tail_search=False`` (True: a heavy-tailed tensor's range by its rounding and clipping error
      on the counted histogram, :func:`_tail_search`; needs ``qmin``/``qmax`` and a collector with
      counts, else the percentile range stands)
    - entropy: ``num_quantized_bins=128``, ``symmetric=False``, ``ort_compatible=True``
    - minmse: ``qmin``/``qmax`` or ``qtype`` (+``reduce_range``), ``symmetric=True``,
      ``power_of_two=False`` (True for ``PowerOfTwoMethod.MinMSE``), ``num_candidates=100``
      (float scale), ``percentile=None`` (drop the tail beyond it first, the reference
      "Percentile" mode)
    - nonoverflow: ``qmin``/``qmax`` or ``qtype``, ``symmetric=True``
    - distribution: no options (``scenario`` accepted, see :func:`distribution_stats`)
    - layerwise_percentile: ``qmin``/``qmax`` or ``qtype`` (the *full* activation range, as the
      reference uses), ``percentile_candidates=(99.99, 99.999, 99.99999)``, ``metric="mae"``,
      ``symmetric=True`` (of the percentile histogram)

    The grid options (``qmin``, ``qmax``, ``qtype``, ``reduce_range``, ``symmetric``) are accepted by
    every method, so a caller can pass the same target description whatever the method;
    ``num_bins``/``max_bins`` are accepted and ignored (they size the collector, see
    :func:`make_collector`). A collector that saw no finite value gives ``(0.0, 0.0)`` with a
    warning.
    """
    key = _memo_key(collector, method, options)
    if key is None:
        return _compute_range(collector, method, **options)
    memo = collector.__dict__.setdefault("_range_memo", {})
    if key not in memo:
        rmin, rmax = _compute_range(collector, method, **options)
        if np.ndim(rmin) or np.ndim(rmax):  # per-channel arrays: the caller may keep and change them
            return rmin, rmax
        memo[key] = (rmin, rmax)
    return memo[key]


def _memo_key(collector: Any, method: Any, options: Mapping[str, Any]) -> tuple | None:
    """The key under which a range of ``collector`` is remembered, or None (nothing to key on).

    Why: every build of a plan solves every activation again from the same statistics, and the
    range guard simulates each candidate's quantizers from them too; the accuracy floor's repair and
    the mixed-precision search build many plans from one calibration. A percentile's range walks its
    histogram's bins (``_tail_percentile_range``): on the 1325 activations of a diffusion U-Net
    (adaptive-terrain-diffusion, A8W8) 22 of the quantize's 175 CPU s went to the same 1890 ranges
    computed ten times over. The key holds the collector's running state (extremes, counts,
    batches: every update and merge changes one of them), so a collector that takes more data after
    a range was asked for gets a new one, never a stale one."""
    if not isinstance(collector, MinMaxCollector) or not hasattr(collector, "__dict__"):
        return None
    state = (collector.count, collector.batches, collector.skipped_batches, collector.nan_count, collector.inf_count,
             float(np.min(collector.min)), float(np.max(collector.max)), collector.batch_min_sum, collector.batch_max_sum)
    try:
        key = (str(method), state, tuple(sorted(options.items())))
        hash(key)
    except TypeError:  # an unhashable option value (a list): computed every time
        return None
    return key


def _compute_range(collector: Collector, method: str | Method, **options: Any) -> tuple[float, float]:
    """:func:`compute_range` without the memo."""
    if "margin" in options:  # widened after the method's own range (pipeline/plan/scarce.py)
        rest = {k: v for k, v in options.items() if k != "margin"}
        return widen_by_margin(*compute_range(collector, method, **rest), float(options["margin"]))
    m, implied = resolve_method(method)
    opts = {**implied, **options}
    opts.pop("num_bins", None)
    opts.pop("max_bins", None)
    name = getattr(collector, "name", "tensor")
    grid = {"qmin", "qmax", "qtype", "reduce_range", "symmetric"}
    allowed = grid | {
        Method.MINMAX: {"moving_average", "moving_average_constant"},
        Method.PERCENTILE: {"percentile", "clamp", "recurring", "tail_search"},
        Method.ENTROPY: {"num_quantized_bins", "ort_compatible"},
        Method.MINMSE: {"power_of_two", "num_candidates", "percentile"},
        Method.NONOVERFLOW: set(),
        Method.DISTRIBUTION: {"scenario"},
        Method.LAYERWISE_PERCENTILE: {"percentile_candidates", "metric"},
    }[m]
    unknown = set(opts) - allowed
    if unknown:
        raise TypeError(
            f"{m.value} calibration of {name!r}: unknown option(s) {', '.join(sorted(unknown))}; "
            f"accepted: {', '.join(sorted(allowed))}"
        )
    if not isinstance(collector, MinMaxCollector):
        raise TypeError(f"calibration of {name!r}: expected a collector from make_collector, got {type(collector).__name__}")
    if isinstance(collector, TailCollector) and m in (Method.ENTROPY, Method.MINMSE, Method.LAYERWISE_PERCENTILE):
        raise TypeError(
            f"{m.value} calibration of {name!r} needs a histogram; the collector holds only the tails "
            "(make_collector gives one to high percentiles alone)"
        )
    if collector.empty:
        _warn_once(collector, "empty", "tensor %r: no value was collected (empty on every calibration feed, or in a branch that never ran); its range is (0, 0)", name)
        return 0.0, 0.0

    if m is Method.MINMAX:
        if opts.get("moving_average", False):
            lo, hi = collector.batch_min_sum / collector.batches, collector.batch_max_sum / collector.batches
        else:
            lo, hi = collector.min, collector.max
        return _finish(lo, hi, m, bool(opts.get("symmetric", False)))

    if m is Method.DISTRIBUTION:
        a = collector.abs_max
        return -a, a

    if m is Method.NONOVERFLOW:
        qmin, qmax, symmetric = _grid(opts, m, name)
        s, zp = pow2_scale(collector.min, collector.max, qmin, qmax, symmetric, rounding="ceil")
        return (qmin - zp) * s, (qmax - zp) * s

    if m is Method.PERCENTILE:
        pct, sym = float(opts.get("percentile", 99.999)), bool(opts.get("symmetric", True))
        if isinstance(collector, TailCollector):
            lo, hi = _tail_percentile_range(collector, pct, sym, bool(opts.get("clamp", True)))
        else:
            lo, hi = _percentile_range(_need_hist(collector, m), pct, sym, bool(opts.get("clamp", True)))
        if opts.get("recurring", False):
            lo, hi = _cover_recurring(collector, lo, hi, sym)
        return _tail_search(collector, lo, hi, opts, name) if opts.get("tail_search", False) else (lo, hi)
    h = _need_hist(collector, m)

    if m is Method.ENTROPY:
        lo, hi = entropy_threshold(
            h.hist.counts, h.hist.edges, int(opts.get("num_quantized_bins", 128)), bool(opts.get("ort_compatible", True))
        )
        lo, hi = max(lo, h.min), min(hi, h.max)
        return _finish(lo, hi, m, bool(opts.get("symmetric", False)))

    if m is Method.MINMSE:
        return _remembered(h, m, opts, lambda: _minmse(h, opts, name))

    return _remembered(h, m, opts, lambda: _layerwise_percentile(h, opts, name))


#: :func:`_tail_search` takes the error-minimising window only where the percentile range's squared
#: error on the histogram is at least this many times the window's (a heavy tail: one a light-tailed
#: tensor never reaches, whose best window is its full range). Chosen on the zoo's detectors and
#: readers (bench/det_range.py, bench/RESULTS.md "(detrange, 2026-11-28)").
TAIL_SEARCH_GAIN = 1.0
#: the kurtosis (E[(x-mean)^4] / var^2; 3 for a normal, 1.8 for a uniform) from which a tensor's
#: tail counts as heavy: below it :func:`_tail_search` keeps the percentile range
TAIL_KURTOSIS = 30.0
#: a heavy tail whose largest |x| is more than this many times its 99.9th percentile of |x| is a few
#: isolated peaks, not a continuous tail: a detector's object responses (plan/peaks.py), which the
#: error of a pooled histogram undervalues; :func:`_tail_search` keeps their percentile range
TAIL_PEAK_RATIO = 3.0


def _counted_grid(c: MinMaxCollector) -> Any:
    """The histogram ``c`` counted its values on (a histogram or counting tail collector), or None."""
    if isinstance(c, HistogramCollector):
        return c.hist
    if isinstance(c, TailHistogramCollector) and c.counted:
        return c.grid
    return None


def tail_errors(c: MinMaxCollector, ranges: np.ndarray, qmin: int, qmax: int, symmetric: bool) -> np.ndarray | None:
    """Mean squared rounding + clipping error of each ``(lo, hi)`` row of ``ranges`` on the values
    ``c`` counted (bin centres), or None where ``c`` counted none."""
    grid = _counted_grid(c)
    if grid is None or grid.width == 0.0:
        return None
    total = float(grid.counts.sum())
    ranges = np.asarray(ranges, dtype=np.float64).reshape(-1, 2)
    scales, zps = grid_scales_zero_points(ranges[:, 0], ranges[:, 1], qmin, qmax, symmetric)
    return _weighted_errors(grid.centres, grid.counts, scales, zps, qmin, qmax, 2) / max(total, 1.0)


def tail_kurtosis(c: MinMaxCollector) -> float | None:
    """Kurtosis ``E[(x - mean)^4] / var^2`` of the values ``c`` counted (bin centres), or None."""
    grid = _counted_grid(c)
    if grid is None or grid.width == 0.0:
        return None
    counts, centres = grid.counts, grid.centres
    total = float(counts.sum())
    if total <= 0.0:
        return None
    mean = float((counts * centres).sum() / total)
    d2 = (centres - mean) ** 2
    var = float((counts * d2).sum() / total)
    return float((counts * d2 * d2).sum() / total / (var * var)) if var > 0.0 else None


def tail_peak_ratio(c: MinMaxCollector) -> float | None:
    """``max|x|`` over the 99.9th percentile of ``|x|`` of the values ``c`` counted (the folded
    histogram's bin edge where the count reaches 99.9 %), or None."""
    grid = _counted_grid(c)
    if grid is None or grid.width == 0.0:
        return None
    counts, edges = grid.folded()
    total = float(counts.sum())
    if total <= 0.0:
        return None
    at = float(edges[min(int(np.searchsorted(np.cumsum(counts), 0.999 * total)) + 1, edges.size - 1)])
    return max(abs(float(c.min)), abs(float(c.max))) / at if at > 0.0 else math.inf


def tail_window(c: MinMaxCollector, lo: float, hi: float, opts: Mapping[str, Any], name: str = "tensor"
                ) -> tuple[float, tuple[float, float]] | None:
    """``(gain, window)``: the window ``f * [min, max]`` (``f`` in (0, 1], MinMSE's candidates) inside
    ``(lo, hi)`` of least squared rounding + clipping error on the values ``c`` counted, and how many
    times that error the range ``(lo, hi)`` costs; None where ``c`` counted nothing, no window lies
    inside, or ``opts`` give no integer grid."""
    grid_opts = {k: opts[k] for k in ("qmin", "qmax", "qtype", "reduce_range", "symmetric") if k in opts}
    if not (("qmin" in grid_opts and "qmax" in grid_opts) or "qtype" in grid_opts):
        return None
    qmin, qmax, symmetric = _grid(grid_opts, Method.PERCENTILE, name)
    dlo, dhi = min(float(c.min), 0.0), max(float(c.max), 0.0)
    if symmetric:
        a = max(-dlo, dhi)
        dlo, dhi = -a, a
    k = 100
    fractions = np.arange(k, 0, -1, dtype=np.float64) / k  # 1 first: ties keep the widest window
    windows = np.stack([fractions * dlo, fractions * dhi], axis=1)
    # only windows inside (lo, hi): the search narrows a range whose tail costs every value step size;
    # it never widens a percentile range back over what the percentile clipped (PP-OCRv4 rec's
    # hardswish_42, widened 3.484 -> 3.548 by it, cost per-tensor A8W8 on the NPU placement 0.005 CER)
    glo, ghi = min(lo, 0.0), max(hi, 0.0)  # the grid holds zero: (lo, hi) as the grid spans it
    windows = windows[(windows[:, 0] >= glo - 1e-12 * abs(glo)) & (windows[:, 1] <= ghi + 1e-12 * abs(ghi))]
    if not windows.size:
        return None
    errors = tail_errors(c, np.vstack([[lo, hi], windows]), qmin, qmax, symmetric)
    if errors is None:
        return None
    best = int(np.argmin(errors[1:]))
    gain = float(errors[0] / errors[1 + best]) if errors[1 + best] > 0 else (1.0 if errors[0] == 0 else math.inf)
    return gain, (float(windows[best, 0]), float(windows[best, 1]))


def _tail_search(c: MinMaxCollector, lo: float, hi: float, opts: dict[str, Any], name: str) -> tuple[float, float]:
    """``(lo, hi)``, or where the values are heavy-tailed, the window that minimises the squared
    rounding and clipping error on the counted histogram (:func:`tail_window`).

    Why: a percentile range (and more so one that keeps recurring peaks, :func:`_cover_recurring`)
    spans a heavy-tailed activation's rare large values, and every other value pays for them in
    step size. PP-OCRv4 det's first pointwise Conv reads a HardSwish output of median |x| 1.38 whose
    peaks reach 91-96 on every page: the step 0.364 left a rounding error that the page's uniform
    background repeats over the whole page (the same value, the same error), and the DB mask IoU
    fell to 0.9447 (0.9765 with this window, 0.9803 with the tensor float). The percentile range is
    kept unless it costs more than :data:`TAIL_SEARCH_GAIN` times the best window's error, so a
    tensor whose tail is light, or that a collector without counts saw, keeps its range exactly.
    """
    kurtosis = tail_kurtosis(c)
    if kurtosis is None or kurtosis < TAIL_KURTOSIS:
        return lo, hi
    ratio = tail_peak_ratio(c)
    if ratio is None or ratio > TAIL_PEAK_RATIO:
        return lo, hi
    found = tail_window(c, lo, hi, opts, name)
    if found is None or not found[0] > TAIL_SEARCH_GAIN:
        return lo, hi
    gain, (new_lo, new_hi) = found
    log.debug("range of %r by its error on the histogram (heavy tail): [%.6g, %.6g] -> [%.6g, %.6g], squared error / %.2f",
              name, lo, hi, new_lo, new_hi, gain)
    return new_lo, new_hi


def widen_by_margin(lo: float, hi: float, margin: float) -> tuple[float, float]:
    """``(lo, hi)`` widened on each side by ``margin − 1`` times its larger magnitude, never across zero
    on a side that did not reach it (a post-ReLU ``[0, hi]`` becomes ``[0, margin·hi]``, a symmetric
    ``±t`` becomes ``±margin·t``). Why a margin at all: ``pipeline/plan/scarce.py``."""
    if margin < 1.0 or not math.isfinite(margin):
        raise ValueError(f"a range margin must be a finite factor >= 1, got {margin}")
    extra = (margin - 1.0) * max(abs(lo), abs(hi))
    new_lo, new_hi = lo - extra, hi + extra
    if lo >= 0.0:
        new_lo = max(new_lo, 0.0)
    if hi <= 0.0:
        new_hi = min(new_hi, 0.0)
    return new_lo, new_hi


def _remembered(h: HistogramCollector, m: Method, opts: dict[str, Any], search: Any) -> tuple[float, float]:
    """``search()``, computed once per collector state and options: the range guard simulates the
    solved quantizer (the same :func:`compute_range`) before solve computes it again, and MinMSE's
    100 candidate grids are most of an A8W8 build's solve (PP-OCR cls: 36 tensors, ~0.15 s each
    time). Keyed on the histogram's state too, so a collector updated since gets a fresh search."""
    memo = h.__dict__.setdefault("_ranges", {})
    key = (m, tuple(sorted((k, repr(v)) for k, v in opts.items())),
           (h.batches, h.count, h.skipped_batches, h.min, h.max, h.hist.width, h.hist.counts.size, float(h.hist.counts.sum())))
    if key not in memo:
        memo[key] = search()
    return memo[key]


def _minmse(h: HistogramCollector, opts: dict[str, Any], name: str) -> tuple[float, float]:
    qmin, qmax, symmetric = _grid(opts, Method.MINMSE, name)
    centres, counts = h.hist.centres, h.hist.counts.copy()
    lo, hi = h.min, h.max
    pct = opts.get("percentile")
    if pct is not None:
        # Reference "Percentile" mode: drop the tail beyond the percentile, then search.
        lo, hi = _percentile_range(h, float(pct), symmetric, clamp=True)
        counts[(centres < lo) | (centres > hi)] = 0.0
    if opts.get("power_of_two", False):
        s0, zp = pow2_scale(lo, hi, qmin, qmax, symmetric, rounding="nearest")
        pos = -round(math.log2(s0))
        scales = np.array([2.0 ** -(pos + k) for k in (-1, 0, 1, 2, 3)])
        errors = _weighted_errors(centres, counts, scales, np.full(5, zp), qmin, qmax, 2)
        s = float(scales[int(np.argmin(errors))])
        return (qmin - zp) * s, (qmax - zp) * s
    k = int(opts.get("num_candidates", 100))
    if k < 1:
        raise ValueError(f"minmse calibration of {name!r}: num_candidates must be >= 1, got {k}")
    fractions = np.arange(k, 0, -1, dtype=np.float64) / k  # 1 first: ties keep the widest window
    scales, zps = grid_scales_zero_points(fractions * lo, fractions * hi, qmin, qmax, symmetric)
    errors = _weighted_errors(centres, counts, scales, zps, qmin, qmax, 2)
    f = float(fractions[int(np.argmin(errors))])
    return _finish(f * min(lo, 0.0), f * max(hi, 0.0), Method.MINMSE, symmetric)


def _layerwise_percentile(h: HistogramCollector, opts: dict[str, Any], name: str) -> tuple[float, float]:
    qmin, qmax, _ = _grid({**opts, "symmetric": False}, Method.LAYERWISE_PERCENTILE, name)
    metric = str(opts.get("metric", "mae")).lower()
    if metric not in ("mae", "mse"):
        raise ValueError(f"layerwise_percentile calibration of {name!r}: metric must be 'mae' or 'mse', got {metric!r}")
    candidates = [float(p) for p in opts.get("percentile_candidates", (99.99, 99.999, 99.99999))]
    if not candidates:
        raise ValueError(f"layerwise_percentile calibration of {name!r}: percentile_candidates is empty")
    ranges = [_percentile_range(h, p, bool(opts.get("symmetric", True)), clamp=True) for p in candidates]
    lows, highs = np.array(ranges, dtype=np.float64).T
    scales, zps = grid_scales_zero_points(lows, highs, qmin, qmax, False)
    errors = _weighted_errors(h.hist.centres, h.hist.counts, scales, zps, qmin, qmax, 1 if metric == "mae" else 2)
    return ranges[int(np.argmin(errors))]


def distribution_stats(collector: Collector, scenario: str = "same") -> tuple[float, float]:
    """Histogram mean and standard deviation, as the reference Distribution method stores them.

    ``scenario="same"`` uses the bin centres, ``"p3"`` their signed cube roots. Why a histogram
    and not exact running moments: the reference computes them this way, ``p3`` needs a
    distribution rather than two sums, and a float64 moment pass per tensor is not free.
    """
    h = _need_hist(collector, Method.DISTRIBUTION)
    counts, centres = h.hist.counts, h.hist.centres
    total = counts.sum()
    if total == 0:
        return 0.0, 0.0
    if scenario == "same":
        values = centres
    elif scenario == "p3":
        values = np.cbrt(centres)
    else:
        raise ValueError(f"distribution calibration of {h.name!r}: scenario must be 'same' or 'p3', got {scenario!r}")
    avg = float((counts * values).sum() / total)
    std = float(math.sqrt(max((counts * values**2).sum() / total - avg**2, 0.0)))
    return avg, std
