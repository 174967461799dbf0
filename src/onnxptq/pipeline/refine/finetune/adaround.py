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

from ....config.schema import FinetuneOptions
from ....formats import integer
from . import torch_formats as tf
from .grad import Adam, LayerGrad
from .train import Batches, EarlyStop, Problem, draw, learning_rate, log_period

log = logging.getLogger(__name__)

ZETA, GAMMA = 1.1, -0.1


def beta_at(it: int, options: FinetuneOptions) -> float:
    """β for iteration ``it``: cosine from BetaRange[0] to BetaRange[1] after the warm start."""
    n = int(options.num_iterations)
    start_it = options.warm_start * n
    start, end = (float(b) for b in options.beta_range)
    r = (it - start_it) / max(n - start_it, 1.0)
    return end + 0.5 * (start - end) * (1.0 + math.cos(math.pi * min(max(r, 0.0), 1.0)))


def optimise(problem: Problem, options: FinetuneOptions, gen: torch.Generator) -> tuple[np.ndarray, None]:
    """Learned rounding for ``problem``'s integer weight; returns the new float weight (on the grid).

    Each step is spec §7.3's: the soft weight ``(clamp(floor(w/s) + h(α) + zp) − zp)·s`` through the
    layer, the squared-L2 reconstruction loss plus (after the warm start) the annealed rounding
    term, one Adam step on α. The gradient is written out (:mod:`.grad`) rather than recorded by
    autograd, which makes a step several times cheaper on small problems; the mathematics is the same.

    Training ends early — without changing the result — once every ``h(α)`` sits at 0 or 1 with
    Adam's momentum pushing it further out: there both gradients are exactly zero (the clamp in
    ``h``), so α only keeps moving away from 0 and the final rounding ``[α ≥ 0]`` is already decided.
    """
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
        # clamp(f + h + zp, qmin, qmax) - zp with h in [0, 1] and f an integer is f + h where
        # qmin <= f + zp <= qmax - 1, and a constant (the clamp bound) elsewhere.
        fz = w_floor + zp32
        free = ((fz >= qmin) & (fz <= qmax - 1)).to(torch.float32)
        base = (torch.clamp(fz, qmin, qmax) - zp32) * s
        s_free = s * free
        s_free_zg = s_free * (ZETA - GAMMA)  # d(soft weight)/d(sigmoid(α)) where h is not clipped
    alpha = alpha0.clone()
    bias = problem.bias_value()
    layer_grad = LayerGrad(problem.layer)
    batches = Batches(problem, options.batch_size, options.drop_ratio, gen,
                      prepare=lambda t: layer_grad.prepare(t, problem.weight.shape))

    def soft_weight(sig: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raw = sig.mul(ZETA - GAMMA).add_(GAMMA)
        return torch.addcmul(base, raw.clamp(0.0, 1.0), s_free), raw

    n = int(options.num_iterations)
    with torch.no_grad():
        x0, y0 = draw(problem, options.batch_size, options.drop_ratio, gen)
        first = float(((problem.forward(x0, soft_weight(torch.sigmoid(alpha))[0], bias) - y0) ** 2).sum(dim=problem.channel_dim).mean())
    opt = Adam(alpha, lr=learning_rate(options, first))
    stop = EarlyStop(options)
    period = log_period(options)
    warm = options.warm_start * n
    lam = float(options.reg_param)
    n_weights = alpha.numel()
    check_every = max(1, min(50, n // 20))
    it = -1
    with torch.no_grad():
        for it in range(n):
            x, y = batches()
            sig = torch.sigmoid(alpha)
            w, raw = soft_weight(sig)
            recon, gw, _ = layer_grad.loss_and_grad(x, w, bias, y)
            d_sig = gw * s_free_zg  # d recon / d sigmoid(α), clipped entries included (masked below)
            if it >= warm:
                beta = beta_at(it, options)
                t = raw.clamp(0.0, 1.0).mul_(2.0).sub_(1.0)  # 2h - 1
                mag = t.abs()
                p = mag.pow(beta - 1.0)
                round_value = lam * (n_weights - float((p * mag).sum()))
                # d/dh of λ·Σ(1 − |2h−1|^β) = −2λβ·|2h−1|^(β−1)·sign(2h−1)
                d_sig.add_(p.mul_(t.sign()), alpha=-2.0 * lam * beta * (ZETA - GAMMA))
            else:
                round_value = 0.0
            d_alpha = torch.ops.aten.hardtanh_backward(torch.ops.aten.sigmoid_backward(d_sig, sig), raw, 0.0, 1.0)
            opt.step(d_alpha)
            recon_value = float(recon)
            value = recon_value + round_value
            if (it + 1) % period == 0 or it == n - 1:
                log.debug("adaround %s iterations=%d, lr=%g, loss=%.4g (recon %.4g, rounding %.4g)",
                          problem.layer.name, it + 1, opt.lr, value, recon_value, round_value)
            if stop(it, value):
                log.debug("adaround %s: early stop after %d iterations", problem.layer.name, it + 1)
                break
            if (it + 1) % check_every == 0 and _decided(alpha, opt):
                log.debug("adaround %s: every rounding decided after %d iterations", problem.layer.name, it + 1)
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


def _decided(alpha: torch.Tensor, opt: Adam) -> bool:
    """True when no later step can change ``[α ≥ 0]``: every h(α) is clipped to 0 or 1 (so both
    gradients are exactly 0 from now on) and Adam's first moment moves each α further into its
    clipped side (with zero gradients that moment only decays, so its sign holds)."""
    raw = torch.sigmoid(alpha).mul_(ZETA - GAMMA).add_(GAMMA)  # as in the step
    # Adam moves α by −lr·m̂/(√v̂+ε): where h = 1 α must not decrease (m <= 0), where h = 0 not increase (m >= 0).
    return bool((((raw >= 1.0) & (opt.m <= 0)) | ((raw <= 0.0) & (opt.m >= 0))).all())
