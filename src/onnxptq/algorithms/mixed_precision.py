"""Automatic mixed precision: keep the sensitive layers in high precision, flip the rest to low.

``auto_mixed_precision(model, high, low, data, target)``:

1. **Calibrate once** (:func:`onnxptq.pipeline.calibrate.calibrate_once`) for the union of the tensors both
   precisions need, so every candidate reuses the same statistics.
2. **Sensitivity**: each layer of ``op_types`` alone in the low precision; its metric is its
   sensitivity. Layers are ranked from the least to the most sensitive.
3. **Greedy flip**: in that order, a layer is flipped to low precision when the model with it
   flipped (on top of those already flipped) still meets the target; otherwise it stays high and
   the search goes on with the next one (the reference tool stops at the first failure; going on
   finds more layers that fit). A last pass re-tries every high layer against the final set, so
   on return no single further layer can be flipped without breaking the target.
4. The final model goes through the normal pipeline end (:func:`onnxptq.pipeline.complete.complete`), and a
   report (which layer got which precision, each sensitivity, baseline and final metric) is
   logged as a table and written as JSON beside the output model.

Metrics (lower is better, as the reference tool's ``MetricDefault``): :class:`L2Target` is the mean
over evaluation samples of ‖float − quantized‖₂ of one output (a feed holding a batch counts each
sample along axis 0); :class:`Top1Target` is the drop ``f(float outputs) − f(quantized outputs)``
of a user evaluation function ``f`` (e.g. top-1 accuracy).

Speed: building an onnxruntime session for a model full of BFP/MX functions costs seconds (it
inlines every function call), so creating one session per candidate dominates a naive search.
Instead one *switch model* holds, for every tensor whose quantizer differs between candidates,
each variant side by side behind a ``Where`` on a boolean graph input; a candidate is evaluated
by feeding the switches its plan selects. Which variant a tensor gets is read from the real plan
of the candidate (``final_plan``, range guard included, + ``solve``), so a switch-model run
computes exactly what the emitted model for that candidate computes; a candidate whose plan holds a variant the switch
model lacks falls back to emitting and running its own model. Candidates run on a thread pool
(onnxruntime releases the GIL; one intra-op thread per run).

Runs are incremental (:class:`~onnxptq.algorithms.suffix_runs.Suffixes`): up to the first node where a candidate's switches
change a data value, it computes what a set already run computed. The switch model is cut at
points spaced by compute, each cut a suffix model fed the tensors live across it; every run keeps
its cut tensors (for the most recently used sets and the all-high set), and a candidate runs from
the latest cut before its divergence from the closest kept set. A sensitivity run starts at its
layer, a greedy run at the layer it adds to the accepted set: on PP-OCRv4 rec about half the
compute of a whole run. The values are the same (same nodes, same inputs).

Evaluation sessions use onnxruntime's basic graph optimizations only, so Q/DQ pairs compute the
format's reference values; a default session may fuse integer Q/DQ into integer kernels whose
rounding differs slightly.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..config.presets import resolve_config
from ..pipeline.build import build_model
from ..pipeline.final_plan import final_plan
from ..pipeline.guard import GuardValues
from ..pipeline.calibrate import Calibrated, calibrate_once
from ..pipeline.complete import QuantizationResult, complete
from ..config.schema import ConfigError, QuantConfig, TensorQuant
from ..pipeline.emit import emit
from ..graph import io
from ..graph.walk import subgraph_nodes
from ..pipeline import plan as planner
from ..pipeline.plan import Plan, TensorPlan
from ..pipeline.solve import QParams, solve
from ..sessions import open_session
from .suffix_runs import NotIncremental, Suffixes, node_costs

log = logging.getLogger(__name__)

#: Layer op types searched by default (the reference tool's TargetOpType default).
DEFAULT_OP_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul")
#: Samples the metric is measured on by default (the first ones of the calibration data).
DEFAULT_AMP_SAMPLES = 16
#: Candidates run incrementally (:class:`~onnxptq.algorithms.suffix_runs.Suffixes`); False runs every candidate through the whole
#: switch model (for comparison in bench/amp.py).
INCREMENTAL = True

LowSpec = tuple[TensorQuant | None, TensorQuant | None]


@dataclass(frozen=True)
class L2Target:
    """Keep the mean L2 distance ‖float − quantized‖₂ of output ``output_index`` at or below ``value``."""

    value: float
    output_index: int = 0

    name = "l2"

    def score(self, reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
        """Mean over samples of the Euclidean norm of the difference."""
        norms = [float(np.linalg.norm((np.asarray(r, np.float64) - np.asarray(o, np.float64)).ravel()))
                 for r, o in zip(_per_sample(reference), _per_sample(outputs))]
        return float(np.mean(norms)) if norms else 0.0


@dataclass(frozen=True)
class Top1Target:
    """Keep ``evaluate(float outputs) − evaluate(quantized outputs)`` at or below ``value``.

    ``evaluate`` receives the list of output ``output_index`` arrays, one per evaluation feed in
    feed order, and returns a score where higher is better (e.g. top-1 accuracy in [0, 1]); the
    target is the tolerated drop. Labels, if any, are the user's to bind into the function.
    """

    value: float
    evaluate: Callable[[list[np.ndarray]], float]
    output_index: int = 0

    name = "top1_drop"

    def score(self, reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
        return float(self.evaluate(reference)) - float(self.evaluate(outputs))


Target = L2Target | Top1Target


def _per_sample(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Split batched outputs into samples along axis 0 (tagged by :meth:`_Evaluator._collect`)."""
    out: list[np.ndarray] = []
    for a in arrays:
        batch = getattr(a, "_amp_batch", None)
        out.extend(list(a) if batch else [a])
    return out


