"""Graphs on which onnxruntime's default session creation crashes the process, found before it does.

onnxruntime 1.32 (CPU provider, ``ORT_ENABLE_ALL``) dies with SIGSEGV while it opens a session on a
float16 ``Transpose -> MatMul`` whose Transpose is a *batch* transpose (the form its
``MatmulTransposeFusion`` folds into ``FusedMatMul``'s ``transBatchA/B``: perm
``[1, 2, .., r-2, 0, r-1]``, or ``[1, 2, .., r-1, 0]`` with the last two axes swapped too, rank r >= 3)
and whose other operand is constant, also where float-widening Casts stand between the
Transpose and the MatMul (onnxruntime removes such exact round trips first). Nothing can catch it: ``onnxptq.quantize`` on such a model died
at its first session. Measured by ``bench/ort_fp16_crash.py`` (each probe in its own process), on
the grid dtype x perm x side x constant: it crashes exactly on these; never on float, double,
a fed (non-constant) other operand, a Transpose whose output is also a graph output (the fusion
skips it), or other perms ([1, 0], [0, 2, 1], [2, 0, 1], [1, 0, 2, 3], ...: no batch fusion);
``ORT_ENABLE_EXTENDED`` and disabling either ``MatmulTransposeFusion`` or ``NchwcTransformer``
open it. bfloat16 MatMul has no CPU kernel (a clean load error, not a crash).

:func:`crash_trigger` names the MatMul nodes; :mod:`onnxptq.sessions` then opens such a graph with
:data:`CRASH_FUSION` disabled. Re-measure with the bench script when onnxruntime is upgraded.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto

from .opsets import is_onnx_domain
from .walk import dataflow

__all__ = ["CRASH_FUSION", "ORT_VERSION_SEEN", "batch_transpose", "crash_trigger", "crash_warning", "may_hold_trigger"]

#: The onnxruntime optimizer whose fusion crashes; disabling it is enough (bench/ort_fp16_crash.py).
CRASH_FUSION = "MatmulTransposeFusion"
#: The onnxruntime version the trigger was measured on.
ORT_VERSION_SEEN = "1.32.0"


def batch_transpose(perm: list[int]) -> bool:
    """True for the perms onnxruntime fuses as a batch transpose: ``[1, .., r-2, 0, r-1]`` or
    ``[1, .., r-2, r-1, 0]`` (rank >= 3)."""
    rank = len(perm)
    if rank < 3:
        return False
    head = list(range(1, rank - 1))
    return perm == head + [0, rank - 1] or perm == head + [rank - 1, 0]


#: A ``perm`` attribute's name as protobuf writes it (field 1, length 4): every serializer writes
#: the fields in number order, so its ``ints`` (field 8) follow.
_PERM_NAME = b"\x0a\x04perm"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    return value, at


def may_hold_trigger(data: bytes) -> bool:
    """False where serialized ``data`` surely holds no batch Transpose and no MatMul, read without
    parsing the model: the ``perm`` attributes are found by their name's bytes and decoded in place
    (one per Transpose). Why: parsing the bytes to ask :func:`crash_trigger` held a second copy of
    the model (+82 MiB peak RSS, 0.05 s CPU on an 85 MB transformer) at every session the finish
    check opens from bytes. True (parse and ask) where the bytes after a name are not plain ints."""
    if b"MatMul" not in data:
        return False
    at = data.find(_PERM_NAME)
    while at >= 0:
        cursor, ints = at + len(_PERM_NAME), []
        if cursor < len(data) and data[cursor] == 0x42:  # packed ints
            length, cursor = _varint(data, cursor + 1)
            end = cursor + length
            while cursor < end:
                value, cursor = _varint(data, cursor)
                ints.append(value)
        else:
            while cursor < len(data) and data[cursor] == 0x40:  # ints, one field each
                value, cursor = _varint(data, cursor + 1)
                ints.append(value)
        if not ints or batch_transpose(ints):
            return True
        at = data.find(_PERM_NAME, at + 1)
    return False


def _float16_tensors(graph: onnx.GraphProto) -> set[str]:
    """Names declared float16 (inputs, outputs, value_info, initializers, Constant outputs)."""
    names = {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT16}
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.tensor_type.elem_type == TensorProto.FLOAT16:
            names.add(info.name)
    for node in graph.node:
        if node.op_type == "Cast" and is_onnx_domain(node.domain):
            for a in node.attribute:
                if a.name == "to" and a.i == TensorProto.FLOAT16:
                    names.update(node.output)
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == TensorProto.FLOAT16:
                    names.update(node.output)
    return names


def _fed(graph: onnx.GraphProto) -> set[str]:
    """Tensors that depend on a graph input (the rest onnxruntime can constant-fold)."""
    initializers = {i.name for i in graph.initializer}
    fed = {i.name for i in graph.input if i.name not in initializers}
    for node in graph.node:  # graph order is topological in a valid model
        if node.op_type in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial") \
                or any(name in fed for name in node.input if name):
            fed.update(node.output)
        # subgraph captures make a node fed only through its inputs here: an If/Loop over constants folds
    return fed


def crash_trigger(model: onnx.ModelProto) -> list[str]:
    """The MatMul nodes (names, or ``MatMul#<index>`` where unnamed) of ``model``'s main graph and
    its model-local functions (``function/node``) on which onnxruntime :data:`ORT_VERSION_SEEN`'s
    default session crashes."""
    found: list[str] = []
    _scan(model.graph, found, "")
    for function in model.functions:  # inlined before the optimizers run
        graph = onnx.helper.make_graph(list(function.node), function.name, [onnx.helper.make_tensor_value_info(n, 0, None) for n in function.input],
                                       [onnx.helper.make_tensor_value_info(n, 0, None) for n in function.output], value_info=list(function.value_info))
        _scan(graph, found, f"{function.name}/")
    return found


#: Cast targets through which a float16 value goes and comes back unchanged (float16 -> float ->
#: float16 is exact): onnxruntime's level-1 optimisers drop such chains, so a Transpose behind them
#: meets the MatMul by the time the fusion runs (our FP16 preset's Cast "quantizers" on an
#: unsaturated activation are such a chain: the finish session crashed behind them).
_EXACT_CASTS = (TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE)


def _exact_hop(node: onnx.NodeProto) -> bool:
    """An Identity, or a Cast to float16/float/double: a node onnxruntime may remove between the two."""
    if not is_onnx_domain(node.domain) or len(node.input) < 1:
        return False
    if node.op_type == "Identity":
        return True
    return node.op_type == "Cast" and any(a.name == "to" and a.i in _EXACT_CASTS for a in node.attribute)


def _scan(graph: onnx.GraphProto, found: list[str], prefix: str, sites: list | None = None) -> None:
    """Append to ``found`` the triggering MatMuls' names; to ``sites`` (main graph only, where given)
    ``(matmul, side, transpose, chain)``: the Transpose and the exact Casts between them, nearest first."""
    producers, _ = dataflow(graph.node)
    outputs = {o.name for o in graph.output}
    half = _float16_tensors(graph)
    fed = _fed(graph)
    # Not nested graphs (If/Loop/Scan bodies): the same pattern in an If branch opens (measured,
    # bench/RESULTS.md fp16crash); model-local functions are inlined first and do crash.
    for index, node in enumerate(graph.node):
        if node.op_type != "MatMul" or not is_onnx_domain(node.domain) or len(node.input) != 2:
            continue
        for side, other in ((0, 1), (1, 0)):
            name, producer = node.input[side], producers.get(node.input[side])
            chain = []
            while producer is not None and _exact_hop(producer) and name not in outputs:
                chain.append(producer)
                name = producer.input[0]
                producer = producers.get(name)
            if producer is None or producer.op_type != "Transpose" or name in outputs:
                continue
            perm = next((list(a.ints) for a in producer.attribute if a.name == "perm"), [])
            dtype_half = node.input[side] in half or name in half or producer.input[0] in half \
                or node.input[other] in half or node.output[0] in half
            if batch_transpose(perm) and dtype_half and node.input[other] not in fed:
                found.append(prefix + (node.name or f"MatMul#{index}"))
                if sites is not None:
                    sites.append((node, side, producer, chain))
                break


def crash_warning(model: onnx.ModelProto, where: str) -> str | None:
    """What a user must know where a delivered model holds the trigger (None where it does not):
    the nodes, and the session option that opens it."""
    nodes = crash_trigger(model)
    if not nodes:
        return None
    shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    return (f"{where}: onnxruntime {ORT_VERSION_SEEN}'s default session crashes (SIGSEGV) on its float16 batch "
            f"Transpose -> MatMul at {shown}; open it with "
            f"the session argument disabled_optimizers=[{CRASH_FUSION!r}] (or graph_optimization_level "
            f"ORT_ENABLE_EXTENDED)")

