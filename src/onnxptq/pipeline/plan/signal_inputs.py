"""The first convolutions of a float graph input stay float under FP-element MX formats (MXFP8/6/4).

Why: a model fed a sampled signal — an image, or a log spectrogram computed before the model
(AECMOS takes log-mel features in dB / 40 as its input; PaddleOCR/CRAFT take a mean/std-normalised
image) — meets it first with local detectors: small kernels whose taps nearly cancel (edges,
onsets, spectral slopes), sliding over an input whose neighbouring values share a common level.
An FP element rounds every value by up to 2^-(m+1) of itself (6 % at E4M3's 3 mantissa bits) at
any magnitude, so the rounding errors of the level no longer cancel in the detector's sum and
swamp the small difference the layer exists to measure. This is the mechanism
:mod:`.log_readers` handles where the ``Log`` is inside the graph; here the level is in the data
the graph is given. Measured as the noise gain ``Σ(w·x)² / y²`` of a convolution (the per-value
relative rounding of its operands, over the error that rounding of its output alone would give;
bench/RESULTS.md, "MXFP8_E4M3 on detectors and audio scorers"): AECMOS's first Conv 0.36
(+4.5 dB; its later Convs and dense layers −9.4 to −13.8 dB), CRAFT's first Conv 0.107 (+9.7 dB;
every other Conv of its VGG trunk −4 to −14 dB), DNSMOS's first Conv after the Log 0.305.
Keeping the first Conv's operands float: CRAFT MXFP8_E4M3 (repair off, 8 held-out images) region
F1 0.837 → 0.900, AECMOS's MOS error (96 held-out clips) rms 0.056 → 0.049.

The rule, by dataflow (no names, no data): from every float graph input, walk forward through
the ops that carry its values on without a dot product (:data:`.log_readers.CARRY_OPS`:
elementwise arithmetic, normalizations, data movement) and stop at the first dot products; those
that are convolutions (``Conv``/``ConvTranspose``: detectors slid over a sampled signal) keep
their planned operands (data input and weights) float, with the reason in the plan. A MatMul/Gemm
first reader (a feature vector, an encoder state, a token embedding behind a Gather of integer
ids) is no such detector and stays quantized; an activation read by other dot products as well
stays quantized for them. Integer-element blocks (MXINT8, MX9, BFP16) give a uniform step within
a block and get no such rule (as :mod:`.log_readers`).
"""

from __future__ import annotations

import logging

from ...graph.walk import downstream_nodes
from .fp_blocks import is_fp_block
from .log_readers import CARRY_OPS, LOG_DOTS
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["SIGNAL_DOTS", "first_input_convolutions", "fp_signal_input_convs"]

#: the first dot products of a graph input whose operands the rule keeps float: sliding detectors
SIGNAL_DOTS = frozenset({"Conv", "ConvTranspose"})


def first_input_convolutions(g: _Graph) -> dict[str, str]:
    """``{convolution node: the graph input it reads}``: the first dot products (:data:`LOG_DOTS`)
    a float graph input reaches through :data:`CARRY_OPS`, those of them that are convolutions."""
    found: dict[str, str] = {}
    for name in g.inputs:
        if not g.is_float(name):
            continue
        for reader in downstream_nodes([name], g.consumers, lambda n: n.op_type in CARRY_OPS):
            if reader.op_type in LOG_DOTS and reader.op_type in SIGNAL_DOTS:
                found.setdefault(reader.name, name)
    return found


def fp_signal_input_convs(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Keep the operands of a float graph input's first convolutions float under FP-element MX
    formats (module docstring); returns ``{tensor: reason}`` for ``Plan.float_tensors``."""
    convs = first_input_convolutions(g)
    why: dict[str, str] = {}
    if not convs:
        return why
    for name, t in list(tensors.items()):
        if not is_fp_block(t):
            continue
        mine = [c for c in t.consumers if c in convs]
        if not mine:
            continue
        rest = [c for c in t.consumers if c not in convs]
        if rest and t.role == "activation":
            t.consumers, t.exclusive = rest, True
            continue
        del tensors[name]
        why[name] = (f"operand of {mine[0]}, the first convolution of the graph input {convs[mine[0]]}: an "
                     "FP-element MX format's per-value rounding breaks its cancelling taps against the signal's "
                     "level (plan/signal_inputs.py), so it stays float")
    if why:
        log.info("plan: %d operands of a graph input's first convolutions stay float under an FP-element MX format: %s",
                 len(why), ", ".join(sorted(why)[:4]))
    return why
