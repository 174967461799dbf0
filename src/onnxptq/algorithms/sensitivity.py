"""A switch model for repair: any set of quantized nodes kept float, judged with one session run.

Repair (:mod:`onnxptq.algorithms.repair`) gave halves of the plan back in graph order, each a full
candidate build (plan, solve, emit, a new session: 0.5 s on trueocr_rec, 15–20 s on ddddocr's
block presets at load). With the loss spread over many nodes every half held one of them, every
halving failed, and the budget of about eight builds ended with most or all nodes float.

What makes a node sensitive is not the size of the error it adds. On trueocr_rec A8W8 the nodes
adding the largest per-row relative error each flip **no** held-out arg-max position when quantized
alone, while single squeeze-excitation 1×1 convolutions (a few percent of error on a pooled vector,
which rescales whole feature maps) each flip one (bench/RESULTS.md, "Repair ordered by
sensitivity"). So sensitivity is measured by the floor's own judgement, which needs a run per
candidate set — cheap only without a build per set. Hence this module.

**The switch model** is an evaluation copy of the all-quantized candidate: for each quantized node
``n`` whose inputs the quantizer replaced (a dequantized activation or weight), ``n`` reads
``Where(switch_n, quantized input, float input)`` instead — the float input being the producer's own
output (the quantized model keeps the float graph's tensor names; the Q/DQ pairs sit between) or the
float weight (from the prepared model). ``switch_n`` is a boolean scalar graph input: true runs the
node as quantized, false as kept float. One session then judges any set of kept nodes by its feed.

It is an approximation of the build it stands for: a real build with ``n`` excluded plans again
(neighbours' output quantizers, shared scales, int32 biases, the range guard), so repair uses it
to *rank*, and every set it accepts is judged on a real build
(:class:`~onnxptq.algorithms.repair._Judge`). Nodes it cannot switch (no quantized input by the same
name, inputs of another type such as a BF16 ``Cast``, nodes inside subgraphs) are left out of it;
when no node can be switched there is no switch model and repair bisects as before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

log = logging.getLogger(__name__)

__all__ = ["SwitchModel", "switch_model", "SWITCH_PREFIX"]

SWITCH_PREFIX = "onnxptq_repair_switch_"

#: Op types whose output carries a (de)quantized value of the same element type as its input: a node
#: whose replaced input comes from one of these (or from a function of the library's own domain, the
#: block formats' quantize-dequantize) can be switched to its float input.
#: How many float nodes deep the switch model recomputes a float input the quantized model fused away.
_MAX_RECOMPUTED = 4
_DEQUANT_OPS = frozenset({"DequantizeLinear", "Transpose", "Reshape", "Slice", "Mul", "Squeeze", "Unsqueeze", "Identity"})


class SwitchModel:
    """The switch model (module docstring) and the feed that keeps a set of its nodes float."""

    def __init__(self, model: onnx.ModelProto, switches: dict[str, str]) -> None:
        self.model = model
        #: node name -> its switch's graph input
        self.switches = switches
        self._on = np.array(True)
        self._off = np.array(False)

    @property
    def nodes(self) -> list[str]:
        return list(self.switches)

    def feed(self, kept: frozenset[str] | set[str]) -> dict[str, np.ndarray]:
        """The switches' feed for ``kept`` float (every other switched node quantized)."""
        return {sw: (self._off if node in kept else self._on) for node, sw in self.switches.items()}


def _dequantized_producer(op: onnx.NodeProto | None) -> bool:
    return op is not None and (op.op_type in _DEQUANT_OPS or op.domain not in ("", "ai.onnx"))


