"""Read a loop-invariant carried value from the outer scope: a Loop/Scan state passed through unchanged.

Why: tf2onnx writes a Keras LSTM as a ``Loop`` whose body gets the layer's kernel, recurrent kernel
and bias as loop-carried state, each returned unchanged (the body output *is* the body input), so
the value is the same on every iteration. Inside the body such a weight is a graph input, not an
initializer: the planner saw an activation there, quantized it per tensor, and placed the quantizer
at the top of the body with the body output renamed onto it (emit keeps a graph output's name by
renaming its producer, and a pass-through has none), so every preset failed the ONNX checker
("… _QuantizeLinear_Input … is not output of any previous nodes"; chars2vec, vital-model-chars2vec-
onnx 0.1.0). Read through the outer scope instead, the body's MatMul sees the main graph's
initializer: a weight, quantized per channel once, outside the loop.

Rule, by dataflow only: for a ``Loop`` (state ``j``: node input ``2 + j``, body input ``2 + j``,
body output ``1 + j``, node output ``j``) or a ``Scan`` (state ``j`` at position ``j`` of all
four), when the body output is the very value of the body input of the same state, every reader
of that body input (in the body and its nested bodies) reads the node's initial value instead, and
every reader of the node's final value for that state reads the initial value too (it equals it:
the state never changes, also after zero iterations). A ``Loop`` state then read nowhere (its final
value no graph output) is dropped: node input, body input, body output and node output. Kept, it held
the float weight in the file beside the quantized copies the body's folded slices became (mk8dx-table-
reader's digit CRNN: every preset's file 1.2-1.48x the float one; bench/RESULTS.md, newmodels21). A
``Scan``'s slot stays (its scan-input attributes count positions). The model computes the same function.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxptq.graph.passes._common import is_onnx_domain, rewrite_result

__all__ = ["LoopInvariantsPass", "loop_invariants"]


def _state_slots(node: ir.Node, body: ir.Graph) -> list[tuple[int, int, int, int]]:
    """(node input, body input, body output, node output) positions of each carried state."""
    if node.op_type == "Loop":
        n_state = len(node.inputs) - 2
        return [(2 + j, 2 + j, 1 + j, j) for j in range(n_state)]
    n_scan = node.attributes["num_scan_inputs"].as_int()
    n_state = len(node.inputs) - n_scan
    return [(j, j, j, j) for j in range(n_state)]


def _rewire(node: ir.Node) -> int:
    """Point the readers of ``node``'s pass-through states at their initial values; how many states."""
    attr = node.attributes.get("body")
    if attr is None:
        return 0
    body = attr.as_graph()
    count, dead = 0, []
    for n_in, b_in, b_out, n_out in _state_slots(node, body):
        if n_in >= len(node.inputs) or b_in >= len(body.inputs) or b_out >= len(body.outputs):
            continue
        initial, inner = node.inputs[n_in], body.inputs[b_in]
        if initial is None or body.outputs[b_out] is not inner:
            continue
        readers = list(inner.uses())
        final = node.outputs[n_out] if n_out < len(node.outputs) else None
        final_readers = list(final.uses()) if final is not None else []
        # a Loop state whose final value is no graph output is read nowhere once rewired (or already, after an
        # earlier prepare): dropped
        droppable = node.op_type == "Loop" and (final is None or not final.is_graph_output())
        if not readers and not final_readers and not droppable:
            continue
        for user, index in readers:  # node inputs only: the body output keeps the pass-through
            user.replace_input_with(index, initial)
        if final_readers and not final.is_graph_output():
            for user, index in final_readers:
                user.replace_input_with(index, initial)
        count += 1
        if droppable:
            dead.append((n_in, b_in, b_out, n_out))
    if dead:
        _drop(node, body, dead)
    return count


def _drop(node: ir.Node, body: ir.Graph, dead: list[tuple[int, int, int, int]]) -> None:
    """Replace the Loop ``node`` by one without the ``dead`` state slots (read nowhere, returned unchanged)."""
    for _, b_in, b_out, _ in sorted(dead, reverse=True):
        body.outputs.pop(b_out)
        body.inputs.pop(b_in)
    gone_in, gone_out = {d[0] for d in dead}, {d[3] for d in dead}
    kept = [i for i in range(len(node.outputs)) if i not in gone_out]
    new = ir.Node(node.domain, node.op_type, [v for i, v in enumerate(node.inputs) if i not in gone_in],
                  list(node.attributes.values()), num_outputs=len(kept), name=node.name, version=node.version)
    node.graph.insert_before(node, new)
    for value, i in zip(new.outputs, kept):
        old = node.outputs[i]
        value.name, value.type, value.shape, old.name = old.name, old.type, old.shape, None
        ir.convenience.replace_all_uses_with(old, value, replace_graph_outputs=True)
    node.graph.remove(node, safe=True)


class LoopInvariantsPass(ir.passes.InPlacePass):
    """Readers of a Loop/Scan state the body returns unchanged read its initial value (module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        nodes = [n for n in ir.traversal.RecursiveGraphIterator(model.graph)
                 if n.op_type in ("Loop", "Scan") and is_onnx_domain(n.domain)]
        count = sum(_rewire(n) for n in nodes)
        return rewrite_result(model, count, "loop invariants: %d carried state(s) passed through unchanged now read from the outer scope")


def loop_invariants(model):
    """Return a copy of ``model`` (a ModelProto) with :class:`LoopInvariantsPass` applied."""
    from onnxptq.graph.passes._common import run_passes

    return run_passes(model, LoopInvariantsPass())
