"""Recover a float model from one that onnxruntime's ``quantize_dynamic`` made int8.

Why: packages often ship ONLY the dynamically quantized file (text2tashkeel's BiLSTM, pyfrspell's
GRU seq2seq: ``MatMulInteger``, ``DynamicQuantizeLSTM``), and :func:`onnxptq.quantize` refuses a
quantized model, rightly (quantizing quantization nodes is meaningless). The float graph is still
there under the int8 plumbing, and the weights' int8 values times their scales ARE a float model:
the one the package's model would be if its activations were not rounded at run time. Rebuilding
it lets a user take such a model to another format (BF16, MX, A16W8) without the float original.

What is rewritten, each by its dataflow (the producers and consumers of every tensor, never names):

- ``DynamicQuantizeLinear(x) -> MatMulInteger(xq, Wq, xzp, Wzp) -> Cast(float) -> Mul(., xs * Ws)``
  becomes ``MatMul(x, W)`` with ``W = (Wq - Wzp) * Ws`` (per tensor or per output column), writing
  the same tensor the ``Mul`` wrote;
- ``DynamicQuantizeLSTM`` (com.microsoft: weights ``[D, in, 4H]`` int8 with per-direction or
  per-gate-row scales) becomes the standard ``LSTM`` with ``W``/``R`` dequantized and transposed to
  ONNX's ``[D, 4H, in]``;
- ``DequantizeLinear`` of a constant folds to a float constant; of a computed int8 tensor (an
  embedding table read through ``Gather``) with a per-tensor scale, it becomes the same arithmetic
  in float ops (``(Cast(x) - zp) * scale``), exactly what it computed.

The result holds no quantization op (else :class:`NotRecoverableError` names what is left), passes
the ONNX checker and is what onnxruntime computes with the weights' int8 grid and float
activations.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import OnnxptqError
from ..graph.check import onnx_checker, quantized_node_counts
from ..graph.opsets import is_onnx_domain

__all__ = ["NotRecoverableError", "dequantize_dynamic"]

log = logging.getLogger(__name__)


class NotRecoverableError(OnnxptqError, ValueError):
    """The model holds quantization ops this conversion cannot turn back into float ones."""


def dequantize_dynamic(model: onnx.ModelProto, source: str = "model") -> onnx.ModelProto:
    """Return a float copy of a dynamically int8-quantized ``model`` (see the module docstring).

    ``source`` names the model in errors. A model with no quantization op comes back unchanged (a
    copy). Raises :class:`NotRecoverableError` when quantization ops remain that no rule here
    understands (static QDQ with per-axis activations, QLinear* ops, ConvInteger, ...).
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            if i:
                readers[i].append(n)
    const = {name: numpy_helper.to_array(t) for name, t in inits.items()}
    new_inits: list[onnx.TensorProto] = []
    replaced: dict[int, list[onnx.NodeProto]] = {}  # id(node) -> the nodes standing in its place
    dropped: set[int] = set()
    done: Counter[str] = Counter()

    for node in graph.node:
        if node.op_type == "MatMulInteger" and is_onnx_domain(node.domain):
            rewrite = _matmul_integer(node, producer, readers, const)
            if rewrite is not None:
                matmul, weight, gone = rewrite
                new_inits.append(weight)
                replaced[id(gone[-1])] = [matmul]  # the scale Mul's place: its inputs are all computed by then
                dropped.update(id(n) for n in gone[:-1])
                done["MatMulInteger"] += 1
        elif node.op_type == "DynamicQuantizeLSTM" and node.domain == "com.microsoft":
            lstm, weights = _lstm(node, const, source)
            new_inits.extend(weights)
            replaced[id(node)] = [lstm]
            done["DynamicQuantizeLSTM"] += 1
        elif node.op_type == "DequantizeLinear" and is_onnx_domain(node.domain):
            rewrite = _dequantize_linear(node, const)
            if rewrite is not None:
                nodes, tensors = rewrite
                new_inits.extend(tensors)
                replaced[id(node)] = nodes
                done["DequantizeLinear"] += 1

    if not done:  # nothing of quantize_dynamic's: the copy as it came (a float model stays byte-identical)
        _raise_if_quantized(out, source)
        return out
    # The DynamicQuantizeLinear nodes and scale products nothing reads any more go too.
    kept = []
    for node in graph.node:
        if id(node) in dropped:
            continue
        kept.extend(replaced.get(id(node), [node]))
    kept = _drop_unread(kept, {o.name for o in graph.output})
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_inits)
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    live = [t for t in graph.initializer if t.name in read]
    gone_names = {t.name for t in graph.initializer} - {t.name for t in live}
    del graph.initializer[:]
    graph.initializer.extend(live)
    inputs = [i for i in graph.input if i.name not in gone_names]  # initializers an old IR also lists as inputs
    del graph.input[:]
    graph.input.extend(inputs)
    produced = {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    stale = [vi for vi in graph.value_info if vi.name not in produced]
    for vi in stale:
        graph.value_info.remove(vi)
    if not any(n.domain == "com.microsoft" for n in graph.node):
        imports = [op for op in out.opset_import if op.domain != "com.microsoft"]
        del out.opset_import[:]
        out.opset_import.extend(imports)

    _raise_if_quantized(out, source)
    log.info("%s: recovered float for %s", source, ", ".join(f"{k} {op}" for op, k in sorted(done.items())))
    onnx_checker(out)  # any size (a >2 GB model is checked from a file)
    return out


def _raise_if_quantized(model: onnx.ModelProto, source: str) -> None:
    """NotRecoverableError naming the quantization ops no rule here undid."""
    left = quantized_node_counts(model)
    if left:
        listed = ", ".join(f"{k} {op}" for op, k in left.most_common())
        raise NotRecoverableError(
            f"{source}: cannot recover float for {sum(left.values())} quantization node(s) ({listed}); only onnxruntime's "
            "dynamic quantization (DynamicQuantizeLinear + MatMulInteger, DynamicQuantizeLSTM, DequantizeLinear of "
            "per-tensor or constant int8) is undone")


def _only_reader(tensor: str, readers: dict[str, list[onnx.NodeProto]], op_type: str) -> onnx.NodeProto | None:
    nodes = readers.get(tensor, [])
    return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op_type else None


def _matmul_integer(node, producer, readers, const):
    """The MatMul that ``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scale product)`` stands for,
    its float weight, and the nodes it replaces (the scale ``Mul`` last); None when the chain is not that."""
    a_q, b_q = node.input[0], node.input[1]
    a_zp = node.input[2] if len(node.input) > 2 else ""
    b_zp = node.input[3] if len(node.input) > 3 else ""
    dql = producer.get(a_q)
    if dql is None or dql.op_type != "DynamicQuantizeLinear" or b_q not in const or (b_zp and b_zp not in const):
        return None
    if a_zp and a_zp != dql.output[2]:
        return None
    cast = _only_reader(node.output[0], readers, "Cast")
    if cast is None or helper.get_attribute_value(cast.attribute[0]) != TensorProto.FLOAT:
        return None
    mul = _only_reader(cast.output[0], readers, "Mul")
    if mul is None:
        return None
    scale_in = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
    product = producer.get(scale_in)
    if product is None or product.op_type != "Mul" or dql.output[1] not in product.input:
        return None
    b_scale = product.input[1] if product.input[0] == dql.output[1] else product.input[0]
    if b_scale not in const:
        return None
    wq = const[b_q].astype(np.float32)
    zp = const[b_zp].astype(np.float32) if b_zp else np.float32(0)
    scale = const[b_scale].astype(np.float32)
    if wq.ndim != 2 or scale.ndim > 1 or (scale.ndim == 1 and scale.shape[0] not in (1, wq.shape[1])):
        return None
    weight = numpy_helper.from_array(((wq - zp) * scale).astype(np.float32), name=f"{b_q}_dequantized")
    matmul = helper.make_node("MatMul", [dql.input[0], weight.name], [mul.output[0]], name=f"{node.name or mul.output[0]}_float")
    return matmul, weight, [node, cast, mul]


def _lstm(node, const, source):
    """A standard LSTM for a com.microsoft DynamicQuantizeLSTM: W and R dequantized and turned to [D, 4H, in]."""
    names = list(node.input) + [""] * (12 - len(node.input))
    x, w, r, b, seq, h0, c0, p, ws, wzp, rs, rzp = names
    missing = [n for n in (w, r, ws, wzp, rs, rzp) if n not in const]
    if missing:
        raise NotRecoverableError(f"{source}: DynamicQuantizeLSTM {node.name!r} reads computed weights or scales ({missing}); "
                                  "only constant ones can be dequantized")
    weights = []
    for name, scale, zp in ((w, ws, wzp), (r, rs, rzp)):
        q = const[name].astype(np.float32)  # [D, in, 4H]
        s, z = const[scale].astype(np.float32), const[zp].astype(np.float32)
        # per direction ([D]) or per gate row ([D, 4H]): broadcast over the input axis
        s = s.reshape(s.shape[0], 1, -1) if s.ndim else s
        z = z.reshape(z.shape[0], 1, -1) if z.ndim else z
        weights.append(numpy_helper.from_array(np.ascontiguousarray(((q - z) * s).transpose(0, 2, 1)),
                                               name=f"{name}_dequantized"))
    inputs = [x, weights[0].name, weights[1].name, b, seq, h0, c0, p]
    while inputs and not inputs[-1]:
        inputs.pop()
    lstm = helper.make_node("LSTM", inputs, list(node.output), name=f"{node.name or node.output[0]}_float")
    lstm.attribute.extend(node.attribute)
    return lstm, weights


def _dequantize_linear(node, const):
    """A constant for DequantizeLinear of a constant; the same arithmetic in float ops for a computed input
    with a per-tensor scale; None otherwise (the node stays and the caller reports it)."""
    x, scale = node.input[0], node.input[1]
    zp = node.input[2] if len(node.input) > 2 else ""
    if scale not in const or (zp and zp not in const):
        return None
    s = const[scale].astype(np.float32)
    z = const[zp].astype(np.float32) if zp else np.zeros_like(s)
    if x in const:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        q = const[x].astype(np.float32)
        if s.ndim == 1 and s.size > 1:
            shape = [1] * q.ndim
            shape[axis] = -1
            s, z = s.reshape(shape), z.reshape(shape)
        return [], [numpy_helper.from_array(((q - z) * s).astype(np.float32), name=node.output[0])]
    if s.size != 1:
        return None
    out = node.output[0]
    s_t = numpy_helper.from_array(s.reshape(()).astype(np.float32), name=f"{out}_scale_float")
    z_t = numpy_helper.from_array(z.reshape(()).astype(np.float32), name=f"{out}_zero_point_float")
    nodes = [helper.make_node("Cast", [x], [f"{out}_cast"], to=TensorProto.FLOAT),
             helper.make_node("Sub", [f"{out}_cast", z_t.name], [f"{out}_centred"]),
             helper.make_node("Mul", [f"{out}_centred", s_t.name], [out])]
    return nodes, [s_t, z_t]


def _drop_unread(nodes: list[onnx.NodeProto], graph_outputs: set[str]) -> list[onnx.NodeProto]:
    """Remove, to a fixed point, the nodes none of whose outputs anything reads (the left-over
    DynamicQuantizeLinear and scale products); other nodes are never touched by this."""
    removable = {"DynamicQuantizeLinear", "Mul"}
    while True:
        read = {i for n in nodes for i in n.input} | graph_outputs
        keep = [n for n in nodes if n.op_type not in removable or any(o in read for o in n.output if o)]
        if len(keep) == len(nodes):
            return keep
        nodes = keep