def switch_model(prepared: onnx.ModelProto, quantized: onnx.ModelProto, owners: Mapping[str, Sequence[str]]) -> SwitchModel | None:
    """The switch model of ``quantized`` (module docstring); None where it can switch nothing.

    ``owners``: for each quantized tensor of the plan (the float model's names), the quantized
    nodes that keep it quantized — its quantized consumers (for an activation or a weight), else its
    producer (a graph output's Q/DQ). A consumer of its dequantized value, quantized or not (the
    emitter wires a float HardSwish to the same DequantizeLinear), reads the quantized value while
    any owner's switch is on: keeping every owner float is what drops a tensor's Q/DQ in a build."""
    float_weights = {i.name: i for i in prepared.graph.initializer}
    float_producer = {o: n for n in prepared.graph.node for o in n.output if o}
    float_nodes = {n.name: n for n in prepared.graph.node if n.name}
    model = onnx.ModelProto()
    model.CopyFrom(quantized)
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    available = set(producer) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    stored = {i.name: i.data_type for i in graph.initializer}
    switches: dict[str, str] = {}
    conditions: dict[str, str] = {}
    added: dict[str, onnx.TensorProto] = {}
    rebuilt: list[onnx.NodeProto] = []

    quantized_weights = {i.name: i for i in graph.initializer}

    def rounded_in_place(name: str) -> bool:
        """A float weight the quantized model holds rounded under its own name (MXFP8's element grid)."""
        q, f = quantized_weights.get(name), float_weights.get(name)
        return q is not None and f is not None and (q.data_type != f.data_type
                                                    or not np.array_equal(numpy_helper.to_array(q), numpy_helper.to_array(f)))

    def float_value(tensor: str, depth: int = 0) -> str | None:
        """The name under which the float model's ``tensor`` is available in the switch model (a
        float weight, added; the float nodes that compute a value the quantized model fused away —
        a ReLU folded into its Q/DQ — copied), or None."""
        if tensor in float_weights:
            if tensor in quantized_weights and rounded_in_place(tensor):
                original = f"{tensor}__{SWITCH_PREFIX}float"
                added.setdefault(original, numpy_helper.from_array(numpy_helper.to_array(float_weights[tensor]), original))
                return original
            if tensor not in available:
                added[tensor] = float_weights[tensor]
                available.add(tensor)
            return tensor
        if tensor in available:
            return tensor
        source = float_producer.get(tensor)
        if source is None or depth >= _MAX_RECOMPUTED or source.domain not in ("", "ai.onnx") \
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in source.attribute):
            return None
        if not all(float_value(t, depth + 1) == t for t in source.input if t):
            return None
        copy = onnx.NodeProto()
        copy.CopyFrom(source)
        copy.name = f"{source.name}__float_copy"
        rebuilt.append(copy)
        available.update(o for o in source.output if o)
        return tensor

    def condition(tensor: str) -> str:
        """The boolean that keeps ``tensor`` quantized: its one owner's switch, or their Or."""
        if tensor not in conditions:
            names = []
            for owner in owners[tensor]:
                if owner not in switches:
                    switches[owner] = f"{SWITCH_PREFIX}{len(switches)}"
                names.append(switches[owner])
            cond = names[0]
            for j, other in enumerate(names[1:]):
                out = f"{tensor}__{SWITCH_PREFIX}or_{j}"
                rebuilt.append(helper.make_node("Or", [cond, other], [out], name=out))
                cond = out
            conditions[tensor] = cond
        return conditions[tensor]

    for node in graph.node:
        ref = float_nodes.get(node.name)
        if ref is not None and ref.op_type == node.op_type and len(ref.input) == len(node.input):
            for i, name in enumerate(node.input):  # a weight rounded in place: the float copy behind a switch
                if name and name == ref.input[i] and owners.get(name) and rounded_in_place(name):
                    chosen = f"{name}__{SWITCH_PREFIX}{node.name}_{i}"
                    rebuilt.append(helper.make_node("Where", [condition(name), name, float_value(name)], [chosen], name=chosen))
                    node.input[i] = chosen
            pairs = [(i, q, f) for i, (q, f) in enumerate(zip(node.input, ref.input)) if q != f and q and f and owners.get(f)
                     and not q.startswith(f"{f}__{SWITCH_PREFIX}")]
            # An input of another kind (a Cast to BF16, an integer kernel's) is not switchable; a
            # weight or bias the emitter stored already rounded (a float initializer) is.
            if not all(_dequantized_producer(producer.get(q)) or stored.get(q) == TensorProto.FLOAT for _, q, _ in pairs):
                pairs = []
            for i, q, f in pairs:
                value = float_value(f)
                if value is None:
                    continue
                chosen = f"{q}__{SWITCH_PREFIX}{node.name}_{i}"
                rebuilt.append(helper.make_node("Where", [condition(f), q, value], [chosen], name=chosen))
                node.input[i] = chosen
        rebuilt.append(node)
    # A graph output dequantized by its producer's Q/DQ: the float value is the producer's renamed
    # output (the node of the same name in both models).
    quantized_nodes = {n.name: n for n in graph.node if n.name}
    for out in graph.output:
        source = float_producer.get(out.name)
        node = quantized_nodes.get(source.name) if source is not None else None
        if not owners.get(out.name) or node is None or list(node.output) == list(source.output) \
                or not _dequantized_producer(producer.get(out.name)):
            continue
        raw = node.output[list(source.output).index(out.name)]
        last = producer[out.name]
        quantized_value = f"{out.name}__{SWITCH_PREFIX}quantized"
        last.output[list(last.output).index(out.name)] = quantized_value
        rebuilt.append(helper.make_node("Where", [condition(out.name), quantized_value, raw], [out.name],
                                        name=f"{out.name}__{SWITCH_PREFIX}output"))
    if not switches:
        return None
    del graph.node[:]
    graph.node.extend(rebuilt)
    graph.initializer.extend(added[name] for name in sorted(added))
    graph.input.extend(helper.make_tensor_value_info(sw, TensorProto.BOOL, []) for sw in switches.values())
    return SwitchModel(model, switches)


def badness(verdict, floor) -> float:
    """How far a verdict is from float, in units of the floor's allowance: the worst output's
    ``(1 − cosine) / (1 − floor cosine)`` or ``(1 − top-1) / (1 − floor top-1)``; ≥ 1 is about
    where the floor breaks. A single number to order nodes by (a verdict's ``ok`` decides)."""
    worst = 0.0
    for check in verdict.outputs.values():
        if np.isfinite(check.cosine):
            worst = max(worst, (1.0 - check.cosine) / max(1e-9, 1.0 - floor.cosine))
        if check.top1 is not None and np.isfinite(check.top1):
            worst = max(worst, (1.0 - check.top1) / max(1e-9, 1.0 - floor.top1))
    return worst


def order_by(sensitivity: Mapping[str, float], nodes: Sequence[str]) -> list[str]:
    """``nodes`` from the least to the most sensitive, ties in graph order."""
    index = {n: i for i, n in enumerate(nodes)}
    return sorted(nodes, key=lambda n: (sensitivity.get(n, float("inf")), index[n]))
