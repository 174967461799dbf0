"""FP16 on a float16 model delivers no exact Cast chain (graph/passes/exact_cast_chains.py, run in emit).

Why: under FP16 a float16 source stays fp16, and every activation quantizer was
``Cast(FLOAT) -> Cast(FLOAT16) -> Cast(FLOAT) -> Cast(FLOAT16)`` on a float16 tensor: the identity,
at two to four passes over the tensor each (platerec_enc FP16 ran 3.8x its source, 0.99x with the
chains collapsed: bench/RESULTS.md "fp16chain"). The outputs are checked bit for bit against the chain
form on ONNX's reference evaluator, which computes float16 ops in float16 as the spec says
(onnxruntime's CPU provider computes them in fp32 and rounds only where a Cast forces it, so there
the chain form's extra roundings move last bits: see the bench section).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.conversion import convert_float_to_float16
from onnxptq.graph.passes import exact_cast_chains
from onnxptq.graph.passes.exact_cast_chains import collapse_exact_cast_chains


def _half_model() -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Clip -> GlobalAveragePool in float16 (fp16 input, weights, output)."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.normal(0, s, shape).astype(np.float32), name)
             for name, shape, s in (("w1", (8, 3, 3, 3), 0.3), ("b1", (8,), 0.1), ("w2", (8, 8, 3, 3), 0.2))]
    inits += [onnx.numpy_helper.from_array(np.float32(v), n) for n, v in (("lo", 0.0), ("hi", 6.0))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4, name="conv2"),
             helper.make_node("Clip", ["c2", "lo", "hi"], ["k2"], name="clip2"),
             helper.make_node("GlobalAveragePool", ["k2"], ["y"], name="pool")]
    graph = helper.make_graph(nodes, "half_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return convert_float_to_float16(model)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float16)} for _ in range(n)]


def _chains(model: onnx.ModelProto) -> list[str]:
    """Casts that read a Cast (the start of every chain the pass collapses)."""
    casts = {n.output[0] for n in model.graph.node if n.op_type == "Cast"}
    return [n.name for n in model.graph.node if n.op_type == "Cast" and n.input[0] in casts]


@pytest.fixture(scope="module")
def delivered(request) -> dict[str, onnx.ModelProto]:
    """FP16 of the float16 model, with the pass (as delivered) and without it (the chain form)."""
    data, cfg = _feeds(4, 1), get_preset("FP16")
    collapsed = onnxptq.quantize(_half_model(), cfg, data=data).model
    mp = pytest.MonkeyPatch()
    mp.setattr(exact_cast_chains, "collapse_exact_cast_chains", lambda model: 0)
    try:
        chain = onnxptq.quantize(_half_model(), cfg, data=data).model
    finally:
        mp.undo()
    return {"collapsed": collapsed, "chain": chain}


def test_fp16_on_a_float16_model_leaves_no_cast_chain(delivered):
    assert delivered["collapsed"].graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16
    assert len(_chains(delivered["chain"])) >= 4, "the chain form this pass is for"
    assert _chains(delivered["collapsed"]) == []
    casts = [n for n in delivered["collapsed"].graph.node if n.op_type == "Cast"]
    assert len(casts) <= 1, [n.name for n in casts]  # at most the graph output's own node
    assert [o.name for o in delivered["collapsed"].graph.output] == [o.name for o in delivered["chain"].graph.output]


def test_outputs_bit_identical_to_the_chain_form(delivered):
    """On ONNX's reference evaluator (float16 ops computed in float16, as specified)."""
    runs = {k: ReferenceEvaluator(m) for k, m in delivered.items()}
    for feed in _feeds(3, 7):
        a, b = (runs[k].run(None, feed)[0] for k in ("chain", "collapsed"))
        assert a.dtype == b.dtype == np.float16
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))


def _cast(src: str, dst: str, to: int) -> onnx.NodeProto:
    return helper.make_node("Cast", [src], [dst], to=to, name=dst)


def _graph(nodes, x_type: int, y_type: int, name: str = "g") -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", x_type, [4])],
                             [helper.make_tensor_value_info("y", y_type, [4])])


F16, F32, BF16 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.BFLOAT16


