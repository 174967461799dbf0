"""Block floating point: BFP16 (``to_bfp``) and shared micro-exponents MX4/MX6/MX9 (``to_bfp_prime``).

This module is the NumPy reference — the truth the ONNX realisation in
:mod:`onnxptq.onnx_ops.bfp` is held bit-exact to. It deliberately works on the IEEE bit fields
(integer exponents and mantissas), the way the reference tool's kernels do, rather than on the
float tricks the ONNX function uses: two independent derivations that must agree are a much
stronger test than one formula written twice.

Semantics (reference tool ``BFPCPUKernel`` / ``BFPPrimeCPUKernel``, spec §3.4, §3.5, §3.7):

``to_bfp``
    Per block of ``block_size`` elements along ``axis``: ``Es`` = the largest biased exponent
    (Inf/NaN count as 0), ``scale = 2^(Es-127-(m-1))`` with ``m = bit_width-9``; each finite x
    becomes ``R(x/scale)·scale`` clamped to ``±(2^m-1)·scale``; Inf/NaN pass through unchanged.
    ``R`` is rounding mode 0 (half away from zero), 1 (half towards +inf) or 2 (half to even —
    the reference's ``py3_round``, which returns +0 for values in [-0.5, 0)).
``to_bfp_prime``
    Two-level block: ``Es`` over the block (Inf/NaN count as 255: the whole block becomes NaN),
    each ``sub_block_size`` sub-block gets ``shift = min(Es - Ej, 2^d - 1)``; the 24-bit
    significand of each element is shifted right and rounded to an ``m``-bit magnitude that
    never rounds past ``2^m-1``; subnormal inputs flush to ±0; the sign of zero follows x.

Differences from the reference tool, all deliberate (see docs/formats.md):

* ``block_size % sub_block_size != 0`` (``to_bfp_prime``): the tool leaves the trailing
  elements of every block unwritten (garbage); here they form a shorter last sub-block.
  ``sub_block_size > block_size`` likewise means one sub-block per block.
* ``convert_to_bfloat_before_bfp=1``: the tool rounds the caller's input buffer in place; here
  the input is never modified. NaN stays NaN (the tool's bit trick can turn a NaN whose payload
  sits in the low 16 bits into ±Inf or 0).
* ``use_compiler_version_cpu_kernel=1``: the tool tests the rounded codes against the literal
  ±128 (right for m = 7, i.e. BFP16); here the test is against ±2^m, so other bit widths get
  the same "bump the exponent once on overflow" meaning. Identical for bit_width 16. The
  option only exists for ``to_bfp``; it is ignored by ``to_bfp_prime`` as in the tool.
"""

from __future__ import annotations

import logging
from typing import Any

import ml_dtypes
import numpy as np

from .blocks import from_blocks, max_last, to_blocks

log = logging.getLogger(__name__)

#: Method names accepted; "to_bfp_prime_shared" is the tool's legacy spelling of "to_bfp_prime".
BFP_METHODS = ("to_bfp", "to_bfp_prime", "to_bfp_prime_shared")
#: bit_width counts 8 shared-exponent bits + 1 sign bit + m mantissa bits; m must be 1..23
#: (m = 24 would need a scale below the smallest float32 subnormal).
MIN_BIT_WIDTH = 10
MAX_BIT_WIDTH = 32
#: sub_block_shift_bits above 8 cannot change anything: a shift is at most 254 anyway.
MAX_SHIFT_BITS = 8

#: The user-facing presets of the reference tool (docs: BFPQuantizeDequantize.rst).
PRESETS: dict[str, dict[str, Any]] = {
    "BFP16": dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=2),
    "MX9": dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, sub_block_size=2,
                sub_block_shift_bits=1, rounding_mode=2),
    "MX6": dict(bfp_method="to_bfp_prime", bit_width=13, block_size=16, sub_block_size=2,
                sub_block_shift_bits=1, rounding_mode=2),
    "MX4": dict(bfp_method="to_bfp_prime", bit_width=11, block_size=16, sub_block_size=2,
                sub_block_shift_bits=1, rounding_mode=2),
}


