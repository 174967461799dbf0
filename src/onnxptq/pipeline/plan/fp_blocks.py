"""Block formats on dot-product operands; MX formats with floating-point elements (MXFP8/6/4): what the OCP scale rule needs from the plan.

Why these differ from integer-element blocks (MXINT8, BFP, MX9): an FP element's relative
precision is the same at every magnitude, so a block buys range, not precision, and the OCP
shared exponent ``floor(log2(amax)) - emax_elem`` puts the block maximum in ``[2^emax, 2^(emax+1))``
where E4M3 saturates above 448 = 1.75·2^8: the block's largest element loses up to 12.5 % when
its mantissa is above 1.75 (spec §6.3, "the block max can clip").

* A weight whose block axis has length 1 (a depthwise Conv's ``[C, 1, kh, kw]`` along the input
  channels) makes every element a block of its own, so EVERY element whose mantissa is above 1.75
  saturates — one weight in eight, by up to 12.5 % — instead of one element per 32. With an FP
  element nothing is gained by a per-element scale (its range is ±2^17 within a block), so the
  block runs along the tensor's longest axis instead (the output channels of a depthwise Conv).
  Measured on PP-OCRv4 rec MXFP8_E4M3, see
  docs/formats.md "MXFP8 on PP-OCRv4 rec" for the whole bisection.
* A Conv/Gemm bias is added in the accumulator, which the OCP MX dot product keeps in FP32
  (spec §6.4); a BN-folded bias rounded to 3 mantissa bits shifts whole channels by up to 6 %
  of their bias, which cancels against the convolution sum (rec: CER 0.58 → 0.41 when the biases
  alone stay float). Biases of FP-element MX formats stay float, with the reason in the plan.

* Only the operands of dot products are encoded (OCP MX v1.0 §6.4 defines MX compute as the dot
  product of two MX vectors, accumulated in FP32; the companion paper's direct-cast inference, and
  its microxcaling code, quantize the inputs of matmul/linear/conv layers and run every vector op —
  bias and residual adds, normalizations, activations, softmax — at higher precision). An FP
  element rounds every value it touches by up to 2^-(mbits+1) of itself, at any magnitude, so each
  quantizer on a chain of elementwise ops adds its own ≈ 3.6 % (E4M3) relative noise to the
  tensor itself: on a ViT the residual stream, the layer-scale products and the GELU inputs are
  rounded again at every block and the output cosine falls to 0.964 (0.996 with the dot products'
  operands alone; bench/RESULTS.md "MXFP8_E4M3 and block formats on the ViT"). So an FP-element MX
  activation is quantized only for the dot products that read it (``exclusive``: the model's other
  readers keep the float value), one that no dot product reads stays float, and so does a constant
  only elementwise ops read (a layer scale or an affine's offset, a systematic per-channel error);
  a lookup table (Gather) is stored like a weight.

* The queries and keys of an attention score product (the MatMul of two computed operands whose
  output a Softmax reads, plan/attention_scores.py) take MXINT8 elements under an FP8-element plan:
  the Softmax turns the scores' absolute error into its probabilities' relative error, and MXINT8
  rounds those Gaussian-spread blocks 10–150× more finely (squared error) than E4M3 at the same bytes
  (:func:`attention_score_operands`).

* The operands of a channel gate's dot products (squeeze-and-excitation: a pooled feature map through 1×1
  convolutions to a Mul that rescales it; plan/channel_gates.py) take MXINT8 elements under an FP8-element plan
  too (:func:`channel_gate_operands`): a gate's error is a gain error of a whole channel at every position, and its
  inputs are one pooled vector per image whose large channels sit nearly constant, so E4M3's rounding of them is
  the same offset on every sample.

* Weights choose their shared exponent by squared error among the OCP one and its neighbours
  (MX ``scale_search``, ``QuantConfig.mx_weight_scale_search``: :func:`mx_weight_exponents`). The
  OCP exponent ``floor(log2(amax)) - emax_elem`` puts the block maximum in ``[2^emax, 2^(emax+1))``,
  and an element saturates at its max normal (448 = 1.75·2^8 for E4M3, 6 = 1.5·2^2 for E2M1): a
  block whose maximum has a mantissa above 1.75 (about one in five) loses up to 12.5 % of its
  largest weight, which a dot product sums with the rest; the exponent above fixes that, so FP
  elements search X and X+1 by default. The exponent below (``scale_search=2``) helps only an
  MXINT8 block whose maximum barely exceeds a power of two (it clips by under 1 % and halves every
  other element's step): +0.05–0.1 dB of weight SQNR on real models, but the task metric rose on
  one of six and fell slightly on five (it clips the largest weight of about one block in fifty,
  always towards zero), so MXINT8 keeps OCP's exponent unless asked. Any E8M0 exponent is a valid MX encoding, and weights
  are encoded once, offline, so choosing per block costs nothing at inference; the ViT's output
  cosine error halves (0.996 → 0.998). Activations keep the OCP rule by default, which is what MX
  hardware applies when it encodes them at run time; asked (``QuantConfig.mx_activation_scale_search=3``,
  :func:`mx_activation_exponents`) they take the exponent above where OCP's saturates the block
  maximum (MX ``scale_search=3``), decided by the block maximum alone: a few ops on the block
  maxima at run time, not a second quantization (not the default for every activation: bench/RESULTS.md
  "The MX activations' exponent"; by default only FP8-element activations holding the model's input
  whose block axis is shorter than the block take it, where the clipped maximum is a large share of
  the elements and the same bend on every sample: plan/short_blocks.py).

Integer-element blocks (BFP16, MX9/MX6/MX4, MXINT8) follow the same placement rule by default
(``QuantConfig.int_block_dot_operands_only``; measured on the zoo and PP-OCR, bench/RESULTS.md
"Integer block formats on dot-product operands"): an integer element has a fixed point relative
to its block's largest value, so a quantizer on a vector op (a residual stream, a softmax input,
a GELU input) flushes the small values of every block holding a large one, again at each block of
the network, and each runtime quantizer costs a block function's dozen ops. Their other rules stay:
the element has a fixed point relative to the block's scale, so a block of one gives each element
7 bits of its own (weights keep their block axis), and biases are stored in the block format, as
the reference tool's presets round them (folded at quantize time, so it costs nothing at run
time). ``int_block_dot_operands_only=False`` restores the reference tool's every-op placement.
"""

