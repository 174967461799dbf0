"""A regression head whose rows a sibling two-class head gates: box offsets read only for objects.

Why: MTCNN's O-Net ends in three linear heads on one feature, per candidate row: ``softmax_2``
(background, face), ``dense_5`` (the box's four offsets, in units of the crop) and ``dense_6``
(landmarks). Its package refines the box and reads the landmarks only of the rows whose face
probability passes 0.7; a rejected candidate's offsets are never read, and a detector's regression
is trained on its objects only. The floor judged ``dense_5`` as a score output over every row
(analysis/scores.py) and broke A8W8 at 0.8646 of 96 rows within 0.05 of float's spread, and repair
kept 2 nodes float. On 96 held-out feeds (768 crops) the offsets' A8W8 errors sat on the rows float
calls background (up to 8 px of the 48-px crop, 0.81 of them within 1 px); on the rows it calls faces
every one was within 1 px (the bench's tolerance for the landmarks) and 0.97 within the floor's
tolerance (bench/RESULTS.md, "Reference presets' leftovers", branch refpreset). A false alarm of the
rows judged, not of the tolerance.

**Found by structure** (:func:`gated_outputs`): a graph output read (through data movement and a
bias ``Add``) from a linear layer with a constant weight, beside another graph output read the same
way through a ``Softmax`` from a linear layer of width 2 on the *same* input tensor: two heads of one
feature, one a two-class decision per row. **On the data** (analysis/floor.py): the decision's float
values are ``[rows, 2]`` probabilities with as many rows as the regression's on every feed; otherwise
nothing is gated.

**Which class is the object.** Not in the graph; two-class detection heads put background first
(MTCNN's P/R/O-Net, SSD-family and RetinaFace/UltraFace face heads read ``scores[:, 1]``), so the
rows judged are those float's arg-max gives class 1. The output's *spread* (the tolerance's scale,
analysis/scores.py) is still taken over every row: it is the scale of the quantity the head writes,
which a subset of the rows does not change.
"""

from __future__ import annotations

import numpy as np
import onnx

from .class_scores import _MOVES, _SOFTMAXES, _const_shapes, _head_width

__all__ = ["OBJECT", "gated_outputs", "object_rows"]

#: the class whose rows a two-class detection head keeps (module docstring: background first)
OBJECT = 1


def _head(tensor: str, producer: dict[str, onnx.NodeProto], shapes: dict[str, tuple[int, ...]],
          softmax: bool) -> tuple[str, int] | None:
    """``(input tensor, width)`` of the linear layer ``tensor`` is read from (through data movement, a
    bias ``Add`` and, where ``softmax``, exactly one ``Softmax``); None where it is not so read."""
    seen_softmax = False
    for _ in range(8):
        node = producer.get(tensor)
        if node is None:
            return None
        if node.op_type in ("MatMul", "Gemm"):
            width = _head_width(node, shapes)
            return (node.input[0], width) if width is not None and seen_softmax == softmax else None
        if node.op_type in _SOFTMAXES:
            if not softmax or seen_softmax:
                return None
            seen_softmax = True
        elif not (node.op_type in _MOVES or (node.op_type == "Add" and any(i in shapes for i in node.input))):
            return None
        data = [i for i in node.input if i and i not in shapes]
        if len(data) != 1:
            return None
        tensor = data[0]
    return None


def gated_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """Regression output → the two-class Softmax output of a sibling head on the same feature
    (module docstring). Outputs with no such sibling are not listed."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    shapes = _const_shapes(model)
    deciders: dict[str, str] = {}  # feature tensor -> two-class softmax output
    for out in model.graph.output:
        head = _head(out.name, producer, shapes, softmax=True)
        if head is not None and head[1] == 2:
            deciders.setdefault(head[0], out.name)
    gates: dict[str, str] = {}
    for out in model.graph.output:
        head = _head(out.name, producer, shapes, softmax=False)
        if head is not None and head[0] in deciders and deciders[head[0]] != out.name:
            gates[out.name] = deciders[head[0]]
    return gates


def object_rows(decision: np.ndarray, rows: int) -> np.ndarray | None:
    """The rows float's two-class ``decision`` gives the object class (:data:`OBJECT`), or None where
    its values are no ``[rows, 2]`` probabilities (then nothing is gated)."""
    d = np.asarray(decision)
    if d.ndim != 2 or d.shape != (rows, 2) or not np.issubdtype(d.dtype, np.floating) or not np.isfinite(d).all():
        return None
    if float(d.min()) < -1e-6 or np.abs(d.sum(axis=1) - 1.0).max() > 1e-3:
        return None
    return np.argmax(d, axis=1) == OBJECT
