"""Whether a narrow linear head's outputs are class scores or regression values, from float's data.

Why: the class-score rule (:func:`onnxptq.analysis.class_scores.class_like_outputs`, rule 3) reads
any graph output of a linear layer with at least two output columns as class scores and judges it
by arg-max. brainmaze's EEG spindle detector ends in such a layer: ``detection`` ``[1, 30, 3]`` holds
per 1 s segment a confidence logit, a centre offset and a half-duration, three independent values
each read on its own (a sigmoid and a threshold, a position, a length). The arg-max over them means
nothing, yet the floor judged it as reads, broke it on margins between a duration and an offset, and
repair kept 22-154 of 206 nodes float while the task (segmentation IoU) held at 0.99
(bench/RESULTS.md, "The floor after the merges ..."). The structure cannot tell the two apart (a
``MatMul [51, 3]`` either way); what the layer was *trained for* can, and it leaves a mark on the data.

**The mark: a common shift that never trained.** Every loss that reads scores as alternatives
normalizes them over the class axis: softmax cross-entropy, CTC, a CRF's emissions. Its gradient
with respect to the scores of one position sums to zero over the classes (``p − y`` for
cross-entropy; posterior occupancy minus the target for CTC and CRFs). The component common to all
classes, the per-position mean of the scores, is therefore never trained: it keeps the small size
it had at initialization while the class differences grow. Regression values and independent
sigmoid targets are trained column by column, and their per-position mean moves with them. So on
float's outputs (the floor's held-out feeds), per position ``z`` of ``C`` values, compare the
spread over positions of the mean ``mean(z)`` with the spread of the centred values
``z − mean(z)``: :func:`shift_share`. Columns drawn independently with one spread give
``1 / sqrt(C − 1)``; class scores give a fraction of that. Measured (float, 6-16 feeds):

| output | C | trained as | shift share | independent columns |
|---|---|---|---|---|
| ddddocr_ocr CTC logits | 8210 | CTC | 0.001 | 0.011 |
| eeg_seizure ``logits`` | 4 | cross-entropy | 0.11 | 0.58 |
| khmersm ``emissions`` | 2 | CRF | 0.23 | 1.0 |
| LAC emissions | 59 | CRF | 0.12 | 0.13 |
| eeg_spindles ``detection`` | 3 | regression + sigmoid | **0.78** | 0.71 |

A per-position head (rank ≥ 3: one row of values per step, segment or anchor) of at most
:data:`MAX_COLUMNS` columns whose shift share is at least :data:`REGRESSION_SHARE` of the independent
value is read as regression fields (:func:`regression_like`): the floor judges its error (output
cosine and each field's cosine, ``fields.FieldCosines``), not an arg-max. Why so narrow: the value
heads seen are that narrow (a segment's 3 values, a box's 4), and columns of independent noise, as
synthetic class scores are often made (tests/test_floor_sequences.py: a blank, a few symbols and
i.i.d. noise over 6-12 classes), have the independent share by construction; the independent value
also shrinks with ``C`` until the two overlap (LAC: 0.12 against 0.13). Wider heads, rank-2
classifier rows and fewer than :data:`MIN_POSITIONS` positions stay class scores, as before.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

__all__ = ["MAX_COLUMNS", "MIN_POSITIONS", "REGRESSION_SHARE", "REGRESSION_VALUES", "regression_like", "shift_share"]

#: per-position heads of at most this many columns can be read as regression (module docstring)
MAX_COLUMNS = 4
#: A shift share at least this fraction of independent columns' ``1 / sqrt(C − 1)`` is regression.
REGRESSION_SHARE = 0.5
#: values each field of a regression head needs to be judged by its cosine (``fields.FieldCosines``):
#: each of its values is read, so fewer than the 1024 of a declared field axis (a detector's 30
#: segments on 4 held-out feeds: 120)
REGRESSION_VALUES = 64
#: positions needed to measure the shares (fewer: not decided, the head stays class scores)
MIN_POSITIONS = 32


def shift_share(values: Sequence[np.ndarray]) -> tuple[float, int]:
    """``(share, positions)``: the spread over positions of the per-position mean of ``values``'
    last axis, over the root-mean-square spread of the centred columns (module docstring), pooled
    over the feeds' arrays; ``(nan, positions)`` where the centred values do not vary."""
    rows = [np.asarray(v, dtype=np.float64).reshape(-1, np.shape(v)[-1]) for v in values if np.ndim(v) >= 1]
    rows = [r for r in rows if r.size and np.isfinite(r).all()]
    if not rows:
        return float("nan"), 0
    z = np.concatenate(rows)
    mean = z.mean(axis=1)
    centred = z - mean[:, None]
    spread = math.sqrt(float(centred.var(axis=0).mean()))
    if spread == 0.0:
        return float("nan"), int(z.shape[0])
    return float(mean.std()) / spread, int(z.shape[0])


def regression_like(values: Sequence[np.ndarray]) -> bool:
    """Whether float's outputs ``values`` (arrays ``[..., T, C]``, rank ≥ 3) of a linear head are regression
    fields rather than class scores (module docstring); False where it cannot be told."""
    width = int(np.shape(values[0])[-1]) if values and np.ndim(values[0]) >= 3 else 0
    if not 2 <= width <= MAX_COLUMNS:
        return False
    share, positions = shift_share(values)
    if positions < MIN_POSITIONS or not math.isfinite(share):
        return False
    return share >= REGRESSION_SHARE / math.sqrt(width - 1)
