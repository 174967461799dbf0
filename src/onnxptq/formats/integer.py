"""Integer formats (int4/uint4/int8/uint8/int16/uint16/int32/uint32): the NumPy reference.

Runtime semantics are those of ONNX ``QuantizeLinear``/``DequantizeLinear`` as onnxruntime's CPU
kernels compute them, so that a Q/DQ pair in a model and :func:`fake_quantize` agree bit for bit:

- ``q = saturate_T(round_half_even(float32(x) / float32(scale)) + zero_point)``; the division is one
  float32 IEEE division, the saturation is to the *full* range of the storage type, and a NaN input
  quantizes to ``qmin`` of the type (what onnxruntime's QuantizeLinear produces);
- ``x̂ = float32(q − zero_point) · float32(scale)``.

Granularity: per tensor (scalar scale), per channel (1-D scale of the ``axis`` length) or per
block (scale of the same rank as ``x`` whose ``axis`` dimension is ``ceil(n / block_size)``, the
last block possibly shorter — ONNX opset-21 blocked Q/DQ).

Parameter selection (:func:`compute_scale_zp`) follows the reference tool (spec §3.1) except for
its two defects: asymmetric signed weights use the full range (so −128 is reachable for int8), and
power-of-two scales are rounded *up* by default so that "NonOverflow" never clips.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Literal

import ml_dtypes
import numpy as np
import onnx

logger = logging.getLogger(__name__)

FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)

ScaleKind = Literal["float", "pow2", "int16"]


@dataclass(frozen=True)
class IntType:
    """One integer storage type: its bit width, signedness, NumPy dtype and ONNX element type."""

    name: str
    bits: int
    signed: bool
    dtype: Any
    onnx_type: int

    @property
    def qmin(self) -> int:
        """The smallest storable value (the saturation bound of QuantizeLinear)."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def qmax(self) -> int:
        """The largest storable value."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


INT_TYPES: dict[str, IntType] = {
    "int4": IntType("int4", 4, True, ml_dtypes.int4, onnx.TensorProto.INT4),
    "uint4": IntType("uint4", 4, False, ml_dtypes.uint4, onnx.TensorProto.UINT4),
    "int8": IntType("int8", 8, True, np.int8, onnx.TensorProto.INT8),
    "uint8": IntType("uint8", 8, False, np.uint8, onnx.TensorProto.UINT8),
    "int16": IntType("int16", 16, True, np.int16, onnx.TensorProto.INT16),
    "uint16": IntType("uint16", 16, False, np.uint16, onnx.TensorProto.UINT16),
    "int32": IntType("int32", 32, True, np.int32, onnx.TensorProto.INT32),
    "uint32": IntType("uint32", 32, False, np.uint32, onnx.TensorProto.UINT32),
}

#: Each 8-bit integer format and its 16-bit counterpart (same signedness): the one step up that
#: repair's ladder (algorithms/step_up.py) and the plan's 16-bit rules (pipeline/norm_groups.py) take.
SIXTEEN_BIT = {"int8": "int16", "uint8": "uint16"}


def int_type(fmt: str) -> IntType:
    """The :class:`IntType` of ``fmt``, or a ValueError naming the integer formats."""
    key = str(fmt).lower()
    if key not in INT_TYPES:
        raise ValueError(f"format {fmt!r} is not an integer format; expected one of {', '.join(INT_TYPES)}")
    return INT_TYPES[key]


def qrange(fmt: str, symmetric: bool = False, reduce_range: bool = False) -> tuple[int, int]:
    """``(qmin, qmax)`` used to *choose* scale and zero point (spec §3.1 table).

    ``reduce_range`` has priority: signed types get ``[−2^(b−2), 2^(b−2)]``, unsigned
    ``[0, 2^(b−1) − 1]`` (onnxruntime's convention, kept for compatibility). ``symmetric`` drops the
    most negative signed value so that the range is symmetric about 0; unsigned types keep the full
    range. Unlike the reference tool, int4/uint4 are supported with the same rules.
    """
    t = int_type(fmt)
    if reduce_range:
        if t.signed:
            return -(1 << (t.bits - 2)), 1 << (t.bits - 2)
        return 0, (1 << (t.bits - 1)) - 1
    if symmetric and t.signed:
        return -t.qmax, t.qmax
    return t.qmin, t.qmax


# --------------------------------------------------------------------------------------------
# Granularity: broadcasting scale / zero point against x
# --------------------------------------------------------------------------------------------


def _normalise_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{what}={axis} is out of range for a tensor of rank {rank}")
    return axis % rank


def broadcast_param(
    param: Any, shape: tuple[int, ...], axis: int | None, block_size: int | None, what: str = "scale"
) -> np.ndarray:
    """``param`` (scale or zero point) expanded so that it broadcasts against a tensor of ``shape``.

    Per tensor: a scalar or 1-element array. Per channel: 1-D of length ``shape[axis]``. Per block:
    same rank as ``shape``, ``ceil(shape[axis] / block_size)`` along ``axis`` and equal elsewhere;
    each entry is repeated ``block_size`` times and the last block is cut to what is left.
    """
    p = np.asarray(param)
    rank = len(shape)
    if block_size is not None:
        if axis is None:
            raise ValueError(f"block_size={block_size} needs an axis")
        if int(block_size) < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size}")
        ax = _normalise_axis(int(axis), rank)
        n = shape[ax]
        nblocks = -(-n // int(block_size))
        want = tuple(nblocks if i == ax else d for i, d in enumerate(shape))
        if p.shape != want:
            raise ValueError(
                f"blocked {what} must have shape {want} for input {tuple(shape)}, axis {axis}, "
                f"block_size {block_size}; got {p.shape}"
            )
        return np.repeat(p, int(block_size), axis=ax)[tuple(slice(0, n) if i == ax else slice(None) for i in range(rank))]
    if p.size == 1:
        return p.reshape(())
    if axis is None:
        raise ValueError(f"{what} has {p.size} elements but no axis was given (per-channel needs axis)")
    ax = _normalise_axis(int(axis), rank)
    if p.ndim != 1 or p.shape[0] != shape[ax]:
        raise ValueError(f"per-channel {what} must be 1-D of length {shape[ax]} (axis {axis}); got shape {p.shape}")
    return p.reshape([-1 if i == ax else 1 for i in range(rank)])


def _as_float32(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and arr.dtype != ml_dtypes.bfloat16:
        raise TypeError(f"expected a floating-point array, got dtype {arr.dtype}")
    return arr.astype(np.float32)


def _check_scale(scale: np.ndarray) -> None:
    s = np.asarray(scale, dtype=np.float32)
    if not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"scale must be finite and > 0, got {s.ravel()[:8]}")


def quantize(
    x: Any,
    fmt: str,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
) -> np.ndarray:
    """``x`` quantized to ``fmt`` as QuantizeLinear does: an array of the storage dtype.

    ``x / scale`` is evaluated in float32 and rounded half to even; adding the zero point and the
    saturation to the full type range are exact (float64); NaN maps to ``qmin``.
    """
    t = int_type(fmt)
    x32 = _as_float32(x)
    s = broadcast_param(np.asarray(scale, dtype=np.float32), x32.shape, axis, block_size, "scale")
    _check_scale(s)
    zp = broadcast_param(np.asarray(zero_point), x32.shape, axis, block_size, "zero_point").astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = np.rint(x32 / s).astype(np.float64)
        q = np.clip(r + zp, t.qmin, t.qmax)
    q = np.where(np.isnan(q), t.qmin, q)
    return q.astype(np.int64).astype(t.dtype)


def dequantize(
    q: Any,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
) -> np.ndarray:
    """``float32(q − zero_point) · scale`` in float32, as DequantizeLinear computes it."""
    qa = np.asarray(q)
    s = broadcast_param(np.asarray(scale, dtype=np.float32), qa.shape, axis, block_size, "scale")
    zp = broadcast_param(np.asarray(zero_point), qa.shape, axis, block_size, "zero_point")
    diff = qa.astype(np.int64) - zp.astype(np.int64)
    return (diff.astype(np.float32) * s).astype(np.float32)


def fake_quantize(
    x: Any,
    fmt: str,
    *,
    scale: Any,
    zero_point: Any = 0,
    axis: int | None = None,
    block_size: int | None = None,
) -> np.ndarray:
    """Quantize then dequantize ``x``; the arithmetic is float32, the result has ``x``'s dtype.

    float16 input is widened to float32 exactly, so its result is the float32 result rounded once
    to float16 — the same as the ONNX fragment, which casts around a float32 Q/DQ pair.
    """
    arr = np.asarray(x)
    q = quantize(arr, fmt, scale, zero_point, axis, block_size)
    y = dequantize(q, scale, zero_point, axis, block_size)
    with np.errstate(over="ignore"):
        return y.astype(arr.dtype) if arr.dtype.kind == "f" else y


# --------------------------------------------------------------------------------------------
# Scale and zero point from a range (spec §3.1, compute_scale_zp)
# --------------------------------------------------------------------------------------------


def pow2_scale(scale: Any, rounding: Literal["ceil", "nearest"] = "ceil") -> np.ndarray:
    """Powers of two near ``scale`` (elementwise), exponent clamped to ±127.

    ``"ceil"``: the smallest power of two ≥ ``scale``, so a range that fits the float scale still
    fits (what "NonOverflow" promises). ``"nearest"``: the reference tool's rint(−log2 s), round half
    to even — it may be *smaller* than ``scale`` and clip; it is sound only as the starting point of
    a search that measures the error (PowerOfTwo MinMSE).
    """
    s = np.clip(np.asarray(scale, dtype=np.float64), 2.0**-127, 2.0**127)
    if rounding == "ceil":
        pos = np.floor(-np.log2(s))
    elif rounding == "nearest":
        pos = np.rint(-np.log2(s))
    else:
        raise ValueError(f"pow2 rounding must be 'ceil' or 'nearest', got {rounding!r}")
    return np.exp2(-pos)


def int16_scale(scale: Any, rounding: Literal["ceil", "nearest"] = "ceil") -> np.ndarray:
    """Scales of the form ``M / 2^N`` (N = 0..16, 1 ≤ M ≤ 32767) near ``scale``, elementwise.

    ``"nearest"`` is the reference tool's ``Int16Method.MinMax`` search (M ∈ {floor, ceil}(s·2^N),
    first best wins); it may pick a value below ``scale`` and so clip the range ends. ``"ceil"``
    picks the closest candidate that is ≥ ``scale`` (never clips). M = 0 is excluded in both (the
    reference allows it, which gives scale 0 for tiny scales).
    """
    if rounding not in ("ceil", "nearest"):
        raise ValueError(f"int16 scale rounding must be 'ceil' or 'nearest', got {rounding!r}")
    s = np.asarray(scale, dtype=np.float64)
    best = np.full(s.shape, np.nan)
    best_err = np.full(s.shape, np.inf)
    for n in range(17):
        p = 2.0**n
        for m in (np.floor(s * p), np.ceil(s * p)):
            ok = (m >= 1) & (m <= 32767)
            cand = m / p
            if rounding == "ceil":
                ok &= cand >= s
            err = np.abs(cand - s)
            better = ok & (err < best_err)
            best = np.where(better, cand, best)
            best_err = np.where(better, err, best_err)
    if np.any(np.isnan(best)):
        raise ValueError(f"no M/2^N (1 <= M <= 32767, N <= 16) for scale(s) {s[np.isnan(best)][:4]}")
    return best


def _grid_scale_zp(rmin: Any, rmax: Any, qmin: int, qmax: int, symmetric: bool, *,
                   warn: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spec §3.1 steps 1-5 on float64 arrays: the range widened to hold 0, clamped to ±FLT_MAX/2,
    made symmetric if asked; ``scale = (hi − lo)/(qmax − qmin)``; ``zp = rint(qmin − lo/scale)``.
    Returns ``(scale, zp, tiny)``, ``tiny`` marking scales below FLT_MIN (their zp is 0): the one
    place a range becomes a scale, for every caller."""
    lo = np.minimum(np.asarray(rmin, dtype=np.float64), 0.0)
    hi = np.maximum(np.asarray(rmax, dtype=np.float64), 0.0)
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise ValueError(f"range contains NaN: rmin={rmin!r}, rmax={rmax!r}")
    if np.any(lo < -FLT_MAX / 2) or np.any(hi > FLT_MAX / 2):
        if warn:
            logger.warning("range [%s, %s] exceeds ±FLT_MAX/2 and is clamped", np.min(lo), np.max(hi))
        lo = np.maximum(lo, -FLT_MAX / 2)
        hi = np.minimum(hi, FLT_MAX / 2)
    if symmetric:
        a = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -a, a
    scale = (hi - lo) / float(qmax - qmin)
    if np.any(np.isnan(scale)):
        raise ValueError(f"scale is NaN for range [{rmin!r}, {rmax!r}]")
    tiny = scale < FLT_MIN
    zp = np.where(tiny, 0.0, np.rint(qmin - lo / np.where(tiny, 1.0, scale)))
    return scale, zp, tiny


