"""Constant folding: evaluate nodes whose inputs are all constants and store their results.

Why: Paddle exports compute shapes and scales at run time from constants (Cast/Div/Mul on
constants, Shape→Slice→Concat→Reshape chains). Left in place, the planner would see those
computed tensors as activations to calibrate, weights would sit behind a Cast the quantizer cannot
see through, and each run would recompute them. onnx-ir has no general folder, so this pass
evaluates one node at a time with ``onnx.reference.ReferenceEvaluator`` (the ONNX reference
semantics, no session start-up per node) and replaces it with initializers.

Bodies of If/Loop/Scan nodes are folded too, each into its own initializers: exporters build
weights there as well (silero's LSTM weights are Slice/Concat/Unsqueeze chains over constants in
an If branch), and the quantizer only sees weights that are initializers.

What is never folded: random ops (each run must draw anew), Q/DQ nodes (folding a weight's
DequantizeLinear would silently de-quantize a model), nodes with subgraphs, nodes of other domains,
graph outputs, and results above ``size_limit`` elements (folding an Expand/Tile of a small
constant into a huge initializer trades a cheap op for model size). Nor a node whose result would
make the file much larger than the constants it is computed from (:func:`grows`: at least
``GROWN_FROM`` elements, and ``GROWTH`` times the bytes of every constant the all-constant chain
from it reads, looked ahead to where the chain meets a computed tensor; an element counted as the
byte it takes at the narrowest quantized width): onnx-asr's resamplers compute a [320, 1, 1, 459]
sinc kernel (588 KB) from two ramps of 779 numbers through Add/Sin/Cos; folded, every quantized
file stored the kernel, 17-53x the 8.8 KB float file. Kept, the file holds the ramps, onnxruntime
folds the chain when it loads the model (with its own Sin/Cos, as it does for the float model),
and the weight's consumer reads a computed tensor the plan quantizes on its path. A table the
chain scatters from stored values (swift_f0's filter banks: a zero fill of 65 664 elements and
8 KB of indices and values) is data the file holds anyway: folded as before.
Folds that read the same constants are also judged together (:func:`shared_growth`, before the
sweep): the results every such fold would store, summed, against those constants' bytes, each
charged once (``SHARED_GROWTH``). DAT-light's 18 position-bias lookups gather small tables through
two shared 512 KB indices: one at a time each read more than it made, together they stored 14 MB
of fp32 biases where the float file held 1 MB. Kept, onnxruntime folds the Gathers at load.
``Shape``/``Size`` of a tensor
whose shape inference gave fully static dims are folded too; that needs shapes, so run shape
inference first (``fold_constants`` does).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from onnxptq.graph.opsets import model_opset
from onnxptq.graph.passes._common import (
    constant_array,
    has_subgraph,
    is_onnx_domain,
    run_passes,
)

log = logging.getLogger(__name__)

#: Ops whose result must not be computed once: they are random, or carry a quantization format.
NEVER_FOLD = frozenset(
    {
        "RandomUniform",
        "RandomNormal",
        "RandomUniformLike",
        "RandomNormalLike",
        "Multinomial",
        "Bernoulli",
        "Dropout",  # with a training_mode input it is random; inference ones are removed elsewhere
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
    }
)
#: Default cap on the elements of a folded result (4 Mi elements = 16 MB of fp32).
DEFAULT_SIZE_LIMIT = 1 << 22
#: A result of at least this many elements (64 KB of fp32) that is ``GROWTH`` times the bytes of
#: the constants its chain reads is not folded: the file would store what a few small constants
#: compute (see the module docstring).
GROWN_FROM = 1 << 14
#: How many bytes of file per byte of source constants folding must cost (result elements at one
#: byte each, the narrowest 8-bit storage) for the chain to stay computed: ordinary folds (a
#: weight's Transpose, Reshape, a scale's Mul) never grow at all and stay folded. None: fold grown
#: results too (the form before blockfile9; the tests build both).
GROWTH: int | None = 16
#: The same judgement over a whole graph (:func:`shared_growth`): how many bytes of file the results
#: of every fold that reads the same source constants may take per byte of those sources (each
#: charged once) before the folds that grow them stay computed. Decided by measurement (bench/
#: fold_growth_survey.py over every model at hand, RESULTS.md "foldgrow16"): DAT-light's 18
#: position-bias lookups share two 512 KB indices and come to ~14x; no other fold group of the
#: survey is between 3x and 14x. None: judge node by node only.
SHARED_GROWTH: int | None = 10
#: Consumer slots that read a tensor as a weight: every quantized format stores those at 8 bits or
#: fewer, so a result read only there is counted at one byte an element; any other (an addend
#: beside an activation) stays in its own type in every format.
_WEIGHT_SLOTS = {"MatMul": (0, 1), "Gemm": (1,), "Conv": (1,), "ConvTranspose": (1,)}
#: Nodes the look-ahead follows from a grown node before it stops counting (a chain longer than
#: this counts what it saw: a lower bound on the bytes it reads, so the rule errs toward folding).
LOOK_AHEAD = 256


def _static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """The value's shape when every dimension is a known integer, else None. A negative dim_value is no
    size: old paddle2onnx exports (PP-OCRv3 rec at opset 10) declare dynamic axes as -1, and folding a Shape
    of such an input wrote [-1, -1, ...] into a Reshape target that onnxruntime then refused to load."""
    if value is None or value.shape is None:
        return None
    dims = []
    for d in value.shape:
        if not isinstance(d, int) or d < 0:
            return None
        dims.append(d)
    return tuple(dims)


def _fold_shape_op(node: ir.Node) -> list[np.ndarray] | None:
    """Evaluate Shape/Size from a statically known input shape (the input itself need not be constant)."""
    shape = _static_shape(node.inputs[0] if node.inputs else None)
    if shape is None:
        return None
    if node.op_type == "Size":
        return [np.array(math.prod(shape), dtype=np.int64)]
    rank = len(shape)
    start_attr = node.attributes.get("start")
    end_attr = node.attributes.get("end")
    start = start_attr.as_int() if start_attr is not None else 0
    end = end_attr.as_int() if end_attr is not None else rank
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(shape[start:end], dtype=np.int64)]


class FoldConstantsPass(ir.passes.InPlacePass):
    """Fold constant nodes into initializers, in the main graph and in every If/Loop/Scan body."""

    def __init__(self, size_limit: int = DEFAULT_SIZE_LIMIT, exclude_ops: frozenset[str] = NEVER_FOLD) -> None:
        super().__init__()
        self.size_limit = size_limit
        self.exclude_ops = exclude_ops

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        opset = model_opset(model)
        count = 0
        # Outer graphs first (model.graphs() order): a body reading an outer constant folds
        # against its initializer. Topological order lets one sweep fold whole chains: a folded
        # node's result is an initializer by the time its consumers are visited.
        for graph in list(model.graphs()):
            graph.sort()
            kept = {id(n) for group in shared_growth(graph, self._foldable, self.size_limit) if group.grown
                    for n in group.growers}
            for node in list(graph):
                if id(node) in kept:
                    log.info("not folding %s (%s): its fold group grows the file; the file keeps the computation",
                             node.name, node.op_type)
                    continue
                results = self._evaluate(node, opset)
                if results is None:
                    continue
                self._replace(graph, node, results)
                count += 1
            if graph is not model.graph:
                # The main graph's leftovers go in the cleanup pass; a body's would stay (and
                # onnxruntime warns about each unused body initializer at every session).
                for name, value in list(graph.initializers.items()):
                    if not value.uses() and not value.is_graph_output():
                        graph.initializers.pop(name)
        if count:
            log.info("folded %d constant node(s)", count)
        return ir.passes.PassResult(model, modified=bool(count))

    def _foldable(self, node: ir.Node) -> bool:
        if not is_onnx_domain(node.domain) or node.op_type in self.exclude_ops or has_subgraph(node):
            return False
        if not node.inputs or any(out.is_graph_output() for out in node.outputs):
            return False
        return any(out.uses() for out in node.outputs)

    def _evaluate(self, node: ir.Node, opset: int) -> list[np.ndarray] | None:
        if not self._foldable(node):
            return None
        if node.op_type in ("Shape", "Size"):
            return _fold_shape_op(node)
        feeds: dict[str, np.ndarray] = {}
        for value in node.inputs:
            if value is None:
                continue
            array = constant_array(value)
            if array is None:
                return None
            feeds[value.name] = array
        sizes = [math.prod(shape) for shape in map(_static_shape, node.outputs) if shape is not None]
        if any(size > self.size_limit for size in sizes):
            log.debug("not folding %s (%s): %d elements > %d", node.name, node.op_type, max(sizes), self.size_limit)
            return None
        fed = sum(int(a.nbytes) for a in feeds.values())
        if self._grown(node, sizes, fed):
            return None
        results = _numpy_fold(node, [None if v is None else feeds[v.name] for v in node.inputs])
        if results is None:
            # imported here: the reference evaluator and its op list cost ~17 MiB of RSS for the
            # process's life, which models whose folds are all Reshape/Cast never need
            from onnx.reference import ReferenceEvaluator

            proto = ir.serde.serialize_node(node)
            try:
                results = ReferenceEvaluator(proto, opsets={"": opset}).run(None, feeds)
            except Exception as exc:  # the reference lacks an op or rejects an attribute: keep the node
                log.debug("not folding %s (%s): reference evaluation failed: %s", node.name, node.op_type, exc)
                return None
        arrays = [np.asarray(r) for r in results]
        if self._grown(node, [int(a.size) for a in arrays], fed):
            return None
        for out, array in zip(node.outputs, arrays):
            if array.size > self.size_limit:
                log.debug("not folding %s (%s): %d elements > %d", node.name, node.op_type, array.size, self.size_limit)
                return None
            if out.dtype is not None:
                try:
                    expected = out.dtype.numpy()
                except Exception:  # an ONNX type with no NumPy equivalent
                    return None
                if array.dtype != expected:
                    log.debug("not folding %s: reference gave %s, graph says %s", node.name, array.dtype, expected)
                    return None
        return arrays

    def _grown(self, node: ir.Node, sizes: list[int], fed: int) -> bool:
        """Whether ``node``'s result (``sizes`` elements, from ``fed`` bytes of constants) is one
        to keep computed: it grows, and still does counting every constant its chain reads on."""
        if GROWTH is None or not any(grows(n, fed, GROWTH) for n in sizes):
            return False
        read = fed + _chain_constant_bytes(node)
        if not any(grows(n, read, GROWTH) for n in sizes):
            return False
        log.info("not folding %s (%s): %d elements from %d bytes of constants; the file keeps the computation",
                 node.name, node.op_type, max(sizes), read)
        return True

    @staticmethod
    def _replace(graph: ir.Graph, node: ir.Node, arrays: list[np.ndarray]) -> None:
        replacements: list[tuple[ir.Value, ir.Value]] = []
        for out, array in zip(node.outputs, arrays):
            if not out.uses():
                continue
            tensor = ir.tensor(array, name=out.name)
            value = ir.Value(shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
            ir.convenience.replace_all_uses_with(out, value)
            replacements.append((out, value))
        graph.remove(node, safe=True)
        for out, value in replacements:
            value.name = out.name
            graph.register_initializer(value)


#: ONNX element types whose NumPy dtype is a builtin one: a Cast between two of them is
#: ``astype``, exactly what the reference's ``cast_to`` does for them (its other branches are the
#: saturating float8/float4/e8m0 and string casts, left to the reference)
_PLAIN_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                          onnx.TensorProto.BOOL, onnx.TensorProto.INT8, onnx.TensorProto.INT16,
                          onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
                          onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64})
_PLAIN_DTYPES = frozenset(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t)) for t in _PLAIN_TYPES)


def _numpy_fold(node: ir.Node, inputs: list[np.ndarray | None]) -> list[np.ndarray] | None:
    """``node``'s outputs computed in NumPy as the ONNX reference computes them, for the two ops
    exported graphs fold most (Reshape of constant weights, Cast of constant scalars), or None
    for the reference to evaluate. Why: constructing ``onnx.reference.ReferenceEvaluator`` imports
    its whole op list, ~17 MiB resident for the rest of the process — on PP-OCR cls a tenth of
    A8W8 quantize's peak — for results that are one ``reshape``/``astype``."""
    if not is_onnx_domain(node.domain):
        return None
    if node.op_type == "Reshape" and len(inputs) == 2 and all(x is not None for x in inputs):
        data, shape = inputs
        attr = node.attributes.get("allowzero")
        shape = np.array(shape, dtype=np.int64).reshape(-1)
        if attr is None or attr.as_int() == 0:  # a 0 keeps the input's dimension (the reference's rule)
            zeros = np.where(shape == 0)[0]
            if zeros.size and zeros.max() >= data.ndim:
                return None
            shape[zeros] = np.array(data.shape, dtype=np.int64)[zeros]
        try:
            return [np.reshape(data, shape)]
        except ValueError:  # let the reference reject it
            return None
    if node.op_type == "Cast" and len(inputs) == 1 and inputs[0] is not None:
        attr = node.attributes.get("to")
        if attr is None or attr.as_int() not in _PLAIN_TYPES or inputs[0].dtype not in _PLAIN_DTYPES:
            return None
        return [inputs[0].astype(onnx.helper.tensor_dtype_to_np_dtype(attr.as_int()))]
    return None


