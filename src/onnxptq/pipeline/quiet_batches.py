"""Conditioning scalars whose quiet calibration batches an integer grid flushes stay float.

Why: a diffusion denoiser takes the noise level as an input and computes its preconditioning from
it inside the graph (EDM's ``c_skip = σd²/(σ² + σd²)``, ``c_in = 1/√(σ² + σd²)``, ``log σ``). Those
are a few values per sample that move over many decades between inputs: on
adaptive-terrain-diffusion's consistency U-Net, ``σ²`` is 6400 on a ``generate`` call (σ = 80) and
0.16 on a ``generate_from`` call (σ = 0.4), ``c_skip`` 3.9e-5 and 0.61, a reciprocal 1.6e-4 and 2.45.
One per-tensor grid over the whole calibrated range gives the quiet calls 0-2 codes: under A8W8
every σ-80 call read ``c_skip`` as 0, the output's cosine fell to 0.46, and the accuracy floor's
repair stepped up 551 of 1101 nodes (8 candidate builds, most of the quantize's 175 CPU s); under
A16W8 (its σ² of 0.16 is 1.6 codes of 65536 over 6400) repair kept 48 nodes float and stopped at
0.826 of the height cells (bench/RESULTS.md, eighth round of outside models).

The rule, by the calibration's data and the format alone: a per-tensor integer activation of at
most :data:`~onnxptq.pipeline.plan.scarce.SCARCE_VALUES` values per calibration batch (a handful of
scalars per sample, not a feature map, whose quiet batches are silence or dark images that carry
little) whose quietest batch peaks below ``√levels`` steps of its solved grid (16 codes of int8's
256, 256 of int16's 65536: the quiet batches keep less than half the format's bits) stays float,
with the reason in the plan. A batch that is exactly zero is held exactly and does not count.
Keeping such a tensor float costs nothing at run time (a few values per sample) and nothing in
size (an activation has no stored values).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import numpy as np

from ..calibration.collectors import MinMaxCollector
from ..formats.integer import qrange
from .plan import Plan
from .plan.scarce import SCARCE_VALUES
from .solve import shared_activation_params

__all__ = ["keep_quiet_scalars_float"]

log = logging.getLogger(__name__)


def keep_quiet_scalars_float(plan: Plan, stats: Mapping[str, Any], *, moving_average: bool = False) -> dict[str, str]:
    """Drop from ``plan`` (in place) the per-tensor integer activations of few values per batch whose
    quietest calibration batch an integer grid would hold in fewer than ``√levels`` codes (module
    docstring); record and return the reasons."""
    why: dict[str, str] = {}
    for t in plan.activations():
        c = stats.get(t.name)
        if not t.quant.is_integer or t.quant.per_channel or not isinstance(c, MinMaxCollector) or c.batches < 2:
            continue
        if c.count > SCARCE_VALUES * c.batches or not (0.0 < c.quietest_peak < math.inf):
            continue
        step = float(np.max(shared_activation_params(plan, t, stats, moving_average=moving_average).scale))
        qmin, qmax = qrange(t.quant.format, symmetric=t.quant.symmetric, reduce_range=t.quant.reduce_range)
        codes = math.sqrt(qmax - qmin + 1)
        if c.quietest_peak >= codes * step:
            continue
        why[t.name] = (f"a few values per sample whose quietest calibration batch peaks at {c.quietest_peak:.3g}, "
                       f"{c.quietest_peak / step:.2g} steps of its {t.quant.format} grid (range up to {c.abs_max:.3g}; fewer "
                       f"than {codes:g}): quiet inputs would lose it, so it stays float (pipeline/quiet_batches.py)")
    plan.keep_float(why)
    if why:
        log.info("quiet batches: %d scalar activation(s) stay float (an integer grid flushes their quiet calibration "
                 "batches): %s", len(why), ", ".join(sorted(why)[:6]))
    return why
