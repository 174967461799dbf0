"""``quantize(model, config, data) -> QuantizationResult``: the one entry point of the pipeline.

load → check → prepare → plan → calibrate → solve → emit → finish → save → report. Each step is a
function of the previous step's output; nothing reaches back. The compatible API
(:mod:`onnxptq.compat`), the CLI and the tools all end up here.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import onnx

from .calibration import readers
from .config.presets import get_preset
from .config.schema import QuantConfig
from .emit import emit
from .solve import QParams
from .graph import check, io
from .graph.passes import prepare
from .plan import Plan, make_plan
from .solve import solve

log = logging.getLogger(__name__)

#: Samples kept in memory during calibration to measure the quantized model against the float one.
#: Bounded, so memory stays flat however long the calibration data is.
DEFAULT_EVAL_SAMPLES = 8


class NothingToQuantizeError(ValueError):
    """The configuration selects no tensor of the model."""


@dataclass
class QuantizationResult:
    """What a quantization produced: the model, the decisions, the figures."""

    model: onnx.ModelProto
    plan: Plan
    params: dict[str, QParams]
    config: QuantConfig
    output_path: Path | None = None
    #: per graph output: cosine similarity, L2 loss, MSE and PSNR vs the float model (metrics.py)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    calibration_samples: int = 0

    def summary(self) -> str:
        lines = [f"quantized {len(self.plan.nodes)} nodes, {len(self.plan.tensors)} tensors: {self.config.describe()}"]
        for out, m in self.metrics.items():
            lines.append(f"  output {out}: cosine {m['cosine']:.6f}  L2 {m['l2']:.3e}  PSNR {m['psnr']:.2f} dB")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f}s" for k, v in self.timings.items()))
        return "\n".join(lines)


def _resolve_config(config: QuantConfig | str) -> QuantConfig:
    if isinstance(config, QuantConfig):
        return config
    if isinstance(config, str):
        return get_preset(config)
    raise TypeError(f"config must be a QuantConfig or a preset name, not {type(config).__name__}")


def _source_name(model: Any) -> str:
    return str(model) if not isinstance(model, onnx.ModelProto) else (model.graph.name or "<ModelProto>")


def quantize(
    model: io.ModelLike,
    config: QuantConfig | str = "A8W8",
    data: Any = None,
    output: str | os.PathLike | None = None,
    *,
    eval_samples: int = DEFAULT_EVAL_SAMPLES,
    report_path: str | os.PathLike | None = None,
) -> QuantizationResult:
    """Quantize ``model`` as ``config`` says, calibrating on ``data``; save to ``output`` if given.

    ``data``: an object with ``get_next()`` (onnxruntime CalibrationDataReader), an iterable of
    feed dicts, a folder of .npy/.npz files, a .npz keyed by input name, or an array for a
    single-input model. It is read once, streaming. The first ``eval_samples`` samples are also
    used to report how far the quantized outputs are from the float ones; with ``report_path``
    the same samples give a per-tensor error report there (HTML, JSON beside it; see
    :mod:`onnxptq.report`).
    """
    cfg = _resolve_config(config)
    if report_path is not None and (data is None or eval_samples < 1):
        raise ValueError(f"{_source_name(model)}: report_path needs data and eval_samples >= 1 (the report compares the models on samples)")
    if output is not None:
        io.check_output_path(output, (model,))
    if cfg.auto_mixed_precision is not None:
        from .algorithms.mixed_precision import quantize_auto

        return quantize_auto(model, cfg, data, output).result
    calibrated = calibrate_once(model, cfg, data, eval_samples=eval_samples)
    return complete(calibrated, cfg, output, eval_samples=eval_samples, report_path=report_path)


@dataclass
class Calibrated:
    """The pipeline up to calibration, done once: the prepared model, its statistics, kept samples.

    :func:`complete` turns it into a quantized model for any config whose planned activations the
    statistics cover, so a search over configs (automatic mixed precision) calibrates only once.
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


