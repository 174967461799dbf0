"""Activations a per-group normalizer reads, judged group by group: 16 bits where a group drowns.

Why: an ``InstanceNormalization`` (on the tensor itself, or on a ``Reshape`` of it to
``[N, G, -1]``: PyTorch's GroupNorm as exported below opset 18) or a ``GroupNormalization``
divides every (sample, group) by that group's own standard deviation. Whatever one shared
per-tensor grid did to a group, its noise comes out of the normalizer at the group's own scale:
a group whose values span a few grid steps leaves the normalizer as noise of unit size, however
small the group was beside the others. The range guard (:mod:`.guard`) judges a per-tensor grid
channel by channel and lets a few drowned channels pass (``MISMATCH_FRACTION``: the next layer mixes
a stray small channel with the rest); a normalizer does not mix them, it amplifies each.

Seen on adaptive-terrain-diffusion's consistency U-Net (bench/RESULTS.md, "GroupNorm inputs judged
per group"): the residual stream between its GroupNorms reaches 1e6-1e10, its groups' standard
deviations spread ×20-×400 within one tensor, and under A8W8's per-tensor uint8 the quietest
groups of 50 of the 139 normalizer inputs come out below 6 dB (down to -10 dB: more noise than
signal) while the whole tensors hold 7-15 dB: the plain build's output cosine was 0.42.

The rule, by structure and the guard's own calibration values: a per-tensor 8-bit integer
activation read by a per-group normalizer (found through ``Reshape`` only, the group count from the
reshape's constant shape or the op's ``num_groups``) is simulated with its planned quantizer on
the guard's kept samples (:class:`~.guard.GuardValues`, no extra float run: the guard fetched
them), and each (sample, group)'s SQNR is taken as the normalizer sees it: signal the group's
variance plus the normalizer's ``epsilon`` (a group quieter than epsilon leaves the normalizer
near zero, its noise with it), noise the variance of the rounding error over the group (the
normalizer removes the group's mean, and with it any constant offset of the error). Below
``QuantConfig.range_guard_sqnr_db`` (the guard's bound for a drowned channel) on any (sample,
group), the tensor and every tensor sharing its grid (a ``share_with`` group, the ``Reshape``
outputs on the way to the normalizer) step up to 16 bits (uint8 → uint16, int8 → int16, all else
about the quantizer kept: the statistics calibration collected serve). 16 bits, not float: the
tensor's other readers (a residual ``Add``, a skip ``Conv``, a ``Concat``) keep an integer input,
and its 256 times finer grid puts every group the guard's bound allows within reach. Not an exact
rescale: where the normalized tensor has other readers (here always: the residual stream), a
per-group scale would change what they read.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import numpy as np
import onnx

from ..formats.integer import SIXTEEN_BIT
from ..graph.ops import PASS_THROUGH
from .guard import GuardValues, simulate
from .plan import Plan, TensorPlan
from .plan.select import _Graph
from .solve import share_root, shared_activation_params

__all__ = ["WIDER", "normalizer_groups", "group_sqnr", "step_up_normalizer_inputs"]

log = logging.getLogger(__name__)

#: 8-bit integer formats and their 16-bit counterparts (same signedness; repair's ladder takes the same step)
WIDER = SIXTEEN_BIT
#: the per-group normalizers the rule reads through (:func:`normalizer_groups`)
_NORMALIZERS = ("InstanceNormalization", "GroupNormalization")
#: the default ``epsilon`` of InstanceNormalization and GroupNormalization (ONNX spec)
DEFAULT_EPSILON = 1e-5


def _epsilon(node: onnx.NodeProto) -> float:
    return next((float(a.f) for a in node.attribute if a.name == "epsilon"), DEFAULT_EPSILON)


def _grouping_reshape(node: onnx.NodeProto, g: _Graph) -> int | None:
    """G for a ``Reshape`` to ``[N or 0, G, -1]`` (contiguous channel groups of its NC... input),
    read from its constant shape; None for any other reshape."""
    shape = g.constant_value(node.input[1]) if len(node.input) > 1 else None
    if shape is None or shape.ndim != 1 or shape.size != 3:
        return None
    batch, groups, rest = int(shape[0]), int(shape[1]), int(shape[2])
    if batch < 0 or groups <= 0 or (rest != -1 and rest <= 0):
        return None
    allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
    if int(shape[0]) == 0 and allowzero:
        return None
    return groups


def normalizer_groups(name: str, g: _Graph) -> list[tuple[int | None, float]]:
    """``[(groups, epsilon)]`` for every per-group normalizer that reads ``name`` directly or
    through one grouping ``Reshape``: ``groups`` None means one group per channel (an
    InstanceNormalization on the tensor itself)."""
    found: list[tuple[int | None, float]] = []
    for node in g.consumers.get(name, []):
        if node.input[0] != name:
            continue
        if node.op_type == "InstanceNormalization":
            found.append((None, _epsilon(node)))
        elif node.op_type == "GroupNormalization":
            groups = next((int(a.i) for a in node.attribute if a.name == "num_groups"), 0)
            if groups > 0:
                found.append((groups, _epsilon(node)))
        elif node.op_type == "Reshape" and (groups := _grouping_reshape(node, g)) is not None:
            for reader in g.consumers.get(node.output[0], []):
                if reader.op_type == "InstanceNormalization" and reader.input[0] == node.output[0]:
                    found.append((groups, _epsilon(reader)))
    return found


def group_sqnr(x: np.ndarray, q: np.ndarray, groups: int | None, epsilon: float) -> float | None:
    """The worst (sample, group) SQNR in dB of ``q`` against ``x`` (``[N, C, ...]``) as a per-group
    normalizer sees it (module docstring); None when the channels do not split into ``groups``."""
    if x.ndim < 2 or x.shape[0] == 0:
        return None
    channels = x.shape[1]
    groups = channels if groups is None else groups
    if groups <= 0 or channels % groups:
        return None
    n = x.shape[0]
    xg = np.asarray(x, np.float64).reshape(n, groups, -1)
    eg = np.asarray(q, np.float64).reshape(n, groups, -1) - xg
    if xg.shape[2] < 2:
        return None
    signal = xg.var(axis=2) + epsilon
    noise = eg.var(axis=2)
    with np.errstate(divide="ignore"):
        db = np.where(noise > 0, 10.0 * np.log10(signal / np.where(noise > 0, noise, 1.0)), np.inf)
    return float(np.min(db))


def _sharing(plan: Plan, root: TensorPlan, g: _Graph) -> list[TensorPlan]:
    """Every planned activation on ``root``'s grid: its share group, and planned ``Reshape``
    outputs of a member (the copy a written-out GroupNorm reads), transitively."""
    members = {t.name for t in plan.activations() if share_root(plan, t).name == root.name}
    todo = list(members)
    while todo:
        current = todo.pop()
        for node in g.consumers.get(current, []):
            if node.op_type == "Reshape" and node.input[0] == current:
                out = node.output[0]
                if out in plan.tensors and plan.tensors[out].role == "activation" and out not in members:
                    members.add(out)
                    todo.append(out)
    return [plan.tensors[n] for n in sorted(members)]


def step_up_normalizer_inputs(model: onnx.ModelProto, plan: Plan, stats: Mapping[str, Any], values: GuardValues,
                              bound_db: float, *, moving_average: bool = False) -> dict[str, str]:
    """Step to 16 bits (in place) every per-tensor 8-bit activation of ``plan`` that a per-group
    normalizer reads and whose quietest group the planned grid drowns (module docstring), with the
    tensors sharing its grid; record each in ``plan.guard`` (action ``16-bit``) and return
    ``{tensor: reason}``."""
    if not any(n.op_type in _NORMALIZERS for n in model.graph.node):  # most models: no index to build
        return {}
    g = _Graph(model, subgraphs=False)
    main = {i.name for i in model.graph.input} | {o for n in model.graph.node for o in n.output}
    # A pass-through op's planned output is judged through its planned input (the guard's rule too,
    # guard._candidates): the input's values are the ones the guard fetched, and the grouping
    # Reshape on the way tells the groups; the output follows its input's grid (_sharing).
    rearranged = {out for node in model.graph.node if node.op_type in PASS_THROUGH and node.input
                  and node.input[0] in plan.tensors for out in node.output}
    todo: dict[str, list[tuple[int | None, float]]] = {}
    for t in plan.activations():
        if (t.name not in rearranged and t.quant.format in WIDER and not t.quant.per_channel and t.producer_quant is None and t.name in main
                and t.name in stats and (found := normalizer_groups(t.name, g))):
            todo[t.name] = found
    if not todo or not values.samples:  # no kept samples: nothing to measure (the guard says so too)
        return {}
    fetched = values.get(list(todo))
    why: dict[str, str] = {}
    for name, readers in todo.items():
        t = plan.tensors.get(name)
        x = fetched.get(name)
        if t is None or t.quant.format not in WIDER or x is None or x.size == 0 or not np.all(np.isfinite(x)):
            continue
        q = simulate(x, t, shared_activation_params(plan, t, stats, moving_average=moving_average))
        worst = min((db for groups, eps in readers if (db := group_sqnr(x, q, groups, eps)) is not None), default=None)
        if worst is None or worst >= bound_db:
            continue
        reason = (f"read by a per-group normalizer: its quietest (sample, group) holds {worst:.1f} dB on the planned "
                  f"{t.quant.format} grid (< {bound_db:g} dB), and the normalizer scales that noise to unit size, so "
                  f"it and the tensors sharing its grid step up to 16 bits (pipeline/norm_groups.py)")
        for member in _sharing(plan, share_root(plan, t), g):
            if member.quant.format in WIDER:
                member.quant = member.quant.with_(format=WIDER[member.quant.format])
                why[member.name] = reason
        plan.guard[name] = {"action": "16-bit", "axis": 1, "worst_sqnr_db": round(worst, 2) if math.isfinite(worst) else None,
                            "reason": f"a group on the normalizer's axis below the SQNR bound (worst {worst:.1f} dB)",
                            "detail": "read by a per-group normalizer: stepped up to 16 bits with the tensors sharing its grid"}
    if why:
        log.info("normalizer groups: %d activation(s) stepped up to 16 bits (a per-group normalizer reads them and "
                 "their quietest group drowns in the 8-bit grid): %s", len(why), ", ".join(sorted(why)[:6]))
    return why
