"""Numerics by structure: a recurrent state carried from one call to the next stays float.

A streaming model (a VAD, a wake-word detector, a streaming ASR encoder) takes its LSTM/GRU/RNN
state as a graph input and returns the new state as a graph output; the caller feeds it back on
the next call. A quantizer on that path rounds the state once per call, and the rounding is fed
back: the error is a recurrence over calls, which no single call shows. silero VAD (the
``silero_vad_half.onnx`` file, MXINT8): every per-window output cosine ≥ 0.9995, yet over 400
consecutive windows, each model streaming its own state, only 93 % of the speech decisions agree
with float; with the state path float, 98 %. The accuracy floor checks one call at a time and
cannot see it, so the rule is structural.

The rule, by dataflow: for every ``LSTM``/``GRU``/``RNN`` node (in any If/Loop body), its state
inputs (``initial_h``, ``initial_c``) walked back through data movement (Gather, Unsqueeze,
Squeeze, Concat, Reshape, Identity, ...) to a graph input, and its state outputs (``Y_h``,
``Y_c``) walked forward through data movement and out of If bodies to a graph output: every tensor
on such a walk stays float. Only a walk that reaches the graph's own input or output counts: an
LSTM whose final state feeds a classifier in the same call keeps its quantizers (the error is not
fed back there), and so does the per-step output ``Y``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

import onnx

from .opsets import is_onnx_domain
from .ops import RELAYOUTS, SELECTIONS

log = logging.getLogger(__name__)

__all__ = ["recurrent_state_float_tensors"]

#: state input / output positions per recurrent op (ONNX spec)
STATE_INPUTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}
STATE_OUTPUTS = {"LSTM": (1, 2), "GRU": (1,), "RNN": (1,)}
#: ops that move or pick state values without computing on them
MOVES = RELAYOUTS | SELECTIONS | {"Concat", "Cast", "Expand"}


def _walk_graphs(graph: onnx.GraphProto, parent: onnx.NodeProto | None, out: list) -> None:
    """(graph, the node owning it) for the main graph and every body, recursively."""
    out.append((graph, parent))
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _walk_graphs(attr.g, node, out)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _walk_graphs(g, node, out)


def recurrent_state_float_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """``{tensor: reason}`` for the tensors of every carried recurrent state (module docstring)."""
    graphs: list[tuple[onnx.GraphProto, onnx.NodeProto | None]] = []
    _walk_graphs(model.graph, None, graphs)
    producer: dict[str, onnx.NodeProto] = {}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    #: a body output → the owning If's output of the same position (the value leaving the body)
    exits: dict[str, list[str]] = defaultdict(list)
    #: an If output → its branches' outputs of the same position (the values entering it)
    entries: dict[str, list[str]] = defaultdict(list)
    recurrent: list[onnx.NodeProto] = []
    for graph, parent in graphs:
        for node in graph.node:
            for o in node.output:
                if o:
                    producer[o] = node
            for i in node.input:
                if i:
                    consumers[i].append(node)
            if node.op_type in STATE_INPUTS and is_onnx_domain(node.domain):
                recurrent.append(node)
        if parent is not None and parent.op_type == "If":
            for k, o in enumerate(graph.output):
                if k < len(parent.output) and parent.output[k]:
                    exits[o.name].append(parent.output[k])
                    entries[parent.output[k]].append(o.name)
    inputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}

    why: dict[str, str] = {}
    for node in recurrent:
        reason = (f"recurrent state of {node.op_type} '{node.name}' carried across calls (graph input/output): a rounding "
                  "there is fed back every call and accumulates, which a per-call check cannot see; it stays float "
                  "(graph/recurrent_state.py)")
        for k in STATE_INPUTS[node.op_type]:
            if k < len(node.input) and node.input[k]:
                path, reached = _back(node.input[k], producer, entries, inputs)
                if reached:
                    for name in path:
                        why.setdefault(name, reason)
        for k in STATE_OUTPUTS[node.op_type]:
            if k < len(node.output) and node.output[k]:
                path, reached = _forward(node.output[k], consumers, exits, outputs)
                if reached:
                    for name in path:
                        why.setdefault(name, reason)
    if why:
        log.debug("recurrent state: %d tensor(s) stay float: %s", len(why), ", ".join(sorted(why)[:6]))
    return why


def _walk(start: str, step: Callable[[str], list[str]], ends: set[str], stop_at_end: bool) -> tuple[list[str], bool]:
    """Tensors reachable from ``start`` by ``step`` (depth first, each once); whether one of
    ``ends`` was reached (``stop_at_end``: an end is not stepped past)."""
    path, stack, reached = [], [start], False
    while stack:
        name = stack.pop()
        if name in path:
            continue
        path.append(name)
        if name in ends:
            reached = True
            if stop_at_end:
                continue
        stack.extend(step(name))
    return path, reached


def _back(start: str, producer: dict[str, onnx.NodeProto], entries: dict[str, list[str]],
          inputs: set[str]) -> tuple[list[str], bool]:
    """Tensors from ``start`` back through data movement and into If branches (an If choosing the
    carried state or zeros); whether a graph input was reached."""
    def step(name: str) -> list[str]:
        node = producer.get(name)
        if node is not None and node.op_type == "If":
            return entries.get(name, [])
        if node is None or node.op_type not in MOVES or not is_onnx_domain(node.domain) or not node.input:
            return []
        # the data input(s): every input of a Concat, the first of the others (the rest are indices/shapes)
        return [i for i in (node.input if node.op_type == "Concat" else node.input[:1]) if i]

    return _walk(start, step, inputs, stop_at_end=True)


def _forward(start: str, consumers: dict[str, list[onnx.NodeProto]], exits: dict[str, list[str]],
             outputs: set[str]) -> tuple[list[str], bool]:
    """Tensors from ``start`` forward through data movement and out of If bodies; whether a graph
    output was reached."""
    def step(name: str) -> list[str]:
        nxt = list(exits.get(name, []))
        for node in consumers.get(name, []):
            if node.op_type in MOVES and is_onnx_domain(node.domain) and (node.op_type == "Concat" or node.input[0] == name):
                nxt.extend(o for o in node.output if o)
        return nxt

    return _walk(start, step, outputs, stop_at_end=False)
