"""The accuracy floor's second look: a share the first held-out samples could not confirm, judged again on
them and a reserve held out beside them (analysis/evidence.py, "Two looks").

Why: only held-out samples confirm a share (``analysis.floor.share_of``), and with the first 8 (a third of
small data) a good result reads "could NOT confirm" for want of reads: 0.99 on ~70 decision tokens cannot
confirm 0.97 at 90 % (khmersm BF16/BFP16/MX9/MXINT8, mp_face_short BF16, anr_ar_decoder BFP16/MX9/MXINT8 moved
from "holds" to it: bench/RESULTS.md, lead 09:36-12:05). More held-out samples on every quantization would
cost runs where the first look already decides (most do); so calibration holds a reserve out
(``calibrate.reserve_stream``, where the data is long enough) and it is run only here, where the verdict holds
on its figure but could not confirm a share.

Where it is taken (``api.quantize``): on the plain build's verdict, before repair, so that repair (which acts on
an unconfirmed share with ``repair_uncertain``, or on a break the larger sample shows) judges every candidate on
all the held-out samples; and on the delivered verdict where repair's build could not confirm and no look was
taken yet. Once taken, every later judgement is on all of them, at the second look's confidence
(``Calibrated.looks``).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from ..analysis.decisions import decision_tensors
from ..analysis.evidence import SECOND_LOOK, share_bound
from ..analysis.floor import POOLED_COSINE, below_on_figure
from ..config.schema import QuantConfig
from . import runtime
from .calibrate import Calibrated
from .complete import QuantizationResult, _verify
from .finish import finish

log = logging.getLogger(__name__)

__all__ = ["could_confirm", "second_look", "wants_second_look"]


def wants_second_look(calibrated: Calibrated, verdict: Any) -> bool:
    """Whether ``verdict`` (judged on :attr:`Calibrated.holdout`) asks for the reserve: a reserve is left and an
    output holds on its figure but could not confirm its share (with ``repair_uncertain`` such an output is
    broken by that alone: the same), where all the held-out samples could confirm it (:func:`could_confirm`); or
    an output is below the floor on its figure with its bound across it (``floor.below_on_figure``), which repair
    would otherwise act on as broken. An output broken beyond its bound is repair's, not this look's.

    Why a below figure always takes the look (no chance to clear, as a share has): the alternative is a repair
    search, four builds and more, each a build, a session and the held-out runs, where the look is one run of the
    reserve; and a first look below the floor is the very draw whose noise fell low: on the planted detector of
    tests/test_floor_maps.py 5 of 23 such rows held the floor on 200 fresh pages and were repaired all the same
    (bench/RESULTS.md, repair18 and repair19)."""
    if not calibrated.reserve or verdict is None or not verdict.samples:
        return False
    held = verdict.samples + len(calibrated.reserve)
    return any(below_on_figure(c) or (c.unconfirmed is not None and (c.ok or verdict.floor.confirm)
                                      and could_confirm(c, verdict.samples, held))
               for c in verdict.outputs.values())


def second_look(calibrated: Calibrated, cfg: QuantConfig, result: QuantizationResult, eval_samples: int) -> QuantizationResult:
    """``result`` judged again on the held-out samples and the reserve (module docstring) where its verdict
    asks for it (:func:`wants_second_look`); else ``result`` as it is. The model is run on every held-out sample
    (the first ones too: their outputs were not kept) on the session finish opened for ``result``'s verification
    (``result._session``, taken: the result holds it no longer, looked or not), else on one opened as finish opens
    the delivered one; the figures and the verdict replaced, the time under ``timings["second look"]``.

    Why that session: it was opened on these very bytes with finish's options, so its outputs are those of a new
    one bit for bit, and on a block-format model opening one is a large part of the quantization (khmersm MX9:
    0.13 of 1.45 CPU s; bench/RESULTS.md, blockquant12)."""
    session, result._session = result._session, None  # not held into repair's search nor the save
    named, result._decided = result._decided, None  # the decisions as that session names them (complete.py)
    if not wants_second_look(calibrated, result.floor):
        return result
    t0 = time.perf_counter()
    first = result.floor
    reserved = len(calibrated.reserve)
    calibrated.look_again()
    decided = decision_tensors(result.model, calibrated.readings.get("decisions") or ())
    model = result.model
    if session is None:
        model, session = finish(result.model, calibrated.source, also=tuple(decided),
                                exact_sums=runtime.judge_exact_sums(cfg))
    elif named is not None:
        decided = named
    verdict, metrics, on = _verify(calibrated, cfg, model, session, {}, eval_samples, decided=decided)
    below = first.below
    if below:  # what the first look said of them: repair acts only where this look is below too (algorithms/repair.py)
        verdict.first_below, verdict.first_samples = {n: first.outputs[n] for n in below}, first.samples
        log.info("%s: %s below the floor on its figure on %d held-out samples, its bound across it; judged again on %d "
                 "(%d more held out): %s", calibrated.source, ", ".join(below), first.samples, verdict.samples, reserved,
                 "held on a second look" if verdict.held_on_second_look == below else "still below")
    unsure = [n for n, c in first.outputs.items() if c.unconfirmed is not None]
    if unsure:
        log.info("%s: the floor could not confirm %s on %d held-out samples; judged again on %d (%d more held out): %s",
                 calibrated.source, ", ".join(unsure), first.samples, verdict.samples, reserved,
                 "confirmed" if verdict.ok and not verdict.unconfirmed else "still could not confirm" if verdict.ok else "broken")
    result.floor, result.metrics, result.metrics_samples = verdict, metrics, on
    result.timings["second look"] = time.perf_counter() - t0
    return result


#: the least chance a second look must have to confirm a share (:func:`could_confirm`) for its runs to be spent
WORTH = 0.2


def could_confirm(check: Any, samples: int, held: int) -> bool:
    """Whether a second look on ``held`` samples (``samples`` judged now) would confirm ``check``'s unconfirmed
    share with a chance of :data:`WORTH` at least: the share's units per held-out sample give the units the look
    would count; the units kept on the reserve are drawn from the rate the first look's units make likely (a
    beta-binomial: the rate Beta(kept + 1, lost + 1), uniform before them), and the look confirms where all the
    kept reach the least count the second look's bound confirms (``evidence.share_bound`` at ``SECOND_LOOK``).
    A mask's pages: where the pages that would decide it (``MaskBound.pages_to_decide``) are within reach. A pooled
    cosine repair chose (``analysis.floor.chosen``): where the feeds its jackknife bound says would decide it
    (``to_confirm``) are within reach; read as a share of rows, its 4–8 feeds never reached the look (floor16).

    Why a chance and not the share seen: 8 of 8 rows kept is little evidence of a rate of 1. PP-OCR cls BF16 on
    200 samples (8 held-out rows kept, 64 in all: every one must be kept) took the look for nothing, 1.08 of
    2.0 CPU s; that look confirms about one time in seven, a clean tagger's 150 tokens' (0.99) nearly always.
    Skipping a look only withholds a confirmation (the two looks' error stays within its bound); a look that
    confirms one time in five costs about one held-out evaluation for a warning spared on a good result."""
    bound = check.unconfirmed
    if check.mask_bound is not None:
        needed = check.mask_bound.pages_to_decide(bound.floor)
        return needed is not None and needed <= held
    if bound.unit == POOLED_COSINE:
        return bound.to_confirm is not None and bound.to_confirm <= held
    count = bound.count
    total = int(round(count * held / samples))
    if total <= count or total > 100_000:
        return False
    kept = min(float(count), max(0.0, bound.share * count))
    least = next((k for k in range(int(math.ceil(bound.floor * total)), total + 1)
                  if share_bound(k, total, SECOND_LOOK)[0] >= bound.floor), None)
    if least is None:
        return False
    return _beta_binomial_tail(least - kept, total - count, kept + 1.0, count - kept + 1.0) >= WORTH


def _beta_binomial_tail(at_least: float, draws: int, a: float, b: float) -> float:
    """``P(X ≥ at_least)`` for ``X`` ~ BetaBinomial(``draws``, ``a``, ``b``)."""
    start = max(0, int(math.ceil(at_least - 1e-9)))
    if start > draws:
        return 0.0
    base = math.lgamma(draws + 1) + math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) - math.lgamma(draws + a + b)
    return min(1.0, sum(math.exp(base - math.lgamma(x + 1) - math.lgamma(draws - x + 1) + math.lgamma(x + a)
                                 + math.lgamma(draws - x + b)) for x in range(start, draws + 1)))
