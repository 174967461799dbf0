"""Numerics by structure: written-out normalizations and activations, found by their dataflow.

Exporters spell one operation many ways. A LayerNorm is ``LayerNormalization`` (opset ≥ 17),
or mean/variance reductions (``ReduceMean → Sub → Pow → ReduceMean → Add → Sqrt → Div``), or
E[x²] − E[x]² (``Mul(x, x)``/``Pow(x, 2)`` and ``ReduceMean`` twice, JAX/TF exporters), an
RMSNorm is ``x · Reciprocal(Sqrt(ReduceMean(x²) + eps))``, a GELU is ``x · ½(1 + erf(x/√2))`` or
``½x(1 + tanh(√(2/π)(x + 0.044715·x³)))`` with ``x³`` as ``Pow(x, 3)`` or ``Mul(Mul(x, x), x)``.
Quantizing the tensors *inside* such a spelling puts a rounding step where the float op has none:
on E[x²] − E[x]² the two means cancel to a variance a thousand times smaller than either, so a
bfloat16 rounding of E[x²] alone (8 bits of mantissa) leaves a variance that is mostly rounding
noise (a 16-node synthetic LayerNorm: BF16 output cosine 0.45).

The rule (one for every format: integer, BF16/FP16, block formats; docs/structure.md): a
*region* is a single-entry single-exit piece of dataflow from one tensor ``x`` to one tensor
``y`` made of elementwise ops, reductions and reshapes only, where

- ``x`` is read at least twice inside it (``x − mean(x)``, ``x · f(x)``, ``Mul(x, x)``),
- every tensor made inside it is read only inside it (nothing escapes but ``y``),
- its last step joins two paths from ``x`` (``x · f(x)``, ``(x − μ) / σ``), not one,
- it has the signature of a normalization (a reduction and a square root, reciprocal, division
  or power; or a reduction, Exp and Log: a log-softmax) or of a gated activation (``x`` times a function of ``x`` through Erf, Tanh,
  Sigmoid, Softplus, Exp/Log, Clip or HardSigmoid),

extended through trailing elementwise ops by constants (``· gamma + beta``, ``· 0.5``) and
reshapes by constant shapes (GroupNorm's reshape back). A single ``InstanceNormalization`` /
``MeanVarianceNormalization`` with such a tail is a region too (torch's GroupNorm below opset 18:
``Reshape(N, G, −1) → InstanceNormalization(ones, zeros) → Reshape back → · γ + β``), and a region
whose tail reshapes back starts where the grouping reshape starts (the ungrouped tensor). The plan
keeps every tensor inside a region float (:func:`structure_float_tensors`): only ``x`` and ``y``
get quantizers, exactly as the fused single op (``LayerNormalization``, ``Gelu``) would. Where the
opset has that op and prepare knows the spelling it fuses it first (``graph/passes/fuse_*``);
this rule covers every spelling it does not, by dataflow rather than op names or node names.
"""

from __future__ import annotations

import heapq
import logging
from collections import Counter
from dataclasses import dataclass

import onnx

from .ops import FLOATING
from .opsets import is_onnx_domain
from .walk import all_graphs, dataflow, subgraphs

log = logging.getLogger(__name__)

__all__ = ["Region", "find_regions", "structure_float_tensors"]