def grows(elements: int, fed: int, growth: int = 16) -> bool:
    """Whether a result of ``elements`` computed from ``fed`` bytes of constants is one to keep
    computed: large (``GROWN_FROM``) and ``growth`` times what it is made from."""
    return elements >= GROWN_FROM and elements >= growth * max(fed, 1)


def _chain_constant_bytes(start: ir.Node) -> int:
    """Bytes of the constants read by the nodes that would fold after ``start`` (each of whose
    inputs is a constant or made by such a node), each constant counted once: what the file
    holds for the chain where ``start`` is not folded (a Scatter's indices and values)."""
    made = {id(v) for v in start.outputs}
    seen_nodes, counted, total = {id(start)}, {id(v) for v in start.inputs if v is not None}, 0
    frontier = [use.node for v in start.outputs for use in v.uses()]
    steps = 0
    while frontier and steps < LOOK_AHEAD:
        node = frontier.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        steps += 1
        if has_subgraph(node) or not is_onnx_domain(node.domain):
            continue
        extra = [v for v in node.inputs if v is not None and id(v) not in made]
        arrays = [constant_array(v) for v in extra]
        if any(a is None for a in arrays):
            continue  # meets a computed tensor: the chain ends here
        for v, a in zip(extra, arrays):
            if id(v) not in counted:
                counted.add(id(v))
                total += int(a.nbytes)
        for out in node.outputs:
            made.add(id(out))
            frontier.extend(use.node for use in out.uses())
    return total


