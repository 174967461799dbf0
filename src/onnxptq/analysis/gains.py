"""A sigmoid map shaped exactly like one of the model's inputs: a gain its caller multiplies into that input's signal.

Why: NSNet2 (48 kHz) takes a noisy log-power spectrum ``[B, T, 513]`` and returns ``Sigmoid → Clip``,
``[B, T, 513]``: one suppression gain per time-frequency bin, which the package multiplies into the
noisy spectrum (outside the graph) before the inverse STFT. What is heard is the product, so a gain's
error counts by the energy of the bin it scales: under MXFP8_E4M3 the gain kept a cosine of 0.999 and
its masks an IoU of 0.95 with float's, the floor held, and only 0.931 of the speech frames kept their
enhanced spectrum within 20 dB of float's (task floor 0.95; bench/RESULTS.md, "MXFP8_E4M3 on LORE's
cell transformer, NSNet2 48 kHz and AECMOS" and this branch's section). The signal's energy per bin is
not in the graph (the input is whatever features the caller computed: a log spectrum here), so the
floor cannot judge the product by itself.

What it can do honestly is say so (:func:`gain_advisory`). **Which outputs** (:func:`gain_outputs`, by
structure): a graph output read from a ``Sigmoid``/``HardSigmoid`` through data movement and ``Clip``
(values in [0, 1]) whose shape, as the model declares or shape inference finds it, is a float graph
input's dimension by dimension (the same size or the same symbolic name on every axis, rank ≥ 2, a
last axis of at least 2 known elements): one value per element of the input, the layout of an
element-wise gain or mask. A segmentation map (``[N, 1, H, W]`` from an ``[N, 3, H, W]`` image), a
class head or a per-frame score is not shaped like its input and is not such an output.

**The estimate** (:class:`GainFrames`): each vector along the last axis (a frame's bins) is the unit a
caller multiplies and hears together. Weighing every element's signal alike (the one weighting that
needs nothing the graph lacks), a frame keeps float's product where its gain's squared error is
within ``2 · (1 − cosine floor)`` of its gain's energy (the distance two vectors of equal length keep
at the family's cosine floor: 0.02 for 16-bit, 0.04 for 8-bit). Where fewer than the family's top-1
floor of the frames keep it, a warning names the output, the input it is shaped like, the share, and
how to tell the floor the real reading (``QuantConfig.floor_output_agreement``); the verdict is not
changed (an estimate under a weighting the caller may not use decides no repair). Told, the floor
holds the user's reading against the top-1 floor and the warning is not given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..graph.ops import FLOATING, RELAYOUTS
from .confidence_gates import from_sigmoid

__all__ = ["GainFrames", "gain_advisory", "gain_outputs"]

#: nodes a gain passes through unchanged in meaning (data movement; ``Clip`` keeps it bounded)
_THROUGH = RELAYOUTS | {"Cast", "Clip"}
_GATES = frozenset(("Sigmoid", "HardSigmoid"))


def _dims(value: onnx.ValueInfoProto) -> tuple[object, ...] | None:
    """A value's dimensions: an int, a symbolic name, or None where neither is known; None without a shape."""
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)


def _same_layout(out: tuple[object, ...] | None, inp: tuple[object, ...] | None) -> bool:
    """Whether an output's dimensions are an input's on every axis (module docstring, "Which outputs")."""
    if out is None or inp is None or len(out) != len(inp) or len(out) < 2:
        return False
    if not (isinstance(out[-1], int) and out[-1] >= 2):
        return False
    return all(a is not None and a == b for a, b in zip(out, inp))


def _gated(model: onnx.ModelProto) -> list[str]:
    """Graph outputs read from a sigmoid through :data:`_THROUGH`."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    return [out.name for out in model.graph.output
            if from_sigmoid(out.name, producer, (), sigmoids=_GATES, through=_THROUGH, where=False)]


def gain_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """Output name → the graph input it is shaped like, for every sigmoid output laid out like a float
    input (module docstring). Shape inference runs only where such an output's declared shape leaves
    an axis unknown or unlike every input's (NSNet2's exporter named the gain's last axis
    ``Clipoutput_dim_2``; inference finds it 513, the input's)."""
    gated = _gated(model)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [(i.name, _dims(i)) for i in model.graph.input
              if i.name not in initializers and i.type.tensor_type.elem_type in FLOATING]
    if not gated or not inputs:
        return {}
    declared = {o.name: _dims(o) for o in model.graph.output}

    def match(dims: tuple[object, ...] | None) -> str | None:
        return next((name for name, shape in inputs if _same_layout(dims, shape)), None)

    found = {name: match(declared.get(name)) for name in gated}
    if any(v is None for v in found.values()):
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # noqa: BLE001 - a model shape inference cannot read keeps its declared shapes
            inferred = None
        if inferred is not None:
            known = {v.name: _dims(v) for v in [*inferred.graph.value_info, *inferred.graph.output]}
            found = {name: inp if inp is not None else match(known.get(name)) for name, inp in found.items()}
    return {name: inp for name, inp in found.items() if inp is not None}


@dataclass
class GainFrames:
    """Frames (vectors along the last axis) whose gain keeps float's within the family's cosine
    distance, weighing every element alike (module docstring, "The estimate")."""

    cosine: float
    kept: int = 0
    frames: int = 0
    worst: float = 0.0

    def add(self, ref: np.ndarray, got: np.ndarray) -> None:
        r = np.asarray(ref, np.float64)
        if r.ndim < 2 or r.shape != np.asarray(got).shape or r.shape[-1] < 2:
            return
        r = r.reshape(-1, r.shape[-1])
        g = np.asarray(got, np.float64).reshape(r.shape)
        error = self.relative_errors(r, g, (r * r).sum(axis=1))
        if error is None:
            return
        self.kept += int((error <= 2.0 * (1.0 - self.cosine)).sum())
        self.frames += int(error.size)
        if error.size:
            self.worst = max(self.worst, float(error.max()))

    def relative_errors(self, r: np.ndarray, g: np.ndarray, energy: np.ndarray) -> np.ndarray | None:
        """Each judged frame's squared error over its energy (None: no frame judged)."""
        live = energy > 0.0  # a frame float gates to silence entirely: nothing of the signal is kept to differ
        return ((r - g) ** 2).sum(axis=1)[live] / energy[live]

    @property
    def share(self) -> float | None:
        return self.kept / self.frames if self.frames else None


def gain_advisory(name: str, input_name: str, frames: GainFrames, top1: float) -> str | None:
    """The warning on output ``name``, a gain shaped like input ``input_name``, where fewer than
    ``top1`` of its frames keep float's (module docstring); None otherwise (no frames, or they keep it)."""
    share = frames.share
    if share is None or share >= top1:
        return None
    return (f"a [0, 1] map shaped like input {input_name!r}, element by element: a gain or mask a caller multiplies into "
            f"the signal that input describes, whose errors count by that signal's energy per element, which the graph "
            f"does not hold, so the floor could NOT judge the product. Weighing every element alike, {frames.kept} of "
            f"{frames.frames} frames (vectors along its last axis, {share:.4f}) keep their gain within the floor's cosine "
            f"distance of float's, below the top-1 floor {top1:g} (worst relative squared error {frames.worst:.3g}). "
            f"If it is read so, tell the floor how: floor_output_agreement={{{name!r}: f(float_gain, quantized_gain) -> share "
            f"of it read as float's}} (docs/accuracy.md, \"A gain shaped like its input\")")