def compute_scale_zp(
    rmin: Any,
    rmax: Any,
    fmt: str,
    *,
    symmetric: bool,
    reduce_range: bool = False,
    scale_kind: ScaleKind = "float",
    pow2_rounding: Literal["ceil", "nearest"] = "ceil",
    int16_rounding: Literal["ceil", "nearest"] = "ceil",
    unsigned_symmetric_midpoint: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Scale (float32) and zero point (storage dtype) that map ``[rmin, rmax]`` onto ``qrange``.

    Elementwise over arrays (per-channel ranges). Steps (spec §3.1): the range is widened to hold 0,
    clamped to ±FLT_MAX/2, made symmetric if asked; ``scale = (rmax − rmin)/(qmax − qmin)`` in
    float64; a scale below FLT_MIN becomes (1, 0); ``zp = round_half_even(qmin − rmin/scale)``.
    ``scale_kind="pow2"`` then rounds the scale to a power of two (:func:`pow2_scale`), and
    ``"int16"`` to ``M/2^N`` (:func:`int16_scale`); the zero point is kept (as the reference does).
    With ``unsigned_symmetric_midpoint`` a symmetric unsigned zero point that landed one below the
    midpoint is moved to it (uint8: 127 → 128, the reference's fix, applied to every unsigned type).
    """
    t = int_type(fmt)
    qmin, qmax = qrange(fmt, symmetric, reduce_range)
    scale, zp, tiny = _grid_scale_zp(rmin, rmax, qmin, qmax, symmetric)
    safe = np.where(tiny, 1.0, scale)
    scale = safe
    if scale_kind == "pow2":
        scale = np.where(tiny, 1.0, pow2_scale(scale, pow2_rounding))
    elif scale_kind == "int16":
        scale = np.where(tiny, 1.0, int16_scale(safe, int16_rounding))
    elif scale_kind != "float":
        raise ValueError(f"scale_kind must be 'float', 'pow2' or 'int16', got {scale_kind!r}")
    zp = np.clip(zp, t.qmin, t.qmax)
    if symmetric and not t.signed and unsigned_symmetric_midpoint:
        zp = np.where(zp == (qmin + qmax) // 2, (qmin + qmax + 1) // 2, zp)
    return np.asarray(scale, dtype=np.float32), np.asarray(zp).astype(np.int64).astype(t.dtype)


def grid_scale_zero_point(rmin: float, rmax: float, qmin: int, qmax: int, symmetric: bool) -> tuple[float, int]:
    """Float scale and zero point for ``[rmin, rmax]`` on the grid ``[qmin, qmax]`` (spec §3.1
    steps 1-5): the rule of :func:`compute_scale_zp` before its scale-kind rounding and zero-point
    clipping, for one range. Range searches (MinMSE, percentile grids) evaluate their candidates
    with it exactly as the quantizer will realise them.
    """
    scale, zp, tiny = _grid_scale_zp(rmin, rmax, qmin, qmax, symmetric, warn=False)
    if tiny:
        return 1.0, 0
    return float(np.float32(scale)), int(zp)


def grid_scales_zero_points(rmin: np.ndarray, rmax: np.ndarray, qmin: int, qmax: int,
                            symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`grid_scale_zero_point` of many ranges at once: float64 arrays of the scales (each
    rounded to float32, 1.0 where tiny) and the zero points (0 where tiny), element for element
    the values it gives one range at a time (the same float64 arithmetic elementwise). Why: a
    MinMSE search evaluates 100 candidate windows per tensor, and a Python call per window was
    most of its time (PP-OCRv4 rec A8W8: 32 searches, 3200 calls)."""
    scale, zp, tiny = _grid_scale_zp(rmin, rmax, qmin, qmax, symmetric, warn=False)
    scales = np.where(tiny, 1.0, np.asarray(scale, dtype=np.float32).astype(np.float64))
    # + 0.0: a zero point of -0.0 (rint of a small negative) is the integer 0 one range at a time
    return scales, np.where(tiny, 0.0, zp) + 0.0


def grid_fake_quantize(x: np.ndarray, scale: float | np.ndarray, zp: float | np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """In float64, for range searches: ``(clip(rint(x / s) + zp, qmin, qmax) - zp) * s`` (round half to even, like QuantizeLinear)."""
    return (np.clip(np.rint(x / scale) + zp, qmin, qmax) - zp) * scale


def grid_pow2_scale(
    rmin: float, rmax: float, qmin: int, qmax: int, symmetric: bool, rounding: str = "ceil"
) -> tuple[float, int]:
    """Power-of-two scale and zero point for ``[rmin, rmax]`` on the grid ``[qmin, qmax]``.

    ``rounding="nearest"`` is the reference rule (exponent rounded half-to-even; may clip).
    ``rounding="ceil"`` returns the smallest power of two whose grid, with some integer zero point,
    covers ``[min(rmin,0), max(rmax,0)]`` - it never clips. Symmetric grids keep the zero point
    at the middle (0 for signed, 128 for uint8).
    """
    scale, zp = grid_scale_zero_point(rmin, rmax, qmin, qmax, symmetric)
    if rounding == "nearest":
        return float(pow2_scale(scale, "nearest")), zp
    if rounding != "ceil":
        raise ValueError(f"pow2 rounding must be 'ceil' or 'nearest', got {rounding!r}")
    lo, hi = min(float(rmin), 0.0), max(float(rmax), 0.0)
    if symmetric:
        a = max(-lo, hi)
        lo, hi = -a, a
        zp = 0 if qmin < 0 else (qmin + qmax + 1) // 2
    if hi - lo < FLT_MIN:
        return 1.0, zp
    e = math.ceil(math.log2(max(scale, 2.0**-127)))
    for _ in range(4):
        s = 2.0**e
        if symmetric:
            z_ok = (qmin - zp) * s <= lo and (qmax - zp) * s >= hi
        else:
            z_lo, z_hi = math.ceil(qmin - lo / s), math.floor(qmax - hi / s)
            z_ok = z_lo <= z_hi
            if z_ok:
                zp = int(min(max(int(np.rint(qmin - lo / s)), z_lo), z_hi))
        if z_ok:
            return s, zp
        e += 1
    raise ValueError(f"no power-of-two grid on [{qmin}, {qmax}] covers [{rmin}, {rmax}]")


# --------------------------------------------------------------------------------------------
# Weights and biases
# --------------------------------------------------------------------------------------------


def weight_range(w: Any, axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(min, max)`` of ``w`` (float64), over the whole tensor or per slice along ``axis``; an
    empty tensor has the range ``(0, 0)``."""
    arr = np.asarray(w, dtype=np.float64)
    if axis is None:
        return (np.asarray(arr.min()), np.asarray(arr.max())) if arr.size else (np.asarray(0.0), np.asarray(0.0))
    ax = _normalise_axis(int(axis), arr.ndim)
    others = tuple(i for i in range(arr.ndim) if i != ax)
    return arr.min(axis=others), arr.max(axis=others)


def quantize_bias(
    b: Any, act_scale: Any, weight_scale: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Int32 bias: ``(q, bias_scale)`` with ``bias_scale = act_scale · weight_scale`` (float32).

    ``q = clip(round_half_even(b / bias_scale), int32)`` evaluated in float64 (spec §3.1); zero point
    0. Values that saturate are logged as a warning because they change the model's output.
    """
    bias = np.asarray(b, dtype=np.float64)
    bias_scale = (np.asarray(act_scale, dtype=np.float32) * np.asarray(weight_scale, dtype=np.float32)).astype(
        np.float32
    )
    if np.any(bias_scale <= 0) or not np.all(np.isfinite(bias_scale)):
        raise ValueError(f"bias scale must be finite and > 0, got {bias_scale.ravel()[:4]}")
    bs = np.broadcast_to(bias_scale.reshape(-1) if bias_scale.size > 1 else bias_scale.reshape(()), bias.shape)
    r = np.rint(bias / bs.astype(np.float64))
    info = np.iinfo(np.int32)
    if np.any((r < info.min) | (r > info.max)):
        logger.warning("int32 bias saturates: %d value(s) out of range", int(np.sum((r < info.min) | (r > info.max))))
    q = np.clip(r, info.min, info.max).astype(np.int32)
    return q, bias_scale.reshape(-1) if bias_scale.ndim else bias_scale.reshape(1)
