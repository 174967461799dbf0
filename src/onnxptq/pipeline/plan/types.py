"""The plan's types: :class:`TensorPlan` (the decision for one tensor) and :class:`Plan` (all of
them, the selected and skipped nodes, the tensors left float and why), with their JSON form.

Most readers of a plan (solve, emit, refine, the report) need only these types, not how a plan is
made: importing them pulls in nothing of the planner.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

from ...config.schema import TensorQuant

__all__ = ["Plan", "Role", "TensorPlan"]

Role = Literal["activation", "weight", "bias"]


@dataclass
class TensorPlan:
    """The decision for one tensor."""

    name: str
    role: Role
    quant: TensorQuant
    #: per-channel axis (integer weights) or block axis (bfp/mx); None for per-tensor
    axis: int | None = None
    #: for int32 biases: the (activation, weight) tensors whose scales multiply into the bias scale
    bias_of: tuple[str, str] | None = None
    #: tensors that must share this tensor's scale and zero point (AlignConcat, AlignSlice)
    share_with: str | None = None
    #: nodes (by name) that read this tensor as a quantized input
    consumers: list[str] = field(default_factory=list)
    #: only ``consumers`` read the quantized value; the tensor's other readers keep the float one
    #: (transformer placement: a residual Add beside the MatMuls that read a LayerNorm output)
    exclusive: bool = False
    producer: str | None = None
    #: DualQuantNodes: the producer's own output format when a consumer reads another one (spec
    #: §4.5). The tensor then passes through this quantizer, then ``quant``; the consumers listed in
    #: ``producer_consumers`` read the value after the first one only.
    producer_quant: TensorQuant | None = None
    producer_axis: int | None = None
    producer_consumers: list[str] = field(default_factory=list)
    #: (low, high) outside which every reader saturates (e.g. HardSwish is 0 below -3), so values
    #: there need no codes: the solver clamps the calibrated range to it. None: unbounded.
    limits: tuple[float | None, float | None] | None = None
    #: (low, high) thresholds the graph compares this tensor's values with (through monotone ops):
    #: the solver widens the calibrated range to include them (plan/thresholds.py). None: none.
    covers: tuple[float, float] | None = None
    #: a percentile range that keeps what several calibration batches reach (plan/peaks.py: the
    #: operands and results of weighted layers); False: the plain pooled percentile
    keep_peaks: bool = False
    #: a percentile range that a heavy tail replaces by the window of least rounding and clipping
    #: error on a counted histogram (plan/heavy_tails.py: 8-bit inputs read only by weighted layers)
    tail_search: bool = False
    #: the factor its calibrated range is widened by (plan/scarce.py: a 16-bit activation of a few
    #: values per sample, whose range is the extreme of a few draws); 1.0: none
    margin: float = 1.0
    #: False: an unscaled fp16 activation whose calibrated range fits with headroom, emitted
    #: without the format's saturating Clip (pipeline/fp16_range.py); True: the format's default. Not
    #: :attr:`Plan.guard`, the range-mismatch guard's decisions
    clip_guard: bool = True

    def statistics_quant(self) -> TensorQuant:
        """The format this tensor's calibration statistics serve: its own, or at a dual-quant
        boundary whose consumer side needs none, the producer side's."""
        if self.quant.needs_calibration or self.producer_quant is None:
            return self.quant
        return self.producer_quant

    def collector_spec(self, num_bins: int | None = None) -> dict[str, Any]:
        """What the calibration collector of this tensor must gather (``calibration.methods.
        make_collector`` arguments), or ``{"per_channel_axis": axis}`` for per-channel min/max."""
        quant = self.statistics_quant()
        if quant.per_channel and self.axis is not None:
            return {"per_channel_axis": self.axis}
        spec: dict[str, Any] = {"method": quant.calibration, "symmetric": quant.symmetric}
        if quant.calibration == "percentile":
            spec["percentile"] = quant.percentile
            if self.tail_search and quant is self.quant:  # its range may be searched on the counts
                spec["histogram"] = True
        if num_bins is not None:
            spec["num_bins"] = num_bins
        return spec

    def range_options(self) -> dict[str, Any]:
        """How solve turns this tensor's statistics into a range (``calibration.methods.compute_range``
        arguments besides the collector): the method, symmetry, percentile and integer grid."""
        quant = self.quant
        options: dict[str, Any] = {"method": quant.calibration, "symmetric": quant.symmetric}
        if quant.calibration == "percentile":
            options["percentile"] = quant.percentile
            if self.keep_peaks:  # clip only what one or two calibration batches reach (plan/peaks.py)
                options["recurring"] = True
            if self.tail_search:  # a heavy tail's range by its error on the histogram (plan/heavy_tails.py)
                options["tail_search"] = True
        if quant.calibration == "minmse":
            # PowerOfTwoMethod.MinMSE: search among power-of-two scales, not a float window that is
            # rounded to a power of two afterwards (which can land on a worse scale than the search's).
            options["power_of_two"] = quant.scale_kind == "pow2"
        if self.margin != 1.0:
            options["margin"] = self.margin
        if quant.is_integer:
            from ...formats.integer import qrange

            options["qmin"], options["qmax"] = qrange(quant.format, symmetric=quant.symmetric, reduce_range=quant.reduce_range)
        return options

    def producer_view(self) -> "TensorPlan | None":
        """This tensor as the producer-side quantizer sees it (None without dual quant nodes)."""
        if self.producer_quant is None:
            return None
        return TensorPlan(self.name, self.role, self.producer_quant, axis=self.producer_axis, producer=self.producer)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "format": self.quant.describe(),
            "quant": self.quant.to_json(),
            "axis": self.axis,
            "bias_of": list(self.bias_of) if self.bias_of else None,
            "share_with": self.share_with,
            "consumers": self.consumers,
            **({"exclusive": True} if self.exclusive else {}),
            "producer": self.producer,
            **({"producer_format": self.producer_quant.describe(), "producer_axis": self.producer_axis,
                "producer_consumers": self.producer_consumers} if self.producer_quant is not None else {}),
            **({"limits": list(self.limits)} if self.limits is not None else {}),
            **({"covers": list(self.covers)} if self.covers is not None else {}),
            **({"keep_peaks": True} if self.keep_peaks else {}),
            **({"tail_search": True} if self.tail_search else {}),
            **({"margin": self.margin} if self.margin != 1.0 else {}),
            **({"clip_guard": False} if not self.clip_guard else {}),
        }