@pytest.mark.parametrize("label, chain, x_type, kept", [
    # an fp32 model's FP16 rounding: the first Cast rounds, nothing goes
    ("fp32 rounding pair", [F16, F32], F32, 2),
    # fp32 -> f16 -> f32 -> f16 -> f32: the first Cast rounds, the rest are exact after it: one pair left
    ("fp32 source, repeated rounding", [F16, F32, F16, F32], F32, 2),
    # through bfloat16: a float16 value need not be a bfloat16 one
    ("through bfloat16", [F32, BF16, F32, F16], F16, 4),
    # f16 -> f64 -> f32: one Cast to float
    ("f16 widened twice", [TensorProto.DOUBLE, F32], F16, 1),
])
def test_rule_on_hand_built_chains(label, chain, x_type, kept):
    names = ["x"] + [f"t{k}" for k in range(len(chain) - 1)] + ["y"]
    nodes = [_cast(names[k], names[k + 1], to) for k, to in enumerate(chain)]
    nodes.append(helper.make_node("Relu", ["y"], ["r"], name="relu"))
    graph = _graph(nodes, x_type, chain[-1])
    graph.output[0].name = "r"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.array([1 / 3, -6.0001e4, 3e-8, 65504], np.float32).astype(
        {F16: np.float16, F32: np.float32}[x_type])
    before = ReferenceEvaluator(model).run(None, {"x": x})[0]
    collapse_exact_cast_chains(model)
    assert sum(n.op_type == "Cast" for n in model.graph.node) == kept, label
    after = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert before.dtype == after.dtype
    np.testing.assert_array_equal(before.view(np.uint8), after.view(np.uint8))


def test_graph_output_keeps_its_node_and_if_bodies_are_collapsed():
    body = helper.make_graph([_cast("x", "b0", F32), _cast("b0", "b1", F16), _cast("b1", "b2", F32),
                              _cast("b2", "b3", F16), helper.make_node("Neg", ["b3"], ["bo"], name="neg")],
                             "body", [], [helper.make_tensor_value_info("bo", F16, [4])])
    nodes = [_cast("x", "a0", F32), _cast("a0", "y", F16),  # the main graph's output: a node stays
             helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["z"], then_branch=body, else_branch=body, name="if")]
    graph = _graph(nodes, F16, F16)
    graph.output.append(helper.make_tensor_value_info("z", F16, [4]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = np.array([0.1, -2, 3.5, 65504], np.float16)
    before = ReferenceEvaluator(model).run(None, {"x": x})
    assert collapse_exact_cast_chains(model) == 9  # a0, and each branch's four
    main = [n for n in model.graph.node if n.op_type == "Cast"]
    assert [(n.input[0], n.output[0]) for n in main] == [("x", "y")]
    for branch in model.graph.node[-1].attribute:
        assert [n.op_type for n in branch.g.node] == ["Neg"] and branch.g.node[0].input[0] == "x"
    after = ReferenceEvaluator(model).run(None, {"x": x})
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))


def test_sibling_branches_of_the_same_names_keep_their_own_chains():
    """ONNX lets both branches of an If define the same names: the else branch's rounding ``Cast(FLOAT16)`` of a
    float ``y`` is not the then branch's exact ``Cast(FLOAT)`` of a float16 ``x`` of the same output name."""
    then = helper.make_graph([_cast("x", "b0", F32), _cast("b0", "b1", F16), _cast("b1", "b2", F32),
                              helper.make_node("Neg", ["b2"], ["t_out"], name="neg_then")],
                             "then", [], [helper.make_tensor_value_info("t_out", F32, [4])])
    other = helper.make_graph([_cast("y", "b0", F16), _cast("b0", "b1", F32), helper.make_node("Neg", ["b1"], ["e_out"], name="neg_else")],
                              "else", [], [helper.make_tensor_value_info("e_out", F32, [4])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other, name="if")], "siblings",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F16, [4]),
                               helper.make_tensor_value_info("y", F32, [4])], [helper.make_tensor_value_info("z", F32, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    feeds = [{"c": np.array(c), "x": np.array([1, 2, 3, 65504], np.float16), "y": np.array([1 / 3, 0.1, 7.77, 1e-8], np.float32)}
             for c in (True, False)]
    before = [ReferenceEvaluator(model).run(None, f)[0] for f in feeds]
    assert collapse_exact_cast_chains(model) == 2  # the then branch's b0 and b1; the else branch's rounding pair stays
    onnx.checker.check_model(model, full_check=True)
    for feed, ref in zip(feeds, before):
        np.testing.assert_array_equal(ReferenceEvaluator(model).run(None, feed)[0].view(np.uint32), ref.view(np.uint32))
