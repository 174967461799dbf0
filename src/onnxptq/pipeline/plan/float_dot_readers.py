"""A float dot product (Conv/Gemm/MatMul kept float) reads its activation float, not dequantized.

Why: onnxruntime's basic graph optimizations (``WeightBiasQuantization``, onnxruntime 1.32 here)
rewrite a float ``Conv``/``ConvTranspose``/``Gemm``/``MatMul`` whose activation input is a
``DequantizeLinear`` output and whose weight is a float initializer: they quantize that weight
(and the bias, to int32) at session start so the node can fuse with its QDQ neighbours. A node the
plan keeps float (``nodes_to_exclude``, repair's kept nodes) therefore runs with an 8-bit weight
after all, on onnxruntime's own grid, and keeping it float buys nothing. U²-Net-p (rembg,
bench/RESULTS.md "u2netp"): one Conv (``Conv_787``) reads a concat whose channel 14 is a near
constant 226..228 and cancels it with weights up to 5.6 against a bias of 1361; any 8-bit weight
grid breaks that cancellation (the Conv's output SQNR under int8 weights alone is −5 dB). Kept
float by name it still read 0.75 output cosine under A16W8 (0.9997 with the rewrite disabled),
so repair went on to keep 228 nodes float.

The rule, by dataflow (no names): an integer Q/DQ activation (no block format: those dequantize in
our own functions, which the rewrite does not match) read by such a dot node that is not one of its
quantized consumers and whose weight input is a float initializer the plan leaves float, becomes
``exclusive`` to its quantized consumers, so the float node reads the unrounded tensor (emit wires
an exclusive tensor's other readers to the float value). Where no reader takes the quantized value
the tensor stays float altogether.
"""

from __future__ import annotations

import onnx

from .corners import drop_float
from .select import _Graph
from .types import TensorPlan

__all__ = ["float_dot_readers"]

#: the ops onnxruntime's WeightBiasQuantization rewrites (a float weight behind a DequantizeLinear input)
_REWRITTEN = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _float_dot(node: onnx.NodeProto, tensor: str, tensors: dict[str, TensorPlan], g: _Graph) -> bool:
    """``node`` is a dot product reading ``tensor`` as its activation with a float initializer weight left float."""
    if node.op_type not in _REWRITTEN or len(node.input) < 2 or node.input[0] != tensor:
        return False
    weight = g.initializers.get(node.input[1])
    return weight is not None and weight.data_type == onnx.TensorProto.FLOAT and node.input[1] not in tensors


def float_dot_readers(tensors: dict[str, TensorPlan], g: _Graph) -> dict[str, str]:
    """Make integer activations exclusive to their quantized consumers where a float dot product also
    reads them (module docstring); return ``{name: reason}`` for those no quantized reader is left on."""
    why: dict[str, str] = {}
    for name, t in list(tensors.items()):
        if (t.role != "activation" or not t.quant.is_integer or t.quant.block_size or t.exclusive
                or t.producer_quant is not None or name in g.outputs):
            continue
        quantized = set(t.consumers)
        dots = [n.name for n in g.consumers.get(name, []) if n.name not in quantized and _float_dot(n, name, tensors, g)]
        if not dots:
            continue
        if quantized:
            t.exclusive = True
            continue
        why[name] = (f"read only by float dot product(s) {', '.join(dots[:3])}: onnxruntime would quantize their "
                     "weights behind a DequantizeLinear input, so the activation stays float (plan/float_dot_readers.py)")
    return drop_float(tensors, why, "activation(s) read only by float dot products stay float")
