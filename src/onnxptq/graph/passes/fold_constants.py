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
``Shape``/``Size`` of a tensor
whose shape inference gave fully static dims are folded too; that needs shapes, so run shape
inference first (``fold_constants`` does).
"""

from __future__ import annotations

import logging
import math

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
            for node in list(graph):
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


def fold_constants_passes(size_limit: int = DEFAULT_SIZE_LIMIT) -> list[ir.passes.PassBase]:
    """Shape inference (for Shape/Size folding) followed by the folding pass."""
    return [ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True), FoldConstantsPass(size_limit)]


def fold_constants(model: onnx.ModelProto, *, size_limit: int = DEFAULT_SIZE_LIMIT) -> onnx.ModelProto:
    """Return a copy of ``model`` with constant subexpressions replaced by initializers.

    Constants held in ``Constant`` nodes are not seen as constants here; lift them first
    (``lift_constants``), as ``prepare`` does.
    """
    return run_passes(model, *fold_constants_passes(size_limit))
