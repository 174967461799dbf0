"""A recurrent layer's recurrent weights ``R`` stay float when its sequence is long.

Why: a GRU/LSTM/RNN multiplies its state by ``R`` at every step, and the state carries each step's
product into all later ones, so ``R``'s rounding is not seen once, as a feed-forward weight's is,
but compounded over as many steps as the layer remembers: the state drifts further from float's the
longer the sequence runs. The input weights ``W`` act on the input alone (no feedback), and ``B`` is
a constant add. Found on DeepFilterNet3's encoder (bench/RESULTS.md, newmodels22): every 8-bit row
lost its ``emb`` output, out of one GRU over ~300 frames, and keeping that GRU float brought A16W8
from 0.918 to 0.974 of speech frames within 20 dB of float's.

The rule, by dataflow and shape only: a ``GRU``/``LSTM``/``RNN`` whose sequence axis (input 0's
axis 0, or 1 under ``layout=1``) is symbolic, unknown or at least :data:`LONG_SEQUENCE` steps keeps
its ``R`` (input 2) float when no other node reads it quantized. ``R`` is ``gates × hidden²``, so the
file grows by ``R``'s float bytes only (a few percent of a layer whose ``W`` is wider than its state).
A layer run one step per call (sequence length 1, state carried by the caller) is left alone: there
``R``'s rounding enters once per call, as a feed-forward weight's does.
"""

from __future__ import annotations

from .corners import drop_float
from .recurrent_inputs import RECURRENT_OPS
from .select import _Graph
from .types import TensorPlan

__all__ = ["LONG_SEQUENCE", "recurrent_weights_float"]

#: steps from which a known sequence length counts as long: the state has had time to compound
#: ``R``'s rounding well past one feed-forward rounding (a design bound, not fitted to a model)
LONG_SEQUENCE = 16


def _steps(node, g: _Graph) -> int | None:
    """The layer's known sequence length, or None where it is symbolic or unknown."""
    dims = g.dims.get(node.input[0]) if node.input else None
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    axis = 1 if layout == 1 else 0
    return dims[axis] if dims is not None and len(dims) > axis else None


def recurrent_weights_float(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Keep long recurrent layers' ``R`` float (module docstring); return ``{name: reason}``."""
    why: dict[str, str] = {}
    for name, t in tensors.items():
        if t.role != "weight":
            continue
        readers = g.consumers.get(name, [])
        loops = [n for n in readers if n.op_type in RECURRENT_OPS and len(n.input) > 2 and n.input[2] == name]
        if not loops or len(loops) != len(readers):
            continue
        steps = [_steps(n, g) for n in loops]
        if all(s is not None and s < LONG_SEQUENCE for s in steps):
            continue
        seen = ", ".join("symbolic" if s is None else str(s) for s in steps)
        why[name] = (f"recurrent weights R of a recurrent layer over a long sequence ({seen} steps): the state compounds "
                     "R's rounding at every step, so R stays float (plan/recurrent_weights.py)")
    return drop_float(tensors, why, "recurrent layers' R weights stay float over long sequences")
