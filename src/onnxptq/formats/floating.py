"""Float-element formats (bf16, fp16, fp8_e4m3 = E4M3FN, fp8_e5m2): the NumPy reference.

``fake_quantize(x, fmt, scale=s, zero_point=z)`` computes, in float32,
``y = (E(x/s − (0 − z)) − z) · s`` where ``E`` rounds to the element type (round half to even,
subnormals kept) and, when saturating, first clips to ± the largest finite value of the type.
With ``s = 1, z = 0`` this is a plain cast round trip. (``x/s − (0 − z)`` equals ``x/s + z`` but
keeps the sign of −0 when ``z = 0``; the ONNX function computes it the same way.)

Defaults for ``saturate`` (what happens to values beyond the largest finite value, and to ±Inf):

- bf16: ``False`` — IEEE behaviour, overflow → ±Inf (the reference tool's bf16 kernel and ONNX Cast);
- fp16: ``True`` — clamp to ±65504, as the reference tool's CPU kernel does (so a model converted to
  fp16 does not turn large activations into Inf); ``saturate=False`` gives the IEEE cast;
- fp8: ``True`` — ONNX ``QuantizeLinear`` default (``saturate=1``), what the reference tool emits.
  ``saturate=False`` is refused for fp8 (see :func:`resolve_saturate`).

NaN stays NaN in every case. Float16 inputs are widened to float32 exactly and the result is
rounded back once, like the ONNX fragments (which cast around a float32 core).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import onnx

logger = logging.getLogger(__name__)

FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)


@dataclass(frozen=True)
class FloatType:
    """One float element type: its NumPy dtype, ONNX type, largest finite value, default saturation."""

    name: str
    dtype: Any
    onnx_type: int
    max: float
    saturate_default: bool

    @property
    def is_fp8(self) -> bool:
        return self.name.startswith("fp8")


FLOAT_TYPES: dict[str, FloatType] = {
    "bf16": FloatType("bf16", ml_dtypes.bfloat16, onnx.TensorProto.BFLOAT16,
                      float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), False),
    "fp16": FloatType("fp16", np.float16, onnx.TensorProto.FLOAT16, 65504.0, True),
    "fp8_e4m3": FloatType("fp8_e4m3", ml_dtypes.float8_e4m3fn, onnx.TensorProto.FLOAT8E4M3FN, 448.0, True),
    "fp8_e5m2": FloatType("fp8_e5m2", ml_dtypes.float8_e5m2, onnx.TensorProto.FLOAT8E5M2, 57344.0, True),
}

#: The largest bf16 value as the reference tool writes it (3.38953139e38).
BF16_MAX = FLOAT_TYPES["bf16"].max


def float_type(fmt: str) -> FloatType:
    """The :class:`FloatType` of ``fmt``, or a ValueError naming the float formats."""
    key = str(fmt).lower()
    if key not in FLOAT_TYPES:
        raise ValueError(f"format {fmt!r} is not a float element format; expected one of {', '.join(FLOAT_TYPES)}")
    return FLOAT_TYPES[key]


def _as_float32(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind != "f" and arr.dtype != ml_dtypes.bfloat16:
        raise TypeError(f"expected a floating-point array, got dtype {arr.dtype}")
    return arr.astype(np.float32)


def check_params(fmt: str, scale: Any, zero_point: Any) -> tuple[np.float32, np.float32]:
    """Validate a per-tensor (scale, zero point) pair for ``fmt``; return them as float32 scalars."""
    t = float_type(fmt)
    s = np.asarray(scale, dtype=np.float32)
    z = np.asarray(zero_point, dtype=np.float32)
    if s.size != 1 or z.size != 1:
        raise ValueError(f"{fmt}: scale and zero_point must be scalars (per-tensor), got shapes {s.shape}, {z.shape}")
    s, z = s.reshape(()), z.reshape(())
    if not np.isfinite(s) or s <= 0:
        raise ValueError(f"{fmt}: scale must be finite and > 0, got {float(s)}")
    if not np.isfinite(z):
        raise ValueError(f"{fmt}: zero_point must be finite, got {float(z)}")
    if t.is_fp8 and z != 0:
        raise ValueError(f"{fmt}: zero_point must be 0 (ONNX float8 QuantizeLinear), got {float(z)}")
    return np.float32(s), np.float32(z)


def resolve_saturate(fmt: str, saturate: bool | None) -> bool:
    """``saturate`` with the per-format default applied; non-saturating fp8 is refused.

    onnxruntime 1.31's non-saturating float8 cast disagrees with the ONNX spec and ml_dtypes
    (E4M3FN 480…495 → 448 but 470 → NaN; E5M2 61440…65057 → NaN instead of Inf), so no fragment
    could match a reference for it.
    """
    t = float_type(fmt)
    sat = t.saturate_default if saturate is None else bool(saturate)
    if t.is_fp8 and not sat:
        raise ValueError(f"{fmt}: saturate=False is not supported (onnxruntime's non-saturating float8 cast "
                         "does not follow the ONNX spec); use saturate=True")
    return sat


def round_element(v: np.ndarray, fmt: str, saturate: bool | None = None) -> np.ndarray:
    """float32 ``v`` rounded to the element type of ``fmt`` (RNE), returned as float32.

    ``saturate`` (default per format, see the module doc) clips to ± the largest finite value
    first, which also maps ±Inf to it; NaN passes through.
    """
    t = float_type(fmt)
    sat = resolve_saturate(fmt, saturate)
    v = np.asarray(v, dtype=np.float32)
    if sat:
        v = np.clip(v, np.float32(-t.max), np.float32(t.max))
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(t.dtype).astype(np.float32)


def quantize(
    x: Any, fmt: str, scale: Any = 1.0, zero_point: Any = 0.0, saturate: bool | None = None
) -> np.ndarray:
    """The element values ``E(x/scale + zero_point)`` (float32 array holding values of the type).

    This is what the reference tool's Q node outputs (e.g. spec test vector D's "q" lists).
    """
    s, z = check_params(fmt, scale, zero_point)
    x32 = _as_float32(x)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        v = x32 / s
        v = v - (np.float32(0) - z)
    return round_element(v, fmt, saturate)


def dequantize(q: Any, fmt: str, scale: Any = 1.0, zero_point: Any = 0.0) -> np.ndarray:
    """``(q − zero_point) · scale`` in float32."""
    s, z = check_params(fmt, scale, zero_point)
    with np.errstate(over="ignore", invalid="ignore"):
        return ((np.asarray(q, dtype=np.float32) - z) * s).astype(np.float32)


def fake_quantize(
    x: Any,
    fmt: str,
    *,
    scale: Any = 1.0,
    zero_point: Any = 0.0,
    saturate: bool | None = None,
) -> np.ndarray:
    """Quantize ``x`` to the float element type of ``fmt`` and back; result in ``x``'s dtype."""
    arr = np.asarray(x)
    y = dequantize(quantize(arr, fmt, scale, zero_point, saturate), fmt, scale, zero_point)
    with np.errstate(over="ignore"):
        return y.astype(arr.dtype) if arr.dtype.kind == "f" else y


