"""Merge MatMuls (or Gemms) that share input A and have constant B into one wider MatMul + Split.

Why: attention blocks project one activation three times (Q, K, V). One GEMM with N = N_q+N_k+N_v
reads A once and keeps the cores busier than three thin ones, and the BF16 conversion tool then
quantizes A once instead of three times. The rewrite is exact in structure: the columns of the
merged product are the products of the separate ones, the merged bias Add adds the same numbers,
and Split hands back each slice under the original output name.

Merged only when: same A value, B true initializers of rank 2 with equal K and equal dtype; for
Gemm also transA=0 and equal alpha/beta (transB is undone by transposing the constant, which is
exact). A MatMul whose only consumer is ``Add`` with a constant bias of shape (N,) or (1, N) gets its
bias merged too; MatMuls with and without such a bias are merged in separate groups. Only the main
graph is rewritten; subgraphs are left alone.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxptq.graph.opsets import model_opset
from onnxptq.graph.passes._common import (
    collect_names,
    constant_array,
    is_onnx_domain,
    make_initializer,
    run_passes,
    unique_name,
)

log = logging.getLogger(__name__)


@dataclass
class _Member:
    """One MatMul/Gemm to merge: its B as (K, N), its bias (N,) if any, and the nodes it replaces."""

    node: ir.Node
    weight: np.ndarray
    bias: np.ndarray | None
    add: ir.Node | None

    @property
    def result(self) -> ir.Value:
        """The value the rest of the graph reads: the Add's output when a bias is merged."""
        return (self.add or self.node).outputs[0]


def _float_attr(node: ir.Node, name: str, default: float) -> float:
    attr = node.attributes.get(name)
    return attr.as_float() if attr is not None else default


def _int_attr(node: ir.Node, name: str, default: int) -> int:
    attr = node.attributes.get(name)
    return attr.as_int() if attr is not None else default


def _bias_add(node: ir.Node, n: int, dtype: np.dtype) -> tuple[ir.Node, np.ndarray] | None:
    """The single Add consuming ``node``'s output with a constant (N,)/(1,N) bias, if there is one."""
    out = node.outputs[0]
    uses = out.uses()
    if len(uses) != 1 or out.is_graph_output():
        return None
    add = uses[0].node
    if add.op_type != "Add" or not is_onnx_domain(add.domain) or add.graph is not node.graph:
        return None
    other = add.inputs[1 - uses[0].idx]
    bias = constant_array(other)
    if bias is None or bias.dtype != dtype or bias.ndim > 2 or bias.size != n or bias.shape[-1] != n:
        return None
    return add, bias.reshape(n)


def _candidate(node: ir.Node) -> tuple[tuple, _Member] | None:
    """Grouping key and member for a mergeable MatMul/Gemm, or None."""
    if not is_onnx_domain(node.domain) or node.op_type not in ("MatMul", "Gemm") or node.inputs[0] is None:
        return None
    b = constant_array(node.inputs[1])
    if b is None or b.ndim != 2 or b.dtype.kind != "f":
        return None
    a = node.inputs[0]
    if node.op_type == "MatMul":
        bias = _bias_add(node, b.shape[1], b.dtype)
        add, vec = bias if bias is not None else (None, None)
        key = (id(a), "MatMul", b.dtype.str, b.shape[0], add is not None)
        return key, _Member(node, b, vec, add)
    if _int_attr(node, "transA", 0) != 0:
        return None
    weight = b.T if _int_attr(node, "transB", 0) else b
    n = weight.shape[1]
    c = None
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        c = constant_array(node.inputs[2])
        if c is None or c.dtype != b.dtype or c.ndim > 2 or c.size not in (1, n) or (c.size == n and c.shape[-1] != n):
            return None
        c = np.broadcast_to(c.reshape(-1), (n,))
    alpha, beta = _float_attr(node, "alpha", 1.0), _float_attr(node, "beta", 1.0)
    key = (id(a), "Gemm", b.dtype.str, weight.shape[0], alpha, beta)
    return key, _Member(node, np.ascontiguousarray(weight), None if c is None else np.array(c), None)