def calibrate_once(model: io.ModelLike, config: QuantConfig | str, data: Any, *, eval_samples: int = DEFAULT_EVAL_SAMPLES,
                   also_for: Sequence[QuantConfig] = ()) -> Calibrated:
    """load → check → prepare → plan → calibrate. Statistics cover the activations ``config`` plans
    and those of every config in ``also_for`` (same preparation settings as ``config``)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    cfg = _resolve_config(config)
    source = _source_name(model)
    proto = io.load_model(model)
    check.check_model(proto, source)
    inputs = readers.ModelInputs.from_model(proto)

    prepared = prepare(proto, opset=max(cfg.opset or 0, io.TARGET_OPSET, _opset(proto)),
                       fold_batchnorm=cfg.fold_batchnorm, fold_constants=cfg.optimize)
    timings["prepare"] = time.perf_counter() - t0

    plan = make_plan(prepared, cfg)
    if not plan.tensors:
        raise NothingToQuantizeError(
            f"{source}: the configuration quantizes nothing (no node of a quantizable op type with float tensors; "
            f"op types present: {sorted({n.op_type for n in prepared.graph.node})})"
        )
    plans = [plan] + [make_plan(prepared, other) for other in also_for]

    t1 = time.perf_counter()
    kept: list[dict[str, np.ndarray]] = []
    float_outputs: list[dict[str, np.ndarray]] = []
    stats: dict[str, Any] = {}
    samples = 0
    if data is not None or any(p.needs_calibration() for p in plans):
        if data is None:
            raise ValueError(
                f"{source}: {len(plan.needs_calibration())} activations need calibration data "
                f"({cfg.activation.describe() if cfg.activation else ''}); pass data="
            )
        feeds = readers.as_feed_iterator(data, inputs, batch_size=cfg.calibration.batch_size)
        if cfg.calibration.data_size is not None:
            feeds = itertools.islice(feeds, cfg.calibration.data_size)
        # Fast finetuning trains on calibration samples: keep up to its DataSize of them (bounded).
        feeds, counter = _keep_first(feeds, kept, max(eval_samples, cfg.finetune.max_samples) if cfg.finetune else eval_samples)
        stats = _calibrate(prepared, plans, feeds, cfg, float_outputs=float_outputs, eval_samples=eval_samples)
        samples = counter()
        if samples == 0:
            raise ValueError(f"{source}: the calibration data is empty (the reader yielded no sample)")
    timings["calibrate"] = time.perf_counter() - t1
    return Calibrated(source, prepared, stats, kept, samples, timings, t0, float_outputs)


def build_model(calibrated: Calibrated, cfg: QuantConfig) -> tuple[Plan, dict[str, QParams], onnx.ModelProto]:
    """plan → solve → refine → emit on calibrated statistics (no checks, no session: see :func:`complete`)."""
    prepared = calibrated.prepared
    plan = make_plan(prepared, cfg)
    params = solve(prepared, plan, calibrated.stats)
    weights = prepared
    if cfg.finetune is not None:
        from .algorithms.finetune import refine, with_weights

        t = time.perf_counter()
        weights = with_weights(prepared, refine(prepared, plan, params, calibrated.kept, cfg.finetune))
        calibrated.timings["refine"] = time.perf_counter() - t
    quantized = emit(weights, plan, params, fold_weights=cfg.fold_weights, store_int_weights=cfg.store_int_weights,
                     bf16_qdq_to_cast=cfg.bf16_qdq_to_cast, fold_relu=cfg.fold_relu)
    return plan, params, quantized


def complete(calibrated: Calibrated, config: QuantConfig | str, output: str | os.PathLike | None = None, *,
             eval_samples: int = DEFAULT_EVAL_SAMPLES, report_path: str | os.PathLike | None = None) -> QuantizationResult:
    """solve → refine → emit → finish → evaluate → save → report for one config, on calibrated data."""
    cfg = _resolve_config(config)
    source, prepared, kept = calibrated.source, calibrated.prepared, calibrated.kept
    timings = dict(calibrated.timings)
    t2 = time.perf_counter()
    plan, params, quantized = build_model(calibrated, cfg)
    timings.update({k: v for k, v in calibrated.timings.items() if k == "refine"})
    quantized, session = finish(quantized, source)
    timings["emit"] = time.perf_counter() - t2

    metrics = {}
    if kept:
        t3 = time.perf_counter()
        from .evaluate import compare_models

        # The float side comes from the calibration runs and the quantized session from finish():
        # no model is run or loaded twice (was 1.1 s of a 4.5 s A8W8 quantization of PP-OCRv4 rec).
        metrics = compare_models(prepared, quantized, kept[:eval_samples], candidate_session=session,
                                 reference_outputs=calibrated.float_outputs[:eval_samples])
        timings["evaluate"] = time.perf_counter() - t3
    if report_path is not None:
        t4 = time.perf_counter()
        from .report import compute_report, write_report

        write_report(compute_report(prepared, quantized, kept[:eval_samples], plan=plan, float_label=source,
                                    quant_label=str(output) if output is not None else "<quantized>"), report_path)
        timings["report"] = time.perf_counter() - t4
    saved = None
    if output is not None:
        saved = io.save_model(quantized, output)
    timings["total"] = time.perf_counter() - calibrated.started
    result = QuantizationResult(quantized, plan, params, cfg, saved, metrics, timings, calibrated.samples)
    log.info("%s", result.summary())
    return result


def _opset(model: onnx.ModelProto) -> int:
    return next((i.version for i in model.opset_import if i.domain in ("", "ai.onnx")), io.TARGET_OPSET)


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


def _calibrate(model: onnx.ModelProto, plans: Plan | Sequence[Plan], feeds: Iterable[dict[str, np.ndarray]],
               cfg: QuantConfig, *, float_outputs: list[dict[str, np.ndarray]] | None = None,
               eval_samples: int = 0) -> dict[str, Any]:
    """One streaming pass: a collector per planned activation that needs statistics (first plan wins
    where several plans need the same tensor). ``float_outputs`` receives the model's outputs on
    the first ``eval_samples`` feeds."""
    from .calibration import collectors, runner

    wanted: dict[str, Any] = {}
    for plan, name in [(p, n) for p in ([plans] if isinstance(plans, Plan) else plans) for n in p.needs_calibration()]:
        if name in wanted:
            continue
        tplan = plan.tensors[name]
        # A dual-quant boundary whose consumer side needs no statistics calibrates for its producer side.
        quant = tplan.quant if tplan.quant.needs_calibration or tplan.producer_quant is None else tplan.producer_quant
        if quant.per_channel and tplan.axis is not None:
            wanted[name] = functools.partial(collectors.PerChannelMinMaxCollector, tplan.axis)
            continue
        spec: dict[str, Any] = {"method": quant.calibration, "symmetric": quant.symmetric}
        if quant.calibration == "percentile":
            spec["percentile"] = quant.percentile
        if cfg.calibration.num_bins is not None:
            spec["num_bins"] = cfg.calibration.num_bins
        wanted[name] = spec
    if not wanted:
        # Nothing needs statistics, but the feeds still validate the data and give eval samples.
        for _ in feeds:
            pass
        return {}
    return runner.collect(model, wanted, feeds, providers=tuple(cfg.calibration.providers), progress=cfg.calibration.progress,
                          model_outputs=float_outputs, model_output_batches=eval_samples)


def finish(model: onnx.ModelProto, source: str):
    """Pin versions, run the checker, and open a real onnxruntime session: what we ship must load.

    Returns ``(model, session)``; the session is reused for the report, because creating one for a
    model full of embedded functions costs seconds (onnxruntime inlines and optimises them).
    """
    import onnxruntime as ort

    io.pin_versions(model)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise RuntimeError(f"{source}: the quantized model fails the ONNX checker (a bug in onnxptq): {exc}") from exc
    try:
        # Default options, as users open it: onnxruntime's QDQ fusions run at session creation
        # and reject some valid Q/DQ layouts (e.g. per-channel scales into a QLinearMul).
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise RuntimeError(f"{source}: onnxruntime cannot load the quantized model (a bug in onnxptq): {exc}") from exc
    return model, session
