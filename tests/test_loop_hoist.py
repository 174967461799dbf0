"""Constant weight decodes leave Loop bodies (graph/passes/hoist_loop_constants.py).

The pattern (mk8dx-table-reader's digit CRNN, bench/RESULTS.md newmodels21): tf2onnx writes a float16 Keras LSTM
as a ``Loop`` whose body holds its weight slices; quantized with the float16 kept inside (``widen_fp16=False``),
each slice is ``DequantizeLinear(int8 body initializer) -> Cast(float16) -> MatMul``, and onnxruntime ran the
dequantization on every time step (A8W8 3.5x float). Built here small: two such weights in a Loop over 6 steps.
"""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.graph.passes import hoist_loop_constants as hoist_module
from onnxptq.graph.passes.hoist_loop_constants import hoist_loop_constants

S, D = 6, 16


def _fp16_loop() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    f16 = TensorProto.FLOAT16
    body = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["xt"], axis=0, name="take"),
         helper.make_node("MatMul", ["xt", "wb"], ["xw"], name="mm_x"),
         helper.make_node("MatMul", ["h_in", "ub"], ["hw"], name="mm_h"),
         helper.make_node("Add", ["xw", "hw"], ["a"], name="add"),
         helper.make_node("Tanh", ["a"], ["h_out"], name="tanh"),
         helper.make_node("Identity", ["h_out"], ["y_t"], name="emit"),
         helper.make_node("Identity", ["c"], ["c_out"], name="go")],
        "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", f16, [1, D])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_out", f16, [1, D]),
         helper.make_tensor_value_info("y_t", f16, [1, D])],
        [numpy_helper.from_array(rng.normal(0, 0.4, (D, D)).astype(np.float16), "wb"),
         numpy_helper.from_array(rng.normal(0, 0.4, (D, D)).astype(np.float16), "ub")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "h0"], ["h", "ys"], body=body, name="steps")], "fp16_loop",
        [helper.make_tensor_value_info("x", f16, [S, 1, D])], [helper.make_tensor_value_info("ys", f16, [S, 1, D])],
        [numpy_helper.from_array(np.array(S, np.int64), "n"), numpy_helper.from_array(np.zeros((1, D), np.float16), "h0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (S, 1, D)).astype(np.float16)} for _ in range(n)]


def _body(model: onnx.ModelProto) -> onnx.GraphProto:
    return next(a.g for a in model.graph.node[-1].attribute if a.name == "body")


def _body_decodes(model: onnx.ModelProto) -> list[str]:
    """The body's DequantizeLinear nodes that read an initializer of the body or of the main graph."""
    inits = {t.name for t in _body(model).initializer} | {t.name for t in model.graph.initializer}
    return [n.name for n in _body(model).node if n.op_type == "DequantizeLinear" and n.input[0] in inits]


def _run(model: onnx.ModelProto, feeds, optimize: bool) -> list[bytes]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if not optimize:  # every op as written: no constant folding, no kernel picked for a constant weight
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


@pytest.fixture(scope="module")
def quantized() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(without the hoist, as shipped): A8W8 with the float16 kept inside."""
    model, config = _fp16_loop(), dataclasses.replace(get_preset("A8W8"), widen_fp16=False)
    with mock.patch.object(hoist_module, "hoist_loop_constants", lambda m: 0):
        before = onnxptq.quantize(model, config, data=_feeds(8, 1)).model
    return before, onnxptq.quantize(model, config, data=_feeds(8, 1)).model


def test_no_weight_dequantization_left_in_the_loop_body(quantized):
    before, after = quantized
    assert len(_body_decodes(before)) == 2  # the pattern is there without the pass
    assert _body_decodes(after) == []
    casts = [n for n in _body(after).node if n.op_type == "Cast"]  # the float16 Cast a MatMul reads stays beside it
    assert len(casts) == 2 and all(n.output[0] in {m.input[1] for m in _body(after).node if m.op_type == "MatMul"} for n in casts)
    onnx.checker.check_model(after)


def test_the_same_computation(quantized):
    """Op by op the same values: bit-identical with onnxruntime's graph optimizations off. With them on, the decoded
    weight is a constant onnxruntime folds and pre-packs for its float16 MatMul, whose sums round otherwise."""
    before, after = quantized
    held = _feeds(3, 1000)
    for a, b in zip(_run(before, held, False), _run(after, held, False)):
        assert a.tobytes() == b.tobytes()
    for a, b in zip(_run(before, held, True), _run(after, held, True)):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=0, atol=4e-3)


def test_pass_alone_leaves_a_model_without_loops_and_an_if_branch_alone():
    """A main-graph decode and a decode in an If branch (which may not run) do not move."""
    rng = np.random.default_rng(0)
    then = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], name="dq_then"),
         helper.make_node("Add", ["x", "wd"], ["y_then"], name="add_then")],
        "then", [], [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(rng.integers(-9, 9, 4).astype(np.int8), "wq"), numpy_helper.from_array(np.float32(0.1), "ws")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y_else"], name="id_else")], "else", [],
                              [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [4])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="branch")],
                              "if_model", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    assert hoist_loop_constants(model) == 0
    assert model.SerializeToString() == before


def _adder_body(name: str, inner: onnx.NodeProto | None, inits: list[onnx.TensorProto]) -> onnx.GraphProto:
    """A Loop body ``h + decoded weight`` (or ``inner`` Loop doing it) over one carried [4] state."""
    f32 = TensorProto.FLOAT
    step = [inner] if inner is not None else [
        helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], name="dq_w"),
        helper.make_node("Add", [f"{name}_h", "wd"], [f"{name}_h2"], name=f"{name}_add")]
    return helper.make_graph(
        step + [helper.make_node("Identity", [f"{name}_c"], [f"{name}_c2"], name=f"{name}_go")], name,
        [helper.make_tensor_value_info(f"{name}_i", TensorProto.INT64, []), helper.make_tensor_value_info(f"{name}_c", TensorProto.BOOL, []),
         helper.make_tensor_value_info(f"{name}_h", f32, [4])],
        [helper.make_tensor_value_info(f"{name}_c2", TensorProto.BOOL, []), helper.make_tensor_value_info(f"{name}_h2", f32, [4])], inits)


def test_a_decode_in_a_nested_loop_comes_up_to_the_main_graph():
    """Its inputs are the inner body's own initializers: it moves out of both bodies, graph by graph."""
    weights = [numpy_helper.from_array(np.arange(-2, 2).astype(np.int8), "wq"), numpy_helper.from_array(np.float32(0.5), "ws")]
    inner = helper.make_node("Loop", ["n", "", "outer_h"], ["outer_h2"], body=_adder_body("inner", None, weights), name="inner")
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=_adder_body("outer", inner, []), name="outer")], "nested",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(3, np.int64), "n")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feed = [{"x": np.array([0.25, -1.0, 3.0, 7.5], np.float32)}]
    before = _run(model, feed, True)[0]
    assert hoist_loop_constants(model) == 2  # one node, two hops
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "Loop"]
    assert {t.name for t in model.graph.initializer} == {"n", "wq", "ws"}
    assert _run(model, feed, True)[0].tobytes() == before.tobytes()