def _as_int(name: str, value: Any) -> int:
    """``value`` as a Python int, or a ValueError naming the attribute."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    raise ValueError(f"BFP attribute {name!r} must be an integer, got {value!r}")


def normalize_attrs(
    *,
    bfp_method: str = "to_bfp",
    axis: int = 1,
    bit_width: int = 16,
    block_size: int = 8,
    sub_block_size: int = 2,
    sub_block_shift_bits: int = 1,
    rounding_mode: int = 0,
    convert_to_bfloat_before_bfp: int = 0,
    use_compiler_version_cpu_kernel: int = 0,
) -> dict[str, Any]:
    """Validate the BFPAttributes and return them normalised (method canonical, ints).

    Shared by the reference and the ONNX builder so both reject exactly the same inputs, with
    an error that names the offending attribute (the reference tool fails at run time, or not
    at all, for most of these).
    """
    method = bfp_method.decode() if isinstance(bfp_method, bytes) else bfp_method
    if not isinstance(method, str) or method not in BFP_METHODS:
        raise ValueError(f"unknown bfp_method {bfp_method!r}; expected one of {', '.join(BFP_METHODS)}")
    if method == "to_bfp_prime_shared":
        method = "to_bfp_prime"
    out: dict[str, Any] = {"bfp_method": method}
    out["axis"] = _as_int("axis", axis)
    bw = _as_int("bit_width", bit_width)
    if not MIN_BIT_WIDTH <= bw <= MAX_BIT_WIDTH:
        raise ValueError(
            f"bit_width must be in [{MIN_BIT_WIDTH}, {MAX_BIT_WIDTH}] (8 exponent + 1 sign + "
            f"1..23 mantissa bits), got {bit_width!r}"
        )
    out["bit_width"] = bw
    bs = _as_int("block_size", block_size)
    if bs < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size!r}")
    out["block_size"] = bs
    sbs = _as_int("sub_block_size", sub_block_size)
    if sbs < 1:
        raise ValueError(f"sub_block_size must be >= 1, got {sub_block_size!r}")
    out["sub_block_size"] = sbs
    d = _as_int("sub_block_shift_bits", sub_block_shift_bits)
    if not 0 <= d <= MAX_SHIFT_BITS:
        raise ValueError(f"sub_block_shift_bits must be in [0, {MAX_SHIFT_BITS}], got {sub_block_shift_bits!r}")
    out["sub_block_shift_bits"] = d
    rm = _as_int("rounding_mode", rounding_mode)
    if rm not in (0, 1, 2):
        raise ValueError(
            f"rounding_mode must be 0 (half away from zero), 1 (half up) or 2 (half to even), got {rounding_mode!r}"
        )
    out["rounding_mode"] = rm
    for name, value in (
        ("convert_to_bfloat_before_bfp", convert_to_bfloat_before_bfp),
        ("use_compiler_version_cpu_kernel", use_compiler_version_cpu_kernel),
    ):
        flag = _as_int(name, value)
        if flag not in (0, 1):
            raise ValueError(f"{name} must be 0 or 1, got {value!r}")
        out[name] = flag
    if method == "to_bfp_prime" and out["use_compiler_version_cpu_kernel"]:
        log.warning("use_compiler_version_cpu_kernel only applies to bfp_method 'to_bfp'; ignored")
    return out


# --------------------------------------------------------------------------- rounding (to_bfp)


def _std_round(v: np.ndarray) -> np.ndarray:
    """C ``std::round``: half away from zero, the sign of a zero result kept."""
    t = np.trunc(v)
    return np.where(np.abs(v - t) >= np.float32(0.5), t + np.sign(v), t).astype(np.float32)


def _dpu_round(v: np.ndarray) -> np.ndarray:
    """The tool's ``dpu_round``: negative exact halves go up (ceil), everything else std::round."""
    half_neg = (v < 0) & ((v - np.floor(v)) == np.float32(0.5))
    return np.where(half_neg, np.ceil(v), _std_round(v)).astype(np.float32)


def _py3_round(v: np.ndarray) -> np.ndarray:
    """The tool's ``py3_round``, in float32 like the C code: half to even, but built as
    ``floor(v) + 1``, so v in [-0.5, 0) gives +0 while v = -0 stays -0.

    ``np.rint`` (half to even) with its −0 for v in [-0.5, 0) made +0: the same values as the
    ``floor``/parity construction in a third of the passes (the largest part of BFP16's
    reference; equal on every float32 near the halves, tests/test_bfp_reference_fast.py)."""
    out = np.rint(v)
    neg_zero = (out == 0) & (v < 0)  # v = -0 is not < 0: it stays -0
    if neg_zero.any():
        out[neg_zero] = 0
    return out.astype(np.float32, copy=False)


_ROUND = {0: _std_round, 1: _dpu_round, 2: _py3_round}