from __future__ import annotations

import logging

from collections.abc import Collection

from ...config.schema import TensorQuant
from .attention_scores import score_products
from .channel_gates import gate_operands
from .bounded_blocks import bounded_exponents
from .short_blocks import short_block_exponents
from .select import _Graph
from .types import TensorPlan

log = logging.getLogger(__name__)

__all__ = ["DOT_PRODUCT_OPS", "SCORE_OPERAND_ELEMENT", "attention_score_operands", "channel_gate_operands", "dot_operands_only", "fp_element_blocks", "fp_element_operands", "is_fp_block", "is_int_block",
           "mx_activation_exponents", "mx_weight_exponents"]


def is_fp_block(t: TensorPlan) -> bool:
    """Whether ``t`` is planned as an MX format with a floating-point element (fp8/fp6/fp4)."""
    return t.quant.format == "mx" and str(t.quant.attr_dict.get("element_dtype", "int8")).startswith("fp")


#: The ops that compute dot products of their inputs (OCP MX §6.4): an FP-element MX format encodes
#: what these read. Recurrent layers multiply X by W and the state by R in the same way.
DOT_PRODUCT_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "LSTM", "GRU", "RNN"})
#: Readers of a constant that is stored encoded: dot products and lookups (an embedding table).
_STORED_READERS = DOT_PRODUCT_OPS | {"Gather"}