def test_a_decode_leaves_a_scan_body():
    """A Scan's body runs once per slice too; its state and scan inputs are fed, its own initializers are not."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["sq", "ss"], ["sd"], name="dq_s"),
         helper.make_node("Add", ["acc", "sd"], ["acc_w"], name="add_w"),
         helper.make_node("Add", ["acc_w", "row"], ["acc2"], name="add_row"),
         helper.make_node("Identity", ["acc2"], ["out_row"], name="emit_row")],
        "scan_step", [helper.make_tensor_value_info("acc", f32, [4]), helper.make_tensor_value_info("row", f32, [4])],
        [helper.make_tensor_value_info("acc2", f32, [4]), helper.make_tensor_value_info("out_row", f32, [4])],
        [numpy_helper.from_array(np.array([1, -3, 5, 127], np.int8), "sq"), numpy_helper.from_array(np.float32(0.125), "ss")])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["acc0", "rows"], ["acc_end", "trace"], body=body, num_scan_inputs=1, name="scan")],
        "scan_model", [helper.make_tensor_value_info("rows", f32, [5, 4])],
        [helper.make_tensor_value_info("trace", f32, [5, 4])], [numpy_helper.from_array(np.zeros(4, np.float32), "acc0")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feed = [{"rows": np.random.default_rng(3).normal(0, 1, (5, 4)).astype(np.float32)}]
    before = _run(model, feed, True)[0]
    assert hoist_loop_constants(model) == 1
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "Scan"]
    assert [t.name for t in next(a.g for a in model.graph.node[1].attribute if a.name == "body").initializer] == []
    assert _run(model, feed, True)[0].tobytes() == before.tobytes()


def _check_same_run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> int:
    """Hoist ``model`` in place; assert it stays valid and computes the same bits. Returns the moves."""
    before = _run(model, [feed], True)[0]
    moved = hoist_loop_constants(model)
    onnx.checker.check_model(model, full_check=True)
    assert _run(model, [feed], True)[0].tobytes() == before.tobytes()
    return moved


def test_a_body_initializer_the_body_returns_stays_in_the_body():
    """A body output must be produced in the body: onnxruntime refuses one that names an outer-scope value, so
    a decode reading such an initializer stays beside it."""
    body = _adder_body("step", None, [numpy_helper.from_array(np.arange(-2, 2).astype(np.int8), "wq"),
                                      numpy_helper.from_array(np.float32(0.5), "ws")])
    body.output.append(helper.make_tensor_value_info("ws", TensorProto.FLOAT, []))  # a scan output: the scale
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y", "scales"], body=body, name="steps")], "returns_init",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]), helper.make_tensor_value_info("scales", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.array(3, np.int64), "n")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _check_same_run(model, {"x": np.array([0.25, -1.0, 3.0, 7.5], np.float32)}) == 0
    assert {t.name for t in _body(model).initializer} == {"wq", "ws"}


def test_a_body_name_that_shadows_an_outer_constant_is_not_taken_for_it():
    """ONNX forbids it, yet the checker and onnxruntime take a body value named like an outer one (the body's
    wins): a decode reading the body's carried scale ``s`` must not move out to read the main graph's ``s``."""
    f32 = TensorProto.FLOAT
    body = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "s"], ["wd"], name="dq_w"),
         helper.make_node("Add", ["h", "wd"], ["h2"], name="add"),
         helper.make_node("Add", ["s", "s"], ["s2"], name="double"),
         helper.make_node("Identity", ["c"], ["c2"], name="go")], "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", f32, [4]), helper.make_tensor_value_info("s", f32, [])],
        [helper.make_tensor_value_info("c2", TensorProto.BOOL, []), helper.make_tensor_value_info("h2", f32, [4]),
         helper.make_tensor_value_info("s2", f32, [])],
        [numpy_helper.from_array(np.arange(-2, 2).astype(np.int8), "wq")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x", "s"], ["y", "s_end"], body=body, name="steps")], "shadow",
        [helper.make_tensor_value_info("x", f32, [4])], [helper.make_tensor_value_info("y", f32, [4])],
        [numpy_helper.from_array(np.array(3, np.int64), "n"), numpy_helper.from_array(np.float32(0.5), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _check_same_run(model, {"x": np.array([0.25, -1.0, 3.0, 7.5], np.float32)}) == 0


def test_sibling_bodies_of_the_same_names_come_up_under_distinct_names():
    """ONNX lets two sibling bodies define the same names (tf2onnx's LSTM Loops do): both decodes come up to the
    main graph, which must then hold each name once."""
    def loop(source: str, out: str, codes: list[int]) -> onnx.NodeProto:
        weights = [numpy_helper.from_array(np.array(codes, np.int8), "wq"), numpy_helper.from_array(np.float32(0.5), "ws")]
        return helper.make_node("Loop", ["n", "", source], [out], body=_adder_body("step", None, weights), name=f"loop_{out}")

    graph = helper.make_graph(
        [loop("x", "y1", [1, 2, 3, 4]), loop("y1", "y", [-4, 0, 4, 8])], "siblings",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(3, np.int64), "n")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _check_same_run(model, {"x": np.array([0.25, -1.0, 3.0, 7.5], np.float32)}) == 2
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "Loop", "DequantizeLinear", "Loop"]


def test_a_decode_in_an_if_branch_inside_a_loop_stays_in_the_branch():
    """The branch may not run: its decode stays. The body's decode that the branch reads moves out (the If reads it
    through the outer scope, no kernel picks by it), and so does its scale, which the branch's decode does not share."""
    f32 = TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("DequantizeLinear", ["tq", "ts"], ["td"], name="dq_then"),
                              helper.make_node("Add", ["h", "wd"], ["t1"], name="add_w"),
                              helper.make_node("Add", ["t1", "td"], ["yt"], name="add_t")],
                             "then", [], [helper.make_tensor_value_info("yt", f32, [4])])
    other = helper.make_graph([helper.make_node("Identity", ["h"], ["ye"], name="id_else")], "else", [],
                              [helper.make_tensor_value_info("ye", f32, [4])])
    body = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], name="dq_w"),
         helper.make_node("Less", ["i", "two"], ["early"], name="early"),
         helper.make_node("If", ["early"], ["h2"], then_branch=then, else_branch=other, name="branch"),
         helper.make_node("Identity", ["c"], ["c2"], name="go")], "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", f32, [4])],
        [helper.make_tensor_value_info("c2", TensorProto.BOOL, []), helper.make_tensor_value_info("h2", f32, [4])],
        [numpy_helper.from_array(np.arange(-2, 2).astype(np.int8), "wq"), numpy_helper.from_array(np.float32(0.5), "ws"),
         numpy_helper.from_array(np.array([1, 1, 1, 9], np.int8), "tq"), numpy_helper.from_array(np.float32(0.25), "ts"),
         numpy_helper.from_array(np.array(2, np.int64), "two")])
    graph = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y"], body=body, name="steps")], "if_in_loop",
                              [helper.make_tensor_value_info("x", f32, [4])], [helper.make_tensor_value_info("y", f32, [4])],
                              [numpy_helper.from_array(np.array(3, np.int64), "n")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _check_same_run(model, {"x": np.array([0.25, -1.0, 3.0, 7.5], np.float32)}) == 1
    assert [n.name for n in model.graph.node] == ["dq_w", "steps"]
    branch = next(a.g for a in _body(model).node[1].attribute if a.name == "then_branch")
    assert [n.name for n in branch.node][0] == "dq_then"
    assert {t.name for t in _body(model).initializer} == {"tq", "ts", "two"}
