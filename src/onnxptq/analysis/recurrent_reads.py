"""An output a recurrent layer writes step by step is judged step by step: the share of its frames that keep float's.

Why: a GRU/LSTM/RNN's state carries each step's rounding into the later ones, so its error is not spread evenly over a
sequence: it grows over the steps the layer remembers and is worst in the frames late in a long sequence or after a
stretch that repeats its rounding. A cosine pooled over every frame of every feed is dominated by the loud, early,
well-kept frames and misses it: DeepFilterNet3's encoder output ``emb`` (out of its ``/emb_gru/GRU`` over ~300 frames)
kept a pooled cosine of 0.999 ≥ 0.99 under A16W8 while only 0.931 of the speech frames its decoders enhance from it
kept their spectrum within 20 dB of float's (bench/RESULTS.md, newmodels22; rnnweights's section).

**Which outputs** (:func:`recurrent_outputs`, by structure): a float graph output of rank ≥ 2 reached from a recurrent
layer's sequence output ``Y`` (input 0 of its readers, not the last state ``Y_h``/``Y_c``) through ops that act on each
frame alone: re-layouts, element-wise activations, element-wise arithmetic with constants or other such paths, and the
dot products (MatMul/Gemm/Einsum) a per-frame linear layer is. **The reading** (:class:`StepFrames`): each vector along
the last axis (a step's features) is a frame; a frame keeps float's where its squared error is within ``2 · (1 − cosine
floor)`` of its energy (the distance two vectors keep at the family's cosine floor), frames float leaves below
``1e-6`` of the feed's loudest ignored (silence: nothing to keep). Fewer than the top-1 floor of the frames keeping it
fails the output, beside its pooled cosine.
"""

from __future__ import annotations


import numpy as np
import onnx

from ..graph.ops import FLOATING, RECURRENT, RELAYOUTS
from .gains import GainFrames

__all__ = ["FRAMEWISE", "StepFrames", "recurrent_outputs", "step_note"]

#: ops that keep a frame's values within that frame: what a recurrent layer's sequence passes through to an output
FRAMEWISE = RELAYOUTS | frozenset("Relu LeakyRelu Sigmoid Tanh HardSigmoid Clip Elu Selu Softplus Mul Add Sub Div "
                                  "MatMul Gemm Einsum Cast".split())
#: a frame's error is weighed against at least this share of its feed's mean frame energy (20 dB under it)
QUIET = 1e-2


def recurrent_outputs(model: onnx.ModelProto) -> set[str]:
    """The float graph outputs of rank ≥ 2 a recurrent layer's sequence output reaches through frame-wise ops."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    consts = {t.name for t in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    found: set[str] = set()
    for out in graph.output:
        tt = out.type.tensor_type
        if tt.elem_type not in FLOATING or (tt.HasField("shape") and len(tt.shape.dim) < 2):
            continue
        stack, seen = [out.name], set()
        while stack:
            name = stack.pop()
            node = producer.get(name)
            if name in seen or node is None:
                continue
            seen.add(name)
            if node.op_type in RECURRENT:
                if node.output and node.output[0] == name:
                    found.add(out.name)
                    break
                continue
            if node.op_type in FRAMEWISE:
                stack.extend(i for i in (node.input[:1] if node.op_type in RELAYOUTS else node.input) if i and i not in consts)
    return found


class StepFrames(GainFrames):
    """Frames (vectors along the last axis) that keep float's within the family's cosine distance (module docstring):
    :class:`~onnxptq.analysis.gains.GainFrames`' count, with a quiet frame judged against the feed's level."""

    def relative_errors(self, r: np.ndarray, g: np.ndarray, energy: np.ndarray) -> np.ndarray | None:
        if not energy.size or energy.mean() <= 0.0:
            return None
        # a frame far quieter than the feed's average is judged against a level QUIET under that average: its own
        # energy would call a rounding that is tiny beside the sequence a total loss
        return ((r - g) ** 2).sum(axis=1) / np.maximum(energy, QUIET * energy.mean())


def step_note(frames: StepFrames, top1: float) -> str | None:
    """The failing note where fewer than ``top1`` of the frames keep float's; None where they do or none were seen."""
    share = frames.share
    if share is None or share >= top1:
        return None
    worst = -10.0 * np.log10(max(frames.worst, 1e-30))
    return (f"(a recurrent layer's output read step by step: {frames.kept} of {frames.frames} frames ({share:.4f}) keep "
            f"float's within the floor's cosine distance, below the top-1 floor {top1:g}; worst frame {worst:.1f} dB SNR: "
            "analysis/recurrent_reads.py)")