#: Elementwise ops a region may hold (one output, element by element, broadcasting constants).
ELEMENTWISE = frozenset(
    """Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp Log Erf Tanh Sigmoid Softplus Softsign Clip HardSigmoid
    Relu Max Min Cast Identity""".split()
)
#: Reductions over some axes (mean/variance, sums of squares, norms, softmax denominators).
#: ``GlobalAveragePool`` is the mean over every spatial axis: prepare writes a channels-first
#: ``ReduceMean(axes=[2, 3])`` as one (graph/passes/spatial_means.py), so an InstanceNorm written as
#: moments over (H, W) reaches this rule with pools for its two means (fuzz20: without it the region was
#: lost and BF16 rounded the mean, the squares, the variance and the root; A8W8 quantized the mean).
REDUCTIONS = frozenset("ReduceMean ReduceSum ReduceSumSquare ReduceL2 ReduceL1 ReduceMax GlobalAveragePool".split())
#: Reshapes (GroupNorm written out reshapes to (N, G, -1) and back); their shape inputs are ints.
RESHAPES = frozenset("Reshape Unsqueeze Squeeze Flatten Transpose Expand".split())
STRUCTURE_OPS = ELEMENTWISE | REDUCTIONS | RESHAPES
#: Reshapes that keep the elements' order (a grouping (N, C, H, W) → (N, G, −1) and back); a Transpose
#: permutes, so it is data movement around a region, not a grouping inside one.
_GROUPING = frozenset("Reshape Flatten Squeeze Unsqueeze".split())
#: Ops whose presence (with a reduction) marks a normalization: the 1/σ step.
_ROOTS = frozenset("Sqrt Reciprocal Div Pow".split())
#: Nonlinearities of gated activations: x · f(x).
_GATES = frozenset("Erf Tanh Sigmoid Softplus Softsign Exp Log Clip HardSigmoid".split())
#: Ops a region's affine tail may extend through, when their other operand is a constant.
_AFFINE = frozenset("Add Sub Mul Div".split())
#: Single normalization ops whose exporters write the affine and the grouping around them: torch's
#: nn.GroupNorm below opset 18 is ``Reshape(N, G, −1) → InstanceNormalization(ones, zeros) → Reshape
#: back → · γ + β`` (InstanceNormalization's own affine is per group there, so γ/β are written out).
_NORM_OPS = frozenset("InstanceNormalization MeanVarianceNormalization".split())
#: Upper bound on a region's size (nodes): the spellings above have at most ~20; the bound keeps
#: the search linear in the graph.
MAX_REGION = 48


@dataclass(frozen=True)
class Region:
    """One written-out normalization or activation: input ``x``, output ``y``, the nodes between."""

    kind: str
    x: str
    y: str
    nodes: tuple[str, ...]
    #: float tensors made inside (every node output but ``y``)
    interior: tuple[str, ...]
    #: constants read only inside (gamma, beta, eps, 0.044715, ...)
    constants: tuple[str, ...]

    def reason(self) -> str:
        return f"inside a written-out {self.kind} ({self.x} → {self.y}): kept float, only its input and output are quantized"


class _Index:
    def __init__(self, graph: onnx.GraphProto, outer_constants: frozenset[str] = frozenset()) -> None:
        """``outer_constants``: of the names a subgraph reads from its enclosing graphs, those no data value
        reaches there; every other outer name carries data (an If branch's only way in)."""
        self.nodes = list(graph.node)
        self.pos = {id(n): i for i, n in enumerate(self.nodes)}
        self.producer, self.consumers = dataflow(self.nodes)
        self.outputs = {o.name for o in graph.output}
        self.types = {v.name: v.type.tensor_type.elem_type for v in (*graph.input, *graph.value_info, *graph.output)
                      if v.type.HasField("tensor_type")}
        for t in graph.initializer:
            self.types[t.name] = t.data_type
        # Constants: every tensor no data value reaches. Shape/Size read only a shape, so what is
        # computed from them is constant here too: jax2tf writes γ and β as
        # Reshape(γ, Concat(Shape(input), ...)), a float tensor that no data value reaches.
        data = {i.name for i in graph.input} - {t.name for t in graph.initializer}
        made_here = {o for n in self.nodes for o in n.output if o} | {t.name for t in graph.initializer}
        data.update(i for n in self.nodes for i in n.input if i and i not in made_here and i not in outer_constants)
        for n in self.nodes:
            if n.op_type not in ("Shape", "Size") and any(i in data for i in n.input if i):
                data.update(o for o in n.output if o)
        self.constants = {t.name for t in graph.initializer}
        self.constants.update(o for n in self.nodes for o in n.output if o and o not in data)
        # the enclosing graphs' constants this graph reads (a region's γ may be one)
        self.constants.update(i for n in self.nodes for i in n.input if i and i not in made_here and i in outer_constants)

    def is_float(self, name: str) -> bool:
        """Known float, or unknown (shape inference may not have typed it); ints are shapes/axes."""
        t = self.types.get(name, 0)
        return t == 0 or t in FLOATING

    def data_inputs(self, node: onnx.NodeProto) -> list[str]:
        """Inputs carrying values (not constants, not integer shapes/axes)."""
        return [i for i in node.input if i and i not in self.constants and self.is_float(i)]

    def float_outputs(self, node: onnx.NodeProto) -> list[str]:
        return [o for o in node.output if o and self.is_float(o)]

    def real_consumers(self, name: str) -> list[onnx.NodeProto]:
        """Readers that consume the value (not only its shape: Shape/Size give integers)."""
        return [c for c in self.consumers.get(name, []) if c.op_type not in ("Shape", "Size")]


