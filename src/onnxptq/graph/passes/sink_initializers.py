"""Put each new constant into the graph that reads it: a body's quantized weights live in that body.

Why: emit writes every initializer it creates (a weight's quantized integers, its scale and zero
point, a packed weight's bytes) into the main graph, and a body reads them through the outer
scope. That is valid ONNX, and onnxruntime runs it, except where a graph transformer looks a weight
up in the node's own graph only: onnxruntime 1.32's ``TransposeDQWeightsForMatMulNBits`` (the
DQ → MatMul fusion it applies to an int8 weight read by a Gemm/MatMul beside 16-bit activations)
fails session creation with "Missing required weight: <name>_quantized" when the weight's
``DequantizeLinear`` sits in an ``If`` branch and its integers in the main graph (silero-style
models, whose every layer is inside an ``If``: A16W8 could not be delivered at all). The float
model held those weights in the branch; the quantized one now holds them there too.

Rule: an initializer among ``names`` that no node of the main graph reads, and that is read only
inside bodies, moves into the innermost graph that encloses every reader (the readers' lowest
common ancestor in the tree of graphs); a body nested in it still sees it through the outer scope.
One read in the main graph, or readers in two sibling bodies (both branches of an ``If``), keep it
where it is. Values, names and node order are untouched: the model computes the same.
"""

from __future__ import annotations

import onnx

from ..walk import Scope, innermost_common, walk_scopes

__all__ = ["sink_initializers"]


def _common_ancestor(scopes: set[Scope]) -> Scope:
    """The innermost scope that is, or encloses, every scope of ``scopes``."""
    return innermost_common([[s, *s.ancestors()][::-1] for s in scopes])  # root first


def sink_initializers(model: onnx.ModelProto, names: set[str]) -> int:
    """Move the main-graph initializers named in ``names`` that only bodies read into the innermost
    body enclosing all their readers (module docstring), in place; returns how many moved."""
    scopes = walk_scopes(model.graph)
    main = scopes[0]
    readers: dict[str, set[Scope]] = {}
    for scope in scopes:
        for node in scope.graph.node:
            for name in node.input:
                if name in names:
                    readers.setdefault(name, set()).add(scope)
        for out in scope.graph.output:
            if out.name in names:
                readers.setdefault(out.name, set()).add(scope)
    moved: dict[int, str] = {}
    for index, tensor in enumerate(main.graph.initializer):
        where = readers.get(tensor.name)
        home = _common_ancestor(where) if where and main not in where else main
        if home is not main:
            home.graph.initializer.append(tensor)  # a copy
            moved[index] = tensor.name
    if not moved:
        return 0
    for index in sorted(moved, reverse=True):  # only the moved ones: the others are not copied
        del main.graph.initializer[index]
    names_moved = set(moved.values())
    inputs = [i for i in main.graph.input if i.name not in names_moved]
    del main.graph.input[:]
    main.graph.input.extend(inputs)
    return len(moved)
