"""A detector's class-score rows, found by structure and judged at the scores that matter.

Why: YOLOv8 (ultralytics' export, nudenet's ``320n.onnx``) writes its detections as one output
``[1, 4 + C, anchors]``: ``Concat(axis=1)`` of the decoded boxes (pixels) and a ``Sigmoid`` of the
class scores. With 18 classes that is 22 rows, over ``fields.MAX_FIELDS`` = 16, so the floor
judged the output as a whole, and its cosine is carried by the pixel-scale box rows: MXINT8
(cosine 0.9999) and MXFP8_E4M3 (0.9995) held the floor while box F1 against float fell to 0.943
and 0.904. Per-field cosines are no answer: a rare class's row is near-zero sigmoid noise whose
cosine broke A8W8, A16W8 and BFP16, whose detections held (bench/RESULTS.md, "More models outside
the zoo, third round"). What a user reads is which candidates pass a score threshold.

**Found by structure** (:func:`detector_score_rows`): a graph output produced by a ``Concat`` (through
data movement) whose inputs are of two kinds: some read, through data movement (Reshape,
Transpose, Split, Slice, ...), from a ``Sigmoid`` (the class scores), the others not (the boxes).
Their lengths along the concat axis come from ONNX shape inference (run only where that structure
is found); an output whose lengths it cannot fix is left to the other judgements.

**Judged** (:class:`ScoreRows`): per image and class, the candidate float ranks highest (a
detector's NMS keeps a class's best box per object; a class's best candidate is what says whether
the image holds one), as the scores of those candidates pass the thresholds a user might set:
``maps.kept_agreement`` with F1, the detections' measure (a lost and a spurious detection each
count once against both sets), estimated from the logit shifts of those candidates and averaged
over thresholds from 0.2 to 0.8 of float's best score. The box rows are judged by their cosine on
the same candidates (those float keeps above the lowest threshold), against the cosine floor: their
cosine over all anchors is carried by thousands of background boxes. A box is read only where its
score passes.

**On few images it is not judged.** A verdict that holds needs as many images as the floor needs
rows (``floor.needed``: 34 for 0.97), as a classifier's top-1 does: on the 12 images a user's 12
samples give the floor, nudenet's MXINT8 (box F1 0.966 on 160 images, floor 0.97) moved its class
peaks no more than MX9 (0.974) and BFP16 (0.977), and every judgement tried there (each class's
best candidate, float's detections after NMS, per image) put MXINT8 within 0.01 of those; a
one-class detector (captcha-recognizer's slider gap: one best candidate per image, 12 in all)
gave too few shifts to estimate from, and its misses (0.906-0.969 of 32 captchas) are candidates
scoring 0.50-0.63 against the package's 0.5. So a verdict on fewer images says it could not judge
the detections (``OutputCheck.images``, the summary and a warning); one that breaks still breaks.

**Nor where the images decide nothing** (:meth:`ScoreRows.undecided`). On the floor's 42 slider
captchas float's best candidate scored 0.94 or more on every one, above every threshold of the band,
and BF16/A16W8/MXINT8 held there while the bench's 32 other captchas lost 1-2 each (candidates at
0.50-0.63 crossing the package's 0.5): no image held a decision to flip. A threshold that keeps every
candidate decides nothing; where none of the band leaves candidates on both sides
(``maps.undecided``), a verdict that holds is *not judged* and the summary says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import onnx

from ..graph.ops import RELAYOUTS
from ..graph.walk import first_input_chain
from .maps import BAND, Kept, kept_agreement, undecided
from .metrics import cosine_similarity

__all__ = ["Rows", "ScoreRows", "detector_score_rows"]

_MOVES = RELAYOUTS | {"Cast", "Split", "Slice"}


class Rows(NamedTuple):
    """Where a detector output's rows are: the concat axis and the ``[start, stop)`` ranges of its
    class-score rows and of its other (box) rows along it."""

    axis: int
    scores: tuple[tuple[int, int], ...]
    boxes: tuple[tuple[int, int], ...]


def _from_sigmoid(tensor: str, producer: dict[str, onnx.NodeProto]) -> bool:
    return first_input_chain(tensor, producer, _MOVES, lambda n: n.op_type == "Sigmoid", 8) is not None


def detector_score_rows(model: onnx.ModelProto) -> dict[str, Rows]:
    """The graph outputs that are a ``Concat`` of sigmoid class scores and other rows (module
    docstring), each with where its rows are."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    found: dict[str, tuple[onnx.NodeProto, list[bool]]] = {}
    for out in model.graph.output:
        tensor = out.name
        for _ in range(4):
            node = producer.get(tensor)
            if node is None:
                break
            if node.op_type == "Concat":
                kinds = [_from_sigmoid(i, producer) for i in node.input]
                if any(kinds) and not all(kinds):
                    found[out.name] = (node, kinds)
                break
            if node.op_type not in ("Identity", "Cast") or not node.input:
                break
            tensor = node.input[0]
    if not found:
        return {}
    try:  # only here: shape inference is the one way to the inputs' lengths along the axis
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - no lengths: the output stays judged as before
        return {}
    dims: dict[str, tuple[int | None, ...]] = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]:
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            dims[v.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    rows: dict[str, Rows] = {}
    for name, (node, kinds) in found.items():
        shapes = [dims.get(i) for i in node.input]
        if any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:  # type: ignore[arg-type]
            continue
        rank = len(shapes[0])  # type: ignore[arg-type]
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        axis = axis + rank if axis < 0 else axis
        lengths = [s[axis] for s in shapes]  # type: ignore[index]
        if any(n is None or n <= 0 for n in lengths):
            continue
        scores: list[tuple[int, int]] = []
        boxes: list[tuple[int, int]] = []
        start = 0
        for n, is_score in zip(lengths, kinds):
            (scores if is_score else boxes).append((start, start + int(n)))
            start += int(n)
        rows[name] = Rows(axis, tuple(scores), tuple(boxes))
    return rows


@dataclass
class ScoreRows:
    """Each image's best candidate per class (float's and the quantized model's scores of it) and the
    box rows of those candidates, gathered over the feeds of one output (module docstring)."""

    rows: Rows
    ref: list[np.ndarray] = field(default_factory=list)
    got: list[np.ndarray] = field(default_factory=list)
    box_ref: list[np.ndarray] = field(default_factory=list)
    box_got: list[np.ndarray] = field(default_factory=list)
    #: images judged (feeds × the leading axes before the rows: a batch)
    images: int = 0
    valid: bool = True

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        axis = self.rows.axis
        total = max(stop for _, stop in (*self.rows.scores, *self.rows.boxes))
        if ref.shape != got.shape or ref.ndim <= axis or ref.shape[axis] != total:
            self.valid = False
            return
        lead = int(np.prod(ref.shape[:axis], dtype=np.int64))

        def split(x: np.ndarray, ranges: tuple[tuple[int, int], ...]) -> np.ndarray:
            x = np.asarray(x, np.float64).reshape(lead, total, -1)  # [images, rows, candidates]
            return np.concatenate([x[:, a:b] for a, b in ranges], axis=1)

        self.images += lead
        s_ref, s_got = split(ref, self.rows.scores), split(got, self.rows.scores)
        best = np.argmax(s_ref, axis=-1)  # [images, classes]: the candidate float ranks highest
        take = lambda x: np.take_along_axis(x, best[..., None], axis=-1)[..., 0]  # noqa: E731
        self.ref.append(take(s_ref).ravel())
        self.got.append(take(s_got).ravel())
        if self.rows.boxes:
            b_ref, b_got = split(ref, self.rows.boxes), split(got, self.rows.boxes)
            # [images, classes, box rows]: the box of each class's best candidate
            self.box_ref.append(np.take_along_axis(b_ref[:, None], best[:, :, None, None], axis=-1)[..., 0].reshape(-1, b_ref.shape[1]))
            self.box_got.append(np.take_along_axis(b_got[:, None], best[:, :, None, None], axis=-1)[..., 0].reshape(-1, b_got.shape[1]))

    def undecided(self) -> tuple[int, float, float, float] | None:
        """``maps.undecided`` of float's best candidates: every one passes every threshold of the
        band (one object per image, always found with confidence), so these images exercise no
        decision and a verdict that holds on them says nothing of the detections."""
        if not self.valid or not self.ref:
            return None
        r = np.concatenate(self.ref)
        if not np.all((r >= 0) & (r <= 1)):
            return None
        return undecided(r)

    def judge(self) -> tuple[Kept | None, float | None, int]:
        """``(scores' kept-set judgement, boxes' cosine on the kept candidates, those candidates)``."""
        if not self.valid or not self.ref:
            return None, None, 0
        r, g = np.concatenate(self.ref), np.concatenate(self.got)
        if not (np.all((r >= 0) & (r <= 1)) and np.isfinite(g).all()):
            self.valid = False
            return None, None, 0  # not probabilities after all
        kept = kept_agreement(r, g, f1=True)
        box_cos = None
        chosen = r >= BAND[0] * r.max() if r.size else r.astype(bool)
        if kept is not None and self.box_ref and chosen.any():
            br, bg = np.concatenate(self.box_ref)[chosen], np.concatenate(self.box_got)[chosen]
            if np.isfinite(bg).all():
                box_cos = cosine_similarity(br, bg)
        return kept, box_cos, int(chosen.sum())
