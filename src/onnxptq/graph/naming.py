"""Node names: plans, configs and reports refer to nodes by name, so every node needs a unique one.

:func:`node_names` gives them (prepare's last step, run once per model); :func:`check_node_names`
refuses a model that skipped it rather than renaming nodes behind the caller's back.
"""

from __future__ import annotations

import onnx

from .walk import ScopeIndex

__all__ = ["check_node_names", "node_names"]


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
