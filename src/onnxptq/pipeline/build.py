"""final plan (coverage, guard) → solve → refine → emit on calibrated statistics: the quantized graph, unchecked.

Kept apart from :mod:`.complete` (which checks, opens a session, measures and saves) because the
mixed-precision search builds many candidate models and only completes the one it keeps.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import onnx

from ..config.schema import QuantConfig
from ..graph.io import with_initializers
from .calibrate import Calibrated
from .emit import ConstantReuse, emit
from .final_plan import final_plan
from .plan import Plan
from .solve import QParams, solve


class Built(NamedTuple):
    """What :func:`build_model` made: the plan, the solved parameters, the quantized model (unchecked)
    and the seconds its optional refine steps took (``"bias correction"``, ``"refine"``), which
    the caller adds to its timings; the calibration it read is left as it was."""

    plan: Plan
    params: dict[str, QParams]
    model: onnx.ModelProto
    timings: dict[str, float]


def build_model(calibrated: Calibrated, cfg: QuantConfig, *, reuse: ConstantReuse | None = None) -> Built:
    """final plan → solve → refine → emit on calibrated statistics (no checks, no session: see
    ``complete``). The plan is :func:`.final_plan.final_plan`'s: the one calibration made for
    ``cfg`` (or a new one for another config), coverage and the range guard applied.
    ``calibrated`` is only read (a search builds many candidates from one calibration); ``reuse``
    keeps quantized weights from one of its builds for the next (:class:`.emit.ConstantReuse`:
    the same model, built for its difference only)."""
    timings: dict[str, float] = {}
    prepared = calibrated.prepared
    plan = final_plan(calibrated, cfg)

    def solved(model: onnx.ModelProto) -> dict[str, QParams]:
        return solve(model, plan, calibrated.stats, moving_average=cfg.calibration.moving_average,
                     weight_minmse=cfg.weight_minmse)

    params = solved(prepared)
    weights = prepared
    if cfg.bias_correction_active(calibrated.holdout_reused):
        from .refine.bias_correction import correct_biases

        t = time.perf_counter()
        corrected = correct_biases(prepared, plan, params, calibrated.kept, providers=cfg.calibration.providers)
        if corrected:
            # Weight scales do not depend on biases; a bias quantized on its own range does: solve again.
            weights = prepared = with_initializers(prepared, corrected)
            params = solved(prepared)
        timings["bias correction"] = time.perf_counter() - t
    if cfg.finetune is not None:
        # Refinement needs torch (an optional extra): imported only when a config asks for it.
        from .refine.finetune import refine

        t = time.perf_counter()
        weights = with_initializers(prepared, refine(prepared, plan, params, calibrated.kept, cfg.finetune))
        timings["refine"] = time.perf_counter() - t
    quantized = emit(weights, plan, params, fold_weights=cfg.fold_weights, store_int_weights=cfg.store_int_weights,
                     bf16_qdq_to_cast=cfg.bf16_qdq_to_cast, fold_relu=cfg.fold_relu,
                     pack_weights=cfg.pack_weights, weight_runtime=cfg.weight_runtime, reuse=reuse)
    return Built(plan, params, quantized, timings)
