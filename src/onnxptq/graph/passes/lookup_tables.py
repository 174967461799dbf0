"""Dequantize a lookup table after the lookup: ``Gather`` reads the stored integers, the rows it
returns are dequantized.

Why: the emitter writes a quantized weight as ``DequantizeLinear(int8 constant)`` feeding its reader.
For a matrix product onnxruntime fuses that pair into an integer kernel; for an embedding table
read by ``Gather`` it does neither fuse nor constant-fold the ``DequantizeLinear`` (its constant
folding leaves DQ nodes to the QDQ fusions), so every run dequantizes the whole table: a
30522×384 table costs 7.7 ms a run against 0.03 ms for the float ``Gather`` (onnxruntime 1.32, one
thread, bench/RESULTS.md "Lookup tables"). Gathering the integer rows first and dequantizing only
them costs 0.03–0.04 ms and keeps the file's int8 bytes.

What: a ``DequantizeLinear`` of integer constants (data, scale, zero point; not block-wise) whose
every reader is a ``Gather`` taking it as data becomes, per reader, ``Gather`` of the integers and:

* per tensor: ``DequantizeLinear`` of the gathered integers with the same scale and zero point;
* per axis, the DQ axis being the Gather axis (one scale per table row): ``Cast [− zero point] ×
  scale`` with the scale (and zero point) gathered by the same indices, reshaped to broadcast over
  the row. The integer minus its zero point is exact in any float type and one rounded multiply
  follows, the steps ``DequantizeLinear`` defines: the rows are the dequantized table's rows bit
  for bit.

A DQ read by anything else (a tied lm_head's Transpose, a body that reads it from outside), or
per axis along another axis than the Gather's, is left as it is: still correct, only slower.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..opsets import is_onnx_domain
from ..walk import walk_scopes

log = logging.getLogger(__name__)

__all__ = ["dequantize_after_lookup"]


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((a.i for a in node.attribute if a.name == name), default)


def _readers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Readers of each name in ``graph``; a node with a body counts as a reader of whatever its
    bodies read (outer-scope references)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        names = set(node.input)
        for attr in node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for body in bodies:
                names |= {i for scope in walk_scopes(body) for n in scope.graph.node for i in n.input}
        for name in names:
            if name:
                readers.setdefault(name, []).append(node)
    return readers


def _targets(graph: onnx.GraphProto, inits: dict[str, TensorProto]) -> dict[str, onnx.NodeProto]:
    """The DQ nodes of ``graph`` to move behind their Gathers, by output name."""
    readers = _readers(graph)
    outputs = {o.name for o in graph.output}
    found: dict[str, onnx.NodeProto] = {}
    for dq in graph.node:
        if dq.op_type != "DequantizeLinear" or not is_onnx_domain(dq.domain) or _attr(dq, "block_size", 0):
            continue
        if any(i not in inits for i in dq.input if i) or dq.output[0] in outputs:
            continue
        data, scale = inits[dq.input[0]], inits[dq.input[1]]
        rank = len(data.dims)
        per_axis = len(scale.dims) == 1 and scale.dims[0] > 1 or len(scale.dims) > 1
        users = readers.get(dq.output[0], [])
        if not users or rank == 0:
            continue
        axis = _attr(dq, "axis", 1) % rank
        if all(u.op_type == "Gather" and is_onnx_domain(u.domain) and u.input[0] == dq.output[0]
               and dq.output[0] not in u.input[1:]
               and (not per_axis or _attr(u, "axis", 0) % rank == axis) for u in users):
            found[dq.output[0]] = dq
    return found


def _after(gather: onnx.NodeProto, dq: onnx.NodeProto, inits: dict[str, TensorProto], graph: onnx.GraphProto,
           added: dict[str, str]) -> list[onnx.NodeProto]:
    """The nodes that replace ``gather`` (same output name): gather the integers, then dequantize."""
    data, scale = dq.input[0], dq.input[1]
    zero = dq.input[2] if len(dq.input) > 2 and dq.input[2] else None
    rank = len(inits[data].dims)
    axis = _attr(gather, "axis", 0) % rank
    base = gather.name or gather.output[0]
    ids = gather.input[1]
    rows = f"{base}_int_rows"
    nodes = [helper.make_node("Gather", [data, ids], [rows], axis=axis, name=f"{base}_int")]
    out = gather.output[0]
    scale_values = numpy_helper.to_array(inits[scale])
    if scale_values.size == 1 and scale_values.ndim <= 1:
        attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute if a.name != "axis"}
        nodes.append(helper.make_node("DequantizeLinear", [rows, *dq.input[1:]], [out], name=f"{base}_dq", **attrs))
        return nodes

    def per_row(name: str, as_float: bool) -> str:
        """``name``'s values as ``[rows, 1, …]`` (a 1 per table axis after the Gather axis), so the
        same Gather yields a tensor that broadcasts over each returned row."""
        key = f"{name}|{as_float}|{axis}"
        if key not in added:
            values = numpy_helper.to_array(inits[name])
            if as_float:  # integers of 8 or 16 bits are exact in any float type
                values = values.astype(helper.tensor_dtype_to_np_dtype(inits[scale].data_type))
            values = values.reshape([values.size] + [1] * (rank - 1 - axis))
            added[key] = f"{name}_per_row{'_float' if as_float else ''}"
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(values), added[key]))
        gathered = f"{base}_{added[key]}"
        nodes.append(helper.make_node("Gather", [added[key], ids], [gathered], axis=0, name=f"{gathered}_gather"))
        return gathered

    to = _attr(dq, "output_dtype", 0) or inits[scale].data_type
    value = f"{base}_rows_float"
    nodes.append(helper.make_node("Cast", [rows], [value], to=to, name=f"{base}_cast"))
    if zero is not None and np.any(numpy_helper.to_array(inits[zero]) != 0):
        nodes.append(helper.make_node("Sub", [value, per_row(zero, True)], [f"{base}_rows_centred"], name=f"{base}_sub"))
        value = f"{base}_rows_centred"
    nodes.append(helper.make_node("Mul", [value, per_row(scale, False)], [out], name=f"{base}_dequantize"))
    return nodes


def dequantize_after_lookup(model: onnx.ModelProto) -> int:
    """Rewrite, in place, every table ``DequantizeLinear → Gather`` of ``model`` (every graph) into
    ``Gather`` of the integers and a dequantization of the rows (module docstring); returns how
    many Gathers were rewritten."""
    rewritten = 0
    for scope in walk_scopes(model.graph):
        graph = scope.graph
        inits = {t.name: t for t in graph.initializer}
        targets = _targets(graph, inits)
        if not targets:
            continue
        added: dict[str, str] = {}
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            if node.op_type == "DequantizeLinear" and node.output[0] in targets:
                continue
            if node.op_type == "Gather" and node.input and node.input[0] in targets:
                nodes.extend(_after(node, targets[node.input[0]], inits, graph, added))
                rewritten += 1
                continue
            nodes.append(node)
        del graph.node[:]
        graph.node.extend(nodes)
        read = {i for s in walk_scopes(graph) for n in s.graph.node for i in n.input} | {o.name for o in graph.output}
        dropped = {i for dq in targets.values() for i in dq.input[1:] if i} - read
        if dropped:
            kept = [t for t in graph.initializer if t.name not in dropped]
            del graph.initializer[:]
            graph.initializer.extend(kept)
    if rewritten:
        log.info("lookup tables: %d Gather(s) read integer rows and dequantize after the lookup", rewritten)
    return rewritten
