"""A model's own answer, read again inside it in short FP-element blocks, stays float there.

Why: some models refine their answer in a second stage that reads the first stage's output, which
is also a graph output the caller reads (a cascade: LORE's cell transformer outputs each cell's
logical row/column span, ``logic_axis``, and its "stacker" encodes those four numbers again through
a ``[N, 4] × [4, 256]`` MatMul to produce the refined ``stacked_axis``). The stage boundary is a
handful of numbers per item (coordinates, a box, a span), so the reading dot product's reduction
axis, which MX blocks run along, is shorter than a block: every element is its block's maximum or
close to it. An FP element keeps 3 mantissa bits (E4M3; fewer for FP6/FP4): it rounds each value by
up to 1/16 of itself, so its ABSOLUTE error grows with the value — on a coordinate of 4…8 the step
is 0.5, on 8…16 it is 1.0, and where OCP's shared exponent clips a block maximum (mantissa above
1.75) the value loses up to 12.5 %: a row index of 7.9 read as 7.0. Such an answer is decided by
the caller at a resolution the graph does not state (LORE rounds at .5), and the second stage
carries the first stage's rounding into its own answer. Measured on LORE's ``lore_process``
(bench/RESULTS.md, branch mxfp8e; repair off, 12 calibration / 32 held-out tables, MXFP8_E4M3):
cells whose logical span equals float's 0.894; that one MatMul input kept float 0.977 (its
exponent one up instead of OCP's: 0.964); logic_axis's quantization error rms 0.123, max 0.996
(OCP) on values 0…9.3.

Why float and not another exponent: the dot product reading it has fewer than a block's worth of
terms per output (``K`` < block size), so keeping its activation float costs a narrow product,
and no FP element precision suits values whose resolution is the caller's, not the graph's.

The rule, by dataflow and shapes (no names): an activation planned with an FP-element MX format
(MXFP8/6/4) that is a graph output, whose block axis has a known length shorter than its block
size, stays float for the dot products that read it. Integer-element blocks (MXINT8, BFP16, MX9)
are untouched: their step is a fixed share of the block maximum (1/64 for MXINT8), not a growing
one, and ``lore_process`` MXINT8 holds (0.990). An answer that only the caller reads is not
quantized anyway (only dot-product operands are: plan/fp_blocks.py).
"""

from __future__ import annotations

from .corners import drop_float
from .fp_blocks import DOT_PRODUCT_OPS, is_fp_block
from .select import _Graph
from .short_blocks import short_block
from .types import TensorPlan

__all__ = ["fed_back_outputs_float"]


def fed_back_outputs_float(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Drop from ``tensors`` the FP-element MX activations that are graph outputs read again by a dot
    product in blocks shorter than the format's (module docstring); return ``{name: reason}`` for
    ``Plan.float_tensors``."""
    why: dict[str, str] = {}
    for name, t in tensors.items():
        if t.role != "activation" or name not in g.outputs or not is_fp_block(t):
            continue
        read_by_dot = any(r.op_type in DOT_PRODUCT_OPS for r in g.consumers.get(name, []))
        if read_by_dot and short_block(t, g.dims.get(name), t.quant):
            why[name] = ("graph output read again by a dot product in blocks shorter than the format's: an FP element "
                         "rounds the model's own answer by up to 1/16 of itself, so it stays float "
                         "(plan/fed_back_outputs.py)")
    return drop_float(tensors, why, "graph output(s) read again in short FP-element blocks stay float")