class _Tagged(np.ndarray):
    """An output array that remembers it holds a batch of samples along axis 0."""

    _amp_batch = False


def _tag(a: np.ndarray, batched: bool) -> np.ndarray:
    t = np.asarray(a).view(_Tagged)
    t._amp_batch = batched
    return t


@dataclass
class LayerDecision:
    """One searched layer: its sensitivity and the precision it ended in."""

    name: str
    op_type: str
    sensitivity: float
    rank: int
    precision: str  # "low" or "high"
    activation: str
    weight: str
    #: why the saved model reads this layer's input 0 in float despite ``activation`` (the range
    #: guard or a plan rule kept that tensor float, recorded in the final plan); None when quantized.
    #: The search still flips such a layer: its weight and the rest of its plan follow the choice,
    #: and the metric it measured is that of the model as emitted.
    input_kept_float: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class MixedPrecisionReport:
    """What the search decided and measured."""

    metric: str
    target: float
    output_index: int
    high: str
    low: str
    baseline: float
    all_low: float
    final_metric: float
    layers: list[LayerDecision]
    evaluations: int
    fallbacks: int
    samples: int
    workers: int
    timings: dict[str, float] = field(default_factory=dict)
    #: the user's ``task_metric`` of the float, all-high, final and all-low models, when given
    task_metric: dict[str, float] | None = None

    @property
    def flipped(self) -> list[str]:
        return [layer.name for layer in self.layers if layer.precision == "low"]

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "layers"}
        data["flipped"] = self.flipped
        data["layers"] = [layer.to_json() for layer in self.layers]
        return data

    def table(self) -> str:
        """The per-layer table logged at the end, most sensitive last."""
        width = max([len(layer.name) for layer in self.layers] + [5])
        lines = [f"{'rank':>4}  {'layer':<{width}}  {'op':<13} {'sensitivity':>12}  precision"]
        for layer in sorted(self.layers, key=lambda x: x.rank):
            fmt = f"low ({layer.activation} / {layer.weight})" if layer.precision == "low" else "high"
            if layer.input_kept_float:
                fmt += "; input kept float"
            lines.append(f"{layer.rank:>4}  {layer.name:<{width}}  {layer.op_type:<13} {layer.sensitivity:>12.6g}  {fmt}")
        lines.append(
            f"{self.metric}: target {self.target:g}, all high {self.baseline:.6g}, all low {self.all_low:.6g}, "
            f"final {self.final_metric:.6g}; {len(self.flipped)} of {len(self.layers)} layers low "
            f"({self.evaluations} evaluations on {self.samples} samples, {self.workers} workers)"
        )
        if self.task_metric:
            lines.append("task metric: " + ", ".join(f"{k.replace('_', ' ')} {v:.6g}" for k, v in self.task_metric.items()))
        return "\n".join(lines)


@dataclass
class MixedPrecisionResult:
    """The final quantization plus the search report."""

    result: QuantizationResult
    report: MixedPrecisionReport
    report_path: Path | None = None

    @property
    def model(self) -> onnx.ModelProto:
        return self.result.model


