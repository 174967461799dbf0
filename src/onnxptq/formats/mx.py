"""OCP Microscaling (MX v1.0) fake quantization: the NumPy reference (the truth).

A block of ``block_size`` elements along ``axis`` shares one E8M0 scale ``2**X`` with
``X = floor(log2(amax)) - emax_elem`` (OCP MX v1.0 §6.3), clamped to the E8M0 range: below −127 it
is −127; above +127 the block would decode as NaN (microxcaling ``_quantize_mx``). For float32
input ``amax < 2**128`` and ``emax_elem >= 0``, so ``X <= 127`` always and the NaN case cannot occur
(float16 input even less so); the rule is kept for clarity. Each element ``x / 2**X`` is rounded to
the element grid (subnormals included) and saturated to the element's max normal.

Element rounding: FP elements always round half to even (as the OCP spec requires and the
reference tool does); INT8 honours ``rounding_mode`` (0 half away from zero, 1 half towards +inf,
2 half to even). Signs of zero are kept: a negative input that rounds to zero gives −0 and −0 stays
−0 (the reference tool returns +0 for FP elements, which throws away the sign IEEE arithmetic
keeps). MXINT8 follows OCP: symmetric codes ±127 with an implicit 2^−6 (the reference tool clamps
to −128; OCP and microxcaling leave −128 unused so the format stays symmetric).

Inf/NaN inputs pass through unchanged and are ignored in the block max (spec §3.6). Blocks are
zero-padded at the end of a ragged axis; zeros never raise the scale. A tensor of one element is
quantized like any other block (the reference tool returns it unchanged, which would let a
non-representable value through; we treat it as a block of one). Rank-1 tensors ignore ``axis``.

``scale_search=1`` (our extension, off by default) tries, per block, the spec exponent ``X`` and
``X + 1`` (when ``X + 1 <= 127``) and keeps the one with the smaller squared error; ties keep
``X``. The comparison sums ``(y1 - y0) * ((y1 + y0) - 2x)`` in float64 in order along the block,
which is the difference of the two squared errors, with ``y0``/``y1`` the values as returned (in
the input dtype, so a candidate that overflows to Inf is never chosen); the ONNX function
computes the same terms with a float64 ``ReduceSum``, whose summation order could differ from ours
only by rounding in the last bits of a sum that is a near-exact tie.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .base import MX_ELEMENT_DTYPES
from .blocks import from_blocks, to_blocks
from .floating import FLOAT_TYPES

log = logging.getLogger(__name__)

#: E8M0 exponent range (bias 127; 0xFF is NaN).
E8M0_MIN = -127
E8M0_MAX = 127


@dataclass(frozen=True)
class ElementFormat:
    """One MX element type: ``mbits`` mantissa bits, ``emin``/``emax`` normal exponents, max value.

    For ``int8`` the grid is ``q / 64`` with ``|q| <= 127`` (fixed point, ``emax = 0``).
    """

    name: str
    ebits: int
    mbits: int
    emax: int
    emin: int
    max_norm: float

    @property
    def is_int(self) -> bool:
        return self.ebits == 0


ELEMENT_FORMATS: dict[str, ElementFormat] = {
    "int8": ElementFormat("int8", 0, 6, 0, 0, 127.0 / 64.0),
    # The fp8 maxima are the float8 element types' own (formats/floating.py holds them once).
    "fp8_e4m3": ElementFormat("fp8_e4m3", 4, 3, 8, -6, FLOAT_TYPES["fp8_e4m3"].max),
    "fp8_e5m2": ElementFormat("fp8_e5m2", 5, 2, 15, -14, FLOAT_TYPES["fp8_e5m2"].max),
    "fp6_e3m2": ElementFormat("fp6_e3m2", 3, 2, 4, -2, 28.0),
    "fp6_e2m3": ElementFormat("fp6_e2m3", 2, 3, 2, 0, 7.5),
    "fp4_e2m1": ElementFormat("fp4_e2m1", 2, 1, 2, 0, 6.0),
}
assert tuple(ELEMENT_FORMATS) == MX_ELEMENT_DTYPES


def check_attributes(
    element_dtype: str, axis: int, block_size: int, rounding_mode: int, scale_search: int
) -> ElementFormat:
    """Validate the MXAttributes; raise ``ValueError``/``TypeError`` naming the bad one."""
    if not isinstance(element_dtype, str) or element_dtype.lower() not in ELEMENT_FORMATS:
        raise ValueError(
            f"element_dtype={element_dtype!r} is not an MX element type; expected one of "
            f"{', '.join(MX_ELEMENT_DTYPES)}"
        )
    for name, value in (("axis", axis), ("block_size", block_size), ("rounding_mode", rounding_mode),
                        ("scale_search", scale_search)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if rounding_mode not in (0, 1, 2):
        raise ValueError(f"rounding_mode must be 0 (half away), 1 (half up) or 2 (half even), got {rounding_mode}")
    if scale_search not in (0, 1):
        raise ValueError(f"scale_search must be 0 or 1, got {scale_search}")
    return ELEMENT_FORMATS[element_dtype.lower()]


def normalize_axis(axis: int, ndim: int) -> int:
    """The block axis for a tensor of rank ``ndim``: rank ≤ 1 ignores ``axis``; else check range."""
    if ndim <= 1:
        return 0
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis={axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def floor_log2(a: np.ndarray) -> np.ndarray:
    """Exact ``floor(log2(a))`` for finite ``a > 0`` (via frexp, no rounding); ``-inf`` where a == 0."""
    mant, exp = np.frexp(a)
    return np.where(a > 0, exp.astype(np.float64) - 1.0, -np.inf)


def round_int(w: np.ndarray, rounding_mode: int) -> np.ndarray:
    """Round float64 ``w`` to integers (0 half away, 1 half up, 2 half even), keeping the sign of zero."""
    if rounding_mode == 0:
        r = np.floor(np.abs(w) + 0.5)  # exact in float64 for |w| < 2**52
    elif rounding_mode == 1:
        r = np.abs(np.floor(w + 0.5))
    else:
        r = np.abs(np.rint(w))
    return np.copysign(r, w)


def quantize_elements(v: np.ndarray, fmt: ElementFormat, rounding_mode: int) -> np.ndarray:
    """Round ``v`` (float64, in element units) onto the element grid with saturation; sign of zero kept."""
    if fmt.is_int:
        c = np.clip(round_int(v * 64.0, rounding_mode), -127.0, 127.0)
        return np.copysign(np.abs(c) / 64.0, v)
    a = np.abs(v)
    e = np.maximum(floor_log2(a), fmt.emin)
    quantum = np.exp2(e - fmt.mbits)
    q = np.minimum(np.rint(a / quantum) * quantum, fmt.max_norm)
    return np.copysign(q, v)


def shared_exponent(amax: np.ndarray, fmt: ElementFormat) -> np.ndarray:
    """OCP MX shared exponent ``floor(log2(amax)) - emax`` clamped to E8M0 (NaN above +127)."""
    with np.errstate(invalid="ignore"):
        x = floor_log2(amax) - fmt.emax
    x = np.maximum(x, E8M0_MIN)
    return np.where(x > E8M0_MAX, np.nan, x)


def _dequant(xb: np.ndarray, exp: np.ndarray, fmt: ElementFormat, rounding_mode: int) -> np.ndarray:
    """Fake-quantize blocks ``xb`` (float64, last axis = block) with per-block exponent ``exp``."""
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.exp2(exp)
        return quantize_elements(xb / scale, fmt, rounding_mode) * scale


def fake_quantize(
    x: np.ndarray,
    *,
    element_dtype: str = "int8",
    axis: int = 1,
    block_size: int = 32,
    rounding_mode: int = 0,
    scale_search: int = 0,
) -> np.ndarray:
    """MX quantize-dequantize ``x`` (float32 or float16; the result has the dtype of ``x``)."""
    fmt = check_attributes(element_dtype, axis, block_size, rounding_mode, scale_search)
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float16):
        raise TypeError(f"MX fake_quantize takes float32 or float16 input, got {x.dtype}")
    if x.size == 0:
        return x.copy()
    ax = normalize_axis(int(axis), x.ndim)
    blocks, view = to_blocks(np.atleast_1d(x).astype(np.float32), ax, block_size)
    xb = blocks.astype(np.float64)

    finite = np.isfinite(xb)
    a = np.where(finite, np.abs(xb), 0.0)
    amax = a.max(axis=-1, keepdims=True)
    exp = shared_exponent(amax, fmt)
    y = _dequant(xb, exp, fmt, rounding_mode)
    if scale_search:
        # Candidates are compared as the values we would return (in the input's dtype), so one
        # that overflows float32 or float16 has an infinite error and is never chosen.
        exp1 = np.where(exp + 1 <= E8M0_MAX, exp + 1, exp)
        with np.errstate(over="ignore", invalid="ignore"):
            y0 = y.astype(np.float32).astype(x.dtype).astype(np.float64)
            y1 = _dequant(xb, exp1, fmt, rounding_mode).astype(np.float32).astype(x.dtype).astype(np.float64)
            delta = np.where(finite, (y1 - y0) * ((y1 + y0) - 2.0 * xb), 0.0)
        total = np.zeros(delta.shape[:-1] + (1,), np.float64)
        for i in range(block_size):  # in order along the block, like the ONNX ReduceSum
            total = total + delta[..., i : i + 1]
        y = np.where(total < 0, _dequant(xb, exp1, fmt, rounding_mode), y)
    y = np.where(finite, y, xb).astype(np.float32)
    return from_blocks(y, view).reshape(x.shape).astype(x.dtype)
