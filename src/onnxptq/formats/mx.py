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

``scale_search`` (our extension, off by default) chooses the shared exponent per block by
squared error, for weights, which are encoded once offline (any E8M0 exponent is a valid MX
block: the spec fixes the decoding ``X·P_i``, and §6.3's rule is the conversion it describes, not a
constraint on the data). ``1`` tries the spec exponent ``X`` and ``X + 1`` (when ``X + 1 <= 127``);
``2`` tries ``X - 1`` (when ``X - 1 >= -127``), ``X`` and ``X + 1``. Each candidate ``c`` is scored by
``t_c = Σ (y_c - y_X) * ((y_c + y_X) - 2x)``, summed in float64 in order along the block, which is
its squared error minus ``X``'s, with ``y`` the values as returned (in the input dtype, so a
candidate that overflows to Inf is never chosen). ``X + 1`` is kept where ``t_{X+1} < 0`` and
``t_{X+1} <= t_{X-1}``, ``X - 1`` where ``t_{X-1} < 0`` and ``t_{X-1} < t_{X+1}``: ties keep ``X``, then
``X + 1``. So the chosen block's squared error never exceeds the spec rule's. ``X + 1`` helps where
the block maximum saturates (E4M3 clips ``[448, 512)·X`` to 448·X, E2M1 ``[6, 8)·X`` to 6·X); ``X - 1``
where the maximum barely exceeds a power of two and the other elements gain a bit (MXINT8: a
maximum of 1.0·2^X clips to 0.99·2^X while every other element's step halves). The ONNX function
computes the same terms with a float64 ``ReduceSum``, whose summation order could differ from ours
only by rounding in the last bits of a sum that is a near-exact tie.

``scale_search=3`` searches nothing: it is a rule for activations, which are encoded at run
time, so a choice by error would quantize every block twice. The exponent is the smallest one
whose grid holds the block maximum: ``X + 1`` where ``amax > max_norm·2^X`` (and ``X + 1 <= 127``),
else ``X`` — ``ceil(log2(amax / max_norm))``, the scale NVIDIA's MXFP8 recipe rounds up to
("Recipes for pre-training LLMs with MXFP8", 2025) instead of OCP's floor. Why it helps FP
elements: OCP's ``X`` puts the maximum in ``[2^emax, 2^(emax+1))·2^X``, and an
E4M3 element saturates at 448 = 1.75·2^8, so about one block in five (a mantissa above 1.75)
clips its largest value by up to 12.5 % — four times the top binade's rounding step — and the
largest value of a block is the one a dot product weighs most. At ``X + 1`` an FP element keeps
its relative precision (the same mantissa bits at every normal magnitude); only values below
``2^(emin+X+1)`` (E4M3: 2^-15 of the maximum) become subnormal. A block that does not saturate
keeps ``X``, so this never changes the OCP encoding of a block OCP encodes without clipping;
nor does it where the power of two above the maximum overflows the input's dtype (the maximum
could round up to it; float16 input from 2^15, float32 from 2^127). A few ops on the block
maxima (1/block of the elements) at run time. The quantizer applies it to activations only when
asked (``QuantConfig.mx_activation_scale_search=3``; bench/RESULTS.md "The MX activations' exponent").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .base import MX_ELEMENT_DTYPES
from .blocks import from_blocks, to_blocks
from .floating import FLOAT_TYPES

log = logging.getLogger(__name__)

#: E8M0 exponent range (bias 127; 0xFF is NaN).
E8M0_MIN = -127
E8M0_MAX = 127
#: ``scale_search`` values: 0 the OCP exponent X; 1 X or X+1; 2 X-1, X or X+1 (by squared error);
#: 3 X, or X+1 where X saturates the block maximum (no search; see the module doc).
SCALE_SEARCHES = (0, 1, 2, 3)
#: The ``scale_search`` values that choose by squared error (quantize a block more than once).
ERROR_SEARCHES = (1, 2)
#: The ``scale_search`` value that takes the smallest exponent holding the block maximum.
NO_SATURATION = 3


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
    if scale_search not in SCALE_SEARCHES:
        raise ValueError(f"scale_search must be 0 (the OCP exponent), 1 (it or the one above), 2 (the one "
                         f"below, it or the one above) or 3 (the one above where the OCP exponent saturates the "
                         f"block maximum), got {scale_search}")
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