def compute_float_scale(
    rmin: Any, rmax: Any, fmt: str, scaled: bool, symmetric: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``(scale, zero_point)`` (float32) for a float element format from a range (spec §3.2/§3.3/§3.8).

    Unscaled: ``(1, 0)`` — a plain cast. Scaled: the range (widened to hold 0, clamped to
    ±FLT_MAX/2, symmetric if asked) is mapped onto ``[−q, q]`` with ``q`` = 2 for bf16 (its dense
    region: scale = absmax/2), 65504 for fp16, 448 / 57344 for fp8; a scale below FLT_MIN becomes
    (1, 0). Asymmetric scaled ranges get ``zp = round(qmin − rmin/scale)`` rounded to the element
    type (bf16 [−1, 3] → scale 1, zp −1), as the reference does.

    The reference tool gives an asymmetric *unscaled* range ``zp = qmin − rmin ≈ −3.39e38`` (spec
    §3.2 [BUG]), which destroys the tensor; here an unscaled format always has zero point 0. fp8
    zero points must be 0 (ONNX), so asymmetric scaled fp8 raises.
    """
    t = float_type(fmt)
    lo = np.minimum(np.asarray(rmin, dtype=np.float64), 0.0)
    hi = np.maximum(np.asarray(rmax, dtype=np.float64), 0.0)
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise ValueError(f"range contains NaN: rmin={rmin!r}, rmax={rmax!r}")
    shape = np.broadcast(lo, hi).shape
    if not scaled:
        return np.ones(shape, np.float32), np.zeros(shape, np.float32)
    if t.is_fp8 and not symmetric:
        raise ValueError(f"{fmt}: asymmetric scaling needs a non-zero zero point, which ONNX float8 Q/DQ forbids")
    lo = np.maximum(lo, -FLT_MAX / 2)
    hi = np.minimum(hi, FLT_MAX / 2)
    if symmetric:
        a = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -a, a
    qmax = 2.0 if t.name == "bf16" else t.max
    scale = (hi - lo) / (2 * qmax)
    tiny = scale < FLT_MIN
    safe = np.where(tiny, 1.0, scale)
    if symmetric:
        zp = np.zeros(shape)
    else:
        zp = np.where(tiny, 0.0, np.rint(-qmax - lo / safe))
        zp = zp.astype(np.float32).astype(t.dtype).astype(np.float32)
    return np.asarray(safe, dtype=np.float32), np.asarray(zp, dtype=np.float32)