def _low_spec(low: QuantConfig | LowSpec | str) -> LowSpec:
    if isinstance(low, str):
        low = resolve_config(low)
    if isinstance(low, QuantConfig):
        return (low.activation, low.weight)
    if isinstance(low, tuple) and len(low) == 2:
        return low
    raise ConfigError(f"low precision must be a QuantConfig, a preset name or an (activation, weight) pair, not {low!r}")


def _input_kept_float(plan: Plan, tensor: str) -> str | None:
    """Why the final plan leaves a layer's input ``tensor`` float, or None when it quantizes it.

    The range guard (per-channel ranges a per-tensor 8-bit scale flushes, e.g. after a
    squeeze-excitation scale) and the plan's float rules act on the layer's own precision, so a
    flipped layer can end with a float input; the report says so rather than claim ``activation``.
    """
    if not tensor or tensor in plan.tensors:
        return None
    guard = plan.guard.get(tensor)
    if guard is not None and guard.get("action") == "float":
        return f"range guard: {guard.get('reason', 'kept float')}"
    return plan.float_tensors.get(tensor, "not quantized by the final plan")


def _describe(q: TensorQuant | None) -> str:
    return q.describe() if q is not None else "float"


def auto_mixed_precision(
    model: io.ModelLike,
    high: QuantConfig | str,
    low: QuantConfig | LowSpec | str,
    data: Any,
    target: Target,
    output: str | os.PathLike | None = None,
    *,
    op_types: Sequence[str] = DEFAULT_OP_TYPES,
    samples: int = DEFAULT_AMP_SAMPLES,
    workers: int | None = None,
    report_path: str | os.PathLike | None = None,
    task_metric: Callable[[onnx.ModelProto], float] | None = None,
) -> MixedPrecisionResult:
    """Quantize ``model`` in ``high`` precision with as many ``op_types`` layers in ``low`` as ``target`` allows.

    ``high``: the config every layer starts from. ``low``: a config (its activation and weight
    formats are used), a preset name, or an ``(activation, weight)`` pair; a ``None`` side keeps
    the high format. ``data`` is read once (calibration); the first ``samples`` samples measure
    the metric. ``workers``: threads evaluating candidates (default: all cores). The report JSON
    goes to ``report_path``, else beside ``output`` as ``<output>.amp.json``.

    ``task_metric``: optional, not used by the search: a function scoring a model on the user's
    task (e.g. CER of a recogniser on labelled data); it is applied to the float (prepared) model,
    the all-high, the final and the all-low model, and the four values go into the report.
    """
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    high = resolve_config(high)  # the one resolution of this entry point; the pipeline takes the object
    high_cfg = high.replace(dual_quant_nodes=False)
    final_dual = high.dual_quant_nodes
    if high_cfg.bias_correction is None:
        # The search scores candidates on one switch model built from solved parameters; bias
        # correction changes biases per candidate, which that model cannot switch. Automatic bias
        # correction is therefore off here, so the scores are those of the model delivered.
        high_cfg = high_cfg.replace(bias_correction=False)
    elif high_cfg.bias_correction:
        raise ConfigError("automatic mixed precision cannot search with bias correction yet (candidates are scored "
                          "without it); set bias_correction=False (BiasCorrection: False)")
    low_act, low_weight = _low_spec(low)
    if not isinstance(target, (L2Target, Top1Target)):
        raise ConfigError(f"target must be an L2Target or a Top1Target, not {type(target).__name__}")
    if samples < 1:
        raise ConfigError(f"samples must be >= 1, not {samples}")
    workers = max(1, int(workers or os.cpu_count() or 1))
    if output is not None:
        io.check_output_path(output, (model,))

    low_pair = (low_act if low_act is not None else high_cfg.activation, low_weight if low_weight is not None else high_cfg.weight)
    # Statistics for both precisions in one pass: every target layer low is the other extreme.
    all_low_cfg = high_cfg.replace(op_type_overrides={**high_cfg.op_type_overrides, **{op: low_pair for op in op_types}})
    calibrated = calibrate_once(model, high_cfg, data, eval_samples=samples, also_for=[all_low_cfg])
    if not calibrated.kept:
        raise ConfigError("automatic mixed precision needs data: its metric compares float and quantized outputs on samples")
    timings = {"prepare+calibrate": time.perf_counter() - t0}

    # Candidates: the quantized layers of the target op types in the high plan, in graph order.
    # Main graph only: the suffix runs re-execute main-graph nodes; layers inside If/Loop/Scan
    # bodies keep the high format (docs/subgraphs.md).
    selected = set(calibrated.plan.nodes)  # the plan calibration made for high_cfg
    candidates = [n.name for n in calibrated.prepared.graph.node if n.op_type in set(op_types) and n.name in selected]
    in_bodies = sum(1 for n in subgraph_nodes(calibrated.prepared.graph) if n.op_type in set(op_types) and n.name in selected)
    if in_bodies:
        log.info("automatic mixed precision: %d layer(s) inside If/Loop/Scan bodies are not searched (they keep %s)",
                 in_bodies, high_cfg.describe())
    if not candidates:
        where = f"; {in_bodies} are inside If/Loop/Scan bodies, which the search does not cover" if in_bodies else ""
        raise ConfigError(f"no quantized main-graph layer of op types {list(op_types)} to search in this model{where}")

    def config_for(flipped: frozenset[str]) -> QuantConfig:
        overrides = dict(high_cfg.node_overrides)
        overrides.update({name: low_pair for name in flipped})
        return high_cfg.replace(node_overrides=overrides)

    # Hundreds of candidate plans: their per-plan INFO lines would drown the log.
    plan_log = logging.getLogger(planner.__name__)  # the planner package's logger: its modules' loggers inherit its level
    plan_level = plan_log.level
    plan_log.setLevel(max(logging.WARNING, plan_log.getEffectiveLevel()))
    # The search shares one cache of the guard's float activations through ``calibrated`` (see
    # _Evaluator); it is dropped however the search ends, so a failure keeps no activations alive.
    try:
        try:
            flipped, evaluator, baseline, everything, sensitivities, order = _search(calibrated, config_for, candidates, target,
                                                                                     workers, timings)
        finally:
            plan_log.setLevel(plan_level)

        t4 = time.perf_counter()
        final_cfg = config_for(flipped).replace(dual_quant_nodes=final_dual)
        result = complete(calibrated, final_cfg, output, eval_samples=samples)
        final_metric = evaluator.exact(result.model)
        evaluator.close()
        timings["final"] = time.perf_counter() - t4
        task_scores = None
        if task_metric is not None:
            t5 = time.perf_counter()
            final_score = float(task_metric(result.model))

            def score_of(flips: frozenset[str]) -> float:
                if flips == flipped:
                    return final_score
                return float(task_metric(build_model(calibrated, config_for(flips).replace(dual_quant_nodes=final_dual)).model))

            task_scores = {"float": float(task_metric(calibrated.prepared)), "all_high": score_of(frozenset()),
                           "final": final_score, "all_low": score_of(frozenset(candidates))}
            log.info("mixed precision: task metric float %.6g, all high %.6g, final %.6g, all low %.6g", *task_scores.values())
            timings["task metric"] = time.perf_counter() - t5
    finally:
        calibrated.guard_values = None
    timings["total"] = time.perf_counter() - t0
    timings["cpu"] = time.process_time() - cpu0

    rank = {name: i + 1 for i, name in enumerate(order)}
    op_of = {n.name: n.op_type for n in calibrated.prepared.graph.node}
    input_of = {n.name: n.input[0] if n.input else "" for n in calibrated.prepared.graph.node}
    layers = []
    for name in candidates:
        low_here = name in flipped
        high_pair = high_cfg.node_overrides.get(name) or high_cfg.op_type_overrides.get(op_of[name]) or (high_cfg.activation, high_cfg.weight)
        act, weight = low_pair if low_here else high_pair
        layers.append(LayerDecision(name, op_of[name], sensitivities[name], rank[name], "low" if low_here else "high",
                                    _describe(act), _describe(weight), _input_kept_float(result.plan, input_of[name])))
    report = MixedPrecisionReport(
        metric=target.name, target=float(target.value), output_index=target.output_index, high=high_cfg.describe(),
        low=f"activations {_describe(low_pair[0])}, weights {_describe(low_pair[1])}", baseline=baseline,
        all_low=everything, final_metric=final_metric, layers=layers, evaluations=evaluator.evaluations,
        fallbacks=evaluator.fallbacks, samples=len(calibrated.kept), workers=workers, timings=timings,
        task_metric=task_scores,
    )
    log.info("automatic mixed precision:\n%s", report.table())
    if final_metric > target.value and flipped:
        log.warning("mixed precision: the final model measures %.6g > target %g (the search measured it within)",
                    final_metric, target.value)
    path = None
    if report_path is not None or output is not None:
        path = Path(report_path) if report_path is not None else Path(str(output) + ".amp.json")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report.to_json(), indent=2))
        tmp.replace(path)
    return MixedPrecisionResult(result, report, path)