class MergeMatMulsPass(ir.passes.InPlacePass):
    """Merge sibling MatMul/Gemm nodes of the main graph that share A and have constant B."""

    def __init__(self, min_group: int = 2) -> None:
        super().__init__()
        self.min_group = min_group

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        opset = model_opset(model)
        names = collect_names(model)
        groups: dict[tuple, list[_Member]] = defaultdict(list)
        for node in graph:
            found = _candidate(node)
            if found is not None:
                groups[found[0]].append(found[1])
        count = 0
        for key, members in groups.items():
            if len(members) >= self.min_group and self._merge(graph, key[1], members, opset, names):
                count += 1
        if count:
            graph.sort()
            log.info("merged %d group(s) of MatMul/Gemm sharing an input", count)
        return ir.passes.PassResult(model, modified=bool(count))

    @staticmethod
    def _merge(graph: ir.Graph, kind: str, members: list[_Member], opset: int, names: set[str]) -> bool:
        first = members[0].node
        a = first.inputs[0]
        assert a is not None
        rank = len(a.shape) if a.shape is not None else None
        if opset < 11 and rank is None:
            return False  # Split takes a negative axis only from opset 11
        axis = -1 if rank is None else max(rank - 1, 0)  # MatMul keeps A's rank (a 1-D A gives 1-D)
        sizes = [m.weight.shape[1] for m in members]
        dtype = members[0].weight.dtype
        base = unique_name(names, f"{first.name or 'matmul'}_merged")
        weight = make_initializer(graph, unique_name(names, f"{base}_B"), np.concatenate([m.weight for m in members], axis=1))
        new_nodes: list[ir.Node] = []
        if kind == "Gemm":
            inputs = [a, weight]
            if any(m.bias is not None for m in members):
                c = np.concatenate([m.bias if m.bias is not None else np.zeros(n, dtype) for m, n in zip(members, sizes)])
                inputs.append(make_initializer(graph, unique_name(names, f"{base}_C"), c.astype(dtype)))
            attrs = {k: v for k, v in first.attributes.items() if k in ("alpha", "beta")}
            product = ir.node("Gemm", inputs, attributes=attrs, name=base)
            new_nodes.append(product)
        else:
            product = ir.node("MatMul", [a, weight], name=base)
            new_nodes.append(product)
            if members[0].add is not None:
                bias = make_initializer(graph, unique_name(names, f"{base}_bias"), np.concatenate([m.bias for m in members]))  # type: ignore[misc]
                product = ir.node("Add", [product.outputs[0], bias], name=unique_name(names, f"{base}_add"))
                new_nodes.append(product)
        if opset >= 13:
            split_sizes = make_initializer(graph, unique_name(names, f"{base}_split"), np.array(sizes, dtype=np.int64))
            split = ir.node("Split", [product.outputs[0], split_sizes], attributes={"axis": axis}, num_outputs=len(members), name=unique_name(names, f"{base}_split"))
        else:
            split = ir.node("Split", [product.outputs[0]], attributes={"axis": axis, "split": sizes}, num_outputs=len(members), name=unique_name(names, f"{base}_split"))
        new_nodes.append(split)
        for node in new_nodes:
            graph.insert_before(first, node)
        for member, out in zip(members, split.outputs):
            old = member.result
            out.shape, out.type = old.shape, old.type
            name = old.name
            ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
            if member.add is not None:
                graph.remove(member.add, safe=True)
            graph.remove(member.node, safe=True)
            out.name = name
        for node in new_nodes[:-1]:
            node.outputs[0].name = unique_name(names, f"{node.name}_out")
        log.debug("merged %s into %s (N = %s)", [m.node.name for m in members], base, sizes)
        return True


def merge_matmuls(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with sibling MatMuls/Gemms on one input merged into MatMul + Split."""
    return run_passes(model, MergeMatMulsPass(), RemoveUnusedNodesPass())
