"""GPTQ (Frantar et al., 2022): quantize K rows one at a time, pushing each row's rounding error
onto the rows not yet quantized through the inverse Hessian ``(XᵀX + λI)⁻¹``.

* damping: ``λ = damp · mean(diag H)`` (``GPTQParams.PercDamp``, 0.01); a Cholesky that still fails
  is retried with ten times the damping;
* dead inputs (a channel that was always 0) get ``H_ii = 1`` and a zero weight row;
* act-order (the default): rows taken by decreasing ``H_ii`` (the most-used inputs first, while
  the most error can still be compensated), in one of :data:`ORDERS` — "global" (static block
  parameters from the unmodified weight) or "blocks" (each block refitted on its updated rows);
  the caller (:mod:`.solve`) keeps, per layer, the order with the smaller output error. On
  SmolLM2-135M int4 sym b128 it took the perplexity increase over fp32 from +6.0 (K in order) to
  +2.9 (bench/RESULTS.md, "LLM weight-only (issue 29): GPTQ act-order, HQQ's block choice,
  calibration in chunks"). Without act-order ("none") parameters come from the already-updated
  rows of the block when its first row is reached (standard GPTQ);
* lazy batch updates: errors of a batch of rows (a multiple of the block size, ≥ 128) are applied
  to the rest of the matrix in one GEMM.

Works in the ``[K, N]`` view, float32 for the weights and float64 for the Hessian inverse; NumPy's
BLAS does the GEMMs (the per-row loop is over K only, each step vectorised over N).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..formats import int_blocks
from ..formats.int_blocks import BlockFormat
from .rtn import Solved

log = logging.getLogger(__name__)


def _upper_inverse_cholesky(h: np.ndarray, damp: float) -> np.ndarray:
    """Upper Cholesky factor of ``(H + λI)⁻¹``; more damping when H is too ill-conditioned."""
    mean_diag = float(np.mean(np.diag(h))) or 1.0
    for factor in (1.0, 10.0, 100.0, 1000.0):
        hd = h + np.eye(h.shape[0]) * damp * factor * mean_diag
        try:
            lower = np.linalg.cholesky(hd)
            lower_inv = np.linalg.inv(lower)
            hinv = lower_inv.T @ lower_inv
            return np.linalg.cholesky(hinv).T
        except np.linalg.LinAlgError:
            log.debug("GPTQ: Cholesky failed at damping %g, retrying with more", damp * factor)
    raise np.linalg.LinAlgError("GPTQ: the Hessian is not positive definite even with 1000x damping")


#: Damping per input channel per calibration vector: with few vectors a Hessian is (nearly) rank
#: deficient and GPTQ fits the calibration tokens instead of the weights' function. Measured on
#: SmolLM2's layer-1 down_proj (K = 1536, 1024 calibration tokens): held-out output error RTN 0.085,
#: GPTQ at damping 0.01 0.091 (worse), at 0.1 0.074, at 0.3 0.070.
DAMP_PER_K_PER_SAMPLE = 0.1


def effective_damp(damp: float, k: int, samples: int) -> float:
    """``damp``, raised to ``0.1 · K / samples`` when the calibration vectors are few for K."""
    if samples <= 0:
        return damp
    return max(float(damp), DAMP_PER_K_PER_SAMPLE * k / samples)


#: Row orders: "none" (K in order), "blocks" (blocks by decreasing summed ``H_ii``, rows inside a
#: block by decreasing ``H_ii``: each block's rows stay consecutive, so its parameters are fitted
#: on the already-updated rows when it comes up, as in standard GPTQ) and "global" (all rows by
#: decreasing ``H_ii``; a block's rows are then scattered, so its parameters must be fixed first,
#: from the unmodified weight: the "static groups" variant).
ORDERS = ("none", "blocks", "global")
#: The orders ``act_order=True`` tries (each layer keeps the one with the smaller output error).
ACT_ORDERS = ("global", "blocks")


@dataclass
class Prepared:
    """What GPTQ derives from a Hessian alone: shared by every weight reading the same input."""

    perm: np.ndarray
    dead: np.ndarray
    u: np.ndarray  # upper Cholesky factor of the damped inverse Hessian, in ``perm`` order
    order: str
    block_size: int


def _order(diag: np.ndarray, order: str, block_size: int) -> np.ndarray:
    k = diag.shape[0]
    if order == "none":
        return np.arange(k)
    if order == "global":
        return np.argsort(-diag, kind="stable")
    starts = np.arange(0, k, block_size)
    weight = np.add.reduceat(diag, starts)
    perm = [s + np.argsort(-diag[s:s + block_size], kind="stable") for s in starts[np.argsort(-weight, kind="stable")]]
    return np.concatenate(perm)


def prepare(hessian: np.ndarray, *, damp: float = 0.01, order: str = "blocks", block_size: int = 128) -> Prepared:
    """The row order and inverse-Hessian factor for ``hessian`` ``[K, K]``."""
    if order not in ORDERS:
        raise ValueError(f"GPTQ order {order!r} is not one of {ORDERS}")
    h = np.array(hessian, dtype=np.float64)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    perm = _order(np.diag(h).copy(), order, block_size)
    h = h[perm][:, perm]
    return Prepared(perm, dead, _upper_inverse_cholesky(h, damp).astype(np.float32), order, block_size)


def _batches(perm: np.ndarray, block_size: int, contiguous: bool, lazy: int) -> list[tuple[int, int]]:
    """Lazy-update batches ``[i1, i2)`` of at least ``lazy`` rows that never split a block whose
    rows are consecutive (its parameters are fitted on its rows inside one batch)."""
    k = perm.shape[0]
    if not contiguous:
        return [(i, min(i + lazy, k)) for i in range(0, k, lazy)]
    blocks = perm // block_size
    starts = [0] + [i for i in range(1, k) if blocks[i] != blocks[i - 1]] + [k]
    out, i1 = [], 0
    for s in starts[1:]:
        if s - i1 >= lazy or s == k:
            out.append((i1, s))
            i1 = s
    return out


def solve(w: np.ndarray, hessian: np.ndarray | Prepared, fmt: BlockFormat, *, damp: float = 0.01,
          order: str = "blocks") -> Solved:
    """GPTQ of ``w`` ``[K, N]`` against the Hessian ``[K, K]`` of its input (or its :class:`Prepared`)."""
    prep = hessian if isinstance(hessian, Prepared) else prepare(hessian, damp=damp, order=order, block_size=fmt.block_size)
    if prep.order == "blocks" and prep.block_size != fmt.block_size:
        raise ValueError(f"GPTQ: prepared for blocks of {prep.block_size}, asked for {fmt.block_size}")
    w = np.array(w, dtype=np.float32)
    k, n = w.shape
    bs = fmt.block_size
    w[prep.dead, :] = 0.0
    perm = prep.perm
    static = prep.order == "global"
    kb = fmt.blocks(k)
    if static:
        scale, zp = int_blocks.rtn_params(w, fmt)
    else:
        scale = np.ones((kb, n), np.float32)
        zp = None if fmt.symmetric else np.zeros((kb, n), np.int64)
    w = w[perm]
    u = prep.u
    q_out = np.zeros((k, n), np.int64)
    block_of = perm // bs  # the block (in original order) of each permuted row
    fitted = np.zeros(kb, dtype=bool)
    for i1, i2 in _batches(perm, bs, not static, bs * max(1, 128 // bs)):
        w1 = w[i1:i2].copy()
        err1 = np.zeros_like(w1)
        u1 = u[i1:i2, i1:i2]
        for j in range(i2 - i1):
            row = i1 + j
            b = block_of[row]
            if not static and not fitted[b]:
                rows = min(bs, k - b * bs)  # a short last block has fewer rows
                s_b, z_b = int_blocks.rtn_params(w1[j:j + rows], fmt)
                scale[b] = s_b[0]
                if zp is not None:
                    zp[b] = z_b[0]
                fitted[b] = True
            s = scale[b]
            z = 0.0 if zp is None else zp[b].astype(np.float32)
            q = np.clip(np.rint(w1[j] / s) + z, fmt.qmin, fmt.qmax)
            dq = ((q - z) * s).astype(np.float32)
            err = (w1[j] - dq) / u1[j, j]
            w1[j:] -= np.outer(u1[j, j:], err)
            err1[j] = err
            q_out[row] = q.astype(np.int64)
        if i2 < k:
            w[i2:] -= u[i1:i2, i2:].T @ err1
    inverse = np.argsort(perm)
    return Solved(q_out[inverse], scale.astype(np.float32), zp, fmt)
