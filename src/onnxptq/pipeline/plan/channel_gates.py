"""The channel gates of a graph (squeeze-and-excitation), found by dataflow: which dot products compute a gate.

Why a module of its own: the FP8-element MX rule (plan/fp_blocks.py ``channel_gate_operands``) and the
measurements that decided it (bench/mxfp8_attention.py, bench/mxfp8_floatback.py) need the same answer, and no
name gives it. A channel gate pools a feature map ``x`` to one value per channel (``GlobalAveragePool``, or a
``ReduceMean`` of ``x``), passes that vector through a few dot products (``Conv`` 1×1, ``Gemm``, ``MatMul``) and
activations (ReLU/Clip, a hard or plain sigmoid, an affine written out as ``Add``/``Mul``/``Div``) with reshapes
between, and multiplies ``x`` by the result (``Mul``). The gate's operands are the data inputs of those dot products.
"""

from __future__ import annotations

import onnx

from ...graph.ops import RELAYOUTS
from .select import _Graph

__all__ = ["GATE_PATH_OPS", "gate_operands"]

#: the pooling a gate starts from (its input is the feature map the gate rescales)
_POOLS = frozenset({"GlobalAveragePool", "ReduceMean"})
#: dot products a gate may hold
_DOTS = frozenset({"Conv", "Gemm", "MatMul"})
#: ops a gate passes through between its pooling and the Mul that rescales the feature map
GATE_PATH_OPS = RELAYOUTS | _DOTS | {"Relu", "Clip", "HardSigmoid", "Sigmoid", "HardSwish", "Add", "Mul", "Div", "Cast"}
#: how many ops a gate's path may hold (SE blocks hold 4–8: two dot products, their activations, an affine)
_MAX_PATH = 12


def _gate_path(start: str, feature: str, g: _Graph) -> list[onnx.NodeProto] | None:
    """The nodes from a pooling of ``feature`` to tensor ``start``, following each node's first input (the data: a
    dot product's weight, an affine's constant are its other inputs), or None when the chain leaves
    :data:`GATE_PATH_OPS`, runs longer than :data:`_MAX_PATH` or does not start at a pooling of ``feature``."""
    path: list[onnx.NodeProto] = []
    name = start
    while len(path) <= _MAX_PATH:
        node = g.producer.get(name)
        if node is None or not node.input:
            return None
        path.append(node)
        if node.op_type in _POOLS:
            return path if node.input[0] == feature else None
        if node.op_type not in GATE_PATH_OPS:
            return None
        name = node.input[0]
    return None


def gate_operands(g: _Graph) -> dict[str, list[str]]:
    """``{gating Mul name: [data inputs of the gate's dot products]}`` for every channel gate of ``g`` whose path
    holds at least one dot product (module docstring)."""
    found: dict[str, list[str]] = {}
    for node in g.nodes:
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        for gate, feature in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            path = _gate_path(gate, feature, g)
            dots = [n.input[0] for n in path or [] if n.op_type in _DOTS]
            if dots:
                found[node.name] = dots
                break
    return found
