"""A field axis whose values are class probabilities is judged by its arg-max masks, not field by field.

Why: the floor splits an output along a small declared axis into fields and holds each field's
cosine against the floor (:mod:`.fields`: a detector's ``[x, y, w, h, objectness, class]`` rows).
napari-czann-segment's U-Net ends in a softmax written out (``ReduceMax``/``Sub``/``Exp``/
``ReduceSum``/``Div``, no ``Softmax`` node, so no class head by structure) → ``[N, 1024, 1024, 2]``
background/nucleus probabilities, which its package reads by arg-max per pixel. Split into fields,
the nucleus channel's cosine under 16-bit activations and weights was 0.9229 against the 16-bit
floor's 0.99 while the nucleus masks kept IoU 0.986 with float's; repair then kept 272 of 310 nodes
float and delivered IoU 0.943 (bench/RESULTS.md, "Repair steps up to 16 bits", czann A16W8). A
probability's cosine is carried by the confident cells near 1 and by the many soft cells float
itself leaves between 0.05 and 0.5 (a tenth of czann's pixels); a value that moves there changes no
arg-max, so the cosine says nothing about the decision a user reads.

**Recognized by data** (:func:`simplex_axis`): on every held-out feed float's values are
non-negative and sum to 1 along the field axis (within 10⁻³), the same test that keeps such an
output out of the heat-map judgement (:func:`onnxptq.analysis.maps.heat_map_feed`). A ``Softmax``
node's output is a class output by structure already (:mod:`.class_scores`) and never split.

**Judged** (:class:`ArgMaxMasks`): per class other than the background (float's arg-max at most
positions), the IoU of float's and the quantized model's arg-max masks, pooled over the feeds, the
worst class against the top-1 floor, on classes whose masks' union holds at least
:data:`~onnxptq.analysis.maps.MIN_MASK` positions (fewer: not a figure), as the probability maps'
masks are (:class:`onnxptq.analysis.maps.MaskAgreement`). The whole output's cosine is still held
against the cosine floor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .maps import MIN_MASK, TIE

__all__ = ["ArgMaxMasks", "SIMPLEX_TOLERANCE", "simplex_axis"]

#: float's values sum to 1 along the axis within this (a float32 softmax's rounding is ~1e-7 a term)
SIMPLEX_TOLERANCE = 1e-3


def simplex_axis(ref: np.ndarray, axis: int) -> bool:
    """Whether float's values of one feed are class probabilities along ``axis``: non-negative (to
    the maps' tie) and summing to 1 there within :data:`SIMPLEX_TOLERANCE`."""
    if ref.ndim <= axis or ref.shape[axis] < 2 or not np.isfinite(ref).all() or ref.min() < -TIE:
        return False
    return bool(np.abs(np.sum(ref, axis=axis, dtype=np.float64) - 1.0).max() <= SIMPLEX_TOLERANCE)


@dataclass
class ArgMaxMasks:
    """Running per-class intersections and unions of float's and the quantized model's arg-max masks
    along ``axis`` (module docstring); ``valid`` is False once a feed's float values were no simplex."""

    axis: int
    classes: int
    inter: np.ndarray = field(init=False)
    union: np.ndarray = field(init=False)
    #: float's arg-max counts per class (the background is the most frequent)
    counts: np.ndarray = field(init=False)
    valid: bool = True
    feeds: int = 0

    def __post_init__(self) -> None:
        self.inter, self.union, self.counts = (np.zeros(self.classes, np.int64) for _ in range(3))

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if not self.valid:
            return
        if ref.shape != got.shape or ref.ndim <= self.axis or ref.shape[self.axis] != self.classes or not simplex_axis(ref, self.axis):
            self.valid = False
            return
        a = np.argmax(ref, axis=self.axis).ravel()
        b = np.argmax(got, axis=self.axis).ravel()
        same = a == b
        self.counts += np.bincount(a, minlength=self.classes)
        self.inter += np.bincount(a[same], minlength=self.classes)
        # |A ∪ B| per class: positions where float or the candidate reads it
        self.union += np.bincount(a, minlength=self.classes) + np.bincount(b, minlength=self.classes) - np.bincount(a[same], minlength=self.classes)
        self.feeds += 1

    def worst(self) -> tuple[str, float, int] | None:
        """``(class in words, IoU, union)`` of the non-background class with the lowest IoU among those
        whose union holds :data:`MIN_MASK` positions; None where the feeds were no class probabilities
        or no class has that many (a class map is still not split into fields: its cosine judges it)."""
        if not self.valid or not self.feeds:
            return None
        background = int(np.argmax(self.counts))
        judged = [(float(self.inter[k] / self.union[k]), k) for k in range(self.classes)
                  if k != background and self.union[k] >= MIN_MASK]
        if not judged:
            return None
        iou, k = min(judged)
        return f"arg-max class {k} of axis {self.axis}", iou, int(self.union[k])
