"""Height and depth maps judged by their relief: float's per-map mean taken off both maps before the cosine.

Why (issue 27; bench/RESULTS.md, zoo19 and zoo20): terrain_unet's ``denoised`` (``[2, 1, 128, 128]``, a height field
in the package's asinh model space, −1…1) held the floor's pooled cosine under BFP16, MX9, MXINT8 and MXFP8_E4M3
(0.9965–0.9975) while the package's heights broke (0.81–0.965 of cells within 1 % of the range, floor 0.97). The block
formats lift the low, flat maps whole: a map at −0.64 with a relief (spatial std) of 0.08 rises by 0.06–0.11, an error
the size of the map's own relief, and a cosine around the origin, carried by the maps' levels, does not see it. A height
or depth map's user reads its relief (a DEM's error as the RMSE of heights about the terrain, a depth map's after its
offset is set aside), so each map's **float** spatial mean is taken off float's and the quantized map alike and the
cosine pooled over the held-out maps: BF16 0.9990 (heights hold), BFP16 0.980, MX9 0.970, MXINT8 0.979, MXFP8 0.976
(all four break, as the heights do), against the family's cosine floor, with no threshold of its own. Float's mean,
not each map's own: a map's own mean taken off the quantized map too hides the lift that is the loss (BFP16 0.998).

Which outputs, by structure (:func:`relief_outputs`) and then by float's data (:func:`relief_cosine`):

* a float graph output whose declared shape allows one map a batch row (``[N, H, W]``, ``[N, 1 or ?, H, W]`` or
  unknown rank), reached back from the op that makes it through data movement, ``Clip`` and affine ops by a
  constant only, with no bounding activation on that walk (Sigmoid, HardSigmoid, Softmax, LogSoftmax, Tanh: a
  probability or a gate, read by the floor's mask readings, never a level);
* whose float values are, after the batch axis, one channel of at least :data:`MIN_SIDE` × :data:`MIN_SIDE` cells,
  neighbouring cells correlated at least :data:`MIN_NEIGHBOUR_CORRELATION` along **both** axes (each map's own mean
  taken off): a field of values, not a table of independent scores (a CTC head's ``[N, T, C]`` logits correlate
  along time but not across classes).

zoo20 surveyed 308 outputs of 172 models: the rule takes terrain's map, a log-mel front end's, a pair-relation matrix,
four ASR front ends' features and CRAFT's refined link map; on every delivered row measured it broke terrain's four
block rows (whose heights break) and nothing else (the lowest relief cosine of a row that holds: terrain BF16 0.99904).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import onnx

from ..graph.ops import FLOATING, RELAYOUTS
from ..graph.walk import constant_names, dataflow

__all__ = ["MIN_NEIGHBOUR_CORRELATION", "MIN_SIDE", "Relief", "relief_cosine", "relief_outputs"]

#: a map's side, in cells, for it to be a field at all (fewer: a few values, not a relief)
MIN_SIDE = 8
#: neighbouring cells' correlation each spatial axis needs: a field of values (a table of independent scores: ~0)
MIN_NEIGHBOUR_CORRELATION = 0.5
#: ops that bound an output to a fixed range: a probability or a gate, read by its masks (analysis/maps.py)
BOUNDING = frozenset(("Sigmoid", "HardSigmoid", "Softmax", "LogSoftmax", "Tanh"))
#: ops a walk back from an output passes: they move or clip values, or shift them by a constant, not make them
_MOVES = RELAYOUTS | {"Cast", "Clip"}
_AFFINE = frozenset(("Mul", "Add", "Sub", "Div"))
#: ops at most on the walk back (an exporter's tail of reshapes and casts is a handful)
_MOST_STEPS = 12


def _one_map_a_row(dims: tuple[int | None, ...] | None) -> bool:
    """Whether a declared shape (None: unknown rank; a None dim: symbolic) allows one map per batch row."""
    if dims is None or len(dims) == 3:
        return True
    return len(dims) == 4 and dims[1] in (1, None)


def relief_outputs(model: onnx.ModelProto) -> frozenset[str]:
    """The float graph outputs that may be value maps by structure (module docstring): float's data decides."""
    producer, _ = dataflow(model.graph.node)
    consts = constant_names(model.graph)
    found = set()
    for out in model.graph.output:
        t = out.type.tensor_type
        if not out.type.HasField("tensor_type") or t.elem_type not in FLOATING:
            continue
        dims = (tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim)
                if t.HasField("shape") else None)
        if _one_map_a_row(dims) and not _bounded(out.name, producer, consts):
            found.add(out.name)
    return frozenset(found)


def _bounded(name: str, producer: dict[str, onnx.NodeProto], consts: set[str]) -> bool:
    """Whether a bounding activation is on the walk back from ``name`` to the op that makes its values."""
    tensor: str | None = name
    for _ in range(_MOST_STEPS):
        node = producer.get(tensor) if tensor is not None else None
        if node is None:
            return False
        if node.op_type in BOUNDING:
            return True
        if node.op_type in _MOVES:
            tensor = node.input[0] if node.input else None
        elif node.op_type in _AFFINE and sum(i in consts for i in node.input) == 1:
            tensor = next(i for i in node.input if i not in consts)
        else:
            return False  # the op that makes the values, no bound among them
    return False