def _to_bfp_blocks(b: np.ndarray, m: int, rounding_mode: int, compiler: bool) -> np.ndarray:
    """``BFPCPUKernel`` on ``b`` of shape (..., block_size), float32."""
    bits = b.view(np.uint32)
    e = (bits >> np.uint32(23)) & np.uint32(0xFF)  # uint32: only the block maxima are widened
    special = e == 0xFF
    es = max_last(np.where(special, np.uint32(0), e))[..., None].astype(np.int64)
    del e
    exp = es - 127
    # scale and bounds are computed in double and stored as float, as in the kernel.
    scale = np.ldexp(1.0, exp - (m - 1)).astype(np.float32)
    rnd = _ROUND[rounding_mode]
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        v = (b / scale).astype(np.float32)
        if compiler:
            codes = rnd(np.where(special, np.float32(0), v))
            bump = (codes >= 2.0**m).any(axis=-1, keepdims=True) | (codes < -(2.0**m)).any(axis=-1, keepdims=True)
            exp = exp + bump
            scale = np.where(bump, scale * np.float32(2), scale).astype(np.float32)
            v = (b / scale).astype(np.float32)
            max_v = (np.ldexp(1.0, exp) * (2.0**m - 1)).astype(np.float32)
            min_v = (-np.ldexp(1.0, exp) * 2.0**m).astype(np.float32)
        else:
            max_v = (np.ldexp(1.0, exp + 1) - scale.astype(np.float64)).astype(np.float32)
            min_v = -max_v
        y = rnd(v)  # a fresh float32 array: scaled and clamped in place
        y *= scale
        np.minimum(y, max_v, out=y)
        np.maximum(y, min_v, out=y)  # min_v < 0 < max_v: the order of the two clamps is moot
    return np.where(special, b, y)


def _to_bfp_prime_blocks(b: np.ndarray, m: int, sbs: int, shift_bits: int, rounding_mode: int) -> np.ndarray:
    """``BFPPrimeCPUKernel`` on ``b`` of shape (..., block_size), float32, in integer arithmetic.

    int32 throughout (a biased exponent is < 256, a significand < 2^24, a shift count ≤ 26), and
    the value is scaled per sub-block: the same integers and the same products as in int64 per
    element, in about half the memory traffic (quantizing lac's 58224x128 embedding for MX9 took
    1.0 s of its 4.8 s quantize). Sub-block maxima by halving (:func:`blocks.max_last`: NumPy
    reduces a last axis of 2 row by row, 0.15 s on that embedding), the shift broadcast per
    sub-block rather than repeated per element, and the rounding from one shift that keeps the
    half bit (:func:`_round_shifted`)."""
    bs = b.shape[-1]
    nsb = -(-bs // sbs)
    whole = nsb * sbs == bs
    bits = b.view(np.uint32)
    e = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int32)
    es = max_last(e)[..., None]
    # Sub-block maxima; a ragged last sub-block is padded with exponent 0, which never wins.
    if whole:
        ej = max_last(e.reshape(e.shape[:-1] + (nsb, sbs)))
    else:
        e_pad = np.zeros(e.shape[:-1] + (nsb * sbs,), np.int32)
        e_pad[..., :bs] = e
        ej = max_last(e_pad.reshape(e.shape[:-1] + (nsb, sbs)))
    shift_j = np.minimum(es - ej, (1 << shift_bits) - 1)

    mant = (bits & np.uint32(0x7FFFFF)).astype(np.int32)
    mant |= np.int32(1 << 23)
    mant[e == 0] = 0  # subnormals (and zeros) flush
    # t = es - shift - e + 24 - m >= 24 - m >= 1; from 26 on, r = 0 and tail < half: q = 0
    base = es - shift_j + (24 - m)  # per sub-block
    if whole:
        t = (base[..., None] - e.reshape(e.shape[:-1] + (nsb, sbs))).reshape(e.shape)
    else:
        t = np.repeat(base, sbs, axis=-1)[..., :bs] - e
    np.minimum(t, 26, out=t)
    q = _round_shifted(mant, t, m, rounding_mode, bits)
    del mant, t
    # |y| = q * 2^(es - 127 - shift + 1 - m), per sub-block's scale. A block whose Es is 0 holds
    # only zeros (flushed): its q are 0 and any scale gives them, so it does not bound the scale.
    exps = np.where(es == 0, 0, es - 127 - shift_j + 1 - m)
    nan = np.array(0x7FFFFFFF, np.uint32).view(np.float32)
    if exps.size and exps.min() >= -126 and exps.max() <= 127:
        # float32: q (< 2^24) times a normal power of two is exact and at least 2^-126, so it is
        # the float64 product's value, bit for bit. (Down to 2^-149 it would be too; a normal
        # scale keeps it so where a library has set denormals-are-zero.)
        scale = np.ldexp(np.float32(1), exps).astype(np.float32)
        qf = q.astype(np.float32)
        del q
        with np.errstate(over="ignore"):  # only in blocks with Es = 255, NaN below
            if whole:
                qf = (qf.reshape(qf.shape[:-1] + (nsb, sbs)) * scale[..., None]).reshape(qf.shape)
            else:
                qf *= np.repeat(scale, sbs, axis=-1)[..., :bs]
        y = np.copysign(qf, b)  # the sign of x, zeros included
    else:
        with np.errstate(over="ignore"):  # blocks with Es = 255 overflow here and become NaN below
            scale = np.ldexp(1.0, es - 127 - shift_j + 1 - m)
            qf = q.astype(np.float64)
            if whole:
                qf = (qf.reshape(q.shape[:-1] + (nsb, sbs)) * scale[..., None]).reshape(q.shape)
            else:
                qf *= np.repeat(scale, sbs, axis=-1)[..., :bs]
            y = np.copysign(qf, b).astype(np.float32)  # the sign of x, zeros included
    return np.where(es == 0xFF, nan, y)


