"""HQQ-style half-quadratic optimisation of each block's scale and zero point (data-free).

Half-quadratic quantization (Badri & Shaji, 2023) splits ``min ‖W − Q(W)‖_p`` (p < 1: robust to
the few large weights that dominate a block's range) into two easy steps, repeated: a sparse
residual ``E = shrink_p(W − Ŵ, β)`` (a generalised soft threshold), then the grid that best fits
``W − E`` in least squares. The original updates only a float zero point; here both the scale and
the zero point are refitted (a 1-D linear regression of ``W − E`` on the integers ``q`` per block,
closed form), and the zero point is rounded to an integer at the end because blocked
``DequantizeLinear`` stores it as one. Each block then keeps whichever of RTN and HQQ has the
smaller error Σ|ΔW|⁴ (weighted by the row importance, the Hessian diagonal, when calibration
statistics exist). Why the fourth power, not the square: HQQ's sparse residual lets a block's few
largest weights go (that is how it lowers the squared error), and in an LLM those are the weights
the output depends on most. Judged by Σ|ΔW|², HQQ won most blocks and SmolLM2-135M's perplexity
(int4 asym b128) rose from RTN's 31.55 to 32.32; judged by Σ|ΔW|⁴ it fell to 31.48 (onnxruntime's
HQQ: 31.67; bench/RESULTS.md, "LLM weight-only (issue 29): GPTQ act-order, …"). Vectorised over all blocks.
"""

from __future__ import annotations

import numpy as np

from ..formats import int_blocks
from ..formats.int_blocks import BlockFormat
from .rtn import Solved


def _shrink(x: np.ndarray, beta: float, p: float) -> np.ndarray:
    """The proximal step of ``|x|^p``: soft thresholding generalised to p < 1."""
    ax = np.abs(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sign(x) * np.maximum(ax - (1.0 / beta) * np.power(np.maximum(ax, 1e-12), p - 1), 0.0)


def solve(w: np.ndarray, fmt: BlockFormat, *, importance: np.ndarray | None = None, iters: int = 20,
          p: float = 0.7, beta: float = 10.0, kappa: float = 1.01) -> Solved:
    """HQQ of ``w`` ``[K, N]``; ``importance`` ``[K]`` weighs rows in the final RTN-or-HQQ choice."""
    w = np.asarray(w, np.float32)
    k = w.shape[0]
    blocks, mask = int_blocks.block_view(w, fmt.block_size)
    blocks = blocks.astype(np.float64)
    m = mask.astype(np.float64)
    count = m.sum(axis=1)  # [Kb, 1]
    scale0, zp0 = int_blocks.rtn_params(w, fmt)
    s = scale0[:, None, :].astype(np.float64)
    z = np.zeros_like(s) if zp0 is None else zp0[:, None, :].astype(np.float64)
    for _ in range(iters):
        q = np.clip(np.rint(blocks / s + z), fmt.qmin, fmt.qmax)
        residual = _shrink((blocks - (q - z) * s) * m, beta, p)
        target = (blocks - residual) * m
        qm = q * m
        if fmt.symmetric:
            den = (qm * qm).sum(axis=1, keepdims=True)
            num = (qm * target).sum(axis=1, keepdims=True)
            s = np.where(den > 0, num / np.where(den > 0, den, 1), s)
        else:
            sq, st = qm.sum(axis=1, keepdims=True), target.sum(axis=1, keepdims=True)
            sqq, sqt = (qm * qm).sum(axis=1, keepdims=True), (qm * target).sum(axis=1, keepdims=True)
            n = count[:, None, :]
            den = n * sqq - sq * sq
            a = np.where(np.abs(den) > 1e-12, (n * sqt - sq * st) / np.where(np.abs(den) > 1e-12, den, 1), s)
            a = np.where(np.abs(a) > 1e-12, a, s)
            b = (st - a * sq) / n
            s, z = a, np.clip(-b / a, fmt.qmin, fmt.qmax)
        beta *= kappa
    scale = s[:, 0, :].astype(np.float32)
    scale = np.where(np.abs(scale) > 0, scale, np.float32(1.0)).astype(np.float32)
    zp = None if fmt.symmetric else np.clip(np.rint(z[:, 0, :]), fmt.qmin, fmt.qmax).astype(np.int64)
    q_h = int_blocks.quantize(w, scale, zp, fmt)
    q_r = int_blocks.quantize(w, scale0, zp0, fmt)
    err_h = _block_error(w - int_blocks.dequantize(q_h, scale, zp, fmt), fmt, importance)
    err_r = _block_error(w - int_blocks.dequantize(q_r, scale0, zp0, fmt), fmt, importance)
    keep_h = err_h < err_r  # [Kb, N]
    scale = np.where(keep_h, scale, scale0).astype(np.float32)
    if zp is not None:
        zp = np.where(keep_h, zp, zp0)
    return Solved(int_blocks.quantize(w, scale, zp, fmt), scale, zp, fmt)


#: The power of the per-weight error in the RTN-or-HQQ choice of each block (see the module doc).
CHOICE_POWER = 4


def _block_error(diff: np.ndarray, fmt: BlockFormat, importance: np.ndarray | None) -> np.ndarray:
    """Σ over each block of ``importance · |diff|^CHOICE_POWER``: ``[Kb, N]``."""
    d2 = np.abs(diff.astype(np.float64)) ** CHOICE_POWER
    if importance is not None:
        d2 = d2 * np.asarray(importance, np.float64)[:, None]
    blocks, _ = int_blocks.block_view(d2, fmt.block_size)
    return blocks.sum(axis=1)
