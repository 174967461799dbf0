"""Which weights a weight-only quantization touches, and in which role: a pure function of the graph.

A *site* is one weight tensor and the nodes that read it:

* ``linear``: ``MatMul(X, W)`` with ``W`` a 2-D constant — an initializer, a ``Constant`` node,
  or ``Transpose(perm=[1, 0])`` of either (the ``[out, in]`` layout some exporters leave); and
  ``Gemm(X, W)`` (``transB`` read), ``alpha == 1``, ``transA == 0``;
* ``lm_head``: the linear site that writes a graph output (the logits), or that reads an
  embedding table through ``Transpose`` (tied embeddings) — found by structure, not by name;
* ``embedding``: ``Gather(table, ids)`` on axis 0 of a 2-D float constant; quantized only when asked,
  or when the table is tied to the lm_head and the lm_head is quantized (it is then stored once).

Every site is given in the ``[K, N]`` view (K the reduction axis): what the methods see.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from ..graph import external
from ..graph.opsets import is_onnx_domain

LINEAR, LM_HEAD, EMBEDDING = "linear", "lm_head", "embedding"


@dataclass
class Site:
    """One weight to quantize.

    ``weight``: the stored tensor's name (initializer or Constant output). ``stored_kn``: stored as
    ``[K, N]`` (else ``[N, K]``, i.e. transposed: through a Transpose node, a ``Gemm`` with
    ``transB``, or an embedding table). ``consumers``: ``(node name, input index)`` of the MatMul/
    Gemm reading it (through ``transpose`` when that is set). ``activation``: the input X of those
    consumers (one tensor: sites whose MatMuls share a weight but not an input are split).
    """

    name: str
    weight: str
    role: str
    k: int
    n: int
    stored_kn: bool
    activation: str | None
    consumers: list[tuple[str, int]] = field(default_factory=list)
    transpose: str | None = None
    gathers: list[str] = field(default_factory=list)
    gemm: bool = False

    @property
    def tied(self) -> bool:
        """A table both gathered (embedding) and multiplied (lm_head)."""
        return bool(self.gathers) and bool(self.consumers)


@dataclass
class WeightPlan:
    """The sites in graph order, and what was left alone with why."""

    sites: list[Site]
    skipped: dict[str, str]

    def by_weight(self) -> dict[str, Site]:
        return {s.weight: s for s in self.sites}


class _Constants:
    """2-D float constants of a graph: initializers and ``Constant`` node outputs."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.tensors: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
        self.constant_nodes: dict[str, onnx.NodeProto] = {}
        inputs = {i.name for i in graph.input}
        for name in list(self.tensors):
            if name in inputs:  # an initializer that is also an input can be overridden: not a constant
                del self.tensors[name]
        for node in graph.node:
            if node.op_type == "Constant" and is_onnx_domain(node.domain):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        self.tensors[node.output[0]] = attr.t
                        self.constant_nodes[node.output[0]] = node

    def float2d(self, name: str) -> onnx.TensorProto | None:
        t = self.tensors.get(name)
        # float32 only: an fp16 model's scales (and so the DequantizeLinear output) would have to be fp16
        if t is None or len(t.dims) != 2 or t.data_type != onnx.TensorProto.FLOAT:
            return None
        return t

    def values(self, name: str) -> np.ndarray:
        """float32 values; a float32 tensor held as raw bytes is viewed, not copied (read-only)."""
        t = self.tensors[name]
        if t.data_type == onnx.TensorProto.FLOAT and t.raw_data and not external.is_external(t) and sys.byteorder == "little":
            return np.frombuffer(t.raw_data, dtype=np.float32).reshape(tuple(t.dims))
        return np.asarray(external.tensor_values(t), dtype=np.float32)