def _cone(ix: _Index, x: str) -> list[onnx.NodeProto]:
    """Structure-op nodes computable from ``x`` and constants alone, in graph order (bounded)."""
    available = {x}
    cone: list[onnx.NodeProto] = []
    heap: list[tuple[int, int]] = []
    seen: set[int] = set()

    def push(name: str) -> None:
        for c in ix.real_consumers(name):
            if c.op_type in STRUCTURE_OPS and is_onnx_domain(c.domain) and id(c) not in seen:
                seen.add(id(c))
                heapq.heappush(heap, (ix.pos[id(c)], id(c)))

    by_id = {id(n): n for n in ix.nodes}
    push(x)
    while heap and len(cone) < MAX_REGION:
        _, key = heapq.heappop(heap)
        node = by_id[key]
        if len(node.output) != 1 or not all(i in available for i in ix.data_inputs(node)):
            continue
        cone.append(node)
        for out in ix.float_outputs(node):
            available.add(out)
            push(out)
    return cone


def _kind(nodes: list[onnx.NodeProto], x: str, ix: _Index) -> str | None:
    ops = {n.op_type for n in nodes}
    if ops & REDUCTIONS and {"Exp", "Log"} <= ops and not ops & _ROOTS:
        # x − m − Log(ReduceSum(Exp(x − m))): a log-softmax written out (jax.nn.log_softmax through jax2tf,
        # a CTC head's log-probabilities). Its normalizing step is a Log, not a root, and it is shift-invariant
        # as a softmax is, so rounding the max or the shifted logits is a step the single op lacks.
        return "log-softmax"
    if ops & REDUCTIONS and ops & _ROOTS:
        if "Exp" in ops:
            return "softmax"
        centred = any(n.op_type == "Sub" and n.input[0] == x for n in nodes)
        squares = any(n.op_type in ("Mul", "Pow") and n.input[0] == x for n in nodes)
        if centred and squares:
            return "LayerNorm/GroupNorm (E[x²] − E[x]²)"
        if centred:
            return "LayerNorm/GroupNorm (mean/variance)"
        return "RMSNorm"
    if ops & REDUCTIONS:
        return None
    if "Erf" in ops:
        return "GELU (erf)"
    if "Tanh" in ops and ("Softplus" in ops or "Log" in ops):
        return "Mish"
    if "Tanh" in ops:
        return "GELU (tanh)"
    if "Sigmoid" in ops:
        return "SiLU/Swish"
    if ops & {"Clip", "HardSigmoid"}:
        return "HardSwish"
    if ops & _GATES:
        return "gated activation"
    return None


def _closed(ix: _Index, y: str, cone_ids: set[int], x: str) -> list[onnx.NodeProto] | None:
    """The cone nodes ``y`` depends on, when they form a region ending at ``y``; else None."""
    producer = ix.producer.get(y)
    if producer is None or id(producer) not in cone_ids or len(ix.data_inputs(producer)) < 2:
        return None  # the last step joins two paths from x (x · f(x), (x − μ) / σ), not a unary step
    members: dict[int, onnx.NodeProto] = {}
    stack = [producer]
    while stack:
        n = stack.pop()
        if id(n) in members:
            continue
        members[id(n)] = n
        for i in ix.data_inputs(n):
            if i == x:
                continue
            p = ix.producer.get(i)
            if p is None or id(p) not in cone_ids:
                return None
            stack.append(p)
    nodes = sorted(members.values(), key=lambda n: ix.pos[id(n)])
    reads = sum(1 for n in nodes for i in n.input if i == x)
    if len(nodes) < 2 or reads < 2:
        return None
    inside = set(members)
    for n in nodes:
        for out in ix.float_outputs(n):
            if out == y:
                continue
            if out in ix.outputs or any(id(c) not in inside for c in ix.real_consumers(out)):
                return None
    return nodes


