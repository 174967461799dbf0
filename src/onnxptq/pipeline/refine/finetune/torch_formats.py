"""Every weight format's fake quantization in torch, with a straight-through gradient.

Fast finetuning optimises weights *through* the quantizer the model will run, so the forward
pass here must be the NumPy reference of :mod:`onnxptq.formats` bit for bit — otherwise the
optimiser would tune a slightly different model than the one emitted, and "never worse" could not
be judged exactly. Each function below is a line-by-line port of its reference (same float32 /
float64 / integer arithmetic, same order), tested bit-exact against it on random and edge-case
tensors. The backward pass is the identity (straight-through estimator), as in the reference
tool: rounding has zero gradient almost everywhere, so the identity is what lets the weight move.

Powers of two are built from their IEEE bit pattern rather than ``exp2``/``ldexp`` so that they
are exact on every device (a GPU ``exp2`` need not be correctly rounded).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
import torch

from ....formats import bfp as bfp_ref
from ....formats import mx as mx_ref
from ....formats.base import FLOAT_FORMATS, INTEGER_FORMATS, check_format
from ....formats.blocks import from_blocks, to_blocks
from ....formats.floating import float_type, resolve_saturate
from ....formats.integer import int_type

log = logging.getLogger(__name__)

__all__ = ["fake_quantize", "ste", "integer_grid"]


# ------------------------------------------------------------------------------------ helpers


def pow2_f64(k: torch.Tensor) -> torch.Tensor:
    """Exact ``2.0**k`` in float64 for integer ``k`` in [-1022, 1023] (normal doubles), via the bits."""
    k = k.to(torch.int64)
    return torch.bitwise_left_shift(k + 1023, 52).view(torch.float64)


def _f32_bits(x: torch.Tensor) -> torch.Tensor:
    """The IEEE bits of float32 ``x`` as non-negative int64 (torch has no uint32 arithmetic)."""
    return x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _broadcast(param: torch.Tensor, x: torch.Tensor, axis: int | None, block_size: int | None) -> torch.Tensor:
    """Scale / zero point expanded to broadcast against ``x`` (per tensor, channel or block)."""
    rank = x.dim()
    if block_size is not None:
        ax = int(axis) % rank
        n = x.shape[ax]
        return torch.repeat_interleave(param, int(block_size), dim=ax).narrow(ax, 0, n)
    if param.numel() == 1:
        return param.reshape(())
    ax = int(axis) % rank
    return param.reshape([-1 if i == ax else 1 for i in range(rank)])


def _as_tensor(v: Any, dtype: Any) -> torch.Tensor:
    """A torch tensor from a NumPy array (any dtype, ml_dtypes' int4 included), scalar or tensor."""
    if isinstance(v, torch.Tensor):
        return v
    return torch.from_numpy(np.ascontiguousarray(np.asarray(v).astype(dtype)))


class _STE(torch.autograd.Function):
    """y = fn(x) forward, dy/dx = 1 backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        return fn(x.detach())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad, None


def ste(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``fn(x)`` in the forward pass, the identity in the backward pass."""
    return _STE.apply(x, fn)


# ------------------------------------------------------------------------------------ integer


def integer_grid(x: torch.Tensor, fmt: str, scale: torch.Tensor, zero_point: torch.Tensor,
                 axis: int | None = None, block_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """(scale, zero point) broadcast to ``x``, float32 scale, and the storage range ``(qmin, qmax)``."""
    t = int_type(fmt)
    s = _broadcast(scale.to(device=x.device, dtype=torch.float32), x, axis, block_size)
    zp = _broadcast(zero_point.to(device=x.device, dtype=torch.float64), x, axis, block_size)
    return s, zp, s, t.qmin, t.qmax


def fake_quantize_integer(x: torch.Tensor, fmt: str, *, scale: Any, zero_point: Any = 0, axis: int | None = None,
                          block_size: int | None = None) -> torch.Tensor:
    """``formats.integer.fake_quantize``: rint(x/s)+zp saturated to the full type range, then (q−zp)·s."""
    scale = _as_tensor(scale, np.float32)
    zero_point = _as_tensor(zero_point, np.int64)
    s, zp, _, qmin, qmax = integer_grid(x, fmt, scale, zero_point, axis, block_size)
    x32 = x.to(torch.float32)
    r = torch.round(x32 / s).to(torch.float64)
    q = torch.clamp(r + zp, qmin, qmax)
    q = torch.where(torch.isnan(q), torch.full_like(q, qmin), q)
    diff = (q.to(torch.int64) - zp.to(torch.int64)).to(torch.float32)
    return (diff * s).to(x.dtype)


# ------------------------------------------------------------------------------------ float elements

_TORCH_FLOAT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fake_quantize_float(x: torch.Tensor, fmt: str, *, scale: Any = 1.0, zero_point: Any = 0.0,
                        saturate: bool | None = None) -> torch.Tensor:
    """``formats.floating.fake_quantize``: ``(E(x/s − (0 − z)) − z)·s`` with E the RNE element cast."""
    t = float_type(fmt)
    sat = resolve_saturate(fmt, saturate)
    s = torch.tensor(float(scale), dtype=torch.float32, device=x.device)
    z = torch.tensor(float(zero_point), dtype=torch.float32, device=x.device)
    v = x.to(torch.float32) / s
    v = v - (torch.zeros((), dtype=torch.float32, device=x.device) - z)
    if sat:
        v = torch.clamp(v, -t.max, t.max)
    q = v.to(_TORCH_FLOAT[fmt]).to(torch.float32)
    return ((q - z) * s).to(x.dtype)


# ------------------------------------------------------------------------------------ BFP


def _std_round(v: torch.Tensor) -> torch.Tensor:
    t = torch.trunc(v)
    return torch.where(torch.abs(v - t) >= 0.5, t + torch.sign(v), t)


def _dpu_round(v: torch.Tensor) -> torch.Tensor:
    half_neg = (v < 0) & ((v - torch.floor(v)) == 0.5)
    return torch.where(half_neg, torch.ceil(v), _std_round(v))


def _py3_round(v: torch.Tensor) -> torch.Tensor:
    fl = torch.floor(v)
    diff = v - fl
    odd = torch.fmod(fl, 2.0) != 0
    up = (diff > 0.5) | ((diff == 0.5) & odd)
    return torch.where(up, fl + 1.0, fl)


_ROUND = {0: _std_round, 1: _dpu_round, 2: _py3_round}


def _to_bfp_blocks(b: torch.Tensor, m: int, rounding_mode: int, compiler: bool) -> torch.Tensor:
    bits = _f32_bits(b)
    e = (bits >> 23) & 0xFF
    special = e == 0xFF
    es = torch.where(special, torch.zeros_like(e), e).amax(dim=-1, keepdim=True)
    exp = es - 127
    scale = pow2_f64(exp - (m - 1)).to(torch.float32)
    rnd = _ROUND[rounding_mode]
    v = b / scale
    if compiler:
        codes = rnd(torch.where(special, torch.zeros_like(v), v))
        bump = (codes >= 2.0**m).any(dim=-1, keepdim=True) | (codes < -(2.0**m)).any(dim=-1, keepdim=True)
        exp = exp + bump.to(torch.int64)
        scale = torch.where(bump, scale * 2.0, scale)
        v = b / scale
        max_v = (pow2_f64(exp) * (2.0**m - 1)).to(torch.float32)
        min_v = (-pow2_f64(exp) * 2.0**m).to(torch.float32)
    else:
        max_v = (pow2_f64(exp + 1) - scale.to(torch.float64)).to(torch.float32)
        min_v = -max_v
    y = rnd(v) * scale
    y = torch.maximum(min_v, torch.minimum(y, max_v))
    return torch.where(special, b, y)


def _to_bfp_prime_blocks(b: torch.Tensor, m: int, sbs: int, shift_bits: int, rounding_mode: int) -> torch.Tensor:
    bs = b.shape[-1]
    nsb = -(-bs // sbs)
    bits = _f32_bits(b)
    e = (bits >> 23) & 0xFF
    es = e.amax(dim=-1, keepdim=True)
    e_pad = torch.zeros(e.shape[:-1] + (nsb * sbs,), dtype=torch.int64, device=b.device)
    e_pad[..., :bs] = e
    ej = e_pad.reshape(e.shape[:-1] + (nsb, sbs)).amax(dim=-1)
    shift_j = torch.clamp(es - ej, max=(1 << shift_bits) - 1)
    shift = torch.repeat_interleave(shift_j, sbs, dim=-1)[..., :bs]

    mant = torch.where(e == 0, torch.zeros_like(bits), (bits & 0x7FFFFF) | (1 << 23))
    t = es - shift - e + 24 - m
    tc = torch.clamp(t, max=26)
    r = torch.bitwise_right_shift(mant, tc)
    one = torch.ones_like(tc)
    tail = mant & (torch.bitwise_left_shift(one, tc) - 1)
    half = torch.bitwise_left_shift(one, tc - 1)
    negative = ((bits >> 31) & 1).to(torch.bool)
    if rounding_mode == 0:
        tie = r + 1
    elif rounding_mode == 1:
        tie = torch.where(negative, r, r + 1)
    else:
        tie = r + (r & 1)
    top = (1 << m) - 1
    q = torch.where(r == top, r, torch.where(tail < half, r, torch.where(tail > half, r + 1, tie)))
    q = torch.where(t > 25, torch.zeros_like(q), q)
    sign = torch.where(negative, -1.0, 1.0).to(torch.float64)
    y = (sign * q.to(torch.float64) * pow2_f64(es - 127 - shift + 1 - m)).to(torch.float32)
    return torch.where(es == 0xFF, torch.full_like(y, float("nan")), y)


def fake_quantize_bfp(x: torch.Tensor, **attrs: Any) -> torch.Tensor:
    """``formats.bfp.fake_quantize`` (``to_bfp`` and ``to_bfp_prime``)."""
    a = bfp_ref.normalize_attrs(**attrs)
    if x.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"BFP quantization takes float32 or float16 tensors, got {x.dtype}")
    if x.numel() <= 1:
        return x.clone()
    ax = 0 if x.dim() == 1 else a["axis"] % x.dim()
    xf = x.to(torch.float32)
    if a["convert_to_bfloat_before_bfp"]:
        xf = xf.to(torch.bfloat16).to(torch.float32)
    blocks, view = to_blocks(xf, ax, a["block_size"])
    m = a["bit_width"] - 9
    if a["bfp_method"] == "to_bfp":
        out = _to_bfp_blocks(blocks, m, a["rounding_mode"], bool(a["use_compiler_version_cpu_kernel"]))
    else:
        out = _to_bfp_prime_blocks(blocks, m, a["sub_block_size"], a["sub_block_shift_bits"], a["rounding_mode"])
    return from_blocks(out, view).contiguous().to(x.dtype)


# ------------------------------------------------------------------------------------ MX


def _floor_log2(a: torch.Tensor) -> torch.Tensor:
    _, exp = torch.frexp(a)
    return torch.where(a > 0, exp.to(torch.float64) - 1.0, torch.full_like(a, float("-inf")))


def _round_int(w: torch.Tensor, rounding_mode: int) -> torch.Tensor:
    if rounding_mode == 0:
        r = torch.floor(torch.abs(w) + 0.5)
    elif rounding_mode == 1:
        r = torch.abs(torch.floor(w + 0.5))
    else:
        r = torch.abs(torch.round(w))
    return torch.copysign(r, w)


def _quantize_elements(v: torch.Tensor, fmt: mx_ref.ElementFormat, rounding_mode: int) -> torch.Tensor:
    if fmt.is_int:
        c = torch.clamp(_round_int(v * 64.0, rounding_mode), -127.0, 127.0)
        return torch.copysign(torch.abs(c) / 64.0, v)
    a = torch.abs(v)
    e = torch.clamp(_floor_log2(a), min=fmt.emin)
    e = torch.where(torch.isnan(e), torch.full_like(e, fmt.emin), e)  # NaN lanes are replaced later
    quantum = pow2_f64(e - fmt.mbits)
    q = torch.clamp(torch.round(a / quantum) * quantum, max=fmt.max_norm)
    return torch.copysign(q, v)


def _mx_dequant(xb: torch.Tensor, exp: torch.Tensor, fmt: mx_ref.ElementFormat, rounding_mode: int) -> torch.Tensor:
    scale = pow2_f64(exp)
    return _quantize_elements(xb / scale, fmt, rounding_mode) * scale


def fake_quantize_mx(x: torch.Tensor, *, element_dtype: str = "int8", axis: int = 1, block_size: int = 32,
                     rounding_mode: int = 0, scale_search: int = 0) -> torch.Tensor:
    """``formats.mx.fake_quantize`` (OCP MX, every element type, optional scale search)."""
    fmt = mx_ref.check_attributes(element_dtype, axis, block_size, rounding_mode, scale_search)
    if x.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"MX fake_quantize takes float32 or float16 input, got {x.dtype}")
    if x.numel() == 0:
        return x.clone()
    ax = mx_ref.normalize_axis(int(axis), x.dim())
    blocks, view = to_blocks(torch.atleast_1d(x).to(torch.float32), ax, block_size)
    xb = blocks.to(torch.float64)
    finite = torch.isfinite(xb)
    a = torch.where(finite, torch.abs(xb), torch.zeros_like(xb))
    amax = a.amax(dim=-1, keepdim=True)
    exp = torch.clamp(_floor_log2(amax) - fmt.emax, min=mx_ref.E8M0_MIN)  # float input: never above +127
    if scale_search == mx_ref.NO_SATURATION:  # formats/mx.unsaturated_exponent
        room = torch.isfinite(pow2_f64(exp + 1 + fmt.emax).to(torch.float32).to(x.dtype))
        exp = torch.where((amax > fmt.max_norm * pow2_f64(exp)) & (exp + 1 <= mx_ref.E8M0_MAX) & room, exp + 1, exp)
    safe_xb = torch.where(finite, xb, torch.zeros_like(xb))
    y = _mx_dequant(safe_xb, exp, fmt, rounding_mode)
    if scale_search in mx_ref.ERROR_SEARCHES:  # formats/mx.choose_exponent, the same candidates, sums and ties
        y0 = y.to(torch.float32).to(x.dtype).to(torch.float64)

        def error_change(e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            yc = _mx_dequant(safe_xb, e, fmt, rounding_mode)
            d = yc.to(torch.float32).to(x.dtype).to(torch.float64)
            delta = torch.where(finite, (d - y0) * ((d + y0) - 2.0 * xb), torch.zeros_like(xb))
            total = torch.zeros(delta.shape[:-1] + (1,), dtype=torch.float64, device=x.device)
            for i in range(block_size):  # in order along the block, like the reference
                total = total + delta[..., i : i + 1]
            return total, yc

        t_up, y_up = error_change(torch.where(exp + 1 <= mx_ref.E8M0_MAX, exp + 1, exp))
        if scale_search == 1:
            y = torch.where(t_up < 0, y_up, y)
        else:
            t_down, y_down = error_change(torch.where(exp - 1 >= mx_ref.E8M0_MIN, exp - 1, exp))
            take_up = (t_up < 0) & (t_up <= t_down)
            take_down = (t_down < 0) & (t_down < t_up)
            y = torch.where(take_up, y_up, torch.where(take_down, y_down, y))
    y = torch.where(finite, y, xb).to(torch.float32)
    return from_blocks(y, view).reshape(x.shape).to(x.dtype)


# ------------------------------------------------------------------------------------ dispatch


def fake_quantize(x: torch.Tensor, fmt: str, **attrs: Any) -> torch.Tensor:
    """Torch twin of :func:`onnxptq.formats.fake_quantize`, forward only (no gradient tracking).

    Same keyword arguments: integer ``scale``/``zero_point``/``axis``/``block_size``; float
    ``scale``/``zero_point``/``saturate``; ``bfp`` the BFPAttributes; ``mx`` the MXAttributes.
    """
    fmt = check_format(fmt)
    with torch.no_grad():
        if fmt in INTEGER_FORMATS:
            return fake_quantize_integer(x, fmt, **attrs)
        if fmt in FLOAT_FORMATS:
            return fake_quantize_float(x, fmt, **attrs)
        if fmt == "bfp":
            return fake_quantize_bfp(x, **attrs)
        return fake_quantize_mx(x, **attrs)


def fake_quantize_ste(x: torch.Tensor, fmt: str, **attrs: Any) -> torch.Tensor:
    """:func:`fake_quantize` in the forward pass, straight-through (identity) gradient."""
    return ste(x, lambda v: fake_quantize(v, fmt, **attrs))
