"""final plan (coverage, guard) → solve → refine → emit on calibrated statistics: the quantized graph, unchecked.

Kept apart from :mod:`.complete` (which checks, opens a session, measures and saves) because the
mixed-precision search builds many candidate models and only completes the one it keeps.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import onnx

from ..config.schema import QuantConfig
from ..graph.io import with_initializers
from ..graph.passes.exact_int_weights import exact_int_weights
from ..graph.passes.unsigned_gemm_weights import unsigned_gemm_weights
from ..graph.passes.lookup_tables import dequantize_after_lookup
from . import runtime
from .calibrate import Calibrated
from .emit import ConstantReuse, Rounded, emit
from .final_plan import final_plan
from .observed_sizes import of_calibration
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
    planned = _planned(reuse, cfg)
    plan = planned[0] if planned is not None else final_plan(calibrated, cfg)

    def solved(model: onnx.ModelProto) -> dict[str, QParams]:
        return solve(model, plan, calibrated.stats, moving_average=cfg.calibration.moving_average,
                     weight_minmse=cfg.weight_minmse)

    if planned is not None:
        params = planned[1]
    else:
        params = solved(prepared)
        if reuse is not None and reuse.keep_weights and _plan_reusable(calibrated, cfg):
            reuse.plans.append((_plan_key(cfg), plan, params))
    weights = prepared
    # The float-format weights bias correction rounds, handed to emit, which folds them (not rounded
    # twice); not where finetuning then changes the weights themselves.
    rounded = Rounded() if cfg.finetune is None and cfg.fold_weights else None
    if cfg.bias_correction_active(calibrated.holdout_reused):
        from .refine.bias_correction import correct_biases

        t = time.perf_counter()
        if reuse is None:
            corrected = correct_biases(prepared, plan, params, calibrated.kept, providers=cfg.calibration.providers,
                                       rounded=rounded, means=calibrated.bias_means)
        else:
            corrected = _reused_corrections(calibrated, cfg, plan, params, reuse, rounded)
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
    sizes = of_calibration(calibrated) if _block_activations(plan) else None  # the same for every emit below

    def emitted(weights: onnx.ModelProto, params: dict[str, QParams]) -> onnx.ModelProto:
        quantized = emit(weights, plan, params, fold_weights=cfg.fold_weights, store_int_weights=cfg.store_int_weights,
                         bf16_qdq_to_cast=cfg.bf16_qdq_to_cast, fold_relu=cfg.fold_relu,
                         pack_weights=cfg.pack_weights, weight_runtime=cfg.weight_runtime, reuse=reuse, rounded=rounded,
                         sizes=sizes)
        if cfg.runtime == "cpu":
            dequantize_after_lookup(quantized)  # a table's rows dequantized after its Gather (graph/passes/lookup_tables.py)
        if cfg.runtime == "cpu" and cfg.weight_runtime == "exact":
            exact_int_weights(quantized)  # no MatMulNBits on 16-bit or float activations (graph/passes/exact_int_weights.py)
        if runtime.guard_saturation(cfg):
            unsigned_gemm_weights(quantized)  # no saturating U8S8 sums without VNNI (graph/passes/unsigned_gemm_weights.py)
        return quantized

    quantized = emitted(weights, params)
    if cfg.bias_correction_active(calibrated.holdout_reused) and cfg.finetune is None:
        from .refine.sequential_bias import sequential_corrections

        t = time.perf_counter()
        further = sequential_corrections(calibrated, plan, params, prepared, quantized, reuse, cfg.calibration.providers)
        if further:
            weights = prepared = with_initializers(prepared, further)
            params = solved(prepared)
            quantized = emitted(weights, params)
        timings["bias correction"] = timings.get("bias correction", 0.0) + time.perf_counter() - t
    return Built(plan, params, quantized, timings)


def _block_activations(plan: Plan) -> bool:
    """Whether ``plan`` quantizes an activation in a block format (bfp, mx): only their bodies read
    the calibration's sizes (:mod:`.observed_sizes`), so no other build pays for the shape inference."""
    return any(t.role == "activation" and q is not None and q.format in ("bfp", "mx")
               for t in plan.tensors.values() for q in (t.quant, t.producer_quant))


def _plan_key(cfg: QuantConfig) -> QuantConfig:
    """What a build's plan and solved parameters depend on of its config: all but how weights are stored."""
    return cfg.replace(pack_weights=False)


def _plan_reusable(calibrated: Calibrated, cfg: QuantConfig) -> bool:
    """Whether a build's plan and parameters are those of the next build of an equal config: where no
    refine step (bias correction, finetune) gives emit other weights than the prepared model's."""
    return not cfg.bias_correction_active(calibrated.holdout_reused) and cfg.finetune is None


def _planned(reuse: ConstantReuse | None, cfg: QuantConfig) -> tuple[Plan, dict[str, QParams]] | None:
    """The plan and parameters an earlier build of the search made for ``cfg`` but its weights' storage
    (:attr:`ConstantReuse.plans`), or None.

    Why: repair judges a candidate on its unpacked twin (``pack_weights=False``) and delivers the kept
    set built packed; the two plans are one (the plan, the range guard and solve never read how weights
    are stored: nothing of the calibration they read changes between the two builds), so the delivered
    build skips planning, the guard and solve (tests/test_repair_reuse.py: the delivered file is
    byte for byte a fresh quantize of its kept set)."""
    if reuse is None or not reuse.plans:
        return None
    key = _plan_key(cfg)
    for made_for, plan, params in reuse.plans:
        if made_for == key:
            return plan, params
    return None


def _reused_corrections(calibrated: Calibrated, cfg: QuantConfig, plan: Plan, params: dict[str, QParams],
                        reuse: ConstantReuse, rounded: Rounded | None = None) -> dict[str, Any]:
    """Bias correction's new biases, each layer's probed once per search: a layer's correction is
    the mean error of its own op on its *float* input (``ΔW``, and the rounding of that input by
    the layer's own input quantizer), so it depends on its weight's rounding (format, attributes),
    its input's quantizer (part of the key) and the calibration samples, not on which other layers
    a candidate quantizes. Layers not probed yet by an earlier build of the search are probed
    together (on ddddocr_ocr MXFP8_E4M3 the probe was ~1.1 CPU s of a ~1.9 s candidate)."""
    from .emit import quantizer_attrs
    from .refine.bias_correction import correct_biases, corrected_layers, input_quantizer

    layers = corrected_layers(calibrated.prepared, plan)
    keys = {b_name: reuse.key_of(w_name, "bias correction", plan.tensors[w_name].quant.format,
                                 {"bias": b_name, "input": input_quantizer(node, plan, params),
                                  **quantizer_attrs(plan.tensors[w_name], params.get(w_name))})
            for node, w_name, b_name in layers}
    missing = {w_name for _, w_name, b_name in layers if keys[b_name] not in reuse.corrections}
    if missing:
        found = correct_biases(calibrated.prepared, plan, params, calibrated.kept, providers=cfg.calibration.providers,
                               only=missing, rounded=rounded, means=calibrated.bias_means)
        reuse.corrections.update({keys[b_name]: value for b_name, value in found.items()})
    return {b_name: reuse.corrections[key] for b_name, key in keys.items() if key in reuse.corrections}
