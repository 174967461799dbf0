"""Decode a loop body's constant weights once: move constant decodes out of Loop/Scan bodies.

Why: a weight quantized inside a ``Loop`` body is stored as integers in the body and decoded by a
``DequantizeLinear`` there, which onnxruntime runs on every iteration (it never constant-folds a
DequantizeLinear: its QDQ fusions want to see it). tf2onnx writes a Keras LSTM as such a Loop;
mk8dx-table-reader's digit CRNN ran 2.9-3.1x float under A8W8/A16W8 because each of its two Loops
dequantized 8 weight slices (1.5 MB) per time step (bench/RESULTS.md, newmodels21). The decode's
inputs are constants, so its value is the same on every iteration: computed once in the enclosing
graph (a body sees the outer scope's values), the body reads the decoded float weight: the same
computation on the same inputs (what changes is which kernels onnxruntime picks; see below).

Rule, by dataflow only. A body node is moved into the graph holding its Loop/Scan when

* its op is a decode: ``DequantizeLinear``, ``Cast``, or an op of the packed-weight decode chains
  (onnx_ops/packed.py: Reshape, Mul, Gather, Add, Sub, Div, Mod, Floor, CumSum, Slice, Split,
  Concat, Transpose, ScatterND) or a pure shape op (Unsqueeze, Squeeze, Flatten, Identity),
  in the default domain;
* every input is constant there: an initializer of an enclosing graph (not a graph input, which a
  caller may feed), the output of a node moved or movable the same way, or an initializer of the
  body itself that only such nodes read and the body does not return (it moves with them, so the
  decode and its integers stay in one graph: onnxruntime's DQ -> MatMul weight fusions look a
  weight up in the node's own graph, graph/passes/sink_initializers.py);
* no output is a graph output of the body (a body output must be produced in the body);
* no output is read by a body node that stays and whose kernel onnxruntime picks by how its weight
  is made (``_KERNEL_PICKERS``: MatMul, Gemm, Conv, Gather, ...): ``DequantizeLinear -> MatMul`` in
  the body is fused to ``MatMulNBits`` (or rewritten exact by graph/passes/exact_int_weights.py),
  ``DequantizeLinear -> Gather`` becomes a gather of integer rows (lookup_tables.py), and a float16
  MatMul rounds its sums otherwise on a weight from the outer scope: hoisting there would change
  the bits or lose the fused kernel (mk8dx A8W8 as fused: 0.13x float; hoisted: 0.24x);
* a ``DequantizeLinear`` whose reader also reads an activation's ``DequantizeLinear`` stays: that
  is a Q/DQ pair onnxruntime fuses into an integer kernel in place, which the hoist would undo.

What moves in practice is the head of a chain: ``DequantizeLinear -> Cast(float16) -> MatMul`` (a
float16 source kept float16 inside, ``widen_fp16=False``) leaves the Cast beside its MatMul and
decodes the integers once outside, where exact_int_weights then makes them a constant onnxruntime
folds. Op by op the model computes the same values (bit-identical with onnxruntime's graph
optimizations off); with them on, the folded float16 weight is pre-packed and the float16 MatMul's
sums may round differently (mk8dx: 2e-3 off, bench/RESULTS.md loopdq).

Bodies nested in a body are done first, so a decode moves graph by graph to the outermost graph
where its inputs are all defined. ``If`` branches are left alone: a branch may not run, and a
decode moved out of it would run every time. Names stay as they are once every value name is unique
across scopes, and every node name too (graph/naming.value_names and node_names run first: no-ops
on a prepared model, whose names prepare made unique; ONNX lets sibling bodies define the same names,
the checker and onnxruntime take a body value named like an outer one, and onnxruntime refuses two
nodes of one graph of the same name), so a moved value collides with nothing and reads what it
read; the moved nodes go right before their Loop/Scan, in body order, so the outer graph stays
topologically sorted.
"""

from __future__ import annotations

import logging

import onnx

from ..naming import node_names, value_names
from ..opsets import is_onnx_domain
from ..walk import all_graphs, subgraphs

log = logging.getLogger(__name__)

__all__ = ["hoist_loop_constants"]

#: Ops whose output is a fixed function of their inputs (no randomness, no state): with constant
#: inputs, a constant. DequantizeLinear and Cast decode stored weights; the rest are the
#: packed-weight decode chains of onnx_ops/packed.py and pure shape ops.
_DECODES = frozenset({
    "DequantizeLinear", "Cast", "Reshape", "Mul", "Gather", "Add", "Sub", "Div", "Mod", "Floor", "CumSum",
    "Slice", "Split", "Concat", "Transpose", "ScatterND", "Unsqueeze", "Squeeze", "Flatten", "Identity",
})
#: Ops whose onnxruntime kernel depends on how their weight is made: a ``DequantizeLinear`` read by a
#: MatMul/Gemm is fused into ``MatMulNBits`` (an int8 weight kernel), an initializer is prepacked, a
#: 16-bit float MatMul gives other bits on a weight from the outer scope, a ``DequantizeLinear`` read
#: by a Gather is turned into a gather of integer rows decoded after (graph/passes/lookup_tables.py:
#: the table stays 8-bit in memory). Their weight input stays produced in their own graph, so
#: neither the speed nor the bits change.
_KERNEL_PICKERS = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv",
    "Einsum", "LSTM", "GRU", "RNN", "Attention", "Gather",
})
#: The control-flow ops whose bodies run once per iteration: what is hoisted out of them saves work.
_LOOPS = ("Loop", "Scan")


