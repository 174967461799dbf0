"""A recurrent layer reads its input sequence float under FP-element MX formats.

Why: a GRU, LSTM or RNN node is a loop: its input ``X`` enters every step's gates, and the state
carries what each step added into all later steps (a GRU's update gate near 1 is how it remembers),
so the state sums the input's rounding over as many steps as it remembers. A feed-forward dot
product sees each rounding once. An FP element rounds every value by up to 1/16 of itself (E4M3's 3
mantissa bits; FP6/FP4 coarser), and frames that repeat (silence, a stationary noise floor, a held
note) repeat their rounding, which the state then integrates instead of averaging. Measured with
repair off (bench/RESULTS.md, branch mxfp8e), keeping one tensor float at a time, on the two
MXFP8_E4M3 rows that lost most: AECMOS (speech MOS, 96 held-out calls, both MOS within 0.1 of
float's) 0.917 with every tensor quantized (after plan/bounded_blocks.py), 0.969 with the first
GRU's input float, 0.896–0.927 with any other one activation float; NSNet2 48 kHz (speech frames
within 20 dB of float's, 32 clips) 0.848, the first GRU's input float 0.895, both GRUs' 0.909,
either GRU's weights float 0.849–0.850 (the weights are not it), the input layer's or the output
layers' input float 0.849–0.862.

The rule, by dataflow (op types only as the ONNX loop ops they are): an activation planned with an
FP-element MX format that a ``GRU``/``LSTM``/``RNN`` reads as its input sequence (input 0) is not
quantized for that reader; when other dot products read it too they keep the quantized value
(``exclusive``). The weights ``W``/``R`` stay in the format, so the layer's storage is unchanged and
run time only loses a quantizer. Integer-element blocks (MXINT8, BFP16, MX9) and integer Q/DQ are
untouched: their rows hold (NSNet2 48 kHz MXINT8 0.989, BFP16 0.995).
"""

from __future__ import annotations

from .corners import drop_float
from .fp_blocks import is_fp_block
from .select import _Graph
from .types import TensorPlan

__all__ = ["RECURRENT_OPS", "recurrent_inputs_float"]

#: ONNX's loop layers: their input 0 is the sequence every step reads
RECURRENT_OPS = frozenset({"GRU", "LSTM", "RNN"})


def recurrent_inputs_float(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Keep the recurrent layers' input sequences float under FP-element MX (module docstring): a
    tensor only recurrent layers read is dropped from ``tensors`` (``{name: reason}`` returned for
    ``Plan.float_tensors``); one other dot products read too stays quantized for them only."""
    why: dict[str, str] = {}
    for name, t in tensors.items():
        if t.role != "activation" or not is_fp_block(t):
            continue
        recurrent = {n.name for n in g.consumers.get(name, []) if n.op_type in RECURRENT_OPS and n.input and n.input[0] == name}
        if not recurrent or not recurrent & set(t.consumers):
            continue
        rest = [c for c in t.consumers if c not in recurrent]
        if any(n.name in rest for n in g.consumers.get(name, [])):
            t.consumers, t.exclusive = rest, True
            continue
        why[name] = ("input sequence of a recurrent layer (GRU/LSTM/RNN) under an FP-element MX format: the state "
                     "integrates its rounding over the steps it remembers, so it stays float (plan/recurrent_inputs.py)")
    return drop_float(tensors, why, "recurrent layers' input sequences stay float under an FP-element MX format")
