"""plan → (coverage) → solve → refine → emit on calibrated statistics: the quantized graph, unchecked.

Kept apart from :mod:`.complete` (which checks, opens a session, measures and saves) because the
mixed-precision search builds many candidate models and only completes the one it keeps.
"""

from __future__ import annotations

import time

import onnx

from ..config.schema import QuantConfig
from ..graph.io import with_initializers
from .calibrate import Calibrated
from .coverage import drop_uncalibrated_bodies
from .emit import emit
from .guard import GuardValues, apply_range_guard
from .plan import Plan, make_plan
from .solve import QParams, solve


def guarded_plan(calibrated: Calibrated, cfg: QuantConfig) -> Plan:
    """The plan of ``cfg`` on calibrated statistics as the delivered model gets it: uncalibrated
    bodies dropped, then the range guard's decisions (:mod:`.guard`: shares cut, block axes moved,
    tensors left float). The one way to plan on a calibration, so that the automatic
    mixed-precision search scores each candidate with the same guard decisions as the model it
    delivers. A search sets ``calibrated.guard_values`` so the guard's float activations are
fetched once and shared by all its candidates."""
    prepared = calibrated.prepared
    plan = make_plan(prepared, cfg)
    if cfg.quantize_subgraphs:
        # A body no calibration sample ran has no statistics: it stays float (coverage.py).
        plan = drop_uncalibrated_bodies(prepared, plan, calibrated.stats)
    if cfg.range_guard:
        # A search over configs keeps one GuardValues on the calibration (mixed_precision); a single
        # build fetches its values for this plan only and lets them go with it (peak memory).
        values = calibrated.guard_values if calibrated.guard_values is not None else GuardValues(prepared, calibrated.kept)
        apply_range_guard(prepared, plan, calibrated.stats, calibrated.kept, cfg, values)
    return plan


def build_model(calibrated: Calibrated, cfg: QuantConfig) -> tuple[Plan, dict[str, QParams], onnx.ModelProto]:
    """plan → guard → solve → refine → emit on calibrated statistics (no checks, no session: see
    ``complete``). The range guard (:mod:`.guard`) may cut shares, move block axes or drop tensors
    from the plan before solve turns it into scales."""
    prepared = calibrated.prepared
    plan = guarded_plan(calibrated, cfg)

    def solved(model: onnx.ModelProto) -> dict[str, QParams]:
        return solve(model, plan, calibrated.stats, moving_average=cfg.calibration.moving_average,
                     weight_minmse=cfg.weight_minmse)

    params = solved(prepared)
    weights = prepared
    if cfg.bias_correction_active():
        from ..algorithms.bias_correction import correct_biases

        t = time.perf_counter()
        corrected = correct_biases(prepared, plan, params, calibrated.kept, providers=cfg.calibration.providers)
        if corrected:
            # Weight scales do not depend on biases; a bias quantized on its own range does: solve again.
            weights = prepared = with_initializers(prepared, corrected)
            params = solved(prepared)
        calibrated.timings["bias correction"] = time.perf_counter() - t
    if cfg.finetune is not None:
        # Refinement needs torch (an optional extra): imported only when a config asks for it.
        from ..algorithms.finetune import refine

        t = time.perf_counter()
        weights = with_initializers(prepared, refine(prepared, plan, params, calibrated.kept, cfg.finetune))
        calibrated.timings["refine"] = time.perf_counter() - t
    quantized = emit(weights, plan, params, fold_weights=cfg.fold_weights, store_int_weights=cfg.store_int_weights,
                     bf16_qdq_to_cast=cfg.bf16_qdq_to_cast, fold_relu=cfg.fold_relu,
                     pack_weights=cfg.pack_weights, weight_runtime=cfg.weight_runtime)
    return plan, params, quantized