@dataclass
class Plan:
    """Every tensor to quantize, in a deterministic order, plus the nodes that were selected."""

    tensors: dict[str, TensorPlan]
    nodes: list[str]
    skipped_nodes: dict[str, str] = field(default_factory=dict)
    #: tensors a selected node reads or writes that stay float on purpose, with the reason
    #: (attention-mask sentinels, transformer placement rules)
    float_tensors: dict[str, str] = field(default_factory=dict)
    #: the range-mismatch guard's decisions by tensor (:mod:`onnxptq.pipeline.guard`): action, reason
    guard: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the accuracy floor's repair (:mod:`onnxptq.algorithms.repair`): ``kept_float`` {node: reason},
    #: the floor and the figures before/after; empty when it did not act
    repair: dict[str, Any] = field(default_factory=dict)

    def activations(self) -> list[TensorPlan]:
        return [t for t in self.tensors.values() if t.role == "activation"]

    def keep_float(self, reasons: dict[str, str]) -> None:
        """Unplan the tensors named in ``reasons`` (name → why it stays float) and record why in
        :attr:`float_tensors`; a tensor that shared its scale with one of them keeps its own. One
        place for the final plan's range rules (fp16_range, quiet_batches) to drop tensors, so none
        forgets the sharing (a share_with to an unplanned tensor has no scale to take)."""
        for name in reasons:
            self.tensors.pop(name, None)
        for other in self.tensors.values():
            if other.share_with in reasons:
                other.share_with = None
        self.float_tensors.update(reasons)

    def needs_calibration(self) -> list[str]:
        """Activation tensors whose scale comes from data (integer, or float formats with a real scale)."""
        return [t.name for t in self.activations()
                if t.quant.needs_calibration or (t.producer_quant is not None and t.producer_quant.needs_calibration)]

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "skipped_nodes": self.skipped_nodes,
            "float_tensors": self.float_tensors,
            **({"guard": self.guard} if self.guard else {}),
            **({"repair": self.repair, "kept_float": self.repair.get("kept_float", {}),
                "stepped_up": self.repair.get("stepped_up", {})} if self.repair else {}),
            "tensors": [t.to_json() for t in self.tensors.values()],
        }

    def summary(self) -> dict[str, int]:
        """Count of planned tensors per (role, format) — what ``inspect`` prints."""
        counts: dict[str, int] = defaultdict(int)
        for t in self.tensors.values():
            counts[f"{t.role}: {t.quant.describe()}"] += 1
        return dict(sorted(counts.items()))
