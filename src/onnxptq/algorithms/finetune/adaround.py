"""AdaRound (Nagel et al. 2020): learn, per integer weight, whether to round down or up.

Rounding to nearest minimises each weight's own error, not the layer's output error; AdaRound
picks the rounding direction that minimises the latter. Each weight keeps its solved scale and
zero point; only the choice between ``floor(w/s)`` and ``floor(w/s)+1`` is learned, through the
rectified sigmoid ``h(α) = clamp(sigmoid(α)·(ζ−γ)+γ, 0, 1)`` and a regulariser
``λ·Σ(1 − |2h−1|^β)`` that pushes every ``h`` to 0 or 1 as β anneals from 20 to 2 (spec §7.3).

The result is returned as ``(q − zp)·s`` computed exactly as DequantizeLinear does, so emit's
re-quantization with the same scale gives back exactly the chosen integers.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from ...config.schema import FinetuneOptions
from ...formats import integer
from . import torch_formats as tf
from .train import EarlyStop, Problem, draw, learning_rate, log_period

log = logging.getLogger(__name__)

ZETA, GAMMA = 1.1, -0.1


def rectified_sigmoid(alpha: torch.Tensor) -> torch.Tensor:
    """h(α): a sigmoid stretched to (γ, ζ) and clipped to [0, 1], so it reaches 0 and 1 exactly."""
    return torch.clamp(torch.sigmoid(alpha) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


def beta_at(it: int, options: FinetuneOptions) -> float:
    """β for iteration ``it``: cosine from BetaRange[0] to BetaRange[1] after the warm start."""
    n = int(options.num_iterations)
    start_it = options.warm_start * n
    start, end = (float(b) for b in options.beta_range)
    r = (it - start_it) / max(n - start_it, 1.0)
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * min(max(r, 0.0), 1.0)))


def optimise(problem: Problem, options: FinetuneOptions, gen: torch.Generator) -> tuple[np.ndarray, None]:
    """Learned rounding for ``problem``'s integer weight; returns the new float weight (on the grid)."""
    q = problem.weight_q
    a = q.attrs
    s, zp, _, qmin, qmax = tf.integer_grid(problem.weight, q.format, a["scale"], a["zero_point"], a.get("axis"), a.get("block_size"))
    zp32 = zp.to(torch.float32)
    with torch.no_grad():
        w_div = problem.weight / s
        w_floor = torch.floor(w_div)
        frac = torch.clamp(w_div - w_floor, 0.0, 1.0)
        # α such that h(α) equals the fractional part: the soft start is the float weight itself.
        ratio = torch.clamp((ZETA - GAMMA) / (frac - GAMMA) - 1.0, min=1e-6)
        alpha0 = -torch.log(ratio)
    alpha = alpha0.clone().requires_grad_(True)
    bias = problem.bias_value()

    def soft_weight() -> torch.Tensor:
        return (torch.clamp(w_floor + rectified_sigmoid(alpha) + zp32, qmin, qmax) - zp32) * s

    n = int(options.num_iterations)
    with torch.no_grad():
        x0, y0 = draw(problem, options.batch_size, options.drop_ratio, gen)
        first = float(((problem.forward(x0, soft_weight(), bias) - y0) ** 2).sum(dim=problem.channel_dim).mean())
    opt = torch.optim.Adam([alpha], lr=learning_rate(options, first))
    stop = EarlyStop(options)
    period = log_period(options)
    warm = options.warm_start * n
    lam = float(options.reg_param)
    for it in range(n):
        x, y = draw(problem, options.batch_size, options.drop_ratio, gen)
        recon = (problem.forward(x, soft_weight(), bias) - y).pow(2).sum(dim=problem.channel_dim).mean()
        if it >= warm:
            h = rectified_sigmoid(alpha)
            round_loss = lam * (1.0 - (2.0 * h - 1.0).abs().pow(beta_at(it, options))).sum()
        else:
            round_loss = torch.zeros((), device=recon.device)
        loss = recon + round_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        if (it + 1) % period == 0 or it == n - 1:
            log.debug("adaround %s iterations=%d, lr=%g, loss=%.4g (recon %.4g, rounding %.4g)",
                      problem.layer.name, it + 1, opt.param_groups[0]["lr"], value, recon.item(), round_loss.item())
        if stop(it, value):
            log.debug("adaround %s: early stop after %d iterations", problem.layer.name, it + 1)
            break

    with torch.no_grad():
        up = (alpha >= 0).to(torch.float64)
        codes = torch.clamp(w_floor.to(torch.float64) + up + zp, qmin, qmax) - zp
    info = integer.int_type(q.format)
    scale = a["scale"].cpu().numpy()
    zero = a["zero_point"].cpu().numpy()
    # DequantizeLinear's arithmetic, so that re-quantizing with the same scale is exact.
    stored = (codes.cpu().numpy() + _broadcast_np(zero, problem.weight.shape, a)).astype(np.int64).astype(info.dtype)
    return integer.dequantize(stored, scale, zero, a.get("axis"), a.get("block_size")), None


def _broadcast_np(zero: np.ndarray, shape: torch.Size, attrs: dict) -> np.ndarray:
    return integer.broadcast_param(zero, tuple(shape), attrs.get("axis"), attrs.get("block_size"), "zero_point").astype(np.float64)
