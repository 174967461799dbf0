"""PESTO's over-repair reproduced on a 16-node graph: a pitch posteriorgram read by its own local weighted average.

PESTO (round 31) ends as CREPE-style pitch trackers do: a softmax over 384 ordered pitch bins (3 a semitone) per
frame, exported as an output (``activations``), and inside the graph the *argmax-local weighted average* of it
(``reduce_activations(..., "alwa")``), after rolling the bins by the model's calibrated shift (Slice, Slice, Concat:
the output is no Softmax's own, so rule 1 does not see it): ArgMax → a window of the bins around it (Add of [-1, 0, 1], Clip) →
GatherElements of the probabilities and of the bins' pitches → their weighted mean, the ``pitch`` output the user
reads. Analysis/class_scores rule 2 ("the graph itself takes an ArgMax of it") makes ``activations`` class scores of
rank 3, judged as *reads*: every frame's arg-max must hold for a sequence to count. A pitch posterior is a smooth bump
over neighbouring bins, so its arg-max moves by one bin (33 cents; the decoded pitch by about 17) under any 16-bit
rounding: the floor breaks and repair keeps the graph float, while the pitch the graph decodes stays within a few
cents.

Since pesto22 the floor finds that decode by structure (analysis/ordinal_bins.py: an ``ArgMax`` whose indices only
place a window of its own scores) and judges ``activations`` by the share of frames whose arg-max stays within the
window's half-width of float's, beside its cosine: BF16 holds with repair off, and repair keeps nothing.

This script builds the pattern (features → MatMul → Softmax over 384 bins → roll → ``activations``; the alwa decode →
``pitch``), quantizes it BF16 with repair off and on, and prints the floor's verdict, what repair kept and the
pitch change in cents (held-out frames).

    PYTHONPATH=src:.:bench python bench/round31_alwa_floor.py
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BINS, FEATS, FRAMES = 384, 96, 64


def build() -> onnx.ModelProto:
    """[1, T, 96] features → MatMul [96, 384] → Softmax → roll (Slice, Slice, Concat) → activations; alwa → pitch
    [1, T] (semitones)."""
    rng = np.random.default_rng(0)
    # each feature a Gaussian bump over 4 neighbouring bins (a harmonic-CQT column's projection, smooth over pitch)
    centres = np.linspace(0, BINS - 1, FEATS)
    w = np.exp(-0.5 * ((np.arange(BINS)[None, :] - centres[:, None]) / 4.0) ** 2) * 60.0
    w += rng.normal(0, 0.05, w.shape)
    pitches = (np.arange(BINS, dtype=np.float32) / 3.0)[None, None, :]
    inits = [numpy_helper.from_array(w.astype(np.float32), "W"),
             numpy_helper.from_array(np.array([[[-1, 0, 1]]], np.int64), "window"),
             numpy_helper.from_array(np.array(0, np.int64), "lo"), numpy_helper.from_array(np.array(BINS - 1, np.int64), "hi"),
             numpy_helper.from_array(pitches, "pitches"), numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array([2], np.int64), "k"), numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([BINS], np.int64), "end")]
    nodes = [
        helper.make_node("MatMul", ["features", "W"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        # PESTO's roll by its calibrated shift (activations.roll(-shift, -1)), as the exporter writes it
        helper.make_node("Slice", ["probs", "k", "end", "last"], ["tail"]),
        helper.make_node("Slice", ["probs", "zero", "k", "last"], ["head"]),
        helper.make_node("Concat", ["tail", "head"], ["activations"], axis=-1),
        helper.make_node("ArgMax", ["activations"], ["centre"], axis=-1, keepdims=1),
        helper.make_node("Add", ["centre", "window"], ["idx_raw"]),
        helper.make_node("Clip", ["idx_raw", "lo", "hi"], ["idx"]),
        helper.make_node("GatherElements", ["activations", "idx"], ["p"], axis=-1),
        helper.make_node("Shape", ["activations"], ["shape"]),
        helper.make_node("Expand", ["pitches", "shape"], ["all_pitches"]),
        helper.make_node("GatherElements", ["all_pitches", "idx"], ["f"], axis=-1),
        helper.make_node("Mul", ["p", "f"], ["pf"]),
        helper.make_node("ReduceSum", ["pf", "last"], ["num"], keepdims=0),
        helper.make_node("ReduceSum", ["p", "last"], ["den"], keepdims=0),
        helper.make_node("Div", ["num", "den"], ["pitch"]),
    ]
    graph = helper.make_graph(nodes, "alwa", [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, "T", FEATS])],
                              [helper.make_tensor_value_info("pitch", TensorProto.FLOAT, [1, "T"]),
                               helper.make_tensor_value_info("activations", TensorProto.FLOAT, [1, "T", BINS])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Frames of a sung line: the features of a pitch gliding through a random phrase (a bump over 2-3 features at
    the pitch's position, plus noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        track = np.cumsum(rng.normal(0, 0.6, FRAMES)) + rng.uniform(60, 320)
        pos = np.clip(track, 0, BINS - 1) * (FEATS - 1) / (BINS - 1)
        x = np.exp(-0.5 * ((np.arange(FEATS)[None, :] - pos[:, None]) / 0.8) ** 2) + rng.normal(0, 0.02, (FRAMES, FEATS))
        out.append({"features": x[None].astype(np.float32)})
    return out


def main() -> None:
    import onnxruntime as ort

    import onnxptq
    from onnxptq.config.presets import get_preset

    tmp = Path(tempfile.mkdtemp())
    src = tmp / "alwa.onnx"
    onnx.save(build(), str(src))
    calib, held = feeds(24, 1), feeds(16, 1000)
    ref = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    for repair in (False, True):
        out = tmp / f"alwa.bf16.{repair}.onnx"
        result = onnxptq.quantize(str(src), dataclasses.replace(get_preset("BF16"), repair=repair), data=calib,
                                  output=str(out))
        test = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        moved, cents = 0, []
        for f in held:
            a, b = ref.run(None, f), test.run(None, f)
            moved += int((a[1].argmax(-1) != b[1].argmax(-1)).sum())
            cents.append(np.abs(a[0] - b[0]).ravel() * 100)
        cents = np.concatenate(cents)
        said = [line.strip() for line in result.summary().splitlines()
                if line.strip().startswith(("accuracy floor (", "REPAIRED"))]
        print(f"repair={repair}:", *said, sep="\n  ")
        print(f"  arg-max moved on {moved} of {len(cents)} held-out frames; pitch change max {cents.max():.2f} cents, "
              f"99th percentile {np.percentile(cents, 99):.2f}, within 50 cents {np.mean(cents <= 50):.4f}")


if __name__ == "__main__":
    main()
