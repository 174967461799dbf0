"""FP8-element MX activations holding a recurrent layer's state (bounded by 1) take the unsaturated exponent.

Why: OCP's shared exponent ``floor(log2(amax)) - emax_elem`` maps a block's maximum into
``[2^emax, 2^(emax+1))`` and an FP8 element saturates at 1.75·2^emax (E4M3: 448), so a block whose
maximum lies in the top eighth of its binade is clipped there (formats/mx.py; plan/short_blocks.py
for an image's colour blocks). A function bounded by 1 (tanh, the logistic sigmoid, and so a GRU's,
LSTM's or RNN's hidden state, a mix of tanh values) puts its values exactly there when it
saturates: every value in ``[0.875, 1)`` of a block whose maximum is below 1 reads 0.875, up to
12.5 % low, always towards zero. A recurrent layer's state sits near ±1 for long stretches (that is
how it remembers), so the clip is no rare maximum but a large share of the elements, and the same
on every frame: measured on NSNet2 48 kHz's two GRU outputs (6 calibration clips, formats/mx.py),
SQNR 25.8 / 24.0 dB under OCP's exponent with 25–27 % of the error a per-feature mean, against
37.2 / 33.7 dB and 5–9 % one binade up (MX ``scale_search=3``), while the ReLU outputs beside them
gain 2–3 dB (28–29 → 31–32 dB). Where a block holds a value of exactly ±1 (or more) the exponent is
OCP's anyway; only the clipping blocks change.

The rule, by dataflow (no names, no data): an activation planned with an FP8-element MX format and
OCP's exponent whose values are a recurrent layer's hidden state — a ``GRU``/``LSTM``/``RNN`` output
``Y``/``Y_h`` with its default (sigmoid/tanh) activations, only permuted or reshaped on the way (plan/short_blocks.py ``INPUT_PERMUTING_OPS``) — takes ``scale_search=3``: a few ops on
the block maxima at run time (no second quantization), and an FP8 element keeps its relative
precision one binade up. FP6/FP4 elements keep OCP's rule (one binade up costs them a mantissa
step on the block's other elements), integer elements too (their step is a share of the block
maximum, no clip). ``QuantConfig.mx_activation_scale_search`` 0 keeps OCP's rule everywhere.
"""

from __future__ import annotations

import logging

import onnx

from .select import _Graph
from .short_blocks import INPUT_PERMUTING_OPS, fp8_ocp, unsaturated
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["BOUNDED_OPS", "bounded_exponents", "bounded_values"]

#: recurrent ops whose hidden state is bounded by 1 with their default activations and sits near it
#: while it remembers (a plain Tanh/Sigmoid is not taken: it changed basic_pitch's contour
#: posteriorgram and broke its floor, bench/RESULTS.md "... branch mxfp8e")
BOUNDED_OPS = frozenset({"GRU", "LSTM", "RNN"})
_BOUNDED_NAMES = {"Tanh", "Sigmoid"}


def _bounded_node(node: onnx.NodeProto, output: str) -> bool:
    if node.op_type not in BOUNDED_OPS or output not in list(node.output)[:2]:  # Y, Y_h (an LSTM's Y_c is not bounded)
        return False
    for attr in node.attribute:
        if attr.name == "activations" and any(a.decode() not in _BOUNDED_NAMES for a in attr.strings):
            return False
    return True


def bounded_values(name: str, g: _Graph) -> bool:
    """Whether tensor ``name`` holds a bounded function's output, only permuted or reshaped (module docstring)."""
    seen: set[str] = set()
    while name not in seen:
        seen.add(name)
        node = g.producer.get(name)
        if node is None:
            return False
        if _bounded_node(node, name):
            return True
        if node.op_type not in INPUT_PERMUTING_OPS or not node.input:
            return False
        name = node.input[0]
    return False


def bounded_exponents(tensors: dict[str, TensorPlan], g: _Graph) -> int:
    """Give FP8-element MX activations with OCP's exponent that hold a bounded function's output the
    unsaturated exponent ``scale_search=3`` (module docstring); returns how many changed."""
    changed = []
    for name, t in tensors.items():
        if t.role != "activation" or not bounded_values(name, g):
            continue
        hit = False
        if fp8_ocp(t.quant):
            t.quant, hit = unsaturated(t.quant), True
        if fp8_ocp(t.producer_quant):
            t.producer_quant, hit = unsaturated(t.producer_quant), True
        if hit:
            changed.append(name)
    if changed:
        log.info("plan: %d FP8 MX activations holding a recurrent layer's state take the "
                 "exponent that does not clip values near 1 (plan/bounded_blocks.py): %s",
                 len(changed), ", ".join(changed[:4]) + (" ..." if len(changed) > 4 else ""))
    return len(changed)