#: The ml_dtypes type of each FP element grid: :func:`_half_even_by_cast` rounds by a cast to it,
#: the packer (onnx_ops/packed.py) stores its bit patterns.
ELEMENT_ML_DTYPES = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
                  "fp6_e3m2": ml_dtypes.float6_e3m2fn, "fp6_e2m3": ml_dtypes.float6_e2m3fn,
                  "fp4_e2m1": ml_dtypes.float4_e2m1fn}
#: :func:`_dequant` rounds half-even FP elements by a cast to their ml_dtypes type (False: by
#: :func:`quantize_elements`' arithmetic, as every other case; the tests compare the two).
CAST_HALF_EVEN = True


def _half_even_by_cast(v: np.ndarray, fmt: ElementFormat) -> np.ndarray:
    """:func:`quantize_elements` of ``v`` with ``rounding_mode=2`` on an FP element grid, for ``v``
    holding float32 values (a float32 block over a power of two): clipped to ``max_norm``, then
    cast to the element's ml_dtypes type.

    The same values: the arithmetic rounds half-even on the same grid (the normal binades and the
    subnormal step ``2^(emin - mbits)``) and then saturates; rounding is monotonic and ``max_norm``
    is on the grid, so clipping first changes nothing. The cast rounds once where ``v`` is a float32
    (ml_dtypes goes through float32: an arbitrary float64 could round twice, hence not for any
    ``v``), and a quotient below float32's normal range is far below the grid's first half step
    (0 either way, its sign kept). NaN stays NaN (the FP6/FP4 types have none to keep it).
    Why: the arithmetic (frexp, exp2, a division, rint over float64 copies of every block) was most
    of an MXFP8 weight's fake quantization (ViT-S MXFP8_E4M3; bench/RESULTS.md, issue 26, branch
    blocktime6)."""
    a = np.abs(v)
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.minimum(a, fmt.max_norm).astype(ELEMENT_ML_DTYPES[fmt.name]).astype(np.float64)
    return np.copysign(np.where(np.isnan(a), a, q), v)


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


def unsaturated_exponent(amax: np.ndarray, exp: np.ndarray, fmt: ElementFormat, dtype: np.dtype) -> np.ndarray:
    """``exp`` (OCP's, from :func:`shared_exponent`) raised by one on the blocks whose maximum
    ``amax`` it saturates (``amax > max_norm·2^exp``), within E8M0 (``scale_search=3``).

    Not where the power of two above ``amax`` overflows the input's ``dtype`` (float32 ``amax``
    of 2^127 or more, float16 of 2^15 or more): there the maximum may round up to it at ``X + 1``
    and come back as Inf, while OCP's ``X`` clips it to a finite value."""
    with np.errstate(invalid="ignore", over="ignore"):
        room = np.isfinite(np.exp2(exp + 1 + fmt.emax).astype(np.float32).astype(dtype))
        clips = (amax > fmt.max_norm * np.exp2(exp)) & (exp + 1 <= E8M0_MAX) & room
    return np.where(clips, exp + 1, exp)


def _dequant(xb: np.ndarray, exp: np.ndarray, fmt: ElementFormat, rounding_mode: int) -> np.ndarray:
    """Fake-quantize blocks ``xb`` (float64, last axis = block) with per-block exponent ``exp``."""
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.exp2(exp)
        if rounding_mode == 2 and not fmt.is_int and CAST_HALF_EVEN:  # xb holds float32 values
            return _half_even_by_cast(xb / scale, fmt) * scale
        return quantize_elements(xb / scale, fmt, rounding_mode) * scale


