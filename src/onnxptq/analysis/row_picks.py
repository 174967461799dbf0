"""A one-column score over several rows a sample, which a caller may read as a pick across the rows.

Why: CapSpot's icon matcher (a siamese CNN) scores a template against each icon cropped from a
captcha, one row per icon, ``Sigmoid`` → ``[N, 1]``; the package picks the icon by the arg-max
*across the rows*. Under BFP16, MX9 and MXINT8 the pick moved on 1-2 of 32 captchas, each one whose
float top two scores were near-equal (0.8921/0.8933, 0.9844/0.9849), while the output's cosine was
0.9999 and the floor held: nothing in the graph says the rows are compared with each other (a batch
of separate samples has the same shape), so the floor cannot judge the pick on its own
(bench/RESULTS.md, "More models outside the zoo, seventh round" and branch slanet's section).

What it can do honestly is say so (:func:`pick_advisory`): where float's scores across the rows
decide (:func:`onnxptq.analysis.class_scores.decides`: the best row stands out from the others, not
a flat column of similar samples), the pick a caller would read is estimated from float's margins
between its best two rows and what the quantized model keeps of them, as a class decision is (the
rows are its classes; the margin CDF of ``class_scores._margin_cdf``), and a warning names the
output, the estimate, the picks seen to move and float's thinnest margins, and how to tell the
floor the reading (``QuantConfig.floor_output_agreement``, docs/accuracy.md "A pick across rows"):
told, the floor holds the picks against the top-1 floor and repair answers a break, and the warning
is not given. A pick is one decision a sample: like reads, a verdict that the picks hold needs
``1 / (1 − top1)`` samples (34 at 0.97), and the held-out feeds are at most 8, so the warning says
"not judged" unless the picks are seen below the floor. It is judged on the held-out feeds only:
the calibration feeds would cost one more run of the quantized model on each (CapSpot MX9: 9.1 →
11.5 CPU s) for a warning that says the same. Scores in [0, 1] (a sigmoid's)
are compared in logits: a rounding moves a logit by about the same wherever it is, a probability
near 1 hardly at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .class_scores import TIE_TOLERANCE, _margin_cdf, _refuted, decides

__all__ = ["Picks", "judge_picks", "one_column_rows", "pick_advisory"]

#: how many of float's thinnest picks the warning names
SHOWN = 3


def one_column_rows(array: np.ndarray) -> bool:
    """Whether one feed's ``array`` is a one-column score over several rows (``[N, 1]``, ``N ≥ 2``)."""
    return array.ndim == 2 and array.shape[1] == 1 and array.shape[0] >= 2


@dataclass
class Picks:
    """The picks across rows a caller would read, against float's."""

    #: the estimated share of samples whose best row stays float's (the lower of estimate and observed)
    agreement: float
    estimated: float
    samples: int
    moved: int
    #: float's thinnest picks: (best score, second score), thinnest first
    thin: list[tuple[float, float]]
    rows: tuple[int, int]
    #: samples whose best two rows float itself ties (left out)
    ties: int = 0

    def describe(self, name: str, top1: float, needed: int) -> str:
        """The warning: what the picks would keep, whether that is below ``top1`` or too few samples
        (``needed``) to say, float's thinnest picks, and how to tell the floor."""
        low, high = self.rows
        rows = f"{low}" if low == high else f"{low}-{high}"
        shown = ", ".join(f"{a:.4f}/{b:.4f}" for a, b in self.thin[:SHOWN])
        state = (f"below the top-1 floor {top1:g}" if self.agreement < top1
                 else f"NOT JUDGED on {self.samples} samples (a top-1 floor of {top1:g} needs {needed})")
        ties = f", {self.ties} float ties left out" if self.ties else ""
        return (f"one score per row over {rows} rows a sample: a caller that picks the row with the highest score (a matcher, "
                f"a ranker) reads a decision the floor does not judge by itself; such picks, {state}: an estimated "
                f"{self.agreement:.4f} keep float's ({self.moved} of {self.samples} seen to move{ties}; float's best two rows "
                f"{shown} on its thinnest samples). If the output is read so, tell the floor: floor_output_agreement="
                f"{{{name!r}: lambda ref, got: float(ref.argmax() == got.argmax())}} (docs/accuracy.md, \"A pick across rows\")")


def _logits(x: np.ndarray) -> np.ndarray:
    """Scores in [0, 1] (a sigmoid's) as logits, others as they are."""
    x = np.asarray(x, np.float64)
    if x.size and x.min() >= 0.0 and x.max() <= 1.0:
        p = np.clip(x, 1e-7, 1 - 1e-7)
        return np.log(p) - np.log1p(-p)
    return x


def judge_picks(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> Picks | None:
    """The picks across rows of one-column outputs (one ``[N, 1]`` array per sample) judged as class
    decisions whose classes are the rows; None where fewer than two samples are such arrays, or
    float's scores do not decide (module docstring)."""
    pairs = [(np.asarray(r), np.asarray(g)) for r, g in zip(reference, candidate)
             if one_column_rows(np.asarray(r)) and np.asarray(r).shape == np.asarray(g).shape and np.isfinite(g).all()]
    if len(pairs) < 2:
        return None
    refs = [_logits(r[:, 0])[None] for r, _ in pairs]
    if not decides(refs):
        return None
    margins, losses, thin = [], [], []
    moved = judged = ties = 0
    for (r, g), lr in zip(pairs, refs):
        lg = _logits(g[:, 0])
        lr = lr[0]
        order = np.argsort(lr)
        best, second = int(order[-1]), int(order[-2])
        margin = lr[best] - lr[second]
        z1, z2 = float(r[best, 0]), float(r[second, 0])
        if z1 - z2 <= TIE_TOLERANCE * max(abs(z1), abs(z2)):
            ties += 1  # float's own tie in the output's values (within fp16's rounding of them): no pick to keep
            continue
        kept = lg[best] - np.max(np.delete(lg, best))
        margins.append(np.array([margin]))
        losses.append(np.array([margin - kept]))
        moved += int(int(np.argmax(lg)) != best)
        judged += 1
        thin.append((float(r[best, 0]), float(r[second, 0]), margin))
    if judged < 2:
        return None
    observed = 1.0 - moved / judged
    estimated = _margin_cdf(margins, losses)
    estimated = observed if estimated is None or _refuted(estimated, moved, judged) else estimated
    thin.sort(key=lambda t: t[2])
    sizes = [r.shape[0] for r, _ in pairs]
    return Picks(min(observed, estimated), estimated, judged, moved, [(a, b) for a, b, _ in thin], (min(sizes), max(sizes)), ties)


def pick_advisory(name: str, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], top1: float,
                  needed: int) -> str | None:
    """The warning on output ``name``'s picks across rows (module docstring) where they keep fewer
    than ``top1`` of float's, or the samples are fewer than ``needed`` (``1 / (1 − top1)``, the count a
    top-1 verdict needs: on fewer, "holds" would say nothing, as for reads); None otherwise (not such
    an output, float does not decide, or the picks hold on enough samples)."""
    picks = judge_picks(reference, candidate)
    if picks is None or (picks.agreement >= top1 and picks.samples >= needed):
        return None
    return picks.describe(name, top1, needed)
