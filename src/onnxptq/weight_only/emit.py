"""Write the solved weights into the model: blocked ``DequantizeLinear`` or ``MatMulNBits``.

``form="dq-strict"`` (standard ONNX only): the model is raised to opset 21 and each weight becomes an
int4/uint4/int8/uint8 initializer stored ``[K, N]`` with a ``DequantizeLinear(axis=0,
block_size)`` feeding its MatMul directly — the pattern onnxruntime fuses into ``MatMulNBits``. A
weight that was behind ``Transpose`` (or a ``Gemm`` with ``transB``) is stored transposed, and the
Transpose dropped / ``transB`` cleared, so the fusion sees it. A tied embedding/lm_head table is
stored once as ``[V, H]`` (blocks along H, ``axis=1``): its one ``DequantizeLinear`` feeds both the
Gather and the lm_head's Transpose. onnxruntime does not fuse that ``DequantizeLinear →
Transpose → MatMul`` (every decode step dequantizes the whole table), hence:

``form="dq"`` (default): the body as in ``dq-strict``, but an embedding table (tied or not) takes
the ``matmulnbits`` form below — ``GatherBlockQuantized`` and the tied lm_head's ``MatMulNBits``
read one stored table — both contrib ops of stock onnxruntime (``accuracy_level``: :func:`table_level`).

``form="matmulnbits"``: each MatMul (Gemm: with its bias, when ``beta == 1``) becomes
``com.microsoft::MatMulNBits``; a tied table is one packed uint8 initializer read by
``GatherBlockQuantized`` and, through a Reshape, by the lm_head's ``MatMulNBits``; an untied
quantized embedding is a ``GatherBlockQuantized``.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..graph.io import TARGET_OPSET, pin_versions
from ..graph.opsets import is_onnx_domain
from ..graph.passes.upgrade_opset import upgrade_opset
from ..onnx_ops import weight_blocks
from .plan import Site, WeightPlan
from .rtn import Solved

log = logging.getLogger(__name__)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_int_attr(node: onnx.NodeProto, name: str, value: int) -> None:
    for a in node.attribute:
        if a.name == name:
            a.i = value
            return
    node.attribute.append(helper.make_attribute(name, value))


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def emit(model: onnx.ModelProto, plan: WeightPlan, solved: dict[str, Solved], vectors: dict[str, np.ndarray], *,
         form: str = "dq", accuracy_level: int | None = None) -> onnx.ModelProto:
    """``model`` with ``solved`` weights in ``form`` and the ``vectors`` (AWQ folds) replaced.

    Works **in place** on ``model`` (the pipeline's own loaded copy: a second copy of an LLM's
    weights is what this avoids) and returns it, or the opset-raised model built from it."""
    out = model
    graph = out.graph
    nodes = {n.name: n for n in graph.node}
    new_front: list[onnx.NodeProto] = []
    new_inits: list[onnx.TensorProto] = []
    drop_nodes: set[str] = set()
    drop_inits: set[str] = set()
    replaced: dict[str, list[onnx.NodeProto]] = {}
    contrib = False
    for site in plan.sites:
        result = solved.get(site.weight)
        if result is None:
            continue
        base = _safe(site.weight)
        if form == "dq-strict" or (form == "dq" and not site.gathers):
            _emit_dq(site, result, base, nodes, new_front, new_inits, drop_nodes)
        elif form == "dq":  # a table: GatherBlockQuantized (+ the tied lm_head's MatMulNBits), see table_level
            _emit_nbits(site, result, base, nodes, new_front, new_inits, drop_nodes, replaced, table_level(accuracy_level))
            contrib = True
        else:
            _emit_nbits(site, result, base, nodes, new_front, new_inits, drop_nodes, replaced, accuracy_level)
            contrib = True
        drop_inits.add(site.weight)
    for init in graph.initializer:
        if init.name in vectors:
            init.CopyFrom(numpy_helper.from_array(np.asarray(vectors[init.name], np.float32), init.name))
    for node in graph.node:  # vectors held by Constant nodes
        if node.op_type == "Constant" and node.output[0] in vectors:
            for a in node.attribute:
                if a.name == "value":
                    a.t.CopyFrom(numpy_helper.from_array(np.asarray(vectors[node.output[0]], np.float32), node.output[0]))
    kept = []
    for node in graph.node:
        if node.name in drop_nodes:
            continue
        if node.op_type == "Constant" and node.output[0] in drop_inits:
            continue
        kept.extend(replaced.get(node.name, [node]))
    del graph.node[:]
    graph.node.extend(new_front + kept)
    still = [t for t in graph.initializer if t.name not in drop_inits]
    del graph.initializer[:]
    graph.initializer.extend(still + new_inits)
    del still, new_inits  # extend copied them into the graph: the lists would be a second copy
    _drop_unused(graph)
    if contrib and not any(o.domain == weight_blocks.MS_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(weight_blocks.MS_DOMAIN, 1))
    if form in ("dq", "dq-strict"):
        out = _upgrade_light(out)
    elif contrib:
        pin_versions(out)
    return out


#: onnxruntime's default accuracy level for fused ``DequantizeLinear`` + ``MatMul`` (int8 activations).
FUSED_DEFAULT_LEVEL = 4


def table_level(accuracy_level: int | None) -> int:
    """The ``accuracy_level`` attribute of a table's ``MatMulNBits`` in ``form="dq"``.

    The session entry ``session.qdq_matmulnbits_accuracy_level`` reaches only the nodes onnxruntime
    fuses itself, not a ``MatMulNBits`` already in the file, so the attribute stands in for it:
    unset, it is onnxruntime's default for the fused body (4), so the whole model runs at one level.
    Level 0/1 on an 8-bit ``MatMulNBits`` is slower than fp32 (~270 ms vs 12 ms for SmolLM2's
    49152x576 lm_head, 1 thread; docs/weight_only.md), so 4 is also the only fast default."""
    return FUSED_DEFAULT_LEVEL if accuracy_level is None else int(accuracy_level)


def _emit_dq(site: Site, r: Solved, base: str, nodes: dict, front: list, inits: list, drop: set) -> None:
    if site.gathers:  # an embedding table (tied or not): stored [V, H], blocks along H
        node, tensors = weight_blocks.dequantize_linear(base, r.q, r.scale, r.zero_point, r.fmt, axis=1)
        front.append(node)
        inits.extend(tensors)
        for g in site.gathers:
            nodes[g].input[0] = node.output[0]
        if site.transpose is not None:
            nodes[site.transpose].input[0] = node.output[0]
        else:
            for c, i in site.consumers:
                nodes[c].input[i] = node.output[0]
        return
    node, tensors = weight_blocks.dequantize_linear(base, r.q, r.scale, r.zero_point, r.fmt, axis=0)
    front.append(node)
    inits.extend(tensors)
    for c, i in site.consumers:
        consumer = nodes[c]
        consumer.input[i] = node.output[0]
        if consumer.op_type == "Gemm":
            _set_int_attr(consumer, "transB", 0)
    if site.transpose is not None:
        drop.add(site.transpose)


def _emit_nbits(site: Site, r: Solved, base: str, nodes: dict, front: list, inits: list, drop: set,
                replaced: dict, accuracy_level: int | None) -> None:
    packed_name = None
    if site.gathers:
        for j, g in enumerate(site.gathers):
            gnode = nodes[g]
            gnodes, tensors, table = weight_blocks.gather_block_quantized(
                base if j == 0 else f"{base}_{j}", gnode.input[1], gnode.output[0], r.q, r.scale, r.zero_point, r.fmt)
            if j == 0:
                inits.extend(tensors)
                packed_name = table
            else:  # a second Gather of the same table reads the same initializers
                for n in gnodes:
                    n.input[:] = [x.replace(f"{base}_{j}_", f"{base}_") if x.startswith(f"{base}_{j}_") else x for x in n.input]
                inits.extend(t for t in tensors if t.name.startswith(f"{base}_{j}_slice"))
            replaced[g] = gnodes
    shared: list[onnx.TensorProto] | None = None
    for idx, (c, _) in enumerate(site.consumers):
        consumer = nodes[c]
        bias = None
        if consumer.op_type == "Gemm" and len(consumer.input) > 2 and consumer.input[2]:
            if float(_attr(consumer, "beta", 1.0)) != 1.0:
                raise ValueError(f"Gemm {c}: beta != 1 has no MatMulNBits form; use form='dq'")
            bias = consumer.input[2]
        mnodes, tensors = weight_blocks.matmul_nbits(base, consumer.input[0], consumer.output[0], r.q, r.scale,
                                                     r.zero_point, r.fmt, bias=bias, accuracy_level=accuracy_level,
                                                     packed_name=packed_name)
        for n in mnodes:
            if n.op_type == "MatMulNBits":
                n.name = f"{c}_MatMulNBits" if c else n.name
        if shared is None:
            shared = tensors
            inits.extend(tensors)
            replaced[c] = mnodes
        else:  # the initializers (and a Reshape) are shared with the first consumer
            replaced[c] = [n for n in mnodes if n.op_type == "MatMulNBits"]
    if site.transpose is not None:
        drop.add(site.transpose)


#: Initializers at least this large are set aside while the opset converter runs.
_STASH_BYTES = 1 << 16


def _upgrade_light(model: onnx.ModelProto) -> onnx.ModelProto:
    """:func:`upgrade_opset` to 21 without the weights: onnx's converter serializes the whole model
    (seconds for a 500 MB LLM, impossible past 2 GB), yet needs only the graph and its small
    constants. Large initializers' bytes are set aside and put back by name into the upgraded
    model; ``model``'s large initializers are left empty when the upgrade succeeds."""
    stash: dict[str, bytes] = {}
    for t in model.graph.initializer:
        if len(t.raw_data) >= _STASH_BYTES:
            stash[t.name] = t.raw_data
            t.ClearField("raw_data")
    try:
        out = upgrade_opset(model, TARGET_OPSET)
    except BaseException:
        for t in model.graph.initializer:
            if t.name in stash:
                t.raw_data = stash[t.name]
        raise
    # The bytes go to the upgraded model only (``model``, the pipeline's own copy, is not used
    # again): putting them back into both would hold the quantized weights three times.
    total = len(stash)
    restored = 0
    for t in out.graph.initializer:
        if t.name in stash and not t.raw_data:
            t.raw_data = stash.pop(t.name)
            restored += 1
    if restored != total:
        raise RuntimeError(f"opset upgrade lost {len(stash) - restored} of {len(stash)} large initializers")
    return out


def _drop_unused(graph: onnx.GraphProto) -> None:
    """Remove initializers no node (subgraphs included) or output reads any more."""
    from ..graph.walk import all_graphs

    used = {o.name for o in graph.output}
    for g in all_graphs(graph):
        for n in g.node:
            used.update(n.input)
    keep = [t for t in graph.initializer if t.name in used]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)
