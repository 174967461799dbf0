"""Accuracy floor with repair: a search above the pipeline, run by :func:`onnxptq.api.quantize`.

After :func:`~onnxptq.pipeline.complete.complete` has built a model and judged it against its
format family's floor on held-out samples (:mod:`onnxptq.analysis.floor`), this module acts on a
broken floor:

- ``strict=True``: raise :class:`~onnxptq.errors.AccuracyError` (nothing is written);
- ``repair=False``: warn, and say it in the summary (the figures are not within the floor);
- otherwise (the default) find the nodes responsible and keep them float, rebuilding from the
  same :class:`~onnxptq.pipeline.calibrate.Calibrated` (no second calibration).

**The search** (sensitivity first, then a search in that order; :mod:`.sensitivity`). The
invariant is a set ``K`` of nodes kept float with which the floor holds on a real build; it starts
as every quantized node (the float model, which holds by definition — checked once: a floor that
breaks even then is not the quantizers' doing and is reported so). Then:

1. **ranking, on the switch model** (the all-quantized candidate with each quantized node's
   quantizers behind a boolean input, so any ``K`` is judged by one session run, no build): chunks
   of nodes alone quantized, every other float, breadth first from the halves in graph order — a
   chunk that holds gives its nodes its figure (how far from float, in units of the floor's
   allowance; held-out feeds only), one that breaks is split, down to single nodes. A first cheap
   pass that covers every node early, so a pass the budget stops still ranks them all at some
   grain; nodes with no quantizer of their own come first, unmeasured ones last;
2. **on builds** (:func:`~onnxptq.pipeline.build.build_model`: plan, range guard, solve, emit —
   the same code as the delivered model, so what is measured is what ships), judged on the
   held-out (and calibration) feeds: the longest prefix of that order, least sensitive first, given
   back its formats together that holds — prefixes of 1, 2, 4, … nodes until one breaks, then
   bisection (each prefix that holds is kept at once, so a search the budget stops keeps it);
3. then the bisection over builds on what is kept, least sensitive chunks first: a chunk whose
   return keeps the floor leaves ``K``; a chunk that breaks it is split in two and each half tried
   again; a single node that breaks it stays.

Where the budget cannot let the ranking cover every node (its first run's CPU × the nodes exceeds
its share) or stops it before, steps 2-3 give way to the bisection over builds from every node float
in graph order, as before the switch model, with its eight builds: a prefix grown from one node, or
the switched nodes alone, gave back too little within them where the loss is spread (PP-OCRv4 rec
MXFP8 delivered no MX node).

Where no switch model can be made (no quantized input keeps its float name: a BF16 ``Cast``, integer
kernels) or it breaks with every switched node float, step 3 runs alone over every node in graph
order (the search before the switch model; about ``2k·log2(n)`` builds for ``k`` responsible nodes
among ``n``). Candidates are planned with the node names added to ``nodes_to_exclude``: the node
computes in float and quantizes nothing of its own (the plan's ``skipped_nodes`` then says "kept
float by repair"). Float is the next precision up from every family, so one step suffices.

**Budget**: at most ``repair_budget`` (default 1.0) times the plain quantization's own CPU time
(this process's, so the outcome does not depend on other jobs' load), so
quantize with repair takes at most about twice as long (and at least :data:`MIN_BUDGET_S`, which a
model that quantizes in a fraction of a second needs for a handful of builds, and at least the CPU
of :data:`MIN_TRIALS` candidate builds, the switch-model pass counted by its CPU; that pass gets
what the budget leaves beyond those builds, at least :data:`SWITCH_SHARE` of it; ``repair_budget=0``: no search). ``K`` holds the floor at every step, so a
search stopped by the budget still delivers a model within the floor, only with more nodes float
than needed (the summary says so).

**Saying so**: a WARNING names the nodes and the metric before/after; the same goes into
``result.summary()``, ``result.repair``, the plan JSON (``repair`` and ``kept_float``) and the
CLI's output.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, NamedTuple

import onnx

from ..analysis.decisions import with_decision_outputs
from ..analysis.floor import Verdict, floor_for, measure, unjudged_text
from ..config.schema import QuantConfig
from ..errors import AccuracyError
from ..pipeline.build import build_model
from ..pipeline.calibrate import DEFAULT_EVAL_SAMPLES, Calibrated
from ..pipeline.complete import QuantizationResult, complete
from ..pipeline.guard import GuardValues
from ..memory import release_freed
from ..sessions import open_session
from .sensitivity import SwitchModel, badness, order_by, switch_model

log = logging.getLogger(__name__)

__all__ = ["enforce_floor", "REASON"]

REASON = "kept float by repair (accuracy floor)"
#: The least time a repair may take, whatever the plain quantization took (a small model quantizes
#: in a fraction of a second, less than a handful of candidate builds).
MIN_BUDGET_S = 2.0
#: The least number of candidate builds a search gets, whatever the budget: the plain quantization
#: got cheaper (reused outputs, cached bodies) while a candidate build did not, and a budget of one
#: or two builds delivered PP-OCR rec BFP16 with every node float. Eight builds bisect a plan of a
#: few hundred nodes down to its quarters.
MIN_TRIALS = 8
#: The least share of the budget the switch-model pass gets before the real builds.
SWITCH_SHARE = 0.25
#: A switch-model run's CPU as a share of a build's, at least (measured 1/3-1/2 on the OCR models):
#: a ranking is not tried where its share of the budget holds fewer runs than nodes.
SWITCH_RUN_SHARE = 0.25


def _config_with(cfg: QuantConfig, kept: frozenset[str]) -> QuantConfig:
    return cfg.replace(nodes_to_exclude=tuple(cfg.nodes_to_exclude) + tuple(sorted(kept)))


class _Judge:
    """Builds a candidate (nodes kept float) and judges it on the held-out feeds."""

    def __init__(self, calibrated: Calibrated, cfg: QuantConfig, eval_samples: int = DEFAULT_EVAL_SAMPLES,
                 reads: bool = False) -> None:
        self.calibrated, self.cfg = calibrated, cfg
        self.floor = floor_for(cfg)
        self.readings = calibrated.readings
        self.names = [o.name for o in calibrated.prepared.graph.output]
        self.evaluations = 0
        self.cache: dict[frozenset[str], Verdict] = {}
        # ``reads``: the verdict judged an output as reads, on calibration feeds too (floor._judge_reads),
        # so each candidate is judged on the same first calibration feeds complete() judged.
        self.seen = calibrated.judged_calibration_feeds(eval_samples) if reads and not calibrated.holdout_reused else []

    def __call__(self, kept: frozenset[str]) -> Verdict | None:
        """The candidate's verdict; None when it cannot be built or run (it then counts as broken:
        the search keeps its nodes float rather than deliver a model it could not measure)."""
        if kept in self.cache:
            return self.cache[kept]
        self.evaluations += 1
        try:
            model = build_model(self.calibrated, _config_with(self.cfg, kept)).model
            verdict: Verdict | None = self.run(model)
        except Exception as exc:  # noqa: BLE001 - any failure of one candidate only rules it out
            log.debug("repair: a candidate with %d node(s) kept float failed: %s", len(kept), exc)
            verdict = None
        self.cache[kept] = verdict
        return verdict

    def run(self, model: onnx.ModelProto) -> Verdict:
        # Functions inlined after the basic optimisers (sessions.open_session): a third less session
        # creation per candidate, the same outputs; the delivered model is then judged again by
        # complete()'s finish session, opened as users open it.
        session = self.session(model)
        verdict = self.judge(session)
        del session
        release_freed()  # the candidate's session (onnxptq.memory: peak RSS over many candidates)
        return verdict

    def session(self, model: onnx.ModelProto) -> "_Session":
        """A session on ``model`` (modified: the graph's inner decisions as extra outputs) with
        the names to fetch and the keys they are judged under."""
        names, keys = self.names, list(self.names)
        if self.readings["decisions"]:  # the graph's inner decisions as extra outputs of this throwaway build
            model, extra = with_decision_outputs(model, self.readings["decisions"], copy=False)
            names, keys = names + list(extra), keys + list(extra.values())
        return _Session(open_session(model, log_severity=3, inline_functions_first=False), names, keys)

    def judge(self, run: "_Session", extra: dict[str, Any] | None = None, quick: bool = False) -> Verdict:
        """The verdict of ``run``'s model on the held-out (and judged calibration) feeds, each fed
        ``extra`` too (a switch model's switches); ``quick``: the held-out feeds only (a ranking's
        figure, a fraction of the runs where reads are judged on calibration feeds too)."""
        more = extra or {}
        got = [dict(zip(run.keys, run.session.run(run.names, {**feed, **more}))) for feed in self.calibrated.holdout]
        seen = [dict(zip(self.names, run.session.run(self.names, {**feed, **more}))) for feed in (() if quick else self.seen)]
        return measure(self.calibrated.holdout_outputs, got, self.floor, reused=self.calibrated.holdout_reused,
                       seen=(self.calibrated.float_outputs[:len(seen)], seen) if seen else None, **self.readings)


class _Session(NamedTuple):
    session: Any
    names: list[str]
    keys: list[str]


class _Switched:
    """Judges sets of kept nodes on the switch model (:mod:`.sensitivity`): one run of the held-out
    feeds per set, no build."""

    def __init__(self, judge: _Judge, switches: SwitchModel) -> None:
        self.judge, self.switches = judge, switches
        self.run = judge.session(switches.model)
        self.evaluations = 0
        self.cache: dict[tuple[frozenset[str], bool], Verdict] = {}

    def __call__(self, kept: frozenset[str], quick: bool = False) -> Verdict:
        key = (kept & frozenset(self.switches.switches), quick)
        if key not in self.cache:
            self.evaluations += 1
            self.cache[key] = self.judge.judge(self.run, self.switches.feed(key[0]), quick=quick)
        return self.cache[key]


class _Trials:
    """The search's work against its budget: runs of the switch model first, then real candidate
    builds (``count``) until the CPU deadline — and at least :data:`MIN_TRIALS` builds' worth of
    CPU in all (the switch pass counted by its CPU in builds), as before the switch model."""

    def __init__(self, deadline: float, build_cpu: float) -> None:
        now = time.process_time()
        self.deadline, self.build_cpu, self.count = deadline, max(build_cpu, 1e-3), 0
        self.switch_cpu = 0.0
        #: the switch pass: what the deadline leaves beyond MIN_TRIALS builds, and at least a
        #: quarter of what the search may spend (a ranking of a few chunks is worth more than two builds)
        end = max(deadline, now + MIN_TRIALS * self.build_cpu)
        self.switch_deadline = max(deadline - MIN_TRIALS * self.build_cpu, now + SWITCH_SHARE * (end - now))

    def spent(self) -> bool:
        done = self.count + self.switch_cpu / self.build_cpu
        return time.process_time() > self.deadline and done >= MIN_TRIALS

    def switch_spent(self) -> bool:
        return time.process_time() > self.switch_deadline


def _search(judge: _Judge, candidates: list[str], trials: _Trials,
            kept: frozenset[str] | None = None) -> tuple[frozenset[str], bool]:
    """The bisection over builds (module docstring): chunks of ``candidates``, in their order,
    given back from ``kept`` (which holds the floor; all of them by default): ``(kept,
    finished)``; ``kept`` still holds the floor."""
    kept = frozenset(candidates) if kept is None else kept
    queue: deque[list[str]] = deque()
    mid = len(candidates) // 2
    queue.extend([candidates[:mid], candidates[mid:]] if len(candidates) > 1 else [candidates])
    while queue:
        if trials.spent():
            return kept, False
        chunk = [c for c in queue.popleft() if c in kept]
        if not chunk:
            continue
        trial = kept - frozenset(chunk)
        trials.count += 1
        verdict = judge(trial)
        if verdict is not None and verdict.ok:
            kept = trial
            log.debug("repair: %d node(s) quantized again (%d kept float)", len(chunk), len(kept))
        elif len(chunk) > 1:
            half = len(chunk) // 2
            queue.extend([chunk[:half], chunk[half:]])
    return kept, True


def _largest_holding(holds, order: list[str], lo: int, hi: int, spent) -> tuple[int, bool]:
    """The largest ``m`` in ``[lo, hi)`` with ``holds(order[:m])``, by bisection, given that ``lo``
    holds and ``hi`` does not: ``(m, finished)``; the ``m`` returned was judged to hold."""
    while hi - lo > 1:
        if spent():
            return lo, False
        mid = (lo + hi) // 2
        if holds(order[:mid]):
            lo = mid
        else:
            hi = mid
    return lo, True


def _gallop(holds, order: list[str], spent) -> tuple[int, bool]:
    """The largest ``m`` with ``holds(order[:m])``: prefixes of 1, 2, 4, … until one breaks, then
    bisection between the last that held and it (``m = 0`` holds, the whole order does not). Each
    prefix that holds is kept at once, so a search the budget stops has what it found (a bisection
    from the middle would hold nothing until it converged): ``(m, finished)``."""
    lo, step = 0, 1
    while lo + step < len(order):
        if spent():
            return lo, False
        if not holds(order[:lo + step]):
            return _largest_holding(holds, order, lo, lo + step, spent)
        lo, step = lo + step, step * 2
    return _largest_holding(holds, order, lo, len(order), spent)


def _switch_search(judge: _Judge, switched: _Switched, candidates: list[str],
                   trials: _Trials) -> tuple[frozenset[str], bool, dict[str, Any]] | None:
    """The ranking on the switch model, then the search on builds in that order (module
    docstring): ``(kept, finished, record)``, or None where the switch model breaks the floor with
    every switched node float (its unswitched quantizers alone break it)."""
    start = time.process_time()
    everything = frozenset(candidates)
    nodes = [n for n in candidates if n in switched.switches.switches]
    switchable = frozenset(nodes)
    if not switched(switchable, quick=True).ok:
        trials.switch_cpu += time.process_time() - start
        return None
    ranked = True
    # Too little budget to cover every node at least once as part of a chunk (about 2 runs per node
    # where single nodes break): no ranking at all, the budget is the builds'.
    run_cpu = time.process_time() - start
    affordable = trials.switch_deadline - time.process_time() >= run_cpu * len(nodes)
    # 1. Chunks alone quantized (every other node float), breadth first from the two halves in
    #    graph order: a chunk that holds gives its nodes its figure (in units of the floor's
    #    allowance), one that breaks is split; a single node that breaks gets its figure + 1000.
    #    Stopped by the budget, the chunks still pending stay unmeasured (last in the order).
    sensitivity: dict[str, float] = {}
    pending: deque[list[str]] = deque([nodes[:len(nodes) // 2], nodes[len(nodes) // 2:]] if len(nodes) > 1 else [nodes])
    while pending:
        if not affordable or trials.switch_spent():
            ranked = False
            break
        chunk = pending.popleft()
        if not chunk:
            continue
        verdict = switched(switchable - frozenset(chunk), quick=True)
        if verdict.ok or len(chunk) == 1:
            figure = badness(verdict, judge.floor) + (0.0 if verdict.ok else 1e3)
            sensitivity.update(dict.fromkeys(chunk, figure))
        else:
            pending.extend([chunk[:len(chunk) // 2], chunk[len(chunk) // 2:]])
    trials.switch_cpu += time.process_time() - start
    # Nodes with no quantizer of their own to switch (a Sigmoid between a Conv and its Mul) cost
    # nothing in the switch model: first; unmeasured switchable ones last.
    sensitivity.update(dict.fromkeys((n for n in candidates if n not in switchable), -1.0))
    order = order_by(sensitivity, candidates)
    record = {"switched": len(nodes), "switch_runs": switched.evaluations, "ranked": ranked,
              "switch_cpu_s": round(trials.switch_cpu, 3),
              "most_sensitive": [[n, round(sensitivity[n], 4)] for n in order[::-1] if n in switchable and n in sensitivity][:5]}

    # 2. On builds: the longest prefix of that order (least sensitive first) given back together
    #    that holds, by bisection (every node float holds; every node quantized is the broken model).
    def builds_hold(prefix: list[str]) -> bool:
        trials.count += 1
        v = judge(everything - frozenset(prefix))
        return v is not None and v.ok

    if not ranked:
        # A ranking the budget cut short orders little (most nodes unmeasured): the bisection over
        # builds from every node float in graph order, as before the switch model, with its eight
        # builds (the switch pass not counted against them). Tried instead and measured worse on
        # PP-OCRv4 rec MXFP8 (bench/RESULTS.md, "Repair ordered by sensitivity"): a prefix grown from
        # one node (118 of 181 kept), the nodes without a quantizer of their own given back first
        # or quantized from the start (every Conv float: no MX node left).
        trials.switch_cpu = 0.0
        kept, finished = _search(judge, candidates, trials)
        return kept, finished, {**record, "ranking_cut_short": True}
    m, finished = _gallop(builds_hold, order, trials.spent)
    kept = everything - frozenset(order[:m])
    # 3. Then chunks of what is kept given back, least sensitive first (the bisection over builds).
    if len(kept) > 1:
        kept, done = _search(judge, [n for n in order if n in kept], trials, kept)
        finished = finished and done
    record["prefix"] = m
    return kept, finished and ranked, record


def _repair_search(calibrated: Calibrated, result: QuantizationResult, judge: _Judge, candidates: list[str],
                   trials: _Trials) -> tuple[frozenset[str], bool, dict[str, Any]]:
    """The switch-model search where a switch model can be made and holds with its nodes float,
    else the bisection over builds in graph order."""
    switched = None
    if trials.switch_deadline - time.process_time() < len(candidates) * trials.build_cpu * SWITCH_RUN_SHARE:
        # Too little budget for a ranking to cover every node (a switch run costs a third to a half
        # of a build on trueocr_rec, ddddocr_ocr, PP-OCRv4 rec): not even the switch model is made.
        kept, finished = _search(judge, candidates, trials)
        return kept, finished, {"searched_on": "builds (graph order)", "ranking": "not affordable within the budget"}
    try:
        wanted = set(candidates)
        owners = {name: [c for c in t.consumers if c in wanted] or ([t.producer] if t.producer in wanted else [])
                  for name, t in result.plan.tensors.items()}
        switches = switch_model(calibrated.prepared, result.model, owners)
        switched = _Switched(judge, switches) if switches is not None else None
    except Exception as exc:  # noqa: BLE001 - an evaluation copy that onnxruntime refuses: bisect on builds
        log.debug("repair: no switch model (%s); bisecting on builds", exc)
    found = _switch_search(judge, switched, candidates, trials) if switched is not None else None
    del switched
    release_freed()
    if found is not None:
        return found[0], found[1], {"searched_on": "switch model", **found[2]}
    kept, finished = _search(judge, candidates, trials)
    return kept, finished, {"searched_on": "builds (graph order)"}


def enforce_floor(calibrated: Calibrated, cfg: QuantConfig, result: QuantizationResult, *,
                  eval_samples: int = DEFAULT_EVAL_SAMPLES) -> QuantizationResult:
    """Act on ``result.floor`` as the config says (module docstring); returns the result to deliver."""
    verdict: Verdict | None = result.floor
    for text in verdict.advisories if verdict is not None else ():
        log.warning("accuracy floor on %s: %s", verdict.where(), text)
    if verdict is not None and verdict.ok and verdict.unjudged:
        # Not "holds": the data was too little to judge the arg-max (floor.unjudged_text). Said in the
        # warning, the summary and the plan; nothing to repair against.
        text = unjudged_text(verdict)
        log.warning("accuracy floor (%s) on %s: could NOT judge %s", verdict.floor.describe(), verdict.where(), text)
        result.repair = {"note": f"could not judge {text}", "unjudged": verdict.unjudged, "before": verdict.to_json()}
        result.plan.repair = result.repair
        return result
    if verdict is None or verdict.ok:
        return result
    before = verdict.describe(only_broken=True)
    where = verdict.where()
    if cfg.strict:
        raise AccuracyError(f"{calibrated.source}: the quantized model breaks the accuracy floor ({verdict.floor.describe()}) "
                            f"on {where}: {before} (strict=True; repair=True without strict keeps the responsible "
                            "nodes float instead)", verdict)
    if not cfg.repair:
        log.warning("accuracy floor (%s) BROKEN on %s: %s; repair is off (repair=False / --no-repair), the model is "
                    "delivered as it is", verdict.floor.describe(), where, before)
        result.repair = {"note": "repair is off (repair=False)", "before": verdict.to_json()}
        result.plan.repair = result.repair
        return result

    # CPU seconds of this process, not wall time: on a machine shared with other jobs the wall clock
    # runs ~3-7x faster than our work, and a wall budget made the delivered model depend on the load.
    t0, cpu0 = time.perf_counter(), time.process_time()
    plain = cpu0 - calibrated.started_cpu  # the plain quantization's CPU time, verification included
    budget = max(float(cfg.repair_budget) * plain, MIN_BUDGET_S) if cfg.repair_budget > 0 else 0.0
    candidates = list(result.plan.nodes)
    judge = _Judge(calibrated, cfg, eval_samples, reads=any(c.positions is not None or c.top1_unjudged for c in verdict.outputs.values()))
    calibrated.within = frozenset(result.plan.tensors)  # reset below, however the search ends
    shared_guard = cfg.range_guard and calibrated.guard_values is None
    if shared_guard:
        # Every candidate plans through the range guard on the same float activations: fetched once.
        calibrated.guard_values = GuardValues(calibrated.prepared, calibrated.kept)
    # Dozens of candidate builds: their plan lines, and warnings the first build already gave
    # (bodies no sample ran), would drown the log.
    quiet = {logging.getLogger(result.plan.__class__.__module__): logging.WARNING,
             logging.getLogger("onnxptq.pipeline.coverage"): logging.ERROR,
             logging.getLogger("onnxptq.pipeline.guard"): logging.WARNING}
    levels = {logger: logger.level for logger in quiet}
    for logger, floor_level in quiet.items():
        logger.setLevel(max(floor_level, logger.getEffectiveLevel()))
    try:
        c_build = time.process_time()
        everything = judge(frozenset(candidates))
        build_cpu = time.process_time() - c_build
        if everything is None or not everything.ok:
            figures = everything.describe(only_broken=True) if everything is not None else "it could not be built"
            note = (f"the floor breaks even with every quantized node float ({figures}): "
                    "the loss is not the quantizers' (a structure rule or the float graph itself); nothing kept float")
            log.warning("accuracy floor (%s) BROKEN on %s: %s; %s", verdict.floor.describe(), where, before, note)
            result.repair = {"note": note, "before": verdict.to_json()}
            result.plan.repair = result.repair
            return result
        if budget > 0:
            kept, finished, searched = _repair_search(calibrated, result, judge, candidates, _Trials(cpu0 + budget, build_cpu))
        else:
            kept, finished, searched = frozenset(candidates), False, {}
        search_s = time.perf_counter() - t0
        repaired = complete(calibrated, _config_with(cfg, kept), eval_samples=eval_samples, deliver_now=False)
    finally:
        for logger, level in levels.items():
            logger.setLevel(level)
        calibrated.within = None
        if shared_guard:
            calibrated.guard_values = None
    after: Verdict | None = repaired.floor
    ops = {n.name: n.op_type for n in calibrated.prepared.graph.node}
    order = {name: i for i, name in enumerate(candidates)}
    kept_sorted = sorted(kept, key=lambda n: order.get(n, 0))
    note = None if finished else (f"the search stopped at its budget ({budget:.1f} CPU s = {cfg.repair_budget:g} × the plain "
                                  "quantization): fewer nodes may suffice")
    if kept_sorted and not repaired.plan.nodes:
        # Nothing left quantized: say so in words, not as a successful repair (isbnx's end-to-end
        # YOLO: rows an in-graph TopK orders shuffle under any rounding, compared position by position).
        nothing = ("every quantized node is kept float: the delivered model is not quantized (an output compared "
                   "position by position that any rounding reorders, such as rows an in-graph TopK selects, breaks the floor so)")
        note = f"{note}; {nothing}" if note else nothing
    reasons = {name: f"{REASON}: {before}" for name in kept_sorted}
    for name in kept_sorted:
        repaired.plan.skipped_nodes[name] = REASON
    record = {
        "kept_float": reasons,
        "op_types": {name: ops.get(name, "?") for name in kept_sorted},
        "floor": verdict.floor.to_json(),
        "before": verdict.to_json(),
        "before_text": before,
        "after": after.to_json() if after is not None else None,
        "evaluations": judge.evaluations,
        "search": searched,
        "candidates": len(candidates),
        "seconds": round(search_s, 3),
        "budget_seconds": round(budget, 3),
        "finished": finished,
        **({"note": note} if note else {}),
    }
    repaired.plan.repair = record
    repaired.repair = record
    repaired.config = cfg  # the user's config; the nodes kept float are in the plan and the record
    repaired.timings["repair"] = search_s
    after_text = after.describe() if after is not None else "not measured"
    state = ("STILL BROKEN" if after is None or not after.ok
             else f"holds by cosine, could NOT judge {unjudged_text(after)}" if after.unjudged else "holds")
    log.warning("accuracy floor (%s) broken on %s: %s; repair kept %d of %d node(s) float: %s; after: %s (%s, %d builds, %.1fs)%s",
                verdict.floor.describe(), where, before, len(kept_sorted), len(candidates),
                ", ".join(f"{n} ({ops.get(n, '?')})" for n in kept_sorted[:12]) + (" …" if len(kept_sorted) > 12 else ""),
                after_text, state, judge.evaluations, search_s, f"; {note}" if note else "")
    return repaired
