"""Heavy tails: which 8-bit activations get their range judged by the error it causes.

Why: a percentile range counts values, and with recurring peaks kept (plan/peaks.py) it spans the
largest values several calibration batches reach. For a heavy-tailed activation (most values a few
steps from zero, a few channels peaking 50-70x the median) every value then pays for those peaks in
step size. PP-OCRv4 det's first pointwise Conv reads a HardSwish output of median |x| 1.38 and peaks
91-96 on every page; uint8 over it has a step of 0.364, and the error that step leaves on a page's
uniform background is one offset repeated over the whole page: the DB mask IoU against float fell
to 0.9447 (0.9765 with the range below, 0.9803 with the tensor kept float; bench/RESULTS.md
"(detrange, 2026-11-28)").

Where, by structure: an 8-bit per-tensor activation calibrated by the percentile, read only by
weighted layers (Conv, ConvTranspose, MatMul, Gemm) as their data input against a constant weight, whose scale no other tensor
shares (a Concat's aligned inputs carry its range into residual paths and other readers, where an
error is not averaged by a dot product). There the reader sums many rounding errors into each output,
so the error a range causes is the right measure of it. The tensor gets a counting tail collector
(``collectors.TailHistogramCollector``); solve keeps the percentile range unless it costs
``methods.TAIL_SEARCH_GAIN`` times the squared error of the best MinMSE window (``methods._tail_search``):
the statistics decide, per tensor, whether the tail is heavy.
"""

from __future__ import annotations

from .peaks import WEIGHTED_OPS
from .select import _Graph
from .types import TensorPlan

__all__ = ["EIGHT_BIT", "heavy_tail_candidates"]

#: the integer formats whose range choice the rule judges (16-bit grids have steps fine enough)
EIGHT_BIT = frozenset({"int8", "uint8"})


def _read_by_weighted_layers(name: str, g: _Graph) -> bool:
    """Every reader of ``name`` is a weighted layer that reads it as its data input (input 0) only,
    against a constant weight (input 1 an initializer): not an attention product of two activations,
    whose probabilities' peaks are the evidence itself (PP-OCRv4 rec's attention Softmax outputs,
    heavy-tailed by that test, lost 2 of 32 lines when they were clipped)."""
    readers = g.consumers.get(name, [])
    return bool(readers) and all(
        node.op_type in WEIGHTED_OPS and len(node.input) > 1 and node.input[0] == name and name not in node.input[1:]
        and node.input[1] in g.initializers
        for node in readers
    )


def heavy_tail_candidates(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """Set ``TensorPlan.tail_search`` on every activation the module docstring describes."""
    shared = {t.share_with for t in tensors.values() if t.share_with}
    for name, plan in tensors.items():
        quant = plan.quant
        if (plan.role != "activation" or not quant.is_integer or quant.format not in EIGHT_BIT or quant.per_channel
                or quant.calibration != "percentile" or plan.producer_quant is not None or plan.share_with
                or name in shared or name in g.outputs):
            continue
        if _read_by_weighted_layers(name, g):
            plan.tail_search = True