def _as_returned(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``y`` (float64) as :func:`fake_quantize` returns it (float32, then ``dtype``), in float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        return y.astype(np.float32).astype(dtype).astype(np.float64)


def _error_change(xb: np.ndarray, y0: np.ndarray, yc: np.ndarray, finite: np.ndarray, block_size: int) -> np.ndarray:
    """Per block, the squared error of ``yc`` minus that of ``y0`` (both as returned), summed in
    order along the block like the ONNX function's ReduceSum."""
    with np.errstate(over="ignore", invalid="ignore"):
        delta = np.where(finite, (yc - y0) * ((yc + y0) - 2.0 * xb), 0.0)
    total = np.zeros(delta.shape[:-1] + (1,), np.float64)
    for i in range(block_size):
        total = total + delta[..., i : i + 1]
    return total


def choose_exponent(xb: np.ndarray, y: np.ndarray, exp: np.ndarray, finite: np.ndarray, fmt: ElementFormat,
                    rounding_mode: int, scale_search: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The per-block exponents ``scale_search`` keeps (module doc) and the blocks quantized with
    them (float64), from the blocks ``xb`` (float64), their values ``y`` quantized with the OCP
    exponents ``exp`` and the mask of finite elements. ``dtype``: the input's, as returned."""
    bs = xb.shape[-1]
    y0 = _as_returned(y, dtype)
    up = np.where(exp + 1 <= E8M0_MAX, exp + 1, exp)
    y_up = _dequant(xb, up, fmt, rounding_mode)
    t_up = _error_change(xb, y0, _as_returned(y_up, dtype), finite, bs)
    if scale_search == 1:
        take_up = t_up < 0
        return np.where(take_up, up, exp), np.where(take_up, y_up, y)
    down = np.where(exp - 1 >= E8M0_MIN, exp - 1, exp)
    # X-1 is scored only on the blocks where it can win (float32 input, so the values as returned
    # are the float64 ones): there the block maximum ``amax`` clips to ``max_norm·2^(X-1)``, an
    # error of at least ``amax - max_norm·2^(X-1)``, while at X an element that does not saturate
    # errs by at most half the top binade's step ``h·2^X`` (``h = 2^(emax-mbits-1)``; 1/128 for
    # INT8) and one that saturates at X clips further at X-1. So the block's squared error can only
    # fall if ``amax/2^X - max_norm/2 < sqrt(block)·h``: for log-uniform maxima about one MXINT8
    # block in twenty and three E4M3 blocks in ten. Elsewhere ``t_down > 0``, as the full sum gives.
    maybe = down != exp
    if dtype == np.float32:
        with np.errstate(invalid="ignore", over="ignore"):
            amax = np.where(finite, np.abs(xb), 0.0).max(axis=-1, keepdims=True)
            h = 2.0 ** (fmt.emax - fmt.mbits - 1)
            maybe &= amax / np.exp2(exp) - fmt.max_norm / 2 < np.sqrt(bs) * h * (1 + 2.0**-20)
    t_down = np.full_like(t_up, np.inf)
    y_down = y
    rows = np.flatnonzero(maybe.reshape(-1))
    if rows.size:
        flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731  (blocks as rows)
        xs, ds, fs = flat(xb)[rows], flat(down)[rows], flat(finite)[rows]
        yd = _dequant(xs, ds, fmt, rounding_mode)
        t_down.reshape(-1)[rows] = _error_change(xs, flat(y0)[rows], _as_returned(yd, dtype), fs, bs).reshape(-1)
        y_down = flat(y).copy()
        y_down[rows] = yd
        y_down = y_down.reshape(y.shape)
    take_up = (t_up < 0) & (t_up <= t_down)
    take_down = (t_down < 0) & (t_down < t_up)
    chosen = np.where(take_up, up, np.where(take_down, down, exp))
    return chosen, np.where(take_up, y_up, np.where(take_down, y_down, y))


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
    if scale_search == NO_SATURATION:
        exp = unsaturated_exponent(amax, exp, fmt, x.dtype)
    y = _dequant(xb, exp, fmt, rounding_mode)
    if scale_search in ERROR_SEARCHES:
        exp, y = choose_exponent(xb, y, exp, finite, fmt, rounding_mode, scale_search, x.dtype)
    y = np.where(finite, y, xb).astype(np.float32)
    return from_blocks(y, view).reshape(x.shape).astype(x.dtype)