def _attr(node: onnx.NodeProto, name: str, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def make_plan(model: onnx.ModelProto, *, embedding: bool = False, exclude: tuple[str, ...] = ()) -> WeightPlan:
    """The weight-only plan of ``model``'s main graph (subgraphs are left float)."""
    graph = model.graph
    consts = _Constants(graph)
    producers = {o: n for n in graph.node for o in n.output}
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, i))
    graph_outputs = {o.name for o in graph.output}
    sites: dict[str, Site] = {}
    skipped: dict[str, str] = {}

    def weight_of(name: str) -> tuple[str, bool, str | None] | None:
        """``(stored weight, stored_kn, transpose node)`` behind a MatMul's B input."""
        if consts.float2d(name) is not None:
            return name, True, None
        node = producers.get(name)
        if node is not None and node.op_type == "Transpose" and consts.float2d(node.input[0]) is not None:
            if list(_attr(node, "perm", [1, 0])) == [1, 0]:
                return node.input[0], False, node.name
        return None

    for node in graph.node:
        if node.name in exclude:
            skipped[node.name] = "excluded by name"
            continue
        if node.op_type == "MatMul" and is_onnx_domain(node.domain):
            found = weight_of(node.input[1])
            if found is None:
                continue
            weight, kn, transpose = found
            gemm = False
        elif node.op_type == "Gemm" and is_onnx_domain(node.domain):
            if _attr(node, "transA", 0) or float(_attr(node, "alpha", 1.0)) != 1.0 or consts.float2d(node.input[1]) is None:
                if consts.float2d(node.input[1]) is not None:
                    skipped[node.name] = "Gemm with transA or alpha != 1"
                continue
            weight, kn, transpose, gemm = node.input[1], not _attr(node, "transB", 0), None, True
        else:
            continue
        dims = list(consts.tensors[weight].dims)
        k, n = (dims[0], dims[1]) if kn else (dims[1], dims[0])
        site = sites.get(weight)
        if site is not None and (site.activation != node.input[0] or site.stored_kn != kn or site.gemm != gemm):
            skipped[node.name] = f"weight {weight} is shared with {site.name} in another layout or on another input"
            continue
        if site is None:
            site = sites[weight] = Site(name=node.name or weight, weight=weight, role=LINEAR, k=k, n=n, stored_kn=kn,
                                        activation=node.input[0], transpose=transpose, gemm=gemm)
        site.consumers.append((node.name, 1))
        if node.output[0] in graph_outputs:
            site.role = LM_HEAD

    for node in graph.node:
        if node.op_type != "Gather" or not is_onnx_domain(node.domain) or int(_attr(node, "axis", 0)) != 0:
            continue
        table = node.input[0]
        if consts.float2d(table) is None:
            continue
        site = sites.get(table)
        if site is not None and not site.stored_kn:
            site.gathers.append(node.name)  # tied: the lm_head reads Transpose(table)
            site.role = LM_HEAD
        elif site is None:
            v, h = consts.tensors[table].dims
            sites[table] = Site(name=node.name or table, weight=table, role=EMBEDDING, k=h, n=v, stored_kn=False,
                                activation=None, gathers=[node.name])
        else:
            skipped[node.name] = f"table {table} is also a MatMul weight stored [K, N]; left float"
    # a weight read by a Transpose that something other than its MatMul consumers also reads stays
    for site in list(sites.values()):
        if site.transpose is not None:
            t_node = next(n for n in graph.node if n.name == site.transpose)
            readers = {n.name for n, _ in uses.get(t_node.output[0], [])}
            if readers - {c for c, _ in site.consumers}:
                skipped[site.name] = f"Transpose {site.transpose} of {site.weight} also feeds other nodes"
                del sites[site.weight]
                continue
        other = {n.name for n, _ in uses.get(site.weight, [])} - {c for c, _ in site.consumers} - set(site.gathers)
        if site.transpose is not None:
            other -= {site.transpose}
        if other:
            skipped[site.name] = f"weight {site.weight} is also read by {sorted(other)[0]}"
            del sites[site.weight]
    ordered = [s for s in sites.values() if s.role != EMBEDDING or embedding]
    for s in sites.values():
        if s.role == EMBEDDING and not embedding:
            skipped[s.name] = "embedding table (opt-in: embedding=True)"
    return WeightPlan(sites=ordered, skipped=skipped)


def weight_kn(model_consts: _Constants, site: Site) -> np.ndarray:
    """The site's weight in the ``[K, N]`` view, float32."""
    w = model_consts.values(site.weight)
    return np.ascontiguousarray(w if site.stored_kn else w.T)
