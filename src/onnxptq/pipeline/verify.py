"""The accuracy floor's judgement of a built model, and judgements already made on a model's exact bytes.

:func:`judgement` is what :func:`onnxptq.pipeline.complete.complete` concludes from the model's
outputs on the held-out feeds (the floor's verdict and the per-output figures), in one place, so
that a judgement made elsewhere on the same outputs is the same judgement. :class:`Verified` holds
such judgements, made by repair's candidates (:mod:`onnxptq.algorithms.repair`), keyed by the
serialized bytes of the model and by the session that ran it.

Why: repair ends with the delivered build (:func:`complete` with the search's answer), which runs
the held-out feeds again on the finish session. Where a candidate the search judged had those very
bytes (an integer plan's candidates are built as they are delivered: no packed weights) and ran on
a session configured as finish's (one intra-op thread each on a 2-core machine), the runs give the
same outputs bit for bit (same bytes, same options, one thread: the same kernels in the same order),
so the verdict and figures are the same; running them again cost lore_detect A8W8 about 7 of 33 CPU
s (four 768² feeds and the floor's measure; bench/RESULTS.md, branch blockquant6). Anything else
(other bytes: packed block weights, float16 storage restored; another thread count; decisions read
inside the graph, whose extra outputs the candidate's session had) is judged again as before.
"""

from __future__ import annotations

import hashlib
import logging
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx

from ..config.schema import QuantConfig
from ..graph.walk import compared_outputs
from ..analysis.held_scores import HeldOutputError, is_held
from ..sessions import options_signature, serialized
from .calibrate import Calibrated

log = logging.getLogger(__name__)

Outputs = list[dict[str, np.ndarray]]
#: ``(verdict, per-output figures)`` of :func:`judgement`
Judgement = tuple[Any, dict[str, Any]]


def judgement(calibrated: Calibrated, cfg: QuantConfig, got: Outputs,
              seen_of: Callable[[list[dict[str, np.ndarray]], bool], Outputs | None], eval_samples: int,
              measured: Mapping[bool, Any] | None = None) -> Judgement | None:
    """The floor's verdict and the per-output figures of a model whose outputs on the held-out feeds
    are ``got`` (with the graph's inner decisions beside them, where the floor reads any).

    ``seen_of(feeds, whole)``: the model's outputs on the first calibration feeds, asked only where the
    verdict judges reads on them too (``Verdict.wants_calibration_feeds``), some held in the form the
    floor reads them in (analysis/held_outputs.py) unless ``whole``; None where they cannot be had
    (then so is the judgement: None). ``measured``: verdicts the floor of ``cfg`` already gave on
    these very outputs, keyed by whether ``seen_of``'s outputs were judged beside them (repair's
    candidate, :meth:`Verified.remember`): taken instead of measuring them again (the same
    arguments to a pure function, so the same verdict)."""
    from ..analysis.compare import compare_outputs
    from ..analysis.floor import floor_for, measure

    measured = measured or {}
    names = compared_outputs(calibrated.prepared.graph)
    metrics = compare_outputs(names, calibrated.holdout_outputs, got)
    readings = calibrated.readings
    verdict = measured.get(False)
    if verdict is None:
        verdict = measure(calibrated.holdout_outputs, got, floor_for(cfg, *calibrated.looks), reused=calibrated.holdout_reused, **readings)
    if not calibrated.holdout_reused and verdict.wants_calibration_feeds:
        # An output judged as reads, rows too few on the held-out feeds, a Softmax sequence's reads
        # (advised on): judged on the first calibration feeds too (floor._judge_reads: a format's
        # rounding flips a near-tie on any feed). Only such models run them.
        feeds = calibrated.judged_calibration_feeds(eval_samples)
        seen = seen_of(feeds)
        if seen is None:
            return None
        verdict = measured.get(True)
        if verdict is None:
            verdict = measure_seen(lambda seen, whole: measure(
                calibrated.holdout_outputs, got, floor_for(cfg, *calibrated.looks), reused=calibrated.holdout_reused, **readings,
                seen=(calibrated.judged_float_outputs(feeds[:len(seen)], whole), seen)), seen, lambda: seen_of(feeds, True))
            if verdict is None:
                return None
    return verdict, metrics


def measure_seen(judge: Callable[[Outputs, bool], Any], seen: Outputs, whole: Callable[[], Outputs | None]) -> Any:
    """``judge(seen, False)``: the floor's verdict with the calibration feeds' outputs ``seen`` (and
    float's), some held in the form their readings need (analysis/held_outputs.py); where a reading
    needed one whole (``HeldOutputError``: the floor's choice of held outputs was wrong for these
    outputs), ``judge(whole(), True)``: the same feeds' outputs run again and kept whole, float's too
    (``Calibrated.judged_float_outputs(whole=True)``): the same verdict, at the old price. None where
    they cannot be had."""
    try:
        return judge(seen, False)
    except HeldOutputError as exc:
        log.debug("the calibration feeds' outputs judged whole: %s", exc)
    again = whole()
    return None if again is None else judge(again, True)


