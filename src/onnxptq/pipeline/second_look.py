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
import time
from typing import Any

from ..analysis.evidence import SECOND_LOOK, reads_to_confirm
from ..config.schema import QuantConfig
from .calibrate import Calibrated
from .complete import QuantizationResult, _verify
from .finish import finish

log = logging.getLogger(__name__)

__all__ = ["could_confirm", "second_look", "wants_second_look"]


def wants_second_look(calibrated: Calibrated, verdict: Any) -> bool:
    """Whether ``verdict`` (judged on :attr:`Calibrated.holdout`) asks for the reserve: a reserve is left and an
    output holds on its figure but could not confirm its share (with ``repair_uncertain`` such an output is
    broken by that alone: the same), where all the held-out samples could confirm it (:func:`could_confirm`).
    An output broken on its figure is repair's, not this look's."""
    if not calibrated.reserve or verdict is None or not verdict.samples:
        return False
    held = verdict.samples + len(calibrated.reserve)
    return any(c.unconfirmed is not None and (c.ok or verdict.floor.confirm) and could_confirm(c, verdict.samples, held)
               for c in verdict.outputs.values())


def could_confirm(check: Any, samples: int, held: int) -> bool:
    """Whether ``check``'s unconfirmed share, at its figure and its units per held-out sample, would be confirmed by
    the second look's bound on ``held`` samples (``samples`` judged now): the reads that would confirm it
    (``evidence.reads_to_confirm`` at ``SECOND_LOOK``; a mask's pages: ``MaskBound.pages_to_decide``) within
    reach. Why: a one-read-per-sample share (a batch-1 classifier) confirms 0.95 from 38 held-out reads, 0.97
    from 64; a look on 8 + 8 samples would run them for nothing. Skipping a look only withholds a confirmation
    (the two looks' error stays within its bound)."""
    bound = check.unconfirmed
    if check.mask_bound is not None:
        needed = check.mask_bound.pages_to_decide(bound.floor)
        return needed is not None and needed <= held
    needed = reads_to_confirm(bound.share, bound.floor, 1, SECOND_LOOK)
    return needed is not None and needed <= bound.count * held / samples


def second_look(calibrated: Calibrated, cfg: QuantConfig, result: QuantizationResult, eval_samples: int) -> QuantizationResult:
    """``result`` judged again on the held-out samples and the reserve (module docstring) where its verdict
    asks for it (:func:`wants_second_look`); else ``result`` as it is. The model is opened as finish opens the
    delivered one and run on every held-out sample (the first ones too: their outputs were not kept), the
    figures and the verdict replaced, the time under ``timings["second look"]``."""
    if not wants_second_look(calibrated, result.floor):
        return result
    t0 = time.perf_counter()
    first = result.floor
    reserved = len(calibrated.reserve)
    calibrated.look_again()
    model, session = finish(result.model, calibrated.source)
    verdict, metrics, on = _verify(calibrated, cfg, model, session, {}, eval_samples)
    log.info("%s: the floor could not confirm %s on %d held-out samples; judged again on %d (%d more held out): %s",
             calibrated.source, ", ".join(n for n, c in first.outputs.items() if c.unconfirmed is not None),
             first.samples, verdict.samples, reserved, "confirmed" if verdict.ok and not verdict.unconfirmed else
             "still could not confirm" if verdict.ok else "broken")
    result.floor, result.metrics, result.metrics_samples = verdict, metrics, on
    result.timings["second look"] = time.perf_counter() - t0
    return result
