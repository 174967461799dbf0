"""``quantize(model, config, data) -> QuantizationResult``: the one entry point of the pipeline.

load → check → prepare → plan → calibrate → solve → emit → finish → save → report. The stages live
in :mod:`onnxptq.pipeline`; this module only chooses between the one-config path and the automatic
mixed-precision search. The compatible API (:mod:`onnxptq.compat`), the CLI and the tools all end
up here. The stages themselves are imported from their homes (``onnxptq.pipeline.calibrate``,
``.build``, ``.complete``); this module re-exports nothing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from .config.presets import resolve_config
from .config.schema import QuantConfig
from .graph import external, io
from .graph.programs import as_model
from .pipeline.calibrate import DEFAULT_EVAL_SAMPLES, DEFAULT_HOLDOUT, calibrate_once, source_name
from .pipeline.complete import QuantizationResult, complete, deliver, streaming_report_error
from .sessions import custom_op_libraries

__all__ = ["quantize"]


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
    single-input model. It is read once, streaming. The result's figures (``result.metrics``: per
    output cosine, L2, MSE, PSNR against the float model) are taken on the samples the accuracy
    floor judges; without a floor, on the first ``eval_samples`` samples, which ``report_path``'s
    per-tensor error report (HTML, JSON beside it; see :mod:`onnxptq.analysis.report`) also uses.

    The accuracy floor (docs/accuracy.md; with data, on every path but the streaming one): of the
    first 24 samples every third is held out of calibration (8; from smaller data a third of it;
    with fewer than 12 samples none, and the first 8 are judged *and* calibrated on, which the
    summary says), the result is judged on them against its format family's floor (and where a share
    holds but the first 8 cannot confirm it, again with every third of the next samples, up to 56
    more, held out beside them: pipeline/second_look.py; data of 46 samples or more), and where the
    floor breaks the responsible nodes are kept float (a WARNING, the summary and the plan name
    them; ``config.repair=False`` only warns). ``config.strict`` raises
    :class:`~onnxptq.errors.AccuracyError` instead.

    A model given by path whose external data reaches
    :data:`onnxptq.graph.external.STREAM_THRESHOLD` is quantized into ``output`` without its
    weights ever entering a protobuf message (peak memory about onnxruntime's one copy of them;
    the result's model then points at ``<output>.data``); see :mod:`onnxptq.graph.external`.
    """
    model = as_model(model)  # torch.onnx.export(..., dynamo=True)'s ONNXProgram: its ModelProto
    cfg = resolve_config(config)
    if report_path is not None and (data is None or eval_samples < 1):
        raise ValueError(f"{source_name(model)}: report_path needs data and eval_samples >= 1 (the report compares the models on samples)")
    _check_paths(model, data, output, report_path)
    stream = external.should_stream(model, output)
    if stream and report_path is not None:
        raise streaming_report_error(source_name(model))  # before any work, not after calibrating
    with custom_op_libraries(cfg.calibration.custom_op_libraries), \
            (external.streaming(Path(model).parent) if stream else contextlib.nullcontext()):
        if cfg.auto_mixed_precision is not None:
            from .algorithms.mixed_precision import quantize_auto

            return quantize_auto(model, cfg, data, output).result
        floor = data is not None and not stream  # judged always; repaired unless repair=False
        # The streaming path holds the same samples out (the same statistics as in memory) but
        # does not judge: its one session on the saved files is its only copy of the weights.
        calibrated = calibrate_once(model, cfg, data, eval_samples=eval_samples,
                                    holdout=DEFAULT_HOLDOUT if data is not None else 0, measure_holdout=floor)
        if not floor:
            return complete(calibrated, cfg, output, eval_samples=eval_samples, report_path=report_path)
        # The accuracy floor (algorithms/repair.py): judge on held-out samples, repair or raise, then write.
        from .algorithms.repair import enforce_floor
        from .pipeline.emit import ConstantReuse
        from .pipeline.second_look import second_look

        # The plain build's bias corrections (one probe of every layer) serve repair's candidates.
        # Its rounded weights are not kept: every quantize whose floor holds would hold a copy of
        # them, for no measured gain where repair acts (bench/RESULTS.md "Repair's cost, third round").
        reuse = ConstantReuse(keep_weights=False)
        shared_guard = cfg.repair and not cfg.strict and cfg.repair_budget > 0 and cfg.range_guard and calibrated.guard_values is None
        if shared_guard:
            # The range guard's float activations, fetched by the plain build for its whole plan,
            # kept for repair's candidates (thinned values): each candidate whose plan asked for
            # tensors not fetched yet ran the float model again (~1.0-1.3 CPU s of each of the first
            # candidates on a ViT-S and on PP-OCRv4 rec).
            from .pipeline.guard import GuardValues

            calibrated.guard_values = GuardValues.of(calibrated)  # seeded by the calibration pass
        try:
            result = complete(calibrated, cfg, eval_samples=eval_samples, deliver_now=False, reuse=reuse)
            # a share the first held-out samples could not confirm: judged again with the reserve (pipeline/second_look.py),
            # before repair, which then judges on all of them; and after it, where its build could not confirm
            result = second_look(calibrated, cfg, result, eval_samples)
            result = enforce_floor(calibrated, cfg, result, eval_samples=eval_samples, reuse=reuse)
            result = second_look(calibrated, cfg, result, eval_samples)
        finally:
            if shared_guard:
                calibrated.guard_values = None
        return deliver(calibrated, result, output, eval_samples=eval_samples, report_path=report_path)


def _check_paths(model: Any, data: Any, output: Any, report_path: Any) -> None:
    """Before any work: no output (the model, the report and its JSON) replaces an input or another output."""
    from pathlib import Path

    from . import outputs

    report_json = Path(report_path).with_suffix(".json") if report_path is not None else None
    outputs.check_io({"output": output, "report": report_path, "report JSON": report_json},
                     models={"the input model": model}, data={"the calibration data": data} if data is not None else {})