def _search(calibrated: Calibrated, config_for: Callable[[frozenset[str]], QuantConfig], candidates: list[str],
            target: Target, workers: int, timings: dict[str, float]):
    """Sensitivity analysis then the greedy flip; returns the flipped set and what was measured."""
    t1 = time.perf_counter()
    evaluator = _Evaluator(calibrated, config_for, candidates, target, workers, incremental=INCREMENTAL)
    timings["switch model"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    empty: frozenset[str] = frozenset()
    all_low = frozenset(candidates)
    baseline, everything = evaluator.many([empty, all_low])
    sensitivities = dict(zip(candidates, evaluator.many([frozenset([c]) for c in candidates])))
    order = sorted(candidates, key=lambda c: (sensitivities[c], candidates.index(c)))
    timings["sensitivity"] = time.perf_counter() - t2
    log.info("mixed precision: %s all high %.6g, all low %.6g, target %g; %d layers ranked by sensitivity",
             target.name, baseline, everything, target.value, len(candidates))

    t3 = time.perf_counter()
    if baseline > target.value:
        log.warning("mixed precision: the all-high model already misses the target (%s %.6g > %g): nothing is flipped",
                    target.name, baseline, target.value)
        flipped: frozenset[str] = empty
    elif everything <= target.value:
        flipped = all_low
    else:
        flipped = _greedy(evaluator, order, target.value, workers)
    timings["greedy"] = time.perf_counter() - t3
    return flipped, evaluator, baseline, everything, sensitivities, order


def _greedy(evaluator: "_Evaluator", order: list[str], target: float, workers: int) -> frozenset[str]:
    """Flip layers least-sensitive first while the target holds; skip those that break it.

    Exactly the sequential rule, evaluated ``workers`` candidates at a time by speculation: after
    an accepted layer the next batch assumes the following ones pass too (prefixes), after a
    rejected one it assumes they fail (each alone on the current set); only results whose
    assumption held are used. A final sweep re-tries every high layer against the final set.
    """
    flipped: frozenset[str] = frozenset()
    pending = list(order)
    last_accepted = True
    while pending:
        batch = pending[:workers]
        if last_accepted:
            sets = [flipped | frozenset(batch[: i + 1]) for i in range(len(batch))]
        else:
            sets = [flipped | {c} for c in batch]
        scores = evaluator.many(sets)
        used = 0
        for i, (cand, score) in enumerate(zip(batch, scores)):
            ok = score <= target
            if last_accepted:
                used = i + 1
                if ok:
                    flipped = sets[i]
                    log.debug("mixed precision: flipped %s (%.6g)", cand, score)
                else:
                    last_accepted = False
                    break
            else:
                used = i + 1
                if ok:
                    flipped = sets[i]
                    last_accepted = True
                    log.debug("mixed precision: flipped %s (%.6g)", cand, score)
                    break
        pending = pending[used:]
    # Final sweep: the property "no single further layer fits" on the set returned.
    while True:
        rest = [c for c in order if c not in flipped]
        if not rest:
            break
        scores = evaluator.many([flipped | {c} for c in rest])
        fits = [c for c, s in zip(rest, scores) if s <= target]
        if not fits:
            break
        flipped = flipped | {fits[0]}
        log.debug("mixed precision: final sweep flipped %s", fits[0])
    return flipped


def _arr_key(a: Any) -> tuple | None:
    if a is None:
        return None
    a = np.asarray(a)
    return (a.dtype.str, a.shape, a.tobytes())


def _variant_key(tplan: TensorPlan | None, qp: QParams | None) -> tuple | None:
    """What decides the emitted quantizer of a tensor: role, format, axis, scale, zero point."""
    if tplan is None:
        return None
    return (tplan.role, tplan.quant, tplan.axis, _arr_key(qp.scale if qp else None), _arr_key(qp.zero_point if qp else None))


class _Evaluator:
    """Scores candidate flip sets on the kept samples through one switch model (see module doc)."""

    def __init__(self, calibrated: Calibrated, config_for: Callable[[frozenset[str]], QuantConfig],
                 candidates: list[str], target: Target, workers: int, incremental: bool = True) -> None:
        self.calibrated = calibrated
        self.prepared = calibrated.prepared
        self.config_for = config_for
        self.target = target
        self.workers = workers
        self.evaluations = 0
        self.fallbacks = 0
        self.feeds = calibrated.kept
        if calibrated.guard_values is None:
            # Every candidate plan goes through the range guard on the same float activations:
            # fetched once, shared (auto_mixed_precision lets them go when the search is done).
            calibrated.guard_values = GuardValues(calibrated.prepared, calibrated.kept)
        self.cache: dict[frozenset[str], float] = {}
        self._flags_cache: dict[frozenset[str], dict[str, np.ndarray] | None] = {}
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
        n_outputs = len(self.prepared.graph.output)
        if not 0 <= target.output_index < n_outputs:
            raise ConfigError(f"output index {target.output_index} is out of range: the model has {n_outputs} outputs")
        float_sess = self._session(self.prepared)
        self.output_name = float_sess.get_outputs()[target.output_index].name
        self.stacked = _stack(self.feeds)
        self.reference: list[np.ndarray] | None = None
        if self.stacked is not None:
            # One run over all samples instead of one per feed (several times faster on small
            # models); only when the model takes the stacked batch and gives one row per sample.
            try:
                out = float_sess.run([self.output_name], self.stacked[0])[0]
                if np.ndim(out) == 0 or out.shape[0] != sum(self.stacked[1]):
                    self.stacked = None
                else:
                    self.reference = self._collect([out])
            except Exception:  # noqa: BLE001 - a fixed batch size: run per feed
                self.stacked = None
        if self.reference is None:
            self.reference = self._outputs(float_sess)
        if isinstance(target, L2Target):  # converted once, not at every score
            self.reference = [_tag(np.asarray(r, np.float64), bool(r._amp_batch)) for r in self.reference]

        # Variants per tensor, seeded from all-high, all-low and every single flip.
        seeds = [frozenset(), frozenset(candidates)] + [frozenset([c]) for c in candidates]
        solved = list(self.pool.map(self._plan, seeds))
        self.high_plan, self.high_params = solved[0]
        self.variants: dict[str, list[tuple | None]] = {}
        self.entries: dict[str, list[tuple[TensorPlan | None, QParams | None]]] = {}
        for plan, params in solved:
            for name in set(plan.tensors) | set(self.variants):
                tplan = plan.tensors.get(name)
                key = _variant_key(tplan, params.get(name))
                known = self.variants.setdefault(name, [])
                entries = self.entries.setdefault(name, [])
                if not known:
                    # index 0 is the all-high variant
                    high_t = self.high_plan.tensors.get(name)
                    known.append(_variant_key(high_t, self.high_params.get(name)))
                    entries.append((high_t, self.high_params.get(name)))
                if key not in known:
                    known.append(key)
                    entries.append((tplan, params.get(name)))
        self.index = {name: {key: i for i, key in enumerate(keys)} for name, keys in self.variants.items()}
        self.switched = {name for name, keys in self.variants.items() if len(keys) > 1}
        model = self._switch_model()
        for flipped, got in zip(seeds, solved):
            self._flags_cache[flipped] = self._flags(*got)
        self.session = None
        self.suffixes: Suffixes | None = None
        t = time.perf_counter()
        if incremental:
            flags = self._flags_cache[frozenset()]
            try:
                costs = node_costs(self.prepared, self._units()[0], self._session)
                self.suffixes = Suffixes(model, target.output_index, self._units(), sorted(flags), self._session, self.pool,
                                          costs=costs, min_kept=workers + 2)
            except NotIncremental as exc:
                log.info("mixed precision: candidates run the whole switch model (%s)", exc)
            else:
                # The all-high set runs whole: its cut tensors are the first base of every candidate.
                self.cache[frozenset()] = self._score_outputs(self._collect(self.suffixes.run(frozenset(), flags, pin=True)))
                self.evaluations += 1
                self.suffixes.build_sessions()
                log.info("mixed precision: switch model with %d switched tensors, cut at %d points (%.1f MiB of cut "
                         "tensors per set kept, up to %d sets kept); sessions in %.2fs", len(self.switched),
                         len(self.suffixes.cuts) - 1, self.suffixes.entry_bytes / 2**20, self.suffixes.capacity,
                         time.perf_counter() - t)
        if self.suffixes is None:
            self.session = self._session(model)
            log.info("mixed precision: switch model with %d switched tensors, session in %.2fs",
                     len(self.switched), time.perf_counter() - t)

    def _session(self, model: onnx.ModelProto):
        # One thread each (the pool runs several), basic optimisation (fast to create), and no
        # arena: up to MAX_CUTS + 3 sessions live at once, and an arena each would keep each
        # one's peak (GBs on PP-OCR rec).
        return open_session(model, threads=1, inter_op_threads=1, optimization="basic", memory_arena=False)

    def _plan(self, flipped: frozenset[str]) -> tuple[Plan, dict[str, QParams]]:
        cfg = self.config_for(flipped)
        plan = final_plan(self.calibrated, cfg)  # the guard's decisions, as the delivered model gets them
        return plan, solve(self.prepared, plan, self.calibrated.stats, moving_average=cfg.calibration.moving_average,
                           weight_minmse=cfg.weight_minmse)

    def _flags(self, plan: Plan, params: dict[str, QParams]) -> dict[str, np.ndarray] | None:
        """Switch inputs selecting this plan's variants; None when the switch model lacks one."""
        if set(plan.tensors) - set(self.variants):
            return None
        flags: dict[str, np.ndarray] = {}
        for name, keys in self.variants.items():
            i = self.index[name].get(_variant_key(plan.tensors.get(name), params.get(name)))
            if i is None:
                return None
            for j in range(1, len(keys)):
                flags[_flag_name(name, j)] = np.array(i == j)
        return flags

    def _switch_model(self) -> onnx.ModelProto:
        """The prepared model with every switched tensor's variants side by side behind Where nodes."""
        model = onnx.ModelProto()
        model.CopyFrom(self.prepared)
        graph = model.graph
        inits = {t.name: t for t in graph.initializer}
        types = {v.name: v.type for v in list(graph.value_info) + list(graph.input) + list(graph.output)}
        plan_tensors: dict[str, TensorPlan] = {}
        params: dict[str, QParams] = {}
        for name, tplan in self.high_plan.tensors.items():
            if name not in self.switched:
                plan_tensors[name] = tplan
                if name in self.high_params:
                    params[name] = self.high_params[name]
        after: dict[str, list[onnx.NodeProto]] = {}  # producer node name ('' = top) -> nodes to add
        selected: dict[str, str] = {}
        for name in sorted(self.switched):
            producer = next((n.name for n in graph.node if name in n.output), "")
            branch_names = []
            for i, (tplan, qp) in enumerate(self.entries[name]):
                branch = f"{name}__amp{i}"
                if name in inits:
                    copy = onnx.TensorProto()
                    copy.CopyFrom(inits[name])
                    copy.name = branch
                    graph.initializer.append(copy)
                else:
                    after.setdefault(producer, []).append(helper.make_node("Identity", [name], [branch], name=f"{branch}_Identity"))
                    if name in types:
                        graph.value_info.append(helper.make_value_info(branch, types[name]))
                if tplan is not None:
                    plan_tensors[branch] = replace(tplan, name=branch, consumers=[], producer_quant=None)
                    if qp is not None:
                        params[branch] = qp
                branch_names.append(branch)
            current = branch_names[0]
            for j in range(1, len(branch_names)):
                flag = _flag_name(name, j)
                graph.input.append(helper.make_tensor_value_info(flag, onnx.TensorProto.BOOL, []))
                out = f"{name}__ampsel{j}"
                after.setdefault(producer, []).append(helper.make_node("Where", [flag, branch_names[j], current], [out], name=f"{out}_Where"))
                current = out
            selected[name] = current
        # Rewire every reader of a switched tensor to its selection, then place the new nodes.
        new_nodes = list(after.get("", []))
        for node in graph.node:
            for i, inp in enumerate(node.input):
                if inp in selected:
                    node.input[i] = selected[inp]
            new_nodes.append(node)
            new_nodes.extend(after.get(node.name, []))
        for out in graph.output:
            if out.name in selected:
                out.name = selected[out.name]
        del graph.node[:]
        graph.node.extend(new_nodes)
        cfg = self.config_for(frozenset())
        plan = Plan(tensors=plan_tensors, nodes=self.high_plan.nodes)
        return emit(model, plan, params, fold_weights=cfg.fold_weights, store_int_weights=cfg.store_int_weights,
                    bf16_qdq_to_cast=cfg.bf16_qdq_to_cast, pack_weights=cfg.pack_weights,
                    weight_runtime=cfg.weight_runtime)

    def _score_outputs(self, outputs: list[np.ndarray]) -> float:
        return self.target.score(self.reference, outputs)

    def _evaluate(self, flipped: frozenset[str]) -> float:
        flags = self._flags_cache.get(flipped)
        if flags is None:
            flags = self._flags(*self._plan(flipped))
        if flags is None:
            # A variant the switch model lacks: emit this candidate's own model (exact, slower).
            self.fallbacks += 1
            model = build_model(self.calibrated, self.config_for(flipped)).model
            return self.exact(model)
        if self.suffixes is not None:
            return self._score_outputs(self._collect(self.suffixes.run(flipped, flags)))
        return self._score_outputs(self._outputs(self.session, flags))

    def _units(self) -> list[dict[str, np.ndarray]]:
        """The feeds one evaluation runs: the stacked batch, or every kept feed."""
        return [self.stacked[0]] if self.stacked is not None else list(self.feeds)

    def _collect(self, outs: list[np.ndarray]) -> list[np.ndarray]:
        """Per-unit outputs (see :meth:`_units`) as one tagged array per feed, in feed order."""
        if self.stacked is None:
            tagged = []
            for feed, out in zip(self.feeds, outs):
                first = next(iter(feed.values()))
                tagged.append(_tag(out, np.ndim(first) > 0 and np.ndim(out) > 0 and first.shape[0] > 1
                                   and out.shape[0] == first.shape[0]))
            return tagged
        sizes = self.stacked[1]
        pieces = np.split(outs[0], np.cumsum(sizes)[:-1])
        return [_tag(p, n > 1) for p, n in zip(pieces, sizes)]

    def _outputs(self, session, extra: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Output ``output_index`` per feed (feed order), from one stacked run when possible."""
        name = session.get_outputs()[self.target.output_index].name
        return self._collect([session.run([name], {**unit, **(extra or {})})[0] for unit in self._units()])

    def exact(self, model: onnx.ModelProto) -> float:
        """The metric of a real emitted model (same session settings as the search)."""
        return self._score_outputs(self._outputs(self._session(model)))

    def many(self, sets: Sequence[frozenset[str]]) -> list[float]:
        """Scores of several candidate sets, in parallel, cached."""
        todo = [s for s in dict.fromkeys(sets) if s not in self.cache]
        for s, score in zip(todo, self.pool.map(self._evaluate, todo)):
            self.cache[s] = score
            self.evaluations += 1
        return [self.cache[s] for s in sets]

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.suffixes = None  # its sessions and kept tensors
        self.session = None


def _stack(feeds: list[dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], list[int]] | None:
    """All feeds concatenated along axis 0 and each feed's row count; None when shapes differ."""
    names = list(feeds[0])
    for feed in feeds:
        if list(feed) != names:
            return None
        for n in names:
            a, b = np.asarray(feed[n]), np.asarray(feeds[0][n])
            if a.ndim == 0 or a.shape[1:] != b.shape[1:] or a.dtype != b.dtype:
                return None
    sizes = [int(np.asarray(feed[names[0]]).shape[0]) for feed in feeds]
    if any(int(np.asarray(feed[n]).shape[0]) != size for feed, size in zip(feeds, sizes) for n in names):
        return None
    return {n: np.concatenate([np.asarray(feed[n]) for feed in feeds]) for n in names}, sizes


def _flag_name(tensor: str, j: int) -> str:
    return f"amp_switch::{tensor}::{j}"


def quantize_auto(model: io.ModelLike, config: QuantConfig, data: Any, output: str | os.PathLike | None = None,
                  *, report_path: str | os.PathLike | None = None) -> MixedPrecisionResult:
    """Run the search a config asks for (``QuantConfig.auto_mixed_precision``): what
    :func:`onnxptq.api.quantize` and the compatible API call."""
    options = config.auto_mixed_precision
    if options is None:
        raise ConfigError("quantize_auto needs a config with auto_mixed_precision set")
    target: Target
    if options.l2_target is not None:
        target = L2Target(options.l2_target, options.output_index)
    else:
        target = Top1Target(float(options.top1_target), options.evaluate, options.output_index)
    return auto_mixed_precision(model, config.replace(auto_mixed_precision=None), (options.activation, options.weight),
                                data, target, output, op_types=options.op_types, samples=options.samples,
                                workers=options.workers, report_path=report_path)
