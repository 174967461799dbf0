"""The delivered plan, made at one address: the first plan of a config, then what calibration showed.

:func:`final_plan` is the one way to plan on a calibration: the plan calibration made for its own
config (no second :func:`~onnxptq.pipeline.plan.make_plan`; another config gets its own), then the
bodies no calibration sample ran dropped (:mod:`.coverage`), then the range guard's decisions
(:mod:`.guard`: shares cut, block axes moved, tensors left float), then coordinates whose 8-bit step is coarser than a pixel kept at 16 bits (:mod:`.plan.coordinates`). The automatic mixed-precision
search plans each candidate through it too, so it scores what it would deliver.

Above :mod:`.plan` (a pure function of model and config, which knows nothing of statistics) and
below :mod:`.build`: coverage and the guard read the calibration's statistics and samples.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import onnx

from ..config.schema import QuantConfig
from ..memory import release_freed
from .coverage import drop_uncalibrated_bodies
from .fp16_range import keep_overflowing_float, keep_underflowing_float
from .quiet_batches import keep_quiet_scalars_float
from .guard import GuardValues, apply_range_guard
from .norm_groups import step_up_normalizer_inputs
from .plan import Plan, make_plan
from .plan.coordinates import keep_coordinates_wide
from .plan.corners import settle
from .plan.sliced import split_sliced
from .solve import activation_range, shared_activation_params

__all__ = ["CalibrationView", "final_plan"]


class CalibrationView(Protocol):
    """What :func:`final_plan` reads of a :class:`onnxptq.pipeline.calibrate.Calibrated` (a
    protocol: the final plan needs these fields only, whoever made them)."""

    prepared: onnx.ModelProto
    stats: Mapping[str, Any]
    kept: Sequence[Mapping[str, np.ndarray]]
    guard_values: Any
    plan: Plan | None
    config: QuantConfig | None


def first_plan(calibrated: CalibrationView, cfg: QuantConfig) -> Plan:
    """``cfg``'s plan on the prepared model: a copy of the one calibration made when ``cfg`` is the
    config it calibrated for (later steps change the plan in place; the calibration's stays as
    made), else a new one."""
    made, made_for = calibrated.plan, calibrated.config
    if made is not None and made_for is not None and (made_for is cfg or made_for == cfg):
        return copy.deepcopy(made)
    return make_plan(calibrated.prepared, cfg)


def _calibrated_scales(plan: Plan, stats: Mapping[str, Any], cfg: QuantConfig) -> tuple[Any, Any]:
    """(step_of, range_of) over ``stats`` for :func:`~.plan.sliced.split_sliced`: a per-tensor
    activation's solved scale, and a tensor's own calibrated range by ``like``'s range method (None
    without statistics: a tensor no plan of this calibration quantized)."""
    moving = cfg.calibration.moving_average

    def step_of(t: Any) -> float | None:
        if t.name not in stats:
            return None
        return float(np.max(shared_activation_params(plan, t, stats, moving_average=moving).scale))

    def range_of(name: str, like: Any) -> tuple[float, float] | None:
        return activation_range(like, stats[name], moving_average=moving) if name in stats else None

    return step_of, range_of


def _magnitudes(outputs: Sequence[Mapping[str, Any]]) -> Any:
    """``magnitude_of(name)`` for plan/coordinates.py: float's largest magnitude of graph output ``name`` on
    ``outputs`` (arrays only: a held form is no value), None where none was recorded."""

    def magnitude_of(name: str) -> float | None:
        arrays = [v for o in outputs if isinstance(v := o.get(name), np.ndarray) and v.size]
        return max(float(np.max(np.abs(a))) for a in arrays) if arrays else None

    return magnitude_of


def final_plan(calibrated: CalibrationView, cfg: QuantConfig) -> Plan:
    """The plan of ``cfg`` on calibrated statistics as the delivered model gets it: uncalibrated
    bodies dropped, then the range guard's decisions. A search sets ``calibrated.guard_values`` so
    the guard's float activations are fetched once and shared by all its candidates."""
    prepared = calibrated.prepared
    plan = first_plan(calibrated, cfg)
    if cfg.quantize_subgraphs:
        # A body no calibration sample ran has no statistics: it stays float (coverage.py).
        plan = drop_uncalibrated_bodies(prepared, plan, calibrated.stats)
    within = getattr(calibrated, "within", None)
    if within is not None:
        # The accuracy floor's repair (algorithms/repair.py): a node kept float adds no quantizer.
        for name in [n for n in plan.tensors if n not in within]:
            del plan.tensors[name]
            plan.float_tensors[name] = "kept float with a neighbour the accuracy floor's repair kept float"
    # A tensor read only through disjoint parts of one axis whose one scale starves a part (plan/sliced.py).
    split_sliced(prepared, plan, *_calibrated_scales(plan, calibrated.stats, cfg))
    if cfg.range_guard:
        # A search over configs keeps one GuardValues on the calibration (mixed_precision); a single
        # build fetches its values for this plan only and lets them go with it (peak memory).
        shared = calibrated.guard_values
        values = shared if shared is not None else GuardValues.of(calibrated)
        apply_range_guard(prepared, plan, calibrated.stats, calibrated.kept, cfg, values)
        # An 8-bit activation a per-group normalizer reads, whose quietest group drowns, steps up to 16 bits (norm_groups.py).
        step_up_normalizer_inputs(prepared, plan, calibrated.stats, values, cfg.range_guard_sqnr_db, moving_average=cfg.calibration.moving_average)
        if shared is None:
            del values
            release_freed()  # this build's guard values and checks: solve and emit come next
    # Coordinates (a sampling grid, indices) whose 8-bit step is coarser than a pixel keep 16 bits (plan/coordinates.py).
    # Read on float's outputs of the first held-out samples (fixed per calibration: the second look's reserve,
    # added later, would let a build after the look find grids the builds before it did not), else the calibration's.
    outputs = getattr(calibrated, "first_outputs", None) or getattr(calibrated, "float_outputs", None) or []
    keep_coordinates_wide(prepared, plan, _calibrated_scales(plan, calibrated.stats, cfg)[0], _magnitudes(outputs), outputs)
    # An unscaled fp16 activation beyond fp16's range on calibration data stays float (fp16_range.py).
    keep_overflowing_float(plan, calibrated.stats)
    # ... and one float keeps positive but below fp16's normals, read by a Log or a divisor (fp16_range.py, "Underflow").
    keep_underflowing_float(prepared, plan, calibrated.stats)
    # A few values per sample, a magnitude read as a factor, that an integer grid flushes on quiet batches stay float (quiet_batches.py).
    keep_quiet_scalars_float(prepared, plan, calibrated.stats, moving_average=cfg.calibration.moving_average)
    # What coverage and the guard left float may orphan an int32 bias (plan/corners.py).
    return settle(plan)
