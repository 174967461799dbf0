"""Conditioning scalars whose quiet calibration batches an integer grid flushes stay float.

Why: a diffusion denoiser takes the noise level as an input and computes its preconditioning from
it inside the graph (EDM's ``c_skip = σd²/(σ² + σd²)``, ``c_in = 1/√(σ² + σd²)``, ``log σ``). Those
are a few values per sample that move over many decades between inputs: on
adaptive-terrain-diffusion's consistency U-Net, ``σ²`` is 6400 on a ``generate`` call (σ = 80) and
0.16 on a ``generate_from`` call (σ = 0.4), ``c_skip`` 3.9e-5 and 0.61, a reciprocal 1.6e-4 and 2.45.
One per-tensor grid over the whole calibrated range gives the quiet calls 0-2 codes: A16W8 plans
them (its placement quantizes the elementwise ops they pass through), and a σ² of 0.16 is 1.6 codes
of 65536 over 6400, a ``c_skip`` of 3.9e-5 a fraction of one over 0.61; its repair kept 48 nodes
float and stopped at 0.826 of the height cells (bench/RESULTS.md, eighth round of outside models).
(A8W8's CPU placement leaves those scalars float already: its break on that model is elsewhere.)

The rule, by the calibration's data and the format alone: a per-tensor integer activation of at
most :data:`~onnxptq.pipeline.plan.scarce.SCARCE_VALUES` values per calibration batch (a handful of
scalars per sample, not a feature map), **of one sign over the whole calibration** (a magnitude: a
variance, a gain, a reciprocal) and **read as a factor** (it scales another computed tensor: an
operand of a ``Mul`` or a ``Div`` whose other operand is computed, reached directly or through
data movement and elementwise arithmetic against constants: :func:`read_as_factor`), whose
quietest batch peaks below ``√levels`` steps of its solved
grid (16 codes of int8's 256, 256 of int16's 65536: the quiet batches keep less than half the
format's bits) stays float, with the reason in the plan. A batch that is exactly zero is held
exactly and does not count. Keeping such a tensor float costs nothing at run time (a few values
per sample) and nothing in size (an activation has no stored values).

Why one sign and a factor: a magnitude that scales something carries a relative error (a
``c_in`` read 22 % high scales a whole sample's features by 22 %, however small ``c_in`` is: it is
small exactly where the features it scales are large). A value read additively (a logit into a
``Sigmoid`` or a comparison, a feature into a ``MatMul``) needs the grid's absolute step there,
which the calibrated range already sets; and a signed value passes through zero, so with enough
calibration batches one of them lands near zero by chance: its "quiet batch" is a crossing, not
a quieter kind of input. Without these two conditions the rule kept float a wake-word head's
logit and a MOS head's logit (one value per sample, read by a ``Sigmoid``), a tabular model's
z-scored input and a sequence model's sliced hidden state (the built-graph models of
test_decision_thresholds, test_floor_scores, test_repair_seen_rows and test_compat_keys_table),
none of them a scale.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import numpy as np
import onnx

from ..calibration.collectors import MinMaxCollector
from ..formats.integer import qrange
from ..graph.ops import RELAYOUTS, REPEATS
from .plan import Plan
from .plan.scarce import SCARCE_VALUES
from .plan.select import _Graph
from .solve import shared_activation_params

__all__ = ["ARITHMETIC", "MOVES", "keep_quiet_scalars_float", "read_as_factor"]

log = logging.getLogger(__name__)

#: ops that copy or rearrange values (a factor reshaped to broadcast is still that factor)
MOVES = RELAYOUTS | REPEATS
#: ops whose operands scale each other: a relative error in either is one in the result
FACTOR_OPS = frozenset({"Mul", "Div"})
#: elementwise arithmetic that, against constants (or the tensor itself: σ·σ), carries a relative
#: error on: σ² + σd², 1/√d, σd²/d, 4·p
ARITHMETIC = frozenset("Add Sub Mul Div Pow Sqrt Reciprocal Exp Log Neg Abs".split())


def read_as_factor(name: str, g: _Graph) -> bool:
    """Whether ``name`` scales another computed tensor: it reaches an operand of a ``Mul`` or ``Div``
    whose other operand is computed (a feature map, not a constant), directly or through
    :data:`MOVES` and through :data:`ARITHMETIC` against constants or itself (a reciprocal, a square,
    an offset by a constant carry its relative error on: EDM's ``σ² → σ² + σd² → c_skip → x·c_skip``)."""
    todo, seen = [name], {name}
    while todo:
        current = todo.pop()
        for node in g.consumers.get(current, []):
            others = [i for i in node.input if i and i != current]
            if node.op_type in FACTOR_OPS and any(not g.is_constant(i) for i in others):
                return True
            passes = node.op_type in MOVES or (node.op_type in ARITHMETIC and all(g.is_constant(i) for i in others))
            if passes and node.output and node.output[0] not in seen:
                seen.add(node.output[0])
                todo.append(node.output[0])
    return False


def keep_quiet_scalars_float(model: onnx.ModelProto, plan: Plan, stats: Mapping[str, Any], *,
                             moving_average: bool = False) -> dict[str, str]:
    """Drop from ``plan`` (in place) the per-tensor integer activations of few values per batch, one
    sign and read as a factor whose quietest calibration batch an integer grid would hold in fewer
    than ``√levels`` codes (module docstring; ``model`` is the prepared model the plan is of); record
    and return the reasons."""
    why: dict[str, str] = {}
    g: _Graph | None = None
    for t in plan.activations():
        c = stats.get(t.name)
        if not t.quant.is_integer or t.quant.per_channel or not isinstance(c, MinMaxCollector) or c.batches < 2:
            continue
        if c.count > SCARCE_VALUES * c.batches or not (0.0 < c.quietest_peak < math.inf):
            continue
        if c.min < 0.0 < c.max:  # signed: a batch near zero is a crossing, not a quiet input (module docstring)
            continue
        g = g if g is not None else _Graph(model)
        if not read_as_factor(t.name, g):  # read additively: the absolute step is what counts
            continue
        step = float(np.max(shared_activation_params(plan, t, stats, moving_average=moving_average).scale))
        qmin, qmax = qrange(t.quant.format, symmetric=t.quant.symmetric, reduce_range=t.quant.reduce_range)
        codes = math.sqrt(qmax - qmin + 1)
        if c.quietest_peak >= codes * step:
            continue
        why[t.name] = (f"a factor of a few values per sample, of one sign, whose quietest calibration batch peaks at {c.quietest_peak:.3g}, "
                       f"{c.quietest_peak / step:.2g} steps of its {t.quant.format} grid (range up to {c.abs_max:.3g}; fewer "
                       f"than {codes:g}): quiet inputs would lose it, so it stays float (pipeline/quiet_batches.py)")
    # A tensor that takes its scale from another (share_with) carries that tensor's grid: it goes
    # float with its source, never alone. Alone it would break the requantization onnxruntime needs
    # after an int8 tensor's data move (plan/qdq_propagation.py _requantize_after_float_transposes: under the
    # NPU placement a Slice output kept float alone gave a model onnxruntime refuses).
    why = {n: r for n, r in why.items() if plan.tensors[n].share_with is None or plan.tensors[n].share_with in why
           or plan.tensors[n].share_with not in plan.tensors}
    plan.keep_float(why)
    if why:
        log.info("quiet batches: %d scalar activation(s) stay float (an integer grid flushes their quiet calibration "
                 "batches): %s", len(why), ", ".join(sorted(why)[:6]))
    return why
