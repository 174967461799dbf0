"""A main-graph weight that both branches of an ``If`` read through a foldable chain is stored once.

silero VAD's two ``If`` branches each slice/concat/unsqueeze the one set of main-graph LSTM weights;
constant folding stored the result in each branch, so the delivered file held every LSTM weight
twice (silero_half BF16 0.71× the fp32 file). ``graph/passes/share_body_constants`` stores such
identical folded copies once, in the graph enclosing both branches. The model here: a 128×96
weight, each branch reads it through Transpose → Slice → Concat (foldable; only its values reach
the branch's MatMul); the two branches differ after the MatMul, so nothing else merges them.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.pipeline.prepare import prepare

IN, OUT = 96, 128


def _branch(prefix: str, act: str, lo: int = 0) -> onnx.GraphProto:
    """``act(x @ W')`` where W' is the outer ``W`` transposed, split at row ``IN // 2`` and put back
    together (``lo`` shifts the split's start: a nonzero one makes a different W')."""
    half = IN // 2
    inits = [numpy_helper.from_array(np.array([lo], np.int64), f"{prefix}.s0"),
             numpy_helper.from_array(np.array([half], np.int64), f"{prefix}.e0"),
             numpy_helper.from_array(np.array([half], np.int64), f"{prefix}.s1"),
             numpy_helper.from_array(np.array([IN], np.int64), f"{prefix}.e1"),
             numpy_helper.from_array(np.array([0], np.int64), f"{prefix}.ax")]
    nodes = [helper.make_node("Transpose", ["W"], [f"{prefix}.wt"], perm=[1, 0], name=f"{prefix}/t"),
             helper.make_node("Slice", [f"{prefix}.wt", f"{prefix}.s0", f"{prefix}.e0", f"{prefix}.ax"],
                              [f"{prefix}.a"], name=f"{prefix}/s0"),
             helper.make_node("Slice", [f"{prefix}.wt", f"{prefix}.s1", f"{prefix}.e1", f"{prefix}.ax"],
                              [f"{prefix}.b"], name=f"{prefix}/s1")]
    parts = [f"{prefix}.a", f"{prefix}.b"]
    if lo:  # keep the shape: the first half, shorter by lo rows, is padded with rows of the second again
        inits.append(numpy_helper.from_array(np.array([half + lo], np.int64), f"{prefix}.e0_pad"))
        nodes.append(helper.make_node("Slice", [f"{prefix}.wt", f"{prefix}.s1", f"{prefix}.e0_pad", f"{prefix}.ax"],
                                      [f"{prefix}.pad"], name=f"{prefix}/pad"))
        parts.insert(1, f"{prefix}.pad")
    nodes.append(helper.make_node("Concat", parts, [f"{prefix}.w"], axis=0, name=f"{prefix}/cat"))
    nodes += [helper.make_node("MatMul", ["x", f"{prefix}.w"], [f"{prefix}.mm"], name=f"{prefix}/mm"),
              helper.make_node(act, [f"{prefix}.mm"], [f"{prefix}.y"], name=f"{prefix}/act")]
    return helper.make_graph(nodes, prefix, [], [helper.make_tensor_value_info(f"{prefix}.y", TensorProto.FLOAT, [4, OUT])],
                             inits)


def _model(differ: bool = False) -> onnx.ModelProto:
    w = np.random.default_rng(0).normal(0, 0.1, (OUT, IN)).astype(np.float32)
    nodes = [helper.make_node("If", ["c"], ["y"], name="pick", then_branch=_branch("then", "Relu"),
                              else_branch=_branch("else", "Sigmoid", lo=8 if differ else 0))]
    graph = helper.make_graph(nodes, "two_branches",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, IN]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, OUT])],
                              [numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _hand_folded() -> onnx.ModelProto:
    """The same model with W' computed by hand (NumPy) into one main-graph initializer that both
    branches' MatMuls read: the independent reference of what one stored copy computes."""
    model = _model()
    wt = numpy_helper.to_array(model.graph.initializer[0]).T.copy()
    graph = model.graph
    for attr in graph.node[0].attribute:
        body = attr.g
        keep = [n for n in body.node if n.op_type in ("MatMul", "Relu", "Sigmoid")]
        keep[0].input[1] = "Wt"
        del body.node[:]
        body.node.extend(keep)
        del body.initializer[:]
    del graph.initializer[:]
    graph.initializer.append(numpy_helper.from_array(wt, "Wt"))
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (4, IN)).astype(np.float32), "c": np.array(i % 2 == 0)} for i in range(n)]


