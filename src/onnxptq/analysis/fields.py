"""Outputs whose small axis holds different quantities (fields) are judged field by field.

Why: a detector's rows ``[x, y, w, h, objectness, class]`` (ddddocr's YOLOX-style click-captcha
detector: ``[1, 3549, 6]``) hold box offsets up to 2.5 beside probabilities; one cosine over all of
them is carried by the boxes. MXFP8_E4M3 kept that cosine at 0.986 (floor 0.98) while the
objectness and class columns fell to 0.976 and 0.974 and the detections' F1 against float to
0.948 (bench/RESULTS.md, "Outputs judged per field"). Each field is read on its own by whoever
decodes the rows (a score threshold, a box decode), so each must hold the floor.

Which axis: the first axis after the leading one whose length the model *declares* (a fixed
``dim_value`` in the graph output's type) between 2 and :data:`MAX_FIELDS` (:func:`declared_field_axes`),
provided each field gathers at least :data:`MIN_VALUES` values over the held-out feeds (a handful
of values per field is noise, not a figure). Declared, because a symbolic axis of that length on
the day is a sequence or a batch, not fields (a GRU encoder's ``[B, T, 256]`` memory with ``T`` = 11). Outputs without such an axis (a class-score row
``[N, 1000]``, a heatmap ``[1, 1, 224, 224]``, a hidden state ``[2, 1, 128]``, a spectrogram's 32
mel bins) are judged as a whole, as before. Class-score outputs judged by arg-max are not split
(their fields are classes, judged by the decision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..graph.ops import FLOATING

__all__ = ["MAX_FIELDS", "MIN_VALUES", "FieldCosines", "declared_field_axes", "field_axis"]

#: at most this many fields along the axis (a detector row, an image's colour channels)
MAX_FIELDS = 16
#: each field is judged on at least this many values in all (fewer: not a figure)
MIN_VALUES = 1024


def field_axis(shape: tuple[int | None, ...]) -> int | None:
    """The axis of ``shape`` (None: symbolic) holding fields (module docstring), or None."""
    for axis in range(1, len(shape)):
        if shape[axis] is not None and 2 <= shape[axis] <= MAX_FIELDS:
            return axis
    return None


def declared_field_axes(model: onnx.ModelProto) -> dict[str, int]:
    """Each float graph output's field axis from its declared type (module docstring)."""
    axes: dict[str, int] = {}
    for out in model.graph.output:
        t = out.type.tensor_type
        if not out.type.HasField("tensor_type") or not t.HasField("shape"):
            continue
        if t.elem_type not in FLOATING:
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        axis = field_axis(dims)
        if axis is not None:
            axes[out.name] = axis
    return axes


@dataclass
class FieldCosines:
    """Running per-field sums of x², y², x·y (float64) over the feeds of one output."""

    axis: int
    count: int
    xx: np.ndarray = field(init=False)
    yy: np.ndarray = field(init=False)
    xy: np.ndarray = field(init=False)
    values: int = 0
    consistent: bool = True
    #: values a field needs to be judged (:data:`MIN_VALUES`; a regression head's fields, whose
    #: every value is read, fewer: ``head_kind.REGRESSION_VALUES``)
    minimum: int = MIN_VALUES

    def __post_init__(self) -> None:
        self.xx, self.yy, self.xy = (np.zeros(self.count) for _ in range(3))

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if ref.shape != got.shape or ref.ndim <= self.axis or ref.shape[self.axis] != self.count:
            self.consistent = False
            return
        x = np.moveaxis(np.asarray(ref, dtype=np.float64), self.axis, 0).reshape(self.count, -1)
        y = np.moveaxis(np.asarray(got, dtype=np.float64), self.axis, 0).reshape(self.count, -1)
        self.xx += np.einsum("ij,ij->i", x, x)
        self.yy += np.einsum("ij,ij->i", y, y)
        self.xy += np.einsum("ij,ij->i", x, y)
        self.values += x.shape[1]

    def worst(self) -> tuple[int, float] | None:
        """``(field, cosine)`` of the field with the lowest cosine, or None where the output is not
        judged by fields (too few values, shapes that changed between feeds)."""
        if not self.consistent or self.values < self.minimum:
            return None
        cosines = []
        for xx, yy, xy in zip(self.xx, self.yy, self.xy):
            if xx == 0 or yy == 0:
                cosines.append(1.0 if xx == yy else 0.0)
            else:
                cosines.append(float(xy / math.sqrt(xx * yy)))
        index = int(np.argmin(cosines))
        return index, cosines[index]
