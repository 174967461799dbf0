"""Recurring peaks: which percentile-calibrated activations keep what several calibration batches reach.

Why: a percentile counts values, not samples. A detector's object responses or a classifier's
strongest features are a handful of values in each image, so pooled over the calibration set they
look rare and a 99.9999 percentile clips them, although most images reach that far (an NMS-free
YOLO: a backbone activation clipped at 9.3 where 3 of 12 calibration images peak at 10.7-11.5).
``calibration.methods._cover_recurring`` widens such a range to the
``collectors.RECURRING_BATCHES``-th largest per-batch maximum (and smallest minimum): what several
batches reach, held-out data reaches too.

Where, by structure: at the **operands and results of weighted layers** (Conv, ConvTranspose,
MatMul, Gemm): a tensor a weighted layer writes, or one that only weighted layers read. There a
per-sample peak is a filter's full response (the evidence the layer computes, carried through the
next layer's weights as one coherent error when clipped), while the coarser step a wider range
costs is rounding noise that the next dot product averages over its many terms. Elsewhere (a
residual ``Add``, an attention or squeeze-excitation ``Mul``, an activation written out in
elementwise ops) each value's rounding error passes on one to one and nothing averages it, so
the percentile's finer step is worth more there. In PP-OCRv4 rec the elementwise tensors the rule
widened most (residual sums, squeeze-excitation products, HardSwish outputs of the last stages)
peak in the same channel in 5 to 8 of 8 calibration batches (that channel's maximum 4.5-10x the
median channel's): a recurring channel offset, not per-sample evidence; in the YOLO detector the
widened tensors peak in 4 to 6 different channels over 12 images (2.5-3.4x).
Measured (bench/RESULTS.md, "Calibration that keeps recurring peaks,
structurally"): the rule everywhere raised the YOLO detector's box F1 and a file-type classifier's
agreement but moved PP-OCRv4 rec's per-tensor A8W8 on the NPU placement (every elementwise tensor
quantized) from CER 0.0393 to 0.0433; widened only the residual/gate/HardSwish tensors it alone
reached 0.0507, widened only at weighted layers it was 0.0387 (float's) and the detector and the
classifier kept their gains. That CER alone proves little: random widenings of 0-7 % of the same
tensors moved it to 0.043-0.063, and of the weighted layers' ones alone to 0.051-0.062; the line
rests on the averaging argument and the channel statistics above.
"""

from __future__ import annotations

from ..tails import WEIGHTED_OPS  # the layers whose operands and results keep their recurring peaks
from .heavy_tails import heavy_tail_candidates
from .select import _Graph
from .types import TensorPlan

__all__ = ["recurring_peaks"]


def _at_weighted_layer(name: str, g: _Graph) -> bool:
    """True when a weighted layer writes ``name`` or every reader of it is one."""
    producer = g.producer.get(name)
    if producer is not None and producer.op_type in WEIGHTED_OPS:
        return True
    readers = g.consumers.get(name, [])
    return bool(readers) and all(node.op_type in WEIGHTED_OPS for node in readers)


def recurring_peaks(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """Set ``TensorPlan.keep_peaks`` on every percentile-calibrated activation at a weighted layer;
    then :func:`.heavy_tails.heavy_tail_candidates` marks those of them, read by weighted layers alone,
    whose heavy tail (the statistics decide) takes the range of least error instead (called here, not
    from assign.py, which is at the plan package's 350-line limit, tests/test_house.py)."""
    for name, plan in tensors.items():
        if plan.role == "activation" and plan.quant.calibration == "percentile" and _at_weighted_layer(name, g):
            plan.keep_peaks = True
    heavy_tail_candidates(tensors, g)