def _readers(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Name -> index in ``graph`` of each node reading it; a read inside a body nested in ``graph``
    (a node input, or a body output naming an outer value) is the read of the node holding it."""
    out: dict[str, list[int]] = {}

    def visit(g: onnx.GraphProto, top: int | None) -> None:
        for i, node in enumerate(g.node):
            at = i if top is None else top
            for name in node.input:
                if name:
                    out.setdefault(name, []).append(at)
            for body in subgraphs(node):
                visit(body, at)
                for o in body.output:
                    if o.name:
                        out.setdefault(o.name, []).append(at)

    visit(graph, None)
    return out


def _constants(graph: onnx.GraphProto, outer: set[str]) -> set[str]:
    """The values constant in ``graph``: ``outer`` (constants of the enclosing graphs), its
    initializers that are no graph input, and the outputs of its decode nodes on constants."""
    fed = {i.name for i in graph.input}
    const = set(outer) | {t.name for t in graph.initializer if t.name not in fed}
    for node in graph.node:
        if _movable_op(node) and all(not i or i in const for i in node.input):
            const.update(o for o in node.output if o)
    return const


def _movable_op(node: onnx.NodeProto) -> bool:
    return node.op_type in _DECODES and is_onnx_domain(node.domain)  # none of them holds a body


def _hoist_from(body: onnx.GraphProto, visible: set[str]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[onnx.ValueInfoProto]]:
    """Take out of ``body`` the nodes to move (module docstring) given the enclosing graphs'
    constants ``visible``; return them (body order), the body initializers that go with them and
    their value_info."""
    fed = {i.name for i in body.input}
    outputs = {o.name for o in body.output}
    # a body output names a value of the body (onnxruntime refuses an outer-scope one): an initializer
    # the body returns stays, and so do the decodes that read it
    own = {t.name for t in body.initializer if t.name not in fed and t.name not in outputs}
    nodes = list(body.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    readers = _readers(body)

    blocked: set[int] = set()
    while True:  # the largest set closed under the rule: nodes that break it are blocked, then start over
        const = set(visible) | own
        chosen: set[int] = set()
        for i, node in enumerate(nodes):
            if (i not in blocked and _movable_op(node) and all(not x or x in const for x in node.input)
                    and not any(o in outputs for o in node.output)):
                chosen.add(i)
                const.update(o for o in node.output if o)
        breaking: set[int] = set()
        for t in own:  # a body initializer moves only when every reader of it moves
            ats = set(readers.get(t, []))
            if ats - chosen:
                breaking |= ats & chosen
        for i in chosen:  # the weight a compute op reads is made beside it; a weight DQ beside an activation DQ too
            for out in nodes[i].output:
                for at in readers.get(out, []):
                    if at in chosen:
                        continue
                    if nodes[at].op_type in _KERNEL_PICKERS:
                        breaking.add(i)
                    if nodes[i].op_type != "DequantizeLinear":
                        continue
                    others = [producer.get(x) for x in nodes[at].input if x and x != out]
                    if any(p is not None and nodes[p].op_type == "DequantizeLinear" and p not in chosen for p in others):
                        breaking.add(i)
        if not breaking:
            break
        blocked |= breaking
    moved = [nodes[i] for i in sorted(chosen)]
    moved_names = {o for n in moved for o in n.output}
    taken = own & {x for n in moved for x in n.input}
    # rebuilt, not edited in place: protobuf keeps removed elements readable (detached) and extend copies them
    inits = [t for t in body.initializer if t.name in taken]
    kept_inits = [t for t in body.initializer if t.name not in taken]
    infos = [v for v in body.value_info if v.name in moved_names]
    kept_infos = [v for v in body.value_info if v.name not in moved_names]
    kept_nodes = [n for i, n in enumerate(nodes) if i not in chosen]
    del body.node[:]
    body.node.extend(kept_nodes)
    del body.initializer[:]
    body.initializer.extend(kept_inits)
    del body.value_info[:]
    body.value_info.extend(kept_infos)
    return moved, inits, infos


def _hoist_graph(graph: onnx.GraphProto, outer: set[str]) -> int:
    """Hoist, in ``graph`` and every body nested in it, the constant decodes out of Loop/Scan bodies
    into ``graph`` (``outer``: the constants of the graphs enclosing ``graph``); how many nodes moved."""
    # once for the graph: what a Loop's hoist adds to it are values of that body, which no other body reads
    visible = _constants(graph, outer)
    count = 0
    index = 0
    while index < len(graph.node):
        node = graph.node[index]
        bodies = list(subgraphs(node))
        if not bodies:
            index += 1
            continue
        for body in bodies:  # the nested bodies first: their decodes come up into this body
            count += _hoist_graph(body, visible)
        if node.op_type not in _LOOPS or not is_onnx_domain(node.domain):
            index += 1
            continue
        moved: list[onnx.NodeProto] = []
        for body in bodies:
            nodes, inits, infos = _hoist_from(body, visible)
            moved += nodes
            graph.initializer.extend(inits)
            graph.value_info.extend(infos)
        if moved:
            rest = list(graph.node[index:])
            del graph.node[index:]
            graph.node.extend(moved)
            graph.node.extend(rest)
            count += len(moved)
        index += len(moved) + 1
    return count


def hoist_loop_constants(model: onnx.ModelProto) -> int:
    """Move, in place, every constant decode out of ``model``'s Loop/Scan bodies into the outermost
    graph where its inputs are defined (module docstring); returns how many moves were made (a node
    brought out of two nested bodies counts twice)."""
    if not any(n.op_type in _LOOPS for g in all_graphs(model.graph) for n in g.node):
        return 0
    value_names(model)
    node_names(model)
    count = _hoist_graph(model.graph, set())
    if count:
        log.info("hoist_loop_constants: %d move(s) of constant decode nodes out of Loop/Scan bodies", count)
    return count