@dataclass(frozen=True)
class Relief:
    """One output's relief cosine over the held-out maps (module docstring)."""

    #: the cosine pooled over every map, float's per-map mean taken off both
    cosine: float
    #: maps pooled (batch rows over the feeds)
    maps: int
    #: the worst map's own relief cosine (said, not judged: one flat map's is noise)
    worst: float
    #: neighbouring cells' correlation along the two spatial axes (float's, each map centred)
    correlation: tuple[float, float]
    #: each feed's ``(Σx², Σy², Σxy)`` of the centred maps: their spread bounds the pooled figure as the pooled
    #: cosine's does (``floor._cosine_bound``); not in the JSON
    sums: tuple[tuple[float, float, float], ...] = field(default=(), repr=False)
    #: calibration feeds pooled with the held-out ones into ``cosine`` (``floor._judge_relief``: only where the held-out
    #: feeds' bound left it open, and only to break it); 0: the held-out feeds alone
    seen: int = 0
    #: the held-out feeds' bound reaches below the floor and no calibration feed was pooled yet: the floor asks for them
    #: (``floor.Verdict.wants_calibration_feeds``)
    open: bool = False

    def describe(self) -> str:
        on = f" on the held-out and {self.seen} calibration samples" if self.seen else ""
        return (f"relief cosine {self.cosine:.4f} over {self.maps} maps{on} (float's per-map mean taken off both; worst map "
                f"{self.worst:.4f}: a value map, analysis/relief.py)")

    def to_json(self) -> dict[str, Any]:
        return {"cosine": self.cosine, "maps": self.maps, "worst": self.worst, "correlation": list(self.correlation),
                "calibration_samples": self.seen}


def _maps(values: np.ndarray) -> np.ndarray | None:
    """``values`` as ``[maps, H, W]`` float64 where after the batch axis they are one channel of at least
    :data:`MIN_SIDE` cells a side; None otherwise."""
    x = np.asarray(values)
    if x.ndim == 4 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 3 or min(x.shape[1:]) < MIN_SIDE:
        return None
    return x.astype(np.float64)


def _neighbour_sums(centred: np.ndarray, axis: int) -> tuple[float, float, float]:
    """``(Σab, Σa², Σb²)`` over the pairs of neighbouring cells along ``axis`` (1 or 2) of centred maps."""
    a = (centred[:, :-1] if axis == 1 else centred[:, :, :-1]).ravel()
    b = (centred[:, 1:] if axis == 1 else centred[:, :, 1:]).ravel()
    return float(a @ b), float(a @ a), float(b @ b)


def relief_cosine(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Relief | None:
    """The relief cosine of one output over the held-out feeds (float's ``reference``, the quantized ``candidate``:
    one array a feed), or None where float's values are not a field (module docstring) or no feed can be read (a
    non-finite float map, shapes that moved: the floor's other checks say those)."""
    sums: list[tuple[float, float, float]] = []
    near = np.zeros((2, 3))
    maps, worst = 0, 1.0
    for ref, got in zip(reference, candidate):
        r, g = _maps(ref), _maps(got)
        if r is None:
            return None  # float's values on this feed are not one map a row: not a field
        if g is None or r.shape != g.shape or not np.isfinite(r).all():
            continue
        mean = r.mean(axis=(1, 2), keepdims=True)
        x, y = r - mean, g - mean
        for i, axis in enumerate((1, 2)):
            near[i] += _neighbour_sums(x, axis)
        xx, yy, xy = (np.einsum("mij,mij->m", p, q) for p, q in ((x, x), (y, y), (x, y)))
        sums.append((float(xx.sum()), float(yy.sum()), float(xy.sum())))
        maps += r.shape[0]
        worst = min([worst, *(_cosine(a, b, c) for a, b, c in zip(xx, yy, xy))])
    if not sums:
        return None
    correlation = tuple(_cosine(a2, b2, ab) for ab, a2, b2 in near)
    if not all(c >= MIN_NEIGHBOUR_CORRELATION for c in correlation):
        return None
    total = np.sum(sums, axis=0)
    return Relief(_cosine(*total), maps, worst, (correlation[0], correlation[1]), tuple(sums))


def _cosine(xx: float, yy: float, xy: float) -> float:
    """A cosine from its three sums; 1.0 where both sides are flat, 0.0 where one is; NaN where one is not finite."""
    if not (math.isfinite(xx) and math.isfinite(yy) and math.isfinite(xy)):
        return float("nan")
    if xx <= 0 or yy <= 0:
        return 1.0 if xx == yy else 0.0
    return float(xy / math.sqrt(xx * yy))
