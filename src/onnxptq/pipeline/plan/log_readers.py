"""The first dot products of a log-domain input stay float under FP-element MX formats (MXFP8/6/4).

Why: a ``Log`` in the graph makes a log spectrogram (DNSMOS P.835: ``Log(Max(|STFT|², ε)) / ln 10``;
basic-pitch: a min/max-normalized log-CQT, batch-normed, harmonically stacked). The first layer that
reads it holds spectral edge and onset detectors: 3×3 kernels whose taps nearly cancel (DNSMOS's
first Conv: the median filter's ``|Σw| / Σ|w|`` is 0.16) on an input carrying the recording's level
as a common offset (mean −2.0, std 1.3 log10 units). An FP element rounds each value by up to
2^-(m+1) of itself — 6 % at E4M3's 3 mantissa bits — at every magnitude, so the taps' rounding
errors no longer cancel and the offset, multiplied by them, swamps the small differences the layer
exists to measure. Measured on DNSMOS P.835 MXFP8_E4M3, repair off, 32 held-out clips within
0.1 MOS (bench/RESULTS.md, "Speech-quality scores, second round"): 0.406; with only that Conv's
input kept BF16, 0.594 (MXINT8 input 0.563); with its input and weights float, 0.813.
basic-pitch MXFP8_E4M3 had the same loss at the same place (0.924; float in front of its first
Conv, 0.965: "More models outside the zoo, fourth round"). Integer-element blocks (MXINT8, MX9,
BFP16) give a uniform step within a block instead and kept DNSMOS at 0.97-1.0.

The rule, by dataflow (no names): from every ``Log`` output, walk forward through the ops that carry
its values on without a dot product — elementwise arithmetic, comparisons and ``Where`` (a
``div_no_nan``), reductions (a min/max normalization), normalizations, data movement — and stop at
the first dot products (``Conv``/``ConvTranspose``/``MatMul``/``Gemm``) reached. Under an
FP-element MX format those nodes' planned operands (data input, weights) stay float, with the
reason in the plan; an activation read by other dot products as well stays quantized for them.
"""

from __future__ import annotations

import logging

from ...graph.walk import downstream_nodes
from .fp_blocks import is_fp_block
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["CARRY_OPS", "LOG_DOTS", "first_log_domain_dots", "fp_log_domain_dots"]

#: dot products: where the walk from a Log stops (their operands are what the rule keeps float)
LOG_DOTS = frozenset("Conv ConvTranspose MatMul Gemm".split())
#: ops that carry a log-domain value on (elementwise, comparisons, reductions, normalizations, data movement)
CARRY_OPS = frozenset(
    """Add Sub Mul Div Neg Abs Max Min Clip Where Equal Greater Less Not And Or Cast Identity
    ReduceMin ReduceMax ReduceMean ReduceSum BatchNormalization InstanceNormalization LayerNormalization
    Reshape Unsqueeze Squeeze Flatten Transpose Slice Pad Concat Split Gather Expand Tile""".split()
)


def first_log_domain_dots(g: _Graph) -> dict[str, str]:
    """``{dot-product node: the Log it reads}``: the first dot products a ``Log``'s output reaches
    through :data:`CARRY_OPS` (module docstring)."""
    found: dict[str, str] = {}
    for log_node in (n for n in g.nodes if n.op_type == "Log"):
        for reader in downstream_nodes(log_node.output, g.consumers, lambda n: n.op_type in CARRY_OPS):
            if reader.op_type in LOG_DOTS:
                found.setdefault(reader.name, log_node.name)
    return found


def fp_log_domain_dots(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Keep the operands of the first log-domain dot products float under FP-element MX formats;
    returns ``{tensor: reason}`` for ``Plan.float_tensors``."""
    dots = first_log_domain_dots(g)
    why: dict[str, str] = {}
    if not dots:
        return why
    for name, t in list(tensors.items()):
        if not is_fp_block(t):
            continue
        mine = [c for c in t.consumers if c in dots]
        if not mine:
            continue
        reason = (f"operand of {mine[0]}, the first dot product reading the log-domain output of {dots[mine[0]]}: an "
                  "FP-element MX format's per-value rounding breaks its cancelling taps against the input's level "
                  "(plan/log_readers.py), so it stays float")
        rest = [c for c in t.consumers if c not in dots]
        if rest and t.role == "activation":
            t.consumers, t.exclusive = rest, True
            continue
        del tensors[name]
        why[name] = reason
    if why:
        log.info("plan: %d operands of the first dot products after a Log stay float under an FP-element MX format: %s",
                 len(why), ", ".join(sorted(why)[:4]))
    return why