@dataclass
class FoldGroup:
    """The folds of one graph that read the same source constants (linked through any shared one).

    ``stored`` is what the file would hold folded: every chain end's elements at the width it is
    stored (one byte where only weight slots read it, its own type's bytes elsewhere); ``sources``
    the bytes of the constants the chains read, each once: what the file holds unfolded.
    ``growers`` are the group's nodes whose result is large and larger than their inputs (a
    Gather through an index, an Expand, a broadcasting Add): where the group stops folding.
    """

    sources: int = 0
    stored: int = 0
    elements: int = 0
    ends: list[ir.Value] = field(default_factory=list)
    growers: list[ir.Node] = field(default_factory=list)
    known: bool = True  # every chain end's size is known statically

    @property
    def growth(self) -> float:
        return self.stored / max(self.sources, 1)

    @property
    def grown(self) -> bool:
        return (SHARED_GROWTH is not None and self.known and bool(self.growers)
                and self.elements >= GROWN_FROM and self.stored >= SHARED_GROWTH * max(self.sources, 1))


def _is_constant(value: ir.Value) -> bool:
    return value.is_initializer() and not value.is_graph_input() and value.const_value is not None


def _elements(value: ir.Value) -> int | None:
    shape = _static_shape(value)
    return None if shape is None else math.prod(shape)


