"""Node names: plans, configs and reports refer to nodes by name, so every node needs a unique one.

:func:`node_names` gives them (prepare's last step, run once per model); :func:`check_node_names`
refuses a model that skipped it rather than renaming nodes behind the caller's back.
:func:`value_names` does the same for the values two sibling bodies both define (ONNX forbids only
shadowing an enclosing scope's name), since emit keys quantizers by value name across all scopes.
"""

from __future__ import annotations

import onnx

from .walk import ScopeIndex, subgraphs, walk_scopes

__all__ = ["check_node_names", "node_names", "value_names"]


def _defined(graph: onnx.GraphProto) -> list[str]:
    return [v.name for v in graph.input] + [t.name for t in graph.initializer] + [o for n in graph.node for o in n.output if o]


def _rename(graph: onnx.GraphProto, new: dict[str, str]) -> None:
    """Rename ``new``'s keys everywhere in ``graph`` and the bodies nested in it (they read it through the outer scope)."""
    for v in [*graph.input, *graph.output, *graph.value_info, *graph.initializer]:
        v.name = new.get(v.name, v.name)
    for node in graph.node:
        node.input[:] = [new.get(x, x) for x in node.input]
        node.output[:] = [new.get(x, x) for x in node.output]
        for body in subgraphs(node):
            _rename(body, new)


def value_names(model: onnx.ModelProto) -> int:
    """Rename, in place, each value a body defines that an earlier sibling scope already defines; returns how many.

    Why: emit and calibration key a tensor's quantizer by name over every scope (graph/walk.py ScopeIndex). nakdimon's
    four tf2onnx LSTM Loop bodies each define 'while/TensorArrayV2Read/TensorListGetItem:0': one quantizer was put in
    the last body and all four MatMuls rewired to it, so every preset failed the ONNX checker (bench/RESULTS.md,
    newmodels21)."""
    scopes = walk_scopes(model.graph)
    seen: set[str] = set()
    taken = {name for scope in scopes for name in _defined(scope.graph)}
    count = 0
    for scope in scopes:  # main first, then the bodies depth first: the first definer keeps its name
        new: dict[str, str] = {}
        for name in _defined(scope.graph):
            if name in seen:
                k = 1
                while f"{name}__{k}" in taken:
                    k += 1
                new[name] = f"{name}__{k}"
                taken.add(new[name])
            seen.add(new.get(name, name))
        if new:
            _rename(scope.graph, new)
            count += len(new)
    return count


def node_names(model: onnx.ModelProto) -> list[str]:
    """Give every node of ``model``, in every graph and If/Loop/Scan body, a unique name, in place
    (prepare's last step: plans refer to nodes by name); returns the main graph's names."""
    seen: set[str] = set()
    names = []
    index = ScopeIndex(model)
    nodes = list(index.nodes())
    # A made-up name must not be one the model already gives a node: LORE's table-logic transformer
    # (lineless-table-rec) has an unnamed Shape at index 282 after prepare's folds and an exporter's
    # 'Shape_282' elsewhere, and the two collided (bench/RESULTS.md, tenth round of outside models).
    taken = {node.name for node in nodes if node.name}
    for i, node in enumerate(nodes):
        if not node.name or node.name in seen:
            base = f"{node.op_type}_{i}" if not node.name else f"{node.name}_{i}"
            name, k = base, 1
            while name in taken or name in seen:
                name, k = f"{base}_{k}", k + 1
            node.name = name
            taken.add(name)
        seen.add(node.name)
        if index.node_scope[id(node)].is_main:
            names.append(node.name)
    return names


def check_node_names(model: onnx.ModelProto) -> None:
    """Plans refer to nodes by name: every node, in the main graph and in every body, needs a unique one.

    :func:`onnxptq.pipeline.prepare.prepare` gives them (:func:`node_names`); a model that skipped
    it is refused here, naming the node, rather than renamed behind the caller's back.
    """
    seen: set[str] = set()
    for index, node in enumerate(ScopeIndex(model).nodes()):  # bodies included
        if not node.name or node.name in seen:
            why = "has no name" if not node.name else f"repeats the name {node.name!r}"
            raise ValueError(f"node {index} ({node.op_type}) {why}: plans refer to nodes by unique name; "
                             "prepare the model first (onnxptq.pipeline.prepare.prepare names every node)")
        seen.add(node.name)
