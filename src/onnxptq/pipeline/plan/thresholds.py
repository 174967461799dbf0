"""Decision thresholds: a tensor the graph compares with a constant keeps the constant in its range.

Why: a model that decides inside its graph (``GreaterOrEqual(Sigmoid(logit), 0.5) → If``: openWakeWord's
wake-word heads run a verifier branch only above the threshold) is only right if its quantized
values can reach both sides of the threshold. A calibration set without a positive (hey_jarvis's
24 clips: probabilities ≤ 0.493) gives the Sigmoid output the range [0, 0.493] and the logit a
range that ends below 0: every quantized value then saturates under 0.5, the comparison is false
on every input, and the model never fires — 3 of 48 held-out decisions lost (all three wakes),
with an output cosine of 0.99, and the floor's held-out calibration feeds (no positive either)
cannot see it (bench/RESULTS.md, "A decision threshold outside the calibrated range").

The rule, by structure: for every comparison (``Greater``, ``GreaterOrEqual``, ``Less``,
``LessOrEqual``, ``Equal``) of a float tensor with a constant, the constant's values are a
threshold of that tensor; walking back through ops that map a threshold to one threshold of their
input — data movement, ``Relu`` (a positive threshold), ``Sigmoid`` (``logit``), ``Tanh``
(``atanh``), ``Exp`` (``log``), ``Add``/``Sub``/``Mul``/``Div`` by a constant scalar (the affine
inverse; a negative factor swaps the comparison's sides, which does not matter here) — every
planned activation on the way must cover its threshold: the solver widens the calibrated range to
include it and a step beyond (:data:`BEYOND`), so values on both sides stay distinct.

Not widened: a threshold that would stretch the range more than :data:`MAX_STRETCH` times (a test
against a sentinel or an impossible value: costing several bits of every value for it would
trade the model's accuracy for a comparison the data never comes near); the plan logs it.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx

from ...graph.external import tensor_values
from ...graph.ops import FLOATING, RELAYOUTS
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["BEYOND", "COMPARISONS", "MAX_STRETCH", "decision_thresholds", "widen_to_cover"]

COMPARISONS = frozenset("Greater GreaterOrEqual Less LessOrEqual Equal".split())
#: ops whose output equals their (first) input's values, moved: a threshold passes unchanged
_MOVES = RELAYOUTS | {"Slice", "Gather", "Expand", "Cast"}
#: the range is widened past a threshold by this share of the widened span (two int8 steps), so a
#: strict and a non-strict comparison both see values on each side
BEYOND = 2.0 ** -7
#: a threshold that would make the range this many times wider is not covered (module docstring)
MAX_STRETCH = 4.0


def _float_values(name: str, g: _Graph) -> np.ndarray | None:
    """The values of the float initializer ``name``, flat (None: not a float initializer)."""
    init = g.initializers.get(name)
    if init is None or init.data_type not in FLOATING:
        return None
    return np.asarray(tensor_values(init), dtype=np.float64).reshape(-1)


def _scalar(name: str, g: _Graph) -> float | None:
    values = _float_values(name, g)
    return float(values[0]) if values is not None and values.size == 1 and np.isfinite(values[0]) else None


def _constant_values(name: str, g: _Graph) -> np.ndarray | None:
    """The finite values of the float initializer ``name`` (None: not one, or none finite)."""
    values = _float_values(name, g)
    if values is None:
        return None
    values = values[np.isfinite(values)]
    return values if values.size else None


def _through(node: onnx.NodeProto, tensor: str, bounds: tuple[float, float], g: _Graph) -> tuple[str, tuple[float, float]] | None:
    """``(input, its thresholds)`` for a threshold ``bounds`` on ``node``'s output, or None where the
    op does not map one threshold to one threshold of one input."""
    lo, hi = bounds
    op = node.op_type
    if op in _MOVES:
        return (node.input[0], bounds) if node.input and node.input[0] == tensor else None
    if op == "Relu":
        return (node.input[0], bounds) if lo > 0 else None
    if op == "Sigmoid":
        if not (0.0 < lo and hi < 1.0):
            return None
        return node.input[0], (math.log(lo / (1 - lo)), math.log(hi / (1 - hi)))
    if op == "Tanh":
        return (node.input[0], (math.atanh(lo), math.atanh(hi))) if -1.0 < lo and hi < 1.0 else None
    if op == "Exp":
        return (node.input[0], (math.log(lo), math.log(hi))) if lo > 0 else None
    if op in ("Add", "Sub", "Mul", "Div") and len(node.input) == 2:
        for i in (0, 1):
            k = _scalar(node.input[1 - i], g)
            if k is None or node.input[i] == node.input[1 - i]:
                continue
            x = node.input[i]
            if op == "Add":
                ends = (lo - k, hi - k)
            elif op == "Sub":
                ends = (lo + k, hi + k) if i == 0 else (k - hi, k - lo)
            elif op == "Mul":
                if k == 0:
                    return None
                ends = (lo / k, hi / k)
            else:  # Div
                if i == 1 or k == 0:
                    return None  # k / x: a threshold of x exists but the op is rare here
                ends = (lo * k, hi * k)
            return x, (min(ends), max(ends))
    return None


def decision_thresholds(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """Set ``TensorPlan.covers`` on every planned activation whose values a comparison with a
    constant decides on, directly or through the ops :func:`_through` inverts (module docstring)."""
    for node in g.nodes:
        if node.op_type not in COMPARISONS or len(node.input) != 2:
            continue
        for i in (0, 1):
            values = _constant_values(node.input[1 - i], g)
            tensor = node.input[i]
            if values is None or tensor in g.initializers:
                continue
            bounds = (float(values.min()), float(values.max()))
            seen: set[str] = set()
            while tensor and tensor not in seen:
                seen.add(tensor)
                plan = tensors.get(tensor)
                if plan is not None and plan.role == "activation":
                    lo, hi = plan.covers or bounds
                    plan.covers = (min(lo, bounds[0]), max(hi, bounds[1]))
                producer = g.producer.get(tensor)
                step = _through(producer, tensor, bounds, g) if producer is not None else None
                if step is None:
                    break
                tensor, bounds = step


def widen_to_cover(rmin, rmax, covers: tuple[float, float] | None, name: str = ""):
    """``(rmin, rmax)`` widened to include ``covers`` and :data:`BEYOND` of the span past it
    (elementwise for per-channel ranges); unchanged where that would stretch the range more than
    :data:`MAX_STRETCH` times, or where it already covers the thresholds."""
    if covers is None:
        return rmin, rmax
    lo, hi = np.asarray(rmin, dtype=np.float64), np.asarray(rmax, dtype=np.float64)
    new_lo, new_hi = np.minimum(lo, covers[0]), np.maximum(hi, covers[1])
    if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
        return rmin, rmax
    span, new_span = hi - lo, new_hi - new_lo
    if np.any(new_span > MAX_STRETCH * np.maximum(span, np.finfo(np.float64).tiny)):
        log.info("threshold %s of %r is far outside its calibrated range [%s, %s]: range kept",
                 covers, name, np.min(lo), np.max(hi))
        return rmin, rmax
    pad = BEYOND * new_span
    new_lo = np.where(new_lo < lo, new_lo - pad, lo)
    new_hi = np.where(new_hi > hi, new_hi + pad, hi)
    log.info("range of %r widened to cover the threshold %s the graph compares it with", name, covers)
    if np.ndim(rmin) == 0:
        return float(new_lo), float(new_hi)
    return new_lo.astype(np.asarray(rmin).dtype), new_hi.astype(np.asarray(rmax).dtype)
