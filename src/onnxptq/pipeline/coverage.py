"""Bodies the calibration data never ran: their planned tensors stay float, with a warning.

An If branch that no calibration sample takes (silero's 8 kHz branch under 16 kHz audio), a Loop
that never iterates, or a tensor that cannot be passed out of its body, ends calibration with an
empty collector. A range for it would be invented, so the rule is: every body (If branch, Loop or
Scan body) holding a planned activation that needs statistics and got none is left float whole,
with the bodies nested in it — its weights and biases included, so the branch stays exactly the
float model's — and a warning names the body and its tensors. Formats that need no statistics
(BF16 casts, BFP, MX) quantize such bodies all the same: nothing about them is invented.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import onnx

from ..graph.walk import Scope, ScopeIndex
from .plan import Plan

log = logging.getLogger(__name__)

__all__ = ["drop_uncalibrated_bodies", "uncalibrated_bodies"]


def _needs_stats(plan: Plan, name: str) -> bool:
    t = plan.tensors[name]
    if t.role != "activation":
        return False
    return t.quant.needs_calibration or (t.producer_quant is not None and t.producer_quant.needs_calibration)


def _has_stats(stats: Mapping[str, Any], name: str) -> bool:
    collector = stats.get(name)
    return collector is not None and not getattr(collector, "empty", False)


def uncalibrated_bodies(index: ScopeIndex, plan: Plan, stats: Mapping[str, Any]) -> list[tuple[Scope, list[str]]]:
    """(body, its planned tensors without statistics) for each body calibration never reached."""
    missing: dict[int, list[str]] = {}
    for name in plan.tensors:
        scope = index.home.get(name)
        if scope is None or scope.is_main or not _needs_stats(plan, name) or _has_stats(stats, name):
            continue
        missing.setdefault(id(scope), []).append(name)
    return [(s, missing[id(s)]) for s in index.scopes if id(s) in missing]


def drop_uncalibrated_bodies(model: onnx.ModelProto, plan: Plan, stats: Mapping[str, Any]) -> Plan:
    """``plan`` without the tensors of bodies (and bodies nested in them) that got no statistics."""
    index = ScopeIndex(model)
    bodies = uncalibrated_bodies(index, plan, stats)
    if not bodies:
        return plan
    dropped_scopes = {id(s) for s, _ in bodies}
    for scope in index.scopes:
        if any(id(a) in dropped_scopes for a in scope.ancestors()):
            dropped_scopes.add(id(scope))
    drop = {n for n in plan.tensors if (s := index.home.get(n)) is not None and id(s) in dropped_scopes}
    # An int32 bias scale needs its input's and weight's scales: it goes with either.
    drop |= {n for n, t in plan.tensors.items() if t.bias_of is not None and set(t.bias_of) & drop}
    # One warning naming the outermost such bodies (a body inside one is dropped with it).
    outermost = [(s, names) for s, names in bodies if not any(id(a) in {id(b) for b, _ in bodies} for a in s.ancestors())]
    parts = []
    for scope, names in outermost:
        inside = [n for n in drop if (h := index.home.get(n)) is not None and (h is scope or scope in list(h.ancestors()))]
        parts.append(f"{scope.label} ({len(inside)} planned tensor(s); no statistics for e.g. {names[0]!r})")
    shown = "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")
    log.warning("%d If/Loop/Scan bod%s not run by the calibration data stay float: %s", len(parts),
                "y" if len(parts) == 1 else "ies", shown)
    dropped_nodes = {n.name for s in index.scopes if id(s) in dropped_scopes for n in s.nodes}
    tensors = {n: t for n, t in plan.tensors.items() if n not in drop}
    for t in tensors.values():
        if t.share_with in drop:
            t.share_with = None
    skipped = dict(plan.skipped_nodes)
    skipped.update({n: "in a body the calibration data never ran" for n in plan.nodes if n in dropped_nodes})
    return Plan(tensors=tensors, nodes=[n for n in plan.nodes if n not in dropped_nodes], skipped_nodes=skipped)