def worth_remembering(runs_cpu: float, judgement_cpu: float) -> bool:
    """Whether a held candidate whose runs took ``runs_cpu`` and whose floor judgement took
    ``judgement_cpu`` CPU s should be judged again as :func:`complete` would, for :class:`Verified`.

    Why not always: every held candidate of a search is so judged and only the delivered one is used;
    that judgement costs about what the candidate's own did, and what it saves is the delivered
    build's runs and judgement. Worth it where the runs cost more than a judgement: lore_detect
    A8W8 (four 768² feeds against the floor's measure, two held candidates); not tinyocr_rec A8W8,
    whose 32 small lines under a reads judgement cost less than judging them, over 6-8 builds
    (bench/RESULTS.md, branch blockquant6)."""
    return runs_cpu > judgement_cpu


def session_signature(session: Any) -> tuple:
    """What of an onnxruntime session decides its outputs: providers, thread counts, graph level,
    execution mode and the function-inlining entry (log levels and spinning decide none); one
    spelling with a session not opened (:func:`onnxptq.sessions.options_signature`: finish's)."""
    return options_signature(session.get_session_options(), session.get_providers())


def model_digest(model: onnx.ModelProto) -> str | None:
    """sha256 of ``model``'s serialized bytes (None where protobuf cannot serialize it, past 2 GB:
    never matched). By :func:`onnxptq.sessions.serialized`, without its size limit."""
    data = serialized(model, limit=sys.maxsize)
    return None if data is None else bytes_digest(data)


def bytes_digest(data: bytes) -> str:
    """sha256 of a serialized model, as :func:`model_digest` gives it (finish's bytes: no second
    serialization of the delivered model, pipeline/finish.py)."""
    return hashlib.sha256(data).hexdigest()


class Verified:
    """Judgements made on models' exact bytes: ``digest -> (session signature, judgement)``.

    :meth:`remember` is given a model (as its session read it), the session and its outputs; it
    makes :func:`judgement` as :func:`complete` would for ``cfg``. :meth:`recall` gives it back for a
    model with the same bytes, run on a session of the same signature, else None."""

    def __init__(self, calibrated: Calibrated, eval_samples: int) -> None:
        self.calibrated, self.eval_samples = calibrated, eval_samples
        self.entries: dict[str, tuple[tuple, Judgement]] = {}

    def remember(self, model: onnx.ModelProto, signature: tuple, cfg: QuantConfig, got: Outputs,
                 seen_feeds: Sequence[Mapping[str, np.ndarray]] = (), seen: Outputs = (),
                 verdict: Any = None, floor: Any = None) -> bool:
        """Judge ``got`` (and ``seen``, the outputs on ``seen_feeds``) as :func:`complete` would;
        False where that needs runs not given (calibration feeds other than ``seen_feeds``).

        ``verdict``: the floor ``floor`` already gave on ``got`` (with ``seen`` where it is not
        empty; repair's candidate); taken as the judgement's where ``floor`` is ``cfg``'s, so that
        the same outputs are not measured twice (one measure of a held candidate: ~0.7 CPU s on
        lore_detect A8W8 by branch blockquant6's estimate)."""
        from ..analysis.floor import floor_for

        digest = model_digest(model)
        if digest is None:
            return False
        measured = {bool(seen): verdict} if verdict is not None and floor == floor_for(cfg, *self.calibrated.looks) else None

        def seen_of(feeds: list[dict[str, np.ndarray]], whole: bool = False) -> Outputs | None:
            same = len(feeds) == len(seen_feeds) == len(seen) and all(a is b for a, b in zip(feeds, seen_feeds))
            held = whole and any(is_held(v) for outputs in seen for v in outputs.values())
            return list(seen) if same and not held else None  # held outputs cannot be had whole here: not remembered

        found = judgement(self.calibrated, cfg, got, seen_of, self.eval_samples, measured)
        if found is None:
            return False
        self.entries[digest] = (signature, found)
        return True

    def recall(self, model: onnx.ModelProto, signature: tuple, digest: str | None = None) -> Judgement | None:
        """The judgement of a model with ``model``'s bytes on a session of ``signature``, or None.
        ``digest``: those bytes' :func:`bytes_digest`, where the caller had them (finish's)."""
        if all(known != signature for known, _ in self.entries.values()):
            # none was judged on such a session (finish's pool is one thread only on a 2-core
            # machine): the model is not serialized and hashed for a lookup that cannot match
            return None
        entry = self.entries.get(digest or model_digest(model) or "")
        if entry is None or entry[0] != signature:
            return None
        return entry[1]
