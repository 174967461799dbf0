"""An output's agreement with float as its user reads it, where the reading is not in the graph.

Why: the floor judges each output by its structure (cosine, fields, curves, maps, decisions), but a
reader may map the output through a function the graph does not hold, and no figure taken on the
graph's values can know it. adaptive-terrain-diffusion's consistency U-Net returns a height field in
an asinh "model space" ([-1, 1]); the package maps it to metres through ``0.1·sinh(6.09·(x+1)/2)``,
whose slope at the peaks is ~67 m per model unit, so a model-space error of 0.0033 (a sixth of a
percent of the range) is already 1 % of the 22 m height range. BF16, BFP16, MXINT8 and MXFP8_E4M3
kept the output's cosine at 0.9964-0.9998 and only 0.77-0.96 of the height cells within 1 % of
the range (bench/RESULTS.md, eighth round of outside models). That reading demands about 11 bits at
the peaks, more than any 16-bit format's 8-bit mantissa holds; judged on the graph's values (in
whatever metric) the output is fine, and a rule that flagged it would flag every field output.

So the user says how the output is read: ``QuantConfig.floor_output_agreement`` maps an output name
to ``f(float_output, quantized_output) -> agreement in [0, 1]`` (the share of cells, pixels or reads
the application reads as float's), called on each held-out feed's two arrays; the mean over the
feeds is held against the format family's top-1 floor beside everything the floor judges of the
output already, so it can only add a break, and repair answers it like any other.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import UsageError

__all__ = ["output_agreement"]


def output_agreement(name: str, fn: Callable[[np.ndarray, np.ndarray], Any],
                     reference: Sequence[Mapping[str, np.ndarray]], candidate: Sequence[Mapping[str, np.ndarray]]
                     ) -> tuple[float, int] | None:
    """``(mean agreement, feeds)`` of output ``name`` by the user's ``fn`` over the feeds whose float
    output is finite (a quantized output that is not finite agrees on nothing: 0); None where no
    feed has the output as a float array. Raises :class:`~onnxptq.errors.UsageError` naming the
    output and the option where the model has no such output or ``fn`` returns no number in [0, 1]."""
    if reference and name not in reference[0]:
        known = ", ".join(sorted(n for n in reference[0] if not n.startswith("__")))
        raise UsageError(f"floor_output_agreement names output {name!r}, which the model does not have "
                         f"(its outputs: {known})")
    values: list[float] = []
    for ref, got in zip(reference, candidate):
        r, g = np.asarray(ref[name]), np.asarray(got[name])
        if not np.issubdtype(r.dtype, np.floating) or not np.isfinite(r).all():
            continue
        if not np.isfinite(g).all():
            values.append(0.0)
            continue
        value = fn(r, g)
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise UsageError(f"floor_output_agreement[{name!r}] returned {value!r}, not a number in [0, 1]") from None
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise UsageError(f"floor_output_agreement[{name!r}] returned {value!r}, not a number in [0, 1] "
                             "(the share of the output its reader reads as float's)")
        values.append(value)
    if not values:
        return None
    return float(np.mean(values)), len(values)
