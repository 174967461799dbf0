"""Heavy tails: which 8-bit activations get their range judged by the error it causes.

Why: a percentile range counts values, and with recurring peaks kept (plan/peaks.py) it spans the
largest values several calibration batches reach. For a heavy-tailed activation (most values a few
steps from zero, a few channels peaking 50-70x the median) every value then pays for those peaks in
step size. PP-OCRv4 det's first pointwise Conv reads a HardSwish output of median |x| 1.38 and peaks
91-96 on every page; uint8 over it has a step of 0.364, and the error that step leaves on a page's
uniform background is one offset repeated over the whole page: the DB mask IoU against float fell
to 0.9447 (0.9765 with the range below, 0.9803 with the tensor kept float; bench/RESULTS.md
"(detrange, 2026-11-28)").

Where, by structure: an 8-bit per-tensor activation calibrated by the percentile whose channels are a
depthwise convolution's, unmixed since (through activations, normalizations and channelwise products:
:func:`depthwise_source`), read only by weighted layers (Conv, ConvTranspose, MatMul, Gemm) as their
data input against a constant weight (a pointwise Conv, most often), whose scale no other tensor
shares. A depthwise convolution keeps each channel's own range, so one per-tensor grid is set by
its widest channel and the others get few codes (the per-tensor MobileNet problem that cross-layer
equalization answers: it lifted the same detector to 0.9632); the pointwise reader then sums every
channel's rounding error into each output. The tensor gets a counting tail collector
(``collectors.TailHistogramCollector``); solve keeps the percentile range unless the counts say the
tail is heavy and continuous (``methods._tail_search``: kurtosis, peak ratio) and then takes MinMSE's
window of least squared error.

Measured on 15 detectors and 5 readers of the zoo (bench/det_range.py): without the depthwise
condition the rule also fired after regular convolutions (YOLO-style stems, PP-OCRv3 det's
1×1 Convs) and cost PP-OCRv3 det 0.005 mask IoU (64 pages) and nudenet 0.024 box F1; there the
tail is a filter's response, not a channel left unbalanced.
"""

from __future__ import annotations

from ...formats.integer import SIXTEEN_BIT
from ..tails import WEIGHTED_OPS
from .select import _Graph, depthwise_conv
from .types import TensorPlan

__all__ = ["CHANNELWISE", "EIGHT_BIT", "depthwise_source", "heavy_tail_candidates"]

#: the integer formats whose range choice the rule judges (16-bit grids have steps fine enough): those with a
#: 16-bit counterpart (formats/integer.py, their one home)
EIGHT_BIT = frozenset(SIXTEEN_BIT)
#: ops that keep every value in its channel (their first input's): activations, normalization, and
#: elementwise products/sums with a constant or a gate (SiLU written as x·Sigmoid(x), a squeeze-and-
#: excitation Mul)
CHANNELWISE = frozenset("Relu HardSwish Clip LeakyRelu PRelu Sigmoid HardSigmoid Elu Selu Softplus Tanh "
                        "BatchNormalization Mul Add Sub Div".split())
#: how many channelwise ops the walk back from a tensor to its depthwise convolution crosses
MAX_HOPS = 6


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


def depthwise_source(name: str, g: _Graph) -> bool:
    """Whether ``name``'s channels are a depthwise convolution's, unmixed since: walking back
    through :data:`CHANNELWISE` ops (along the input that is not a constant, and for ``x·f(x)``
    along ``x``), at most :data:`MAX_HOPS`, to a depthwise Conv."""
    tensor = name
    for _ in range(MAX_HOPS + 1):
        node = g.producer.get(tensor)
        if node is None:
            return False
        if depthwise_conv(node, g):
            return True
        if node.op_type not in CHANNELWISE or not node.input:
            return False
        live = [i for i in node.input[:2] if i and i not in g.initializers]
        if node.op_type in ("Mul", "Add", "Sub", "Div") and len(live) == 2:
            # x·Sigmoid(x) / x·HardSigmoid(x) (a written-out SiLU or HardSwish), or a gate x·g: x is the
            # feature map, the operand no gate (Sigmoid, HardSigmoid) produced; neither a gate's: the first
            a, b = live
            pa, pb = g.producer.get(a), g.producer.get(b)
            gate_ops = ("Sigmoid", "HardSigmoid")
            tensor = a if pb is not None and pb.op_type in gate_ops else b if pa is not None and pa.op_type in gate_ops else a
        elif live:
            tensor = live[0]
        else:
            return False
    return False


def heavy_tail_candidates(tensors: dict[str, TensorPlan], g: _Graph) -> None:
    """Set ``TensorPlan.tail_search`` on every activation the module docstring describes."""
    shared = {t.share_with for t in tensors.values() if t.share_with}
    for name, plan in tensors.items():
        quant = plan.quant
        if (plan.role != "activation" or quant.format not in EIGHT_BIT or quant.per_channel
                or quant.calibration != "percentile" or plan.producer_quant is not None or plan.share_with
                or name in shared or name in g.outputs):
            continue
        if _read_by_weighted_layers(name, g) and depthwise_source(name, g):
            plan.tail_search = True