def _round_shifted(mant: np.ndarray, t: np.ndarray, m: int, rounding_mode: int, bits: np.ndarray) -> np.ndarray:
    """``mant >> t`` rounded by ``rounding_mode`` and capped at ``2^m - 1`` (int32; ``t`` ≥ 1).

    One shift by ``t - 1`` keeps the half bit: ``r = u >> 1``, the half bit ``u & 1``, and the
    tail below it is nonzero exactly when ``u << (t-1) != mant``. The same ``up`` as comparing
    ``mant & (2^t - 1)`` with ``2^(t-1)`` (greater: half bit and a nonzero rest; equal: half bit
    and a zero rest), without the two mask arrays. ``t`` is modified."""
    t -= 1
    u = mant >> t
    sticky = (u << t) != mant
    r = u >> 1
    up = (u & 1).astype(bool)
    del u
    if rounding_mode == 0:
        pass  # ties away from zero: the half bit alone
    else:
        tie_up = (bits >> np.uint32(31)) == 0 if rounding_mode == 1 else (r & 1) == 1
        up &= sticky | tie_up
    up &= r != (1 << m) - 1  # never rounds past 2^m - 1
    return r + up  # int32


def fake_quantize(
    x: np.ndarray,
    *,
    bfp_method: str = "to_bfp",
    axis: int = 1,
    bit_width: int = 16,
    block_size: int = 8,
    sub_block_size: int = 2,
    sub_block_shift_bits: int = 1,
    rounding_mode: int = 0,
    convert_to_bfloat_before_bfp: int = 0,
    use_compiler_version_cpu_kernel: int = 0,
) -> np.ndarray:
    """Quantize-dequantize ``x`` (float32 or float16) in block floating point; same dtype out.

    Blocks run along ``axis`` (ignored for rank-1 tensors); the last block of a row is
    zero-padded, and a one-element tensor is returned unchanged (spec §3.7). ``x`` itself is
    never modified.
    """
    a = normalize_attrs(
        bfp_method=bfp_method,
        axis=axis,
        bit_width=bit_width,
        block_size=block_size,
        sub_block_size=sub_block_size,
        sub_block_shift_bits=sub_block_shift_bits,
        rounding_mode=rounding_mode,
        convert_to_bfloat_before_bfp=convert_to_bfloat_before_bfp,
        use_compiler_version_cpu_kernel=use_compiler_version_cpu_kernel,
    )
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float16):
        raise TypeError(f"BFP quantization takes float32 or float16 tensors, got {x.dtype}")
    if x.size <= 1:
        return x.copy()
    rank = x.ndim
    if rank == 1:
        ax = 0
    else:
        if not -rank <= a["axis"] < rank:
            raise ValueError(f"axis {a['axis']} is out of range for a tensor of rank {rank}")
        ax = a["axis"] % rank
    xf = x.astype(np.float32)  # always a copy: the caller's buffer is never touched
    if a["convert_to_bfloat_before_bfp"]:
        xf = xf.astype(ml_dtypes.bfloat16).astype(np.float32)

    blocks, view = to_blocks(xf, ax, a["block_size"])
    m = a["bit_width"] - 9
    if a["bfp_method"] == "to_bfp":
        out = _to_bfp_blocks(blocks, m, a["rounding_mode"], bool(a["use_compiler_version_cpu_kernel"]))
    else:
        out = _to_bfp_prime_blocks(blocks, m, a["sub_block_size"], a["sub_block_shift_bits"], a["rounding_mode"])
    return np.ascontiguousarray(from_blocks(out, view)).astype(x.dtype)
