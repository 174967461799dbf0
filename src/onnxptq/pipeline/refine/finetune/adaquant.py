"""AdaQuant (Hubara et al. 2021): learn the float weights (and bias) through the format's quantizer.

Works for every weight format — integer, bf16/fp16, fp8, BFP, MX — because the gradient passes the
fake quantization straight through (:mod:`.torch_formats`), while the forward pass is exactly what
the emitted model computes. The solved scales stay fixed during and after training.

What is returned: for formats with solved parameters (integer, scaled floats) the fake-quantized
values, which emit re-quantizes to exactly the same values; for the others (bf16, bfp, mx) the
learned float values, which emit fake-quantizes exactly as the forward pass did.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from ....config.schema import FinetuneOptions
from .train import EarlyStop, Problem, Quantizer, draw, learning_rate, log_period

log = logging.getLogger(__name__)


def _returned(value: torch.Tensor, quantizer: Quantizer) -> np.ndarray:
    """What to hand back to emit for a learned tensor (see the module doc)."""
    with torch.no_grad():
        if "scale" in quantizer.attrs:
            value = quantizer(value)
    return value.detach().cpu().numpy().astype(np.float32)


def optimise(problem: Problem, options: FinetuneOptions, gen: torch.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """Adam on the weight (and, with ``update_bias`` and a quantized bias, the bias)."""
    weight = problem.weight.clone().requires_grad_(True)
    params = [weight]
    learn_bias = bool(options.update_bias and problem.bias is not None and problem.bias_q is not None)
    bias = problem.bias.clone().requires_grad_(True) if learn_bias else None
    if bias is not None:
        params.append(bias)
    fixed_bias = problem.bias_value()

    def run(x: torch.Tensor) -> torch.Tensor:
        b = problem.bias_q.ste(bias) if bias is not None else fixed_bias
        return problem.forward(x, problem.weight_q.ste(weight), b)

    n = int(options.num_iterations)
    with torch.no_grad():
        x0, y0 = draw(problem, options.batch_size, options.drop_ratio, gen)
        first = float((run(x0) - y0).pow(2).sum(dim=problem.channel_dim).mean())
    opt = torch.optim.Adam(params, lr=learning_rate(options, first))
    stop = EarlyStop(options)
    period = log_period(options)
    for it in range(n):
        x, y = draw(problem, options.batch_size, options.drop_ratio, gen)
        loss = (run(x) - y).pow(2).sum(dim=problem.channel_dim).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        if (it + 1) % period == 0 or it == n - 1:
            log.debug("adaquant %s iterations=%d, lr=%g, loss=%.4g", problem.layer.name, it + 1, opt.param_groups[0]["lr"], value)
        if stop(it, value):
            log.debug("adaquant %s: early stop after %d iterations", problem.layer.name, it + 1)
            break
    new_bias = _returned(bias, problem.bias_q) if bias is not None and problem.bias_q is not None else None
    return _returned(weight, problem.weight_q), new_bias