def _stored_bytes(value: ir.Value, elements: int) -> int:
    weight = all(use.node.op_type in _WEIGHT_SLOTS and use.idx in _WEIGHT_SLOTS[use.node.op_type]
                 for use in value.uses())
    width = 1 if weight or value.dtype is None else int(math.ceil(value.dtype.itemsize))
    return elements * width


def shared_growth(graph: ir.Graph, foldable: Callable[[ir.Node], bool],
                  size_limit: int = DEFAULT_SIZE_LIMIT) -> list[FoldGroup]:
    """The fold groups of ``graph`` (sorted), found from structure and static shapes before anything folds.

    Why: judging each fold by the constants it reads charges a constant that many folds share to
    every one of them. DAT-light's 18 relative-position-bias lookups each Gather a small table
    (11 KB) through one of two shared 512 KB indices: each looked 0.4x its inputs, yet folded the
    file held 14.2 MB of [1, 3, 256, 256] biases where it held 1 MB of tables and indices (and
    onnxruntime folds the Gathers at load anyway). Summed over the group, sources charged once,
    the growth is visible. ``foldable`` is the pass's own test of a node.
    """
    sources: dict[int, frozenset[int]] = {}  # constant-computable value -> ids of its source constants
    source_bytes: dict[int, int] = {}
    members: list[ir.Node] = []
    for node in graph:
        reads = _reads(node, foldable, sources, source_bytes)
        if reads is None or any((n := _elements(out)) is not None and n > size_limit for out in node.outputs):
            continue
        members.append(node)
        for out in node.outputs:
            sources[id(out)] = reads
    member_ids = {id(n) for n in members}
    parent: dict[int, int] = {}  # union-find over source constants: folds sharing one are one group

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for node in members:
        ids = sorted(sources[id(node.outputs[0])])
        for other in ids[1:]:
            parent[find(other)] = find(ids[0])
    groups: dict[object, FoldGroup] = {}
    for node in members:
        ids = sources[id(node.outputs[0])]
        group = groups.setdefault(find(min(ids)) if ids else ("alone", id(node)), FoldGroup())
        if _is_grower(node, sources):
            group.growers.append(node)
        for out in node.outputs:
            if all(id(use.node) in member_ids for use in out.uses()):
                continue  # read only by nodes that fold too (or by none): not stored
            group.ends.append(out)
            n = _elements(out)
            if n is None:
                group.known = False
            else:
                group.elements += n
                group.stored += _stored_bytes(out, n)
    for s in {s for node in members for s in sources[id(node.outputs[0])]}:
        groups[find(s)].sources += source_bytes[s]
    return list(groups.values())