def _affine_tail(ix: _Index, y: str, taken: set[int]) -> list[onnx.NodeProto]:
    """Trailing ``· const`` / ``+ const`` steps and constant-shape reshapes after ``y`` (γ, β, ½,
    GroupNorm's reshape back): one reader each."""
    tail: list[onnx.NodeProto] = []
    current = y
    while current not in ix.outputs:
        readers = ix.real_consumers(current)
        if len(readers) != 1:
            break
        n = readers[0]
        if n.op_type not in _AFFINE | RESHAPES or id(n) in taken or len(n.output) != 1:
            break
        others = [i for i in n.input if i and i != current]
        if n.op_type in RESHAPES:
            if n.input[0] != current or any(i not in ix.constants for i in others):
                break  # a reshape back (GroupNorm's (N, G, −1) → (N, C, H, W)) by a constant shape
        elif len(others) != 1 or others[0] not in ix.constants or list(n.input).count(current) != 1:
            break
        tail.append(n)
        current = n.output[0]
    return tail


def _grouping_head(ix: _Index, x: str, members: set[int], taken: set[int]) -> list[onnx.NodeProto]:
    """The order-keeping reshapes by constant shapes that made ``x`` from a float tensor, each output read only by the
    region (``members``: its nodes' ids) or by the next reshape (GroupNorm's ``Reshape(N, G, −1)``),
    first one first; the caller asks only where the region reshapes back.

    Why: the grouped tensor is the ungrouped one laid out differently, so a quantizer on it is the
    region input's quantizer twice over; the region starts where the grouping starts, as the fused
    ``GroupNormalization`` reads the ungrouped tensor."""
    head: list[onnx.NodeProto] = []
    current, readers_ok = x, set(members)
    while current not in ix.outputs and all(id(c) in readers_ok for c in ix.real_consumers(current)):
        p = ix.producer.get(current)
        if p is None or p.op_type not in _GROUPING or id(p) in members | taken or len(p.output) != 1 or not is_onnx_domain(p.domain):
            break
        source = p.input[0] if p.input else ""
        if (not source or source in ix.constants or not ix.is_float(source)
                or any(i not in ix.constants for i in p.input[1:] if i)):
            break
        head.append(p)
        current, readers_ok = source, {id(p)}
    return head[::-1]


def find_regions(model: onnx.ModelProto) -> list[Region]:
    """Every region (module docstring) of the main graph and of every subgraph (If branches, Loop and Scan
    bodies), graph by graph in graph order, none nested in another.

    Why the subgraphs: an exporter that wraps the network in an ``If`` (openWakeWord's models: the whole
    classifier in a then-branch, two mean/variance LayerNorms in it) writes the same spellings there, and the
    plan quantizes a branch's tensors as it does the main graph's (bench/RESULTS.md, quantcpu16: 16 of
    oww_hey_jarvis's 28 BF16 Cast pairs sat inside its branch's LayerNorms)."""
    regions: list[Region] = []
    reads = Counter(i for g in all_graphs(model.graph) for n in g.node for i in n.input if i)
    _graph_regions(model.graph, frozenset(), reads, regions)
    if regions:
        log.debug("structure: %d region(s): %s", len(regions), ", ".join(f"{r.kind} {r.x}→{r.y}" for r in regions[:8]))
    return regions


