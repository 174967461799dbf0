"""Store once a constant that constant folding wrote into several bodies: the bodies read it from
the graph that encloses them all.

Why: exporters compute a body's weights from main-graph initializers inside the body (silero VAD:
each ``If`` branch slices, concatenates and unsqueezes the one set of main-graph LSTM weights into
its LSTM's W, R and B). Constant folding evaluates each body on its own and stores each result as
that body's initializer, so the two branches end up with identical copies of every LSTM weight,
the main graph's originals become unused, and every delivered file held the weights twice
(silero_half BF16 0.71x the fp32 file where the format stores half; fuzz17, RESULTS.md).

Rule: initializers of bodies (never the main graph's own: a model with no bodies is untouched)
that hold the same element type, shape and bytes and sit in two or more graphs become one
initializer in the innermost graph enclosing all of those graphs (their lowest common ancestor in
the tree of graphs); every reader reads it through the outer scope, which is valid ONNX and what
onnxruntime runs. It keeps the name of the first copy in graph order. Values are unchanged, so the
model computes the same; the quantizer then plans and stores the weight once, as it does for a
main-graph weight two nodes read. Copies under ``MIN_BYTES`` stay where they are: a shape or axis
constant repeated per branch costs a few bytes and is no weight.

Body outputs that name an initializer, and body inputs, are left alone (a body's formal inputs
and outputs are its interface, not storage).
"""

from __future__ import annotations

import hashlib
import logging

import onnx_ir as ir

from onnxptq.graph.passes._common import collect_names, unique_name
from onnxptq.graph.walk import innermost_common

log = logging.getLogger(__name__)

__all__ = ["MIN_BYTES", "ShareBodyConstantsPass"]

#: Smallest copy worth sharing: 1 KiB (256 fp32 elements), far above any shape/axis constant.
MIN_BYTES = 1024


def _parents(model: ir.Model) -> dict[int, ir.Graph]:
    """Each body's enclosing graph, by ``id`` of the body."""
    parents: dict[int, ir.Graph] = {}
    for graph in model.graphs():
        for node in graph:
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    parents[id(attr.as_graph())] = graph
                elif attr.type == ir.AttributeType.GRAPHS:
                    for body in attr.as_graphs():
                        parents[id(body)] = graph
    return parents


def _chain(graph: ir.Graph, parents: dict[int, ir.Graph]) -> list[ir.Graph]:
    """``graph`` and its enclosing graphs, the main graph first."""
    chain = [graph]
    while id(chain[-1]) in parents:
        chain.append(parents[id(chain[-1])])
    return chain[::-1]


def _common_ancestor(graphs: list[ir.Graph], parents: dict[int, ir.Graph]) -> ir.Graph:
    """The innermost graph that is, or encloses, every graph of ``graphs`` (the main graph is in all)."""
    return innermost_common([_chain(g, parents) for g in graphs])


def _key(value: ir.Value) -> tuple[str, tuple[int, ...], str] | None:
    """What makes two initializers the same constant: element type, shape and a digest of the bytes;
    None for one too small to share or not readable as an array."""
    tensor = value.const_value
    if tensor is None or value.is_graph_input() or value.is_graph_output():
        return None
    try:
        array = tensor.numpy()
    except Exception:  # a type with no NumPy form: not a weight this pass is for
        return None
    if array.nbytes < MIN_BYTES:
        return None
    return str(array.dtype), tuple(array.shape), hashlib.sha256(array.tobytes()).hexdigest()


class ShareBodyConstantsPass(ir.passes.InPlacePass):
    """Identical body initializers in several graphs become one, in their common enclosing graph."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        parents = _parents(model)
        if not parents:
            return ir.passes.PassResult(model, modified=False)
        groups: dict[tuple, list[tuple[ir.Graph, ir.Value]]] = {}
        for graph in model.graphs():
            if graph is model.graph:
                continue
            for value in graph.initializers.values():
                key = _key(value)
                if key is not None:
                    groups.setdefault(key, []).append((graph, value))
        names: set[str] | None = None
        shared = saved = 0
        for copies in groups.values():
            if len({id(g) for g, _ in copies}) < 2:
                continue
            home = _common_ancestor([g for g, _ in copies], parents)
            keep_graph, keep = next(((g, v) for g, v in copies if g is home), copies[0])
            for graph, value in copies:
                if value is keep:
                    continue
                ir.convenience.replace_all_uses_with(value, keep)
                graph.initializers.pop(value.name)
                saved += keep.const_value.nbytes
            if keep_graph is not home:
                keep_graph.initializers.pop(keep.name)
                if keep.name in home.initializers:  # a name only unique in its own body
                    names = collect_names(model) if names is None else names
                    keep.name = unique_name(names, keep.name)
                home.register_initializer(keep)
            shared += 1
            log.debug("stored once: %s (%d copies, now in %s)", keep.name, len(copies),
                      "the main graph" if home is model.graph else f"body {home.name!r}")
        if shared:
            log.info("%d constant(s) folded into several bodies stored once (%d bytes fewer)", shared, saved)
        return ir.passes.PassResult(model, modified=bool(shared))
