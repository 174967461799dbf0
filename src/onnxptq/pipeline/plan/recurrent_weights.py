"""A long recurrent layer's weights get 16 bits when its activations are finer than its weights.

Why: a GRU/LSTM/RNN multiplies its state by ``R`` and its input by ``W`` at every step, and the state carries each
step's products into all later ones, so the weights' rounding is not seen once, as a feed-forward weight's is, but
compounded over as many steps as the layer remembers. Where the activations are finer than the weights (A16W8: 16-bit
sequence and state, 8-bit ``W``/``R``) the weights are the coarsest rounding in the loop. Measured on DeepFilterNet3's
encoder, its ``/emb_gru/GRU`` over ~300 frames (bench/recurrent_weights.py, repair off, 48 held-out clips, speech
frames within 20 dB of float's): A16W8 0.862 with ``R`` and ``W`` int8; ``R`` float 0.933 (``R`` int16 0.934);
``R`` float and ``W`` int16 0.983, the whole GRU float 0.983. Under A8W8 the 8-bit sequence dominates: 0.778 / 0.769 /
0.774 (no gain: not applied there).

The rule, by dataflow, shape and formats only: a ``GRU``/``LSTM``/``RNN`` whose sequence axis (input 0's axis 0, or 1
under ``layout=1``) is symbolic, unknown or at least :data:`LONG_SEQUENCE` steps, under integer weights narrower than
its integer activations, quantizes ``W`` (input 1) and ``R`` (input 2) per channel at 16 bits (R int16 kept what R
float did: 0.934 vs 0.933, at half R float's bytes), when no other node reads them. A layer run one step per call (sequence length 1, the state carried by the
caller) is left alone: there the weights' rounding enters once per call, as a feed-forward weight's does.
"""

from __future__ import annotations

import dataclasses
import logging

from ...config.schema import QuantConfig
from .recurrent_inputs import RECURRENT_OPS
from .select import _Graph
from .types import TensorPlan

__all__ = ["LONG_SEQUENCE", "recurrent_weights"]

log = logging.getLogger(__name__)

#: steps from which a known sequence length counts as long: the state has had time to compound the weights' rounding
#: well past one feed-forward rounding (a design bound, not fitted to a model)
LONG_SEQUENCE = 16
_BITS = {"int4": 4, "uint4": 4, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16}


def _steps(node, g: _Graph) -> int | None:
    """The layer's known sequence length, or None where it is symbolic or unknown."""
    dims = g.dims.get(node.input[0]) if node.input else None
    axis = 1 if next((a.i for a in node.attribute if a.name == "layout"), 0) == 1 else 0
    return dims[axis] if dims is not None and len(dims) > axis else None


def _long_loops(name: str, index: int, g: _Graph) -> list[int | None] | None:
    """The sequence lengths of the recurrent layers that alone read ``name`` as input ``index``, where one is long."""
    readers = g.consumers.get(name, [])
    loops = [n for n in readers if n.op_type in RECURRENT_OPS and len(n.input) > index and n.input[index] == name]
    if not loops or len(loops) != len(readers):
        return None
    steps = [_steps(n, g) for n in loops]
    return None if all(s is not None and s < LONG_SEQUENCE for s in steps) else steps


def recurrent_weights(tensors: dict[str, TensorPlan], g: _Graph, config: QuantConfig) -> dict[str, str]:
    """Long recurrent layers' ``W`` and ``R`` per channel at 16 bits where the activations are finer than the weights
    (module docstring), changed in ``tensors`` in place (their plans' formats say so, the log why). Returns ``{}``: no
    tensor is kept float (the late rules' common return)."""
    act, wt = config.activation, config.weight
    if act is None or wt is None or _BITS.get(wt.format, 99) >= _BITS.get(act.format, 0):
        return {}
    for name, t in list(tensors.items()):
        if t.role != "weight" or not t.quant.is_integer or _BITS.get(t.quant.format, 99) >= 16:
            continue
        for index, what in ((1, "input weights W"), (2, "recurrent weights R")):
            steps = _long_loops(name, index, g)
            if steps is None:
                continue
            wide = dataclasses.replace(t.quant, format="int16" if t.quant.symmetric else "uint16")
            tensors[name] = dataclasses.replace(t, quant=wide)
            log.info("plan: %s, %s of a recurrent layer over a long sequence (%s steps) under weights coarser than its "
                     "activations: 16 bits, the state compounds their rounding (plan/recurrent_weights.py)", name, what,
                     ", ".join("symbolic" if s is None else str(s) for s in steps))
    return {}