def is_int_block(t: TensorPlan) -> bool:
    """Whether ``t`` is planned as a block format with an integer element (BFP16, MX9/MX6/MX4, MXINT8)."""
    return t.quant.format == "bfp" or (t.quant.format == "mx" and not is_fp_block(t))


_FAMILY = {"fp": "an FP-element MX format", "int": "an integer-element block format (BFP/MX)"}


def dot_operands_only(tensors: dict[str, TensorPlan], g: _Graph, fp: bool = True, integer: bool = False) -> dict[str, str]:
    """Keep the block quantizers of the chosen families (``fp``: MXFP8/6/4; ``integer``: BFP16,
    MX9/MX6/MX4, MXINT8) on dot-product operands only (see module docstring); returns
    ``{tensor: reason}`` for ``Plan.float_tensors`` of those that stay float. Activations read by
    a dot product and by other ops become ``exclusive`` to the dot products. Biases are left to
    the caller (an FP-element bias stays float, an integer-element one is stored like its weight)."""
    kinds = {n.name: n.op_type for n in g.nodes}
    why: dict[str, str] = {}
    counts = {"fp": 0, "int": 0}
    for name, t in list(tensors.items()):
        family = "fp" if (fp and is_fp_block(t)) else "int" if (integer and is_int_block(t)) else None
        if family is None or t.role == "bias":
            continue
        if t.role == "weight":
            if not any(kinds.get(c) in _STORED_READERS for c in t.consumers):
                del tensors[name]
                counts[family] += 1
                why[name] = (f"constant of an elementwise op under {_FAMILY[family]}: only dot-product operands "
                             "are encoded (OCP MX), so it stays float")
            continue
        dots = [c for c in t.consumers if kinds.get(c) in DOT_PRODUCT_OPS]
        if not dots:
            del tensors[name]
            counts[family] += 1
            why[name] = (f"no dot product reads it: {_FAMILY[family]} encodes dot-product operands only (OCP MX); "
                         "vector ops keep the float value")
        elif (len(dots) != len(t.consumers) or name in g.outputs
              or any(r.op_type not in DOT_PRODUCT_OPS for r in g.consumers.get(name, []))):
            t.consumers, t.exclusive = dots, True
    for family, n in counts.items():
        if n:
            log.info("plan: %d tensors stay float under %s (only dot-product operands are encoded)", n, _FAMILY[family])
    return why


