"""Store the int8 weights onnxruntime would sum in saturating int16 pairs as uint8, value for value.

Why: onnxruntime's x86 U8S8 integer GEMM without VNNI (AVX2; AVX-512 without VNNI) adds each pair of
adjacent uint8 × int8 products in int16 (``vpmaddubsw``) and saturates past 32767 (255 · 127 · 2 = 64770):
a fused QLinearConv, QGemm or MatMulIntegerToFloat then returns a wrong sum wherever two large same-sign
weights meet two large activations (PP-OCR cls A8W8: top-1 0.945 with exact sums, 0.905 as run;
bench/RESULTS.md, "The U8S8 saturation guard"). Its U8U8 kernels widen both operands to 16 bits first and
cannot saturate. So where the machine saturates (``QuantConfig.saturation_guard``,
pipeline/runtime.integer_gemm_saturates), such a weight's ``DequantizeLinear`` reads ``q + 128`` as uint8
with zero point ``zp + 128``: ``(q + 128) − (zp + 128) = q − zp``, the same values bit for bit, the same
grid (onnxruntime's own advice, 7-bit weights, would halve every weight's resolution: PP-OCRv4 rec A8W8
then agrees with float on 0.77 of its lines before repair, against 0.94).

Which weights: the constant int8 input of a per-tensor or per-channel (not blocked) ``DequantizeLinear``
read as the weight of a Conv that is not depthwise (onnxruntime's depthwise QLinearConv sums in int32), a
MatMul or a Gemm whose data input is itself an 8-bit ``DequantizeLinear``: what the CPU provider fuses
into a U8S8 kernel. Nothing else changes: the plan keeps int8 (its formats and the report say so), a
weight read in float keeps its int8 bytes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..external import store, tensor_values
from ..walk import all_graphs, walk_scopes
from .exact_int_weights import _eight_bit_dq_output

__all__ = ["unsigned_gemm_weights", "has_fused_int8_weights"]

_GEMM_OPS = ("Conv", "MatMul", "Gemm")


def _depthwise(node: onnx.NodeProto, weight: TensorProto) -> bool:
    """A Conv onnxruntime runs with its depthwise kernel: one input and one output channel per group."""
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    return node.op_type == "Conv" and group > 1 and len(weight.dims) >= 2 and weight.dims[1] == 1 and weight.dims[0] == group


def _fused_weight_dqs(graph: onnx.GraphProto, inits: dict[str, TensorProto]) -> list[onnx.NodeProto]:
    """The int8 weight ``DequantizeLinear`` nodes of ``graph`` that a U8S8 kernel would read (module docstring)."""
    types = {name: t.data_type for name, t in inits.items()}
    producer = {o: n for n in graph.node for o in n.output if o}
    found: dict[int, onnx.NodeProto] = {}
    for node in graph.node:
        if node.op_type not in _GEMM_OPS or len(node.input) < 2:
            continue
        dq = producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or types.get(dq.input[0]) != TensorProto.INT8:
            continue
        if any(a.name == "block_size" and a.i for a in dq.attribute) or any(i not in inits for i in dq.input[1:] if i):
            continue
        if _depthwise(node, inits[dq.input[0]]) or not _eight_bit_dq_output(node.input[0], producer, types):
            continue
        found[id(dq)] = dq
    return list(found.values())


def _unused_name(base: str, taken: set[str]) -> str:
    name, k = f"{base}_u8", 1
    while name in taken:
        name, k = f"{base}_u8_{k}", k + 1
    taken.add(name)
    return name


def has_fused_int8_weights(model: onnx.ModelProto) -> bool:
    """Whether :func:`unsigned_gemm_weights` would rewrite anything in ``model``; reads only the graph's
    structure and tensor types (no weight bytes: a streamed model's external data is not read)."""
    return any(_fused_weight_dqs(s.graph, {t.name: t for t in s.graph.initializer}) for s in walk_scopes(model.graph))


def unsigned_gemm_weights(model: onnx.ModelProto) -> int:
    """Rewrite, in place, every int8 weight ``DequantizeLinear`` a U8S8 kernel would read to read uint8 data and
    zero point (module docstring); returns how many were rewritten."""
    rewritten = 0
    for scope in walk_scopes(model.graph):
        graph = scope.graph
        inits = {t.name: t for t in graph.initializer}
        dqs = _fused_weight_dqs(graph, inits)
        if not dqs:
            continue
        taken = set(inits) | {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
        replaced: set[str] = set()
        for dq in dqs:
            weight, scale_name = dq.input[0], dq.input[1]
            zero_name = dq.input[2] if len(dq.input) > 2 else ""
            # external data (a streamed large model) is read from and written to its data file
            codes = tensor_values(inits[weight]).astype(np.int16)
            scale = tensor_values(inits[scale_name])
            zero = tensor_values(inits[zero_name]).astype(np.int16) if zero_name else np.zeros(scale.shape, np.int16)
            data = store((codes + 128).astype(np.uint8), _unused_name(weight, taken))
            point = numpy_helper.from_array((zero + 128).astype(np.uint8),
                                            _unused_name(zero_name or scale_name.replace("scale", "zero_point"), taken))
            replaced.update(n for n in (weight, zero_name) if n)
            graph.initializer.extend([data, point])
            del dq.input[:]
            dq.input.extend([data.name, scale_name, point.name])
            rewritten += 1
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        read |= {i for g in all_graphs(graph) if g is not graph for n in g.node for i in n.input}  # outer-scope reads
        keep = [t for t in graph.initializer if t.name not in replaced or t.name in read]
        del graph.initializer[:]
        graph.initializer.extend(keep)
    return rewritten