def _graph_regions(graph: onnx.GraphProto, outer_constants: frozenset[str], reads: Counter, regions: list[Region]) -> None:
    """The regions of ``graph`` appended to ``regions``, then those of its subgraphs (which see this graph's
    constants as theirs: :class:`_Index`). ``reads``: how often each name is read in the whole model, so that a
    constant counts as a region's own (kept float with it) only where no other node, in any graph, reads it: a
    branch's γ is a main-graph weight, and one quantized elsewhere must keep its quantizer (a cast γ beside a
    float LayerNorm spelling is also what onnxruntime's LayerNormFusion mis-types: bfloat16 scale, float X)."""
    ix = _Index(graph, outer_constants)
    _regions_in(graph, ix, reads, regions)
    inner_constants = outer_constants | ix.constants
    for node in graph.node:
        for sub in subgraphs(node):
            _graph_regions(sub, inner_constants, reads, regions)


def _regions_in(graph: onnx.GraphProto, ix: _Index, reads: Counter, regions: list[Region]) -> None:
    """The regions of ``graph`` itself (module docstring), appended to ``regions`` in graph order."""
    taken: set[int] = set()  # nodes already inside a region
    interior_names: set[str] = set()
    found: list[tuple[int, Region]] = []

    def add(kind: str, x: str, core: list[onnx.NodeProto]) -> None:
        """``core`` (x → its last output) with its affine tail and, where the tail reshapes back, the
        grouping reshapes before it, recorded as one region."""
        nodes = list(core)
        y = nodes[-1].output[0]
        tail = _affine_tail(ix, y, taken | {id(n) for n in nodes})
        if tail:
            nodes += tail
            y = tail[-1].output[0]
        if any(n.op_type in _GROUPING for n in tail):  # grouped, normalized, ungrouped: GroupNorm
            head = _grouping_head(ix, x, {id(n) for n in nodes}, taken)
            if head:
                nodes = head + nodes
                x = head[0].input[0]
        member_ids = {id(n) for n in nodes}
        interior = tuple(o for n in nodes for o in ix.float_outputs(n) if o != y)
        inside = Counter(i for n in nodes for i in n.input if i)
        constants = tuple(i for i in inside if i in ix.constants and reads[i] == inside[i])  # read nowhere else
        found.append((min(ix.pos[k] for k in map(id, nodes)), Region(kind, x, y, tuple(n.name for n in nodes), interior, constants)))
        taken.update(member_ids)
        interior_names.update(interior)

    starts = [i.name for i in graph.input] + [o for n in graph.node for o in n.output if o]
    for x in starts:
        if x in interior_names or x in ix.constants or not ix.is_float(x):
            continue
        readers = [c for c in ix.real_consumers(x) if c.op_type in STRUCTURE_OPS]
        if sum(list(c.input).count(x) for c in readers) < 2:
            continue
        cone = [n for n in _cone(ix, x) if id(n) not in taken]
        cone_ids = {id(n) for n in cone}
        for node in cone:
            nodes = _closed(ix, node.output[0], cone_ids, x)
            if nodes is None:
                continue
            kind = _kind(nodes, x, ix)
            if kind is None:
                continue
            add(kind, x, nodes)
            break
    # A single normalization op with its affine (and grouping) written around it: the op's output is
    # exact float in the fused form, so rounding it before ``· γ + β`` is a step the fused op lacks.
    for node in graph.node:
        if (node.op_type not in _NORM_OPS or not is_onnx_domain(node.domain) or id(node) in taken
                or len(node.output) != 1 or ix.data_inputs(node) != [node.input[0]]):
            continue
        if not _affine_tail(ix, node.output[0], taken | {id(node)}):
            continue  # the op alone: nothing inside to keep float
        grouped = any(n.op_type in _GROUPING for n in _affine_tail(ix, node.output[0], taken | {id(node)}))
        add(f"GroupNorm ({node.op_type} over groups)" if grouped else f"{node.op_type} (affine written out)",
            node.input[0], [node])
    regions.extend(region for _, region in sorted(found, key=lambda f: f[0]))


def structure_float_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """Tensors the plan keeps float, with the reason: every region's interior and its constants."""
    why: dict[str, str] = {}
    for region in find_regions(model):
        for name in (*region.interior, *region.constants):
            why[name] = region.reason()
    return why
