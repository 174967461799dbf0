"""Zero-guarded divisors: a divisor computed as ``x + g(x)`` stays float from that sum to the ``Div``.

Why: exporters guard a division against a zero divisor by adding a correction computed from the
divisor itself, nonzero exactly where it is 0 — tf2onnx writes ``Atan2(y, x)`` as
``Atan(y / (x + sign(x)² − 1))`` plus quadrant terms: where ``x`` is 0 the divisor is −1. The
guard holds only in exact arithmetic. Quantized, the sum is rounded again after it is formed: a
small nonzero ``x`` (no correction added) lands on the sum's grid at 0, and where the numerator
rounds to 0 too the quotient is 0/0 = NaN. Measured on leader_minutiae A8W8 with repair off
(bench/RESULTS.md, "More models outside the zoo, eighth round"): NaN in the direction channel at
two pixels of a held-out print (``Atan2div``), the floor read "cosine nan" and repair stepped all
352 nodes up to 16 bits (526.7 s). Keeping the divisor float from the sum on makes the guard exact
again: the sum reads the same rounded ``x`` everywhere its value matters (0 where ``x`` rounded
to 0, whose sign is then 0 too, so the sum is −1; otherwise ``x`` itself or ``x − 1``).

The rule, by dataflow (no names): for every ``Div`` whose divisor is computed, walk the divisor
back through data movement (``peak_nms.MOVES``) to its source; where the source is an ``Add`` or
``Sub`` of two computed tensors one of which is computed from the other without a dot product in
between (a correction derived from the value itself, not a residual branch through a layer), the
source and every moved copy of it up to the ``Div`` stay float, and so does the correction (back
through data movement to the op that computes it), with the reason in the plan. The correction
too: calibration on real data never sees the guard fire (``x`` is never exactly 0 in float), so
its calibrated range is [0, 0] and a quantizer clamps its −1 to 0 (LEADER A8W8 kept NaN with only
the sum float).
"""

from __future__ import annotations

import logging

from ...graph.walk import upstream_nodes
from .peak_nms import _computed, _source
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["DOTS", "guarded_divisors", "zero_guard_float"]

#: dot products: a correction computed through one is a layer's output, not a guard
DOTS = frozenset("Conv ConvTranspose MatMul Gemm".split())


def _derived_from(value: str, other: str, g: _Graph) -> bool:
    """True when ``other`` is computed from ``value`` through ops other than dot products."""
    return any(value in node.input for node in upstream_nodes(other, g.producer, lambda n: n.op_type not in DOTS)
               if node.op_type not in DOTS)


def guarded_divisors(g: _Graph) -> dict[str, list[str]]:
    """``{Div node: the divisor's tensors from the Div to its source, then the correction's}`` for every divisor computed
    as a value plus a correction derived from it (module docstring)."""
    found: dict[str, list[str]] = {}
    for node in g.nodes:
        if node.op_type != "Div" or len(node.input) != 2 or not node.input[1] or node.input[1] in g.initializers:
            continue
        source, path = _source(node.input[1], g)
        summed = g.producer.get(source)
        if summed is None or summed.op_type not in ("Add", "Sub"):
            continue
        a_b = _computed(summed, g)
        if len(a_b) != 2 or a_b[0] == a_b[1]:
            continue
        for value, correction in (a_b, a_b[::-1]):
            if _derived_from(value, correction, g):
                found[node.name] = path + _source(correction, g)[1]
                break
    return found


def zero_guard_float(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Remove every zero-guarded divisor's tensors from ``tensors``; returns ``{tensor: reason}``
    for ``Plan.float_tensors``."""
    why: dict[str, str] = {}
    for div, names in guarded_divisors(g).items():
        for name in names:
            if tensors.pop(name, None) is not None:
                why[name] = (f"divisor of {div} (or its zero guard), a value plus a correction derived from it: rounding either "
                             "puts a small nonzero divisor on 0 past the guard, 0/0 = NaN (plan/zero_guards.py), so it stays float")
    if why:
        log.info("plan: %d zero-guarded divisor tensors stay float: %s", len(why), ", ".join(sorted(why)[:4]))
    return why