def _weight_copies(model: onnx.ModelProto) -> float:
    """How many times ``model``'s files hold the weight: the elements of every initializer of at
    least 256 elements, in any graph and element type (packed groups concatenate several weights
    into one initializer, so initializers are not counted), over the weight's OUT·IN."""
    total, stack = 0, [model.graph]
    while stack:
        g = stack.pop()
        total += sum(n for t in g.initializer if (n := int(np.prod(t.dims))) >= 256)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
                stack.extend(a.graphs)
    return total / (OUT * IN)


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def test_prepare_folds_the_shared_chain_into_one_outer_initializer():
    """After prepare the two branches read one [IN, OUT] initializer of the main graph (main: one
    folded copy per branch), and the prepared model computes what the float model does, bit for bit."""
    model = _model()
    prepared = prepare(model)
    assert _weight_copies(prepared) == 1.0
    assert [list(t.dims) for t in prepared.graph.initializer if len(t.dims) == 2] == [[IN, OUT]]
    feeds = _feeds(4, 3)
    for a, b in zip(_run(model, feeds), _run(prepared, feeds)):
        assert np.array_equal(a, b)


def test_different_folds_stay_apart():
    """Branches whose chains give different weights keep one copy each: only identical bytes are shared."""
    prepared = prepare(_model(differ=True))
    assert _weight_copies(prepared) == 2.0
    feeds = _feeds(4, 3)
    for a, b in zip(_run(_model(differ=True), feeds), _run(prepared, feeds)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("preset", ["BF16", "MXINT8", "A8W8", "A16W8"])
def test_the_delivered_file_holds_the_shared_weight_once(preset):
    """Quantized, the file holds the weight once (main: twice, one per branch) and computes exactly
    what the same preset makes of the hand-folded model whose branches read one outer weight."""
    config = get_preset(preset).replace(repair=False)
    calib = _feeds(16, 1)
    got = quantize(_model(), config, calib).model
    ref = quantize(_hand_folded(), config, calib).model
    assert _weight_copies(got) == _weight_copies(ref) < 1.5, (_weight_copies(got), _weight_copies(ref))
    feeds = _feeds(6, 2)
    for a, b in zip(_run(got, feeds), _run(ref, feeds)):
        assert np.array_equal(a, b), np.abs(a - b).max()


def _nested_model() -> onnx.ModelProto:
    """The two-branch ``If`` of :func:`_model` inside the then-branch of an outer ``If`` (the else
    branch a plain MatMul by its own weight): the folded copies' common enclosing graph is that
    then-branch, not the main graph."""
    inner = _model()
    w = inner.graph.initializer[0]
    own = numpy_helper.from_array(np.random.default_rng(5).normal(0, 0.1, (IN, OUT)).astype(np.float32), "V")
    outer_then = helper.make_graph(list(inner.graph.node), "outer_then", [],
                                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, OUT])])
    outer_then.node[0].output[0] = "y_then"
    outer_then.output[0].name = "y_then"
    outer_else = helper.make_graph([helper.make_node("MatMul", ["x", "V"], ["y_else"], name="else/mm")], "outer_else", [],
                                   [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [4, OUT])], [own])
    graph = helper.make_graph([helper.make_node("If", ["d"], ["y"], name="outer", then_branch=outer_then,
                                                else_branch=outer_else)], "nested",
                              list(inner.graph.input) + [helper.make_tensor_value_info("d", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, OUT])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_copies_in_nested_branches_go_to_the_branch_enclosing_them():
    """Copies folded into the two branches of an inner ``If`` are stored once in the outer
    then-branch that holds that ``If`` (the innermost graph enclosing both), and the model computes
    what the float one does, bit for bit."""
    model = _nested_model()
    prepared = prepare(model)
    outer = prepared.graph.node[-1]
    assert outer.op_type == "If"
    then_graph = next(a.g for a in outer.attribute if a.name == "then_branch")
    assert [list(t.dims) for t in then_graph.initializer if len(t.dims) == 2] == [[IN, OUT]]
    assert _weight_copies(prepared) == 2.0  # the shared one, and the else branch's own V
    feeds = [dict(f, d=np.array(i % 3 != 0)) for i, f in enumerate(_feeds(6, 4))]
    for a, b in zip(_run(model, feeds), _run(prepared, feeds)):
        assert np.array_equal(a, b)