def _is_grower(node: ir.Node, sources: dict[int, frozenset[int]]) -> bool:
    """Whether ``node`` makes a large result (``GROWN_FROM``) with more elements than all its inputs:
    the step where a chain of constants turns into more data than it reads (a Gather through an
    index, Expand, a broadcasting Add). Unknown sizes are no growth (the rule errs toward folding)."""
    if node.op_type in ("Shape", "Size"):
        return False
    in_sizes = [_elements(v) if id(v) in sources else v.const_value.size for v in node.inputs if v is not None]
    if None in in_sizes:
        return False
    total = sum(in_sizes)
    return any((n := _elements(out)) is not None and n >= GROWN_FROM and n > total for out in node.outputs)


def _reads(node: ir.Node, foldable: Callable[[ir.Node], bool], sources: dict[int, frozenset[int]],
           source_bytes: dict[int, int]) -> frozenset[int] | None:
    """The source constants ``node`` computes from when it would fold (every input a constant or
    the result of a node that would), recording each constant's bytes; None when it would not."""
    if not foldable(node):
        return None
    if node.op_type in ("Shape", "Size"):
        return frozenset() if _static_shape(node.inputs[0] if node.inputs else None) is not None else None
    reads: set[int] = set()
    constants: dict[int, int] = {}
    for value in node.inputs:
        if value is None:
            continue
        if id(value) in sources:
            reads |= sources[id(value)]
        elif _is_constant(value):
            constants[id(value)] = int(value.const_value.nbytes)
        else:
            return None
    source_bytes.update(constants)
    return frozenset(reads | constants.keys())


def fold_constants_passes(size_limit: int = DEFAULT_SIZE_LIMIT) -> list[ir.passes.PassBase]:
    """Shape inference (for Shape/Size folding) followed by the folding pass."""
    return [ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True), FoldConstantsPass(size_limit)]


def fold_constants(model: onnx.ModelProto, *, size_limit: int = DEFAULT_SIZE_LIMIT) -> onnx.ModelProto:
    """Return a copy of ``model`` with constant subexpressions replaced by initializers.

    Constants held in ``Constant`` nodes are not seen as constants here; lift them first
    (``lift_constants``), as ``prepare`` does.
    """
    return run_passes(model, *fold_constants_passes(size_limit))
