"""Walking the bodies of control-flow nodes (If/Loop/Scan), at any depth: the one graph walker.

Every module that must see a model's subgraphs (emit, the calibration runner, the whole-model
float conversions) walks them through these functions.

Passes that rewrite the main graph must still see what the bodies read from the outer scope
(an initializer read only inside an If is in use) and what they produce (a name produced only
in a body cannot be calibrated from the main graph).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import onnx


def subgraph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node inside the graph attributes of ``graph``'s nodes, recursively (not the main graph's)."""
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                yield from sub.node
                yield from subgraph_nodes(sub)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by ``node``'s attributes (If branches, Loop/Scan bodies), one level down."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in it, depth first."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from all_graphs(sub)


def rename_uses(graph: onnx.GraphProto, old: str, new: str, skip: Iterable[onnx.NodeProto] = ()) -> None:
    """Point every consumer of ``old`` (in ``graph`` and its subgraphs) at ``new``."""
    skip_ids = {id(n) for n in skip}
    for g in all_graphs(graph):
        for node in g.node:
            if id(node) in skip_ids:
                continue
            for idx, name in enumerate(node.input):
                if name == old:
                    node.input[idx] = new


class FreshNames:
    """Fresh tensor and node names that collide with nothing in any graph of the model."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.taken: set[str] = set()
        for g in all_graphs(model.graph):
            self.taken.update(i.name for i in g.input)
            self.taken.update(i.name for i in g.initializer)
            for n in g.node:
                self.taken.update(n.input)
                self.taken.update(n.output)
                self.taken.add(n.name)  # node names must be unique too; one pool serves both

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name
