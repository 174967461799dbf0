"""Scarce ranges: a 16-bit activation of a few values per sample gets a margin beyond its calibrated range.

Why: a calibrated range is the largest value the calibration feeds reached. On a feature map each
feed gives thousands of values and the per-feed peaks barely move from feed to feed; on a dense
head's features or its logit (a MOS regressor's last layers, one to a few dozen values per clip)
each feed gives one draw, so the range is the extreme of a handful of draws and the next clip
lands beyond it as often as not. speechmos's PLCMOS under A16W8 calibrated its pre-sigmoid logit
(one value per call) to ±1.785 on 8 feeds, where two of the 4 held-out feeds reached −2.14 and
−2.51 and the bench's held-out clips −2.15: the int16 logit saturated and those clips read
0.16 MOS high (bench/RESULTS.md, "More models outside the zoo, fifth round"); its 32-value input
was clipped the same way (±0.598 calibrated, −0.849 reached). A clipped value is an error of any
size; a wider range costs only step size, and a 16-bit grid has steps to spare: ×2 costs one bit of
sixteen (step = range / 16383 instead of / 32767, 128× finer than the 8-bit weights it is
multiplied with under A16W8).

The rule, by structure and format alone: an integer activation of at least :data:`MIN_BITS` bits,
per tensor, whose declared shape holds at most :data:`SCARCE_VALUES` values per sample (the axes after
the batch axis, or all axes of a rank ≤ 1 tensor), gets ``TensorPlan.margin`` = :data:`MARGIN`
(``calibration.methods.compute_range`` widens the calibrated range by it; readers' saturation
limits still cut it, ``solve._clamp``). 8-bit grids are left alone: there a margin costs a bit of
eight on every value of the tensor. Only the presets' percentile calibration gets it (as only it
gets the recurring peaks, plan/peaks.py): a method named for the reference tool's semantics (MinMax,
Entropy, MinMSE, ...) keeps the range that method defines. Measured where that matters: the
reference tool's documented A16W8 → A8W8 mixed-precision example on PP-OCR cls (asymmetric int16,
MinMax) with the margin had its all-A8 model at L2 0.0795 and all-A16 at 0.1018 (0.1128 and 0.1067
without), so no target lay between them for tests/test_mixed_precision.py's greedy check.
"""

from __future__ import annotations

import math

from ...formats.integer import qrange
from .select import _Graph
from .types import TensorPlan

__all__ = ["MARGIN", "MIN_BITS", "SCARCE_VALUES", "scarce_ranges"]

#: values per sample up to which a tensor's calibrated range is the extreme of a few draws per feed
#: (a dense head: PLCMOS's last layers hold 1-128; a feature map holds thousands)
SCARCE_VALUES = 256
#: the factor a scarce 16-bit range is widened by (one bit of sixteen)
MARGIN = 2.0
#: the integer grids that have the steps to spare
MIN_BITS = 16


def _bits(fmt: str) -> int:
    qmin, qmax = qrange(fmt)
    return int(math.log2(qmax - qmin + 1))


def values_per_sample(dims: tuple[int | None, ...] | None) -> int | None:
    """Declared values per sample of a tensor with axes ``dims`` (the first is the batch axis from
    rank 2 on); None where an axis is not known."""
    if dims is None:
        return None
    per = dims[1:] if len(dims) >= 2 else dims
    if any(d is None for d in per):
        return None
    return math.prod(per)


def scarce_ranges(tensors: dict[str, TensorPlan], g: _Graph) -> list[str]:
    """Set ``TensorPlan.margin`` on the scarce 16-bit activations (module docstring); their names."""
    marked: list[str] = []
    for name, plan in tensors.items():
        if plan.role != "activation" or not plan.quant.is_integer or plan.quant.per_channel or plan.quant.calibration != "percentile":
            continue
        if _bits(plan.quant.format) < MIN_BITS:
            continue
        n = values_per_sample(g.dims.get(name))
        if n is not None and n <= SCARCE_VALUES:
            plan.margin = MARGIN
            marked.append(name)
    return marked