def fp_element_operands(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """:func:`dot_operands_only` for the FP-element MX formats alone."""
    return dot_operands_only(tensors, g, fp=True, integer=False)


def mx_weight_exponents(tensors: dict[str, TensorPlan], search: int | None) -> int:
    """Give every MX weight the MX ``scale_search`` ``search`` (None: 1 for FP elements, 0 for
    INT8; see module docstring) unless it already searches as widely; returns how many changed.
    Only weights: an activation's exponent is chosen at run time by OCP's rule."""
    changed = 0
    for t in tensors.values():
        if t.role != "weight" or t.quant.format != "mx":
            continue
        wanted = (1 if is_fp_block(t) else 0) if search is None else int(search)
        if wanted and int(t.quant.attr_dict.get("scale_search", 0)) < wanted:
            t.quant = t.quant.with_(attrs={**dict(t.quant.attrs), "scale_search": wanted})
            changed += 1
    return changed


def _unsaturated(quant: TensorQuant, rule: int) -> TensorQuant:
    """``quant`` with MX ``scale_search=rule`` where ``quant`` has OCP's rule (0, which the
    config's MX defaults fill in); a search by error asked for (1, 2) is kept."""
    if not rule or quant.format != "mx" or int(quant.attr_dict.get("scale_search", 0)):
        return quant
    return quant.with_(attrs={**dict(quant.attrs), "scale_search": int(rule)})


def mx_activation_exponents(tensors: dict[str, TensorPlan], rule: int) -> int:
    """Give MX activations (a dual-quant producer format too) the exponent rule ``rule``
    (``QuantConfig.mx_activation_scale_search``: 0 OCP's, 3 one up where OCP's would saturate the
    block maximum, formats/mx.py module doc); returns how many changed. Activations are encoded
    at run time, so no search by error."""
    changed = 0
    if not rule:
        return changed
    for t in tensors.values():
        if t.role != "activation":
            continue
        new = _unsaturated(t.quant, rule)
        changed += new is not t.quant
        t.quant = new
        if t.producer_quant is not None:
            t.producer_quant = _unsaturated(t.producer_quant, rule)
    if changed:
        log.debug("plan: %d MX activations take the exponent that does not saturate their blocks", changed)
    return changed


#: the element an FP8-element MX plan gives the operands of an attention score product (see
#: :func:`attention_score_operands`)
SCORE_OPERAND_ELEMENT = "int8"
_FP8_ELEMENTS = ("fp8_e4m3", "fp8_e5m2")


def _integer_element(tensors: dict[str, TensorPlan], names: Collection[str], keep: Collection[str]) -> list[str]:
    """Give the activations ``names`` MXINT8 elements (OCP's exponent) where the plan has them in an FP8-element MX
    format and ``keep`` (the names ``tensor_overrides`` set) does not name them; returns those changed."""
    changed: list[str] = []
    for name in names:
        t = tensors.get(name)
        if t is None or name in keep or t.role != "activation" or t.quant.format != "mx":
            continue
        if str(t.quant.attr_dict.get("element_dtype", "")) not in _FP8_ELEMENTS:
            continue
        t.quant = t.quant.with_(attrs={**dict(t.quant.attrs), "element_dtype": SCORE_OPERAND_ELEMENT, "scale_search": 0})
        changed.append(name)
    return changed


def channel_gate_operands(tensors: dict[str, TensorPlan], g: _Graph, keep: Collection[str] = ()) -> list[str]:
    """Give the data operands of every channel gate's dot products (plan/channel_gates.py: a pooled feature map
    through 1×1 convolutions to the Mul that rescales it) MXINT8 elements where the plan has them in an
    FP8-element MX format; returns the tensors changed. ``keep``: the names ``tensor_overrides`` set.

    Why: the gate multiplies every position of a channel by one value, so its error is that channel's gain error,
    which no later dot product averages (plan/gain_vectors.py argues the same for constants); and its operands are
    one pooled vector per image whose large channels sit nearly constant from image to image, so E4M3's rounding
    of them (a step of 2^-3 of the value's binade: 19.1 → 20 on PP-OCRv4 rec's second gate, every image) is the
    same offset on every sample, a bias, not noise. An MXINT8 element keeps 6 fraction bits of its block's largest
    value (19.1 → 19.0): PP-OCRv4 rec's 1 − CER against float on 32 fresh lines, repair off, 0.848 → 0.947 with
    its second gate's ReLU output alone in MXINT8 (bench/mxfp8_floatback.py: of its 55 activation quantizers, the
    one whose float-back gains most, +0.088; the next gains 0.004), the same bytes. The tensors are a few hundred
    values per image, so the element costs nothing at run time."""
    names = [t for operands in gate_operands(g).values() for t in operands]
    changed = _integer_element(tensors, names, keep)
    if changed:
        log.info("plan: %d operands of channel gates take MXINT8 elements under an FP8-element MX format "
                 "(plan/fp_blocks.py channel_gate_operands): %s", len(changed),
                 ", ".join(changed[:4]) + (" ..." if len(changed) > 4 else ""))
    return changed


def attention_score_operands(tensors: dict[str, TensorPlan], g: _Graph, keep: Collection[str] = ()) -> list[str]:
    """Give the queries and keys of every attention score product (plan/attention_scores.py: the MatMul
    of two computed operands whose output a Softmax reads) MXINT8 elements where the plan has them in an
    FP8-element MX format; returns the tensors changed. ``keep``: tensors the user's ``tensor_overrides``
    (or repair's steps) name, which keep what they were given.

    Why: a Softmax turns an absolute error of its scores into a relative error of its probabilities
    (``d log p = d s − E[d s]``), and a score's absolute error is its operands' relative rounding times
    the score's own magnitude: E4M3 rounds every query and key element by up to 2^-4 of itself, so on a
    sharp attention row (scores of ten and more) the probabilities move by tens of percent. An MXINT8
    element keeps 6 fraction bits of its block's largest value, and queries and keys are spread like a
    Gaussian within their blocks along the head dimension (no rare block outlier): measured on the 25
    models with attention we have (bench/mxfp8_qk_error.py), MXINT8 operands cut the scores' relative
    squared error 15–560× and their rms error near each row's maximum 4–28× against E4M3, with the same
    8-bit elements and E8M0 block exponents (the same bytes; still an OCP MX dot product). A planted
    sharp attention block breaks the 8-bit floor under plain MXFP8_E4M3 (output cosine 0.979) and holds
    it with the rule (0.984), repair off (tests/test_mxfp8_attention_scores.py). On 23 real rows one
    crosses its floor upwards (ppocrv3_rec_op10), the others' task figures move within a read or two of
    their feeds both ways (bench/RESULTS.md mxfp8qk19): their loss is mostly not in the scores.
    The other dot products keep FP8 elements; FP6/FP4 plans are left alone (a 4/6-bit budget).
    A user's ``tensor_overrides`` entry for an operand (an MXFP8 quantizer) keeps it as given."""
    changed = _integer_element(tensors, [t for operands in score_products(g).values() for t in operands], keep)
    if changed:
        log.info("plan: %d operands of attention score products take MXINT8 elements under an FP8-element MX format "
                 "(plan/fp_blocks.py attention_score_operands): %s", len(changed),
                 ", ".join(changed[:4]) + (" ..." if len(changed) > 4 else ""))
    return changed


def fp_element_blocks(tensors: dict[str, TensorPlan], g: _Graph, weight_scale_search: int | None = None,
                      activation_scale_search: int | None = None, keep: Collection[str] = ()) -> dict[str, str]:
    """Let MX weights search their shared exponent (``weight_scale_search``, :func:`mx_weight_exponents`)
    and MX activations take theirs (``activation_scale_search``, :func:`mx_activation_exponents`; None:
    FP8-element ones holding the model's input in blocks shorter than the format's take the unsaturated exponent, plan/short_blocks.py),
    move degenerate FP-element weight block axes and drop biases for FP-element MX tensors (see
    module docstring), and give an FP8 plan's attention score operands MXINT8 elements
    (:func:`attention_score_operands`) and the operands of channel gates' dot products too
    (:func:`channel_gate_operands`; ``keep``: the names ``tensor_overrides`` set); returns
    ``{bias name: reason}`` for ``Plan.float_tensors``."""
    why: dict[str, str] = {}
    attention_score_operands(tensors, g, keep)
    channel_gate_operands(tensors, g, keep)
    mx_weight_exponents(tensors, weight_scale_search)
    if activation_scale_search is None:
        short_block_exponents(tensors, g)
        bounded_exponents(tensors, g)  # plan/bounded_blocks.py: tanh/sigmoid/recurrent states near 1
    else:
        mx_activation_exponents(tensors, activation_scale_search)
    for name, t in list(tensors.items()):
        if not is_fp_block(t):
            continue
        if t.role == "bias":
            del tensors[name]
            why[name] = ("bias of an FP-element MX format: added in the FP32 accumulator (OCP MX dot product), "
                         "so it stays float")
        if t.role == "weight" and name in g.initializers and t.axis is not None:
            dims = list(g.initializers[name].dims)
            if len(dims) >= 2 and dims[t.axis] == 1 and max(dims) > 1:
                longest = max(range(len(dims)), key=lambda i: (dims[i], -i))
                log.debug("weight %s %s: block axis %d has length 1, blocks along axis %d", name, dims, t.axis, longest)
                t.axis = longest
    if why:
        log.info("plan: %d biases stay float under an FP-element MX format", len(why))
    return why
