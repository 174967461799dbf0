"""From calibrated statistics to a delivered result: build → finish → evaluate → report → save.

:class:`QuantizationResult` is what every entry point returns: the model, the decisions (plan and
parameters) and the figures that show how much accuracy it kept.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping
from pathlib import Path

import onnx

from .. import outputs
from ..analysis.decisions import decision_tensors, judging
from ..analysis.float_weights import WARN_SHARE, ConstantBytes, constant_table, float_share, float_weight_line
from ..config.schema import QuantConfig, require_config
from ..errors import UsageError
from ..graph import external, io, sparse_storage
from ..graph.ort_crash import crash_warning
from ..graph.passes.half_storage import restore_half_storage
from ..graph.walk import compared_outputs
from ..memory import release_freed
from ..sessions import run_feeds
from . import runtime
from .build import build_model
from .emit import ConstantReuse
from .calibrate import DEFAULT_EVAL_SAMPLES, Calibrated
from .finish import FileBytes, finish, finish_file, finish_saved, finish_signature
from .lean_file import lean, sinusoid_tables_wanted
from .plan import Plan
from .solve import QParams
from .streamed import held_out_outputs
from .verify import Judgement, Verified, bytes_digest, judgement

log = logging.getLogger(__name__)


@dataclass
class QuantizationResult:
    """What a quantization produced: the model, the decisions, the figures."""

    model: onnx.ModelProto
    plan: Plan
    params: dict[str, QParams]
    config: QuantConfig
    output_path: Path | None = None
    #: per graph output: cosine similarity, L2 loss, MSE and PSNR vs the float model (analysis.compare),
    #: means over the samples :attr:`metrics_samples` names
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    calibration_samples: int = 0
    #: the accuracy floor's verdict on the held-out samples (:mod:`onnxptq.analysis.floor`); None:
    #: not checked (no data, the floor off, or the streaming path)
    floor: Any = None
    #: what the repair did (:mod:`onnxptq.algorithms.repair`): kept-float nodes, figures before/after
    repair: dict[str, Any] | None = None
    #: which samples :attr:`metrics` are taken on, in words ("4 held-out samples", "8 calibration samples")
    metrics_samples: str = ""
    #: finish's onnxruntime session on :attr:`model` (the verification's), held from
    #: ``complete(deliver_now=False)`` to the floor's second look, which runs the reserve on it
    #: (:func:`~onnxptq.pipeline.second_look.second_look` takes it, looking or not); None otherwise
    _session: Any = field(default=None, repr=False, compare=False)
    #: the graph's inner decisions as :attr:`_session` returns them (``{tensor: key}``, the tensors under the
    #: file's names where that session read the file's bytes: :func:`~onnxptq.pipeline.finish.finish_file`)
    _decided: dict[str, str] | None = field(default=None, repr=False, compare=False)
    #: the file :func:`deliver` writes, serialized by finish (:func:`~onnxptq.pipeline.finish.finish_file`,
    #: in a temporary file), held from :func:`complete` to :func:`deliver` where the floor held (a broken
    #: floor's build is replaced by repair's); None: deliver serializes the model
    _file: FileBytes | None = field(default=None, repr=False, compare=False)
    #: the float model's constants by name (:func:`onnxptq.analysis.float_weights.constant_table`):
    #: what :meth:`float_weights` weighs the plan against; set by :func:`deliver`
    constants: Mapping[str, ConstantBytes] = field(default_factory=dict, repr=False, compare=False)

    def float_weights(self) -> Any:
        """The weight bytes this plan left float, by op type and reason
        (:class:`~onnxptq.analysis.float_weights.FloatShare`), read from the plan as it is now (repair's
        kept nodes included)."""
        return float_share(self.constants, self.plan.tensors, self.plan.skipped_nodes)

    def summary(self) -> str:
        from ..analysis.floor import floor_lines  # the floor's wording lives with the floor

        lines = [f"quantized {len(self.plan.nodes)} nodes, {len(self.plan.tensors)} tensors: {self.config.describe()}"]
        if self.metrics and self.metrics_samples:
            lines.append(f"  against float, mean per sample on {self.metrics_samples}:")
        broken = set(self.floor.broken) if self.floor is not None else set()
        for out, m in self.metrics.items():
            flag = "  [accuracy floor BROKEN]" if out in broken else ""
            if "equal" in m:  # integer output (ids, lengths): a cosine/PSNR of indices means nothing
                kind = "integer" if "cosine" in m else "strings"  # compare_outputs gives strings no cosine
                by = judging(self.model, out, list(self.floor.outputs)) if self.floor is not None and self.model is not None else []
                told = f" (judged by {', '.join(by)})" if by else ""
                lines.append(f"  output {out}: {kind}, {m['equal']:.4f} of its elements equal to float's{told}{flag}")
                continue
            lines.append(f"  output {out}: cosine {m['cosine']:.6f}  L2 {m['l2']:.3e}  PSNR {m['psnr']:.2f} dB{flag}")
        lines.extend(floor_lines(self.floor, self.repair))
        left = float_weight_line(self.float_weights()) if self.constants else None
        if left:
            lines.append("  " + left)
        lines.append("  time: " + ", ".join(f"{k} {v:.2f}s" for k, v in self.timings.items()))
        return "\n".join(lines)


def complete(calibrated: Calibrated, config: QuantConfig, output: str | os.PathLike | None = None, *,
             eval_samples: int = DEFAULT_EVAL_SAMPLES, report_path: str | os.PathLike | None = None,
             deliver_now: bool = True, reuse: ConstantReuse | None = None,
             verified: Verified | None = None) -> QuantizationResult:
    """solve → refine → emit → finish → evaluate → verify → save → report for one config, on
    calibrated data. ``deliver_now=False`` stops before the save and the report (the accuracy
    floor's repair decides first which model is delivered; :func:`deliver` then writes it).
    ``reuse``: the repair's :class:`~onnxptq.pipeline.emit.ConstantReuse` (weights its candidates
    already rounded), handed to :func:`~onnxptq.pipeline.build.build_model`. ``verified``: judgements
    repair's candidates made (:class:`~onnxptq.pipeline.verify.Verified`), taken where this build has
    the bytes of one of them."""
    cfg = require_config(config, "complete")
    if output is not None and external.active_dir() is not None:
        return _complete_streaming(calibrated, cfg, output, eval_samples=eval_samples, report_path=report_path)
    source = calibrated.source
    timings = dict(calibrated.timings)
    t2 = time.perf_counter()
    plan, params, quantized, refine_timings = build_model(calibrated, cfg, reuse=reuse)
    timings.update(refine_timings)
    release_freed()  # the build's float and guard sessions, emit's copies (onnxptq.memory: peak RSS)
    if cfg.pack_weights:  # weights kept float go back to the source's float16 bytes (bit-identical values)
        # a float16 source computed in fp32 inside: its weights kept float go back to float16 even where
        # preparation's fp32 folds left them inexact (graph/passes/half_storage.py)
        rounded = calibrated.half_stored - set(plan.tensors) if calibrated.reference is not None else frozenset()
        restore_half_storage(quantized, calibrated.half_stored, rounded=frozenset(rounded))
    # Where a candidate judged these very bytes on a session of finish's signature, the verification
    # takes its judgement: finish then opens no session (pipeline/finish.py; found once, here). The
    # bytes' digest is that of the bytes finish serialized (Verified.recall): not a second
    # serialization of the delivered model for it.
    known: list[Judgement] = []

    def judged(data: bytes) -> bool:
        assert verified is not None
        found = verified.recall(quantized, finish_signature(), bytes_digest(data))
        if found is None:
            return False
        known.append(found)
        return True

    # The graph's inner decisions the verification reads come out of finish's session too (pipeline/finish.py).
    decided = decision_tensors(quantized, calibrated.readings.get("decisions") or ()) if calibrated.holdout else {}
    recall = verified is not None and verified.entries and calibrated.holdout
    exact_sums = runtime.judge_exact_sums(cfg)
    # finish's session on the file's own bytes, which the save then writes (finish_file), except where a
    # judgement repair made may be taken (its digests are of the candidates' in-memory bytes) or the session
    # judges another copy (exact sums)
    finished = None if recall or exact_sums else finish_file(source, _stored(io.pin_versions(quantized), cfg),
                                                             _written(calibrated, cfg), also=tuple(decided))
    file = None
    if finished is not None:
        session, names, file = finished
        decided = {names[t]: k for t, k in decided.items()}
    else:
        quantized, session = finish(quantized, source, judged if recall else None, also=tuple(decided),
                                    exact_sums=exact_sums)
    timings["emit"] = time.perf_counter() - t2 - sum(refine_timings.values())

    if calibrated.holdout:
        verdict, metrics, on = _verify(calibrated, cfg, quantized, session, timings, eval_samples,
                                       known[0] if known else None, decided)
    else:
        verdict, metrics, on = None, _evaluate(calibrated, quantized, session, eval_samples, timings), _kept_words(calibrated, eval_samples)
    result = QuantizationResult(quantized, plan, params, cfg, None, metrics, timings, calibrated.samples, floor=verdict,
                                metrics_samples=on)
    if not deliver_now and verdict is not None:
        # a second look (pipeline/second_look.py) runs the reserve on this session rather than open another on
        # the same bytes (khmersm MX9, 96 feeds: one finish session of 0.13 CPU s less; bench/RESULTS.md, blockquant12)
        result._session, result._decided = session, decided
    if deliver_now or verdict is None or (verdict.ok and not verdict.below):
        result._file = file
    elif file is not None:  # repair replaces this build: its file is not written
        file.close()
    if deliver_now:
        deliver(calibrated, result, output, eval_samples=eval_samples, report_path=report_path)
    return result


def deliver(calibrated: Calibrated, result: QuantizationResult, output: str | os.PathLike | None, *,
            eval_samples: int = DEFAULT_EVAL_SAMPLES, report_path: str | os.PathLike | None = None) -> QuantizationResult:
    """The end of :func:`complete`: the save, then the per-tensor report (the order every doc gives),
    the total time, the summary (logged at DEBUG: callers print it)."""
    timings = result.timings
    file, result._file = result._file, None  # not held past the save
    if output is not None and file is not None:  # the bytes finish checked and judged (pipeline/finish.py finish_file)
        result.output_path = io.save_serialized(file.write, output)
    elif output is not None:  # save, then report (the order every doc gives)
        stored = _stored(result.model, result.config)
        with _written(calibrated, result.config)(stored):
            result.output_path = io.save_model(stored, output)
    if file is not None:
        file.close()
    # the float model's constants, weighed against the plan as delivered: once, here (a repair's candidates need none)
    result.constants = constant_table(calibrated.prepared)
    left = result.float_weights() if result.constants else None
    if left is not None and left.share >= WARN_SHARE:  # the file barely shrinks: say where the bytes are
        log.warning("%s stays mostly float: %s", str(output) if output is not None else "the quantized model",
                    float_weight_line(left))
    warning = crash_warning(result.model, str(output) if output is not None else "the quantized model")
    if warning:  # our own sessions disable the fusion (sessions.py); a user's default session would die
        log.warning("%s", warning)
    if report_path is not None:
        t4 = time.perf_counter()
        from ..analysis.report import compute_report
        from ..analysis.report_html import write_report

        write_report(compute_report(calibrated.prepared, result.model, calibrated.kept[:eval_samples], plan=result.plan,
                                    float_label=calibrated.source,
                                    quant_label=str(output) if output is not None else "<quantized>"), report_path)
        timings["report"] = time.perf_counter() - t4
    timings["total"] = time.perf_counter() - calibrated.started
    log.debug("%s", result.summary())
    return result


def _stored(model: onnx.ModelProto, cfg: QuantConfig) -> onnx.ModelProto:
    """The model the file holds: runtime "cpu" writes mostly-zero float weights (folded filter banks) sparse,
    which onnxruntime densifies at load (a copy where any is; else ``model``)."""
    return sparse_storage.sparsify_floats(model) if cfg.runtime == "cpu" else model


def _written(calibrated: Calibrated, cfg: QuantConfig) -> Any:
    """The context a model is written in (pipeline/lean_file.py ``lean``): no inferred shapes, shared call
    attributes once, short names; the model restored after it."""
    return lambda model: lean(model, calls=cfg.pack_weights, avoid=calibrated.source_names,
                              sinusoids=sinusoid_tables_wanted(cfg))


def _verify(calibrated: Calibrated, cfg: QuantConfig, quantized: onnx.ModelProto, session: Any,
            timings: dict[str, float], eval_samples: int = DEFAULT_EVAL_SAMPLES,
            known: Judgement | None = None, decided: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Any], str]:
    """``(verdict, figures, which samples)``: the accuracy floor's verdict (:mod:`onnxptq.analysis.floor`)
    on the held-out samples, run through the session finish() opened, and the per-output figures
    of the same runs (:func:`onnxptq.analysis.compare.compare_outputs`); both by
    :func:`~onnxptq.pipeline.verify.judgement`, or ``known``: the judgement repair made on a model
    of these very bytes on a session like finish's (:meth:`~onnxptq.pipeline.verify.Verified.recall`:
    the same outputs, so the same judgement, without running the feeds again; ``session`` is then
    None: finish opened none).

    Why the figures come from the held-out samples and not from the first calibration samples:
    the summary printed "cosine 0.978" on calibration samples two lines above a floor that "holds"
    on held-out ones (PP-OCRv6 tiny rec BFP16, bench/RESULTS.md "Models outside the zoo"): two
    sets of samples, two answers, and the figures a user reads were those of samples the ranges
    were fitted to. One set now gives both, and the quantized model runs on it once (it ran on the
    calibration samples too before: on a block-format model each run is a large part of the
    quantize time). With too little data to hold any feed out (1-11 feeds:
    ``calibrate.split_holdout``) the held-out feeds are the first calibration feeds, and the
    summary says so.

    ``decided``: ``{tensor: key}`` of the graph's inner decisions that ``session`` returns beside the
    graph outputs (finish's ``also``): read from the same runs. Those it does not return are read on
    an evaluation copy of ``quantized`` (:class:`~onnxptq.analysis.decisions.DecisionReader`), as
    all of them were before (a second session on the model and its feeds run again)."""
    from ..analysis.decisions import DecisionReader

    t0 = time.perf_counter()
    if known is not None:
        log.debug("verification: the judgement repair made on these very bytes, on a session like finish's")
        verdict, metrics = known
        timings["verify"] = time.perf_counter() - t0
        return verdict, metrics, verdict.where()
    names = compared_outputs(calibrated.prepared.graph)
    decided = dict(decided or {})
    if not decided.keys() <= {o.name for o in session.get_outputs()}:
        decided = {}  # past protobuf's limit finish's session returns the graph's outputs only
    fetch = names + [t for t in decided if t not in names]
    at = {n: j for j, n in enumerate(fetch)}

    def outputs(out: list[Any]) -> dict[str, Any]:
        """A run's graph outputs by name, and its decisions' tensors by their keys."""
        return dict(zip(names, out), **{k: out[at[t]] for t, k in decided.items()})

    # Decisions inside the graph the session does not return: read on one evaluation copy of the model
    # (analysis.decisions), the held-out feeds now, the calibration feeds below where the floor asks for them.
    decisions = DecisionReader(quantized, [] if decided else calibrated.readings["decisions"],
                               providers=tuple(cfg.calibration.providers))
    # Two runs in flight (sessions.run_feeds): the same outputs, the second core used; a stream's calls fed
    # their own state (pipeline/streamed.py).
    held, streamed = held_out_outputs(session, fetch, calibrated)
    got = [dict(outputs([g[n] for n in fetch]), **e) for g, e in zip(held, decisions(calibrated.holdout))]

    def seen_of(feeds: list[dict[str, Any]], whole: bool = False) -> list[dict[str, Any]]:
        # the floor's held outputs held as they come out (analysis/held_outputs.py), unless asked whole
        hold = None if whole else calibrated.seen_holder(fetch)
        return [dict(outputs(out), **e) for out, e in zip(run_feeds(session, fetch, feeds, hold), decisions(feeds))]

    found = judgement(calibrated, cfg, got, seen_of, eval_samples)
    assert found is not None  # seen_of always runs the feeds
    verdict, metrics = found
    verdict.streamed = streamed
    timings["verify"] = time.perf_counter() - t0
    return verdict, metrics, verdict.where()


def _kept_words(calibrated: Calibrated, eval_samples: int) -> str:
    n = min(len(calibrated.kept), eval_samples)
    return f"{n} calibration sample{'s' if n != 1 else ''}" if n else ""


def _evaluate(calibrated: Calibrated, quantized: onnx.ModelProto, session: Any, eval_samples: int,
              timings: dict[str, float]) -> dict[str, Any]:
    """Per-output figures of ``quantized`` against the float model on the kept samples ({} without):
    where nothing was held out for the floor (no floor, the streaming path).

    The float side comes from the calibration runs and the quantized side from the session
    finish() already opened: no model is run or loaded twice (that was 1.1 s of a 4.5 s A8W8
    quantization of PP-OCRv4 rec), and on the streaming path no second copy of the weights."""
    if not calibrated.kept:
        return {}
    from ..analysis.compare import compare_models

    t0 = time.perf_counter()
    metrics = compare_models(calibrated.prepared, quantized, calibrated.kept[:eval_samples], candidate_session=session,
                             reference_outputs=calibrated.float_outputs[:eval_samples])
    timings["evaluate"] = time.perf_counter() - t0
    return metrics


def streaming_report_error(source: str) -> UsageError:
    """Why ``report_path`` is refused on the streaming path: the report runs every tensor of both
    models through sessions that hold them in memory, the copies streaming exists to avoid."""
    return UsageError(f"{source}: the per-tensor report is not available for a model quantized on the streaming path "
                      f"(external data of {external.STREAM_THRESHOLD} bytes or more); quantize without report_path and "
                      "compare the saved model with `onnxptq evaluate`")


def _complete_streaming(calibrated: Calibrated, cfg: QuantConfig, output: str | os.PathLike, *, eval_samples: int,
                        report_path: str | os.PathLike | None) -> QuantizationResult:
    """:func:`complete` on the streaming path (:mod:`onnxptq.graph.external`): the weights never
    enter a message. Emit writes each quantized weight into the output's temporary data file, the
    untouched ones are copied there chunk by chunk, the (small) model file is written beside it,
    the checker and the one onnxruntime session read those files, and both are renamed into place
    together only once all of that passed. The returned model points at ``<output>.data``."""
    if report_path is not None:
        raise streaming_report_error(calibrated.source)
    source = calibrated.source
    timings = dict(calibrated.timings)
    out = outputs.resolve_output(output, "output")
    data_name = f"{out.name}.data"
    t2 = time.perf_counter()
    with outputs.atomic_files("model", output) as files:
        tmp_model = files.temp(out)
        tmp_data = files.temp(out.parent / data_name)
        with external.sink(tmp_data) as target:
            plan, params, quantized, refine_timings = build_model(calibrated, cfg)
            timings.update(refine_timings)
            copied = external.consolidate(quantized, target)
        log.info("streamed %d tensors (%d copied unchanged, %.1f MiB) into %s", target.tensors, copied,
                 target.bytes / 2**20, out.parent / data_name)
        io.pin_versions(quantized)
        if target.tensors == 0:  # every tensor was small: no data file
            files.pending = [(t, f) for t, f in files.pending if t != tmp_data]
            tmp_data.unlink()
        onnx.save_model(quantized, str(tmp_model))
        quantized, session = finish_saved(quantized, tmp_model, source, runtime.judge_exact_sums(cfg))
        timings["emit"] = time.perf_counter() - t2 - sum(refine_timings.values())
        metrics = _evaluate(calibrated, quantized, session, eval_samples, timings)
        on = _kept_words(calibrated, eval_samples)
        del session
        external.relocate(quantized, tmp_data.name, data_name)
        with lean(quantized, calls=cfg.pack_weights, avoid=calibrated.source_names,
                  sinusoids=sinusoid_tables_wanted(cfg)):  # the file deliver() writes (pipeline/lean_file.py)
            onnx.save_model(quantized, str(tmp_model))
    log.info("saved %s", out)
    warning = crash_warning(quantized, str(out))
    if warning:  # as deliver says it: our sessions disable the fusion, a user's default session would die
        log.warning("%s", warning)
    timings["total"] = time.perf_counter() - calibrated.started
    result = QuantizationResult(quantized, plan, params, cfg, out, metrics, timings, calibrated.samples, metrics_samples=on)
    log.debug("%s", result.summary())
    return result
