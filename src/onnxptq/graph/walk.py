"""Walking the bodies of control-flow nodes (If/Loop/Scan), at any depth.

Passes that rewrite the main graph must still see what the bodies read from the outer scope
(an initializer read only inside an If is in use) and what they produce (a name produced only
in a body cannot be calibrated from the main graph).
"""

from __future__ import annotations

from typing import Iterator

import onnx


def subgraph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node inside the graph attributes of ``graph``'s nodes, recursively (not the main graph's)."""
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                yield from sub.node
                yield from subgraph_nodes(sub)
