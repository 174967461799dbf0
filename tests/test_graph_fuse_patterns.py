"""Pattern fusions: affine folds, HardSwish, LayerNorm — exact on synthetic graphs and PP-OCR."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxptq.graph.passes._common import run_passes
from onnxptq.pipeline.prepare import fusion_passes, prepare
from testkit.models import model_path


def fuse_patterns(model: onnx.ModelProto) -> onnx.ModelProto:
    """The four fusion passes in prepare's order, then dead-node removal."""
    return run_passes(model, *fusion_passes(), RemoveUnusedNodesPass())


def _run(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def _model(nodes, inits, in_shape, out_shape, opset=21):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def test_conv_mul_add_folds_and_hardswish_fuses():
    rng = np.random.default_rng(0)
    inits = {
        "W": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "B": rng.normal(0, 0.1, (4,)).astype(np.float32),
        "s": rng.uniform(0.5, 2, (4, 1, 1)).astype(np.float32), "o": rng.normal(0, 1, (1, 4, 1, 1)).astype(np.float32),
        "three": np.array(3, np.float32), "zero": np.array(0, np.float32), "six": np.array(6, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["s", "c"], ["m"]),
        helper.make_node("Add", ["m", "o"], ["a"]),
        helper.make_node("Add", ["a", "three"], ["a3"]),
        helper.make_node("Clip", ["a3", "zero", "six"], ["cl"]),
        helper.make_node("Mul", ["a", "cl"], ["hm"]),
        helper.make_node("Div", ["hm", "six"], ["y"]),
    ]
    model = _model(nodes, inits, [1, 3, 8, 8], [1, 4, 8, 8])
    fused = fuse_patterns(model)
    ops = Counter(n.op_type for n in fused.graph.node)
    assert ops == Counter({"Conv": 1, "HardSwish": 1}), ops
    x = {"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(_run(fused, x), _run(model, x), rtol=1e-5, atol=1e-5)


def test_mul_by_non_channel_constant_is_not_folded():
    rng = np.random.default_rng(1)
    inits = {"W": rng.normal(0, 0.3, (4, 3, 1, 1)).astype(np.float32), "s": rng.normal(0, 1, (1, 4, 8, 8)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    model = _model(nodes, inits, [1, 3, 8, 8], [1, 4, 8, 8])
    assert Counter(n.op_type for n in fuse_patterns(model).graph.node) == Counter({"Conv": 1, "Mul": 1})


@pytest.mark.parametrize("which,width,expect", [("rec", 320, {"LayerNormalization": 5, "HardSwish": 28}), ("cls", 192, {"HardSwish": 18})])
def test_real_models_fuse_exactly(which, width, expect):
    original = onnx.load(model_path(which))
    prepared = prepare(original, opset=21)
    ops = Counter(n.op_type for n in prepared.graph.node)
    for op, count in expect.items():
        assert ops[op] == count, (op, ops)
    x = {"x": np.random.default_rng(0).uniform(-1, 1, (2, 3, 48, width)).astype(np.float32)}
    np.testing.assert_allclose(_run(prepared, x), _run(original, x), atol=2e-5)


@pytest.mark.parametrize("pads,expect", [
    ([0, 0, 0, 0], Counter({"Relu": 1, "Conv": 1})),  # no padding: scale into W, shift into the bias
    ([1, 1, 1, 1], Counter({"Relu": 1, "Add": 1, "Conv": 1})),  # padding: c·(t + d/c), the Add stays
])
@pytest.mark.parametrize("group", [1, 4])
def test_scalar_affine_folds_into_the_next_conv(pads, expect, group):
    rng = np.random.default_rng(group)
    k = 1 if pads == [0, 0, 0, 0] else 3
    inits = {"W": rng.normal(0, 0.3, (8, 4 // group, k, k)).astype(np.float32), "B": rng.normal(0, 0.1, (8,)).astype(np.float32),
             "c": np.array([1.7], np.float32), "d": np.array(-0.4, np.float32)}
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Mul", ["r", "c"], ["m"]),
        helper.make_node("Add", ["d", "m"], ["a"]),
        helper.make_node("Conv", ["a", "W", "B"], ["y"], pads=pads, group=group, strides=[2, 2]),
    ]
    model = _model(nodes, inits, [1, 4, 9, 9], None)
    fused = fuse_patterns(model)
    assert Counter(n.op_type for n in fused.graph.node) == expect
    x = {"x": rng.normal(0, 1, (1, 4, 9, 9)).astype(np.float32)}
    np.testing.assert_allclose(_run(fused, x), _run(model, x), rtol=1e-5, atol=1e-5)


def test_scalar_affine_with_other_readers_is_kept():
    rng = np.random.default_rng(3)
    inits = {"W": rng.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32), "c": np.array(2.0, np.float32),
             "v": rng.normal(0, 1, (1, 4, 1, 1)).astype(np.float32)}
    # m is read twice (Conv and the residual Add); a per-channel Mul is not a scalar: both stay.
    nodes = [helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Conv", ["m", "W"], ["cv"]),
             helper.make_node("Add", ["cv", "m"], ["s"]), helper.make_node("Mul", ["s", "v"], ["mv"]),
             helper.make_node("Conv", ["mv", "W"], ["y"])]
    model = _model(nodes, inits, [1, 4, 5, 5], None)
    assert Counter(n.op_type for n in fuse_patterns(model).graph.node) == Counter({"Mul": 2, "Conv": 2, "Add": 1})


def test_nhwc_batchnorm_folds_across_a_transpose():
    """``Conv → Transpose(NHWC) → Add → Sub → Mul → Add`` (a BatchNorm as TF/Caffe converters write it)
    folds into the Conv with the constants per channel on the last axis; ``c - x`` and a constant that
    varies along a spatial axis stay."""
    rng = np.random.default_rng(1)
    inits = {
        "W": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "b": rng.normal(0, 0.1, (4,)).astype(np.float32),
        "m": rng.normal(0, 0.5, (4,)).astype(np.float32), "s": rng.uniform(0.5, 2, (1, 1, 1, 4)).astype(np.float32),
        "o": rng.normal(0, 1, (4,)).astype(np.float32), "r": rng.normal(0, 1, (8, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Add", ["t", "b"], ["a"]),
        helper.make_node("Sub", ["a", "m"], ["d"]),
        helper.make_node("Mul", ["d", "s"], ["e"]),
        helper.make_node("Add", ["o", "e"], ["f"]),
        helper.make_node("Sub", ["r", "f"], ["y"]),  # reversed Sub, per row: not an affine of the Conv
    ]
    model = _model(nodes, inits, [1, 3, 8, 8], [1, 8, 8, 4])
    fused = fuse_patterns(model)
    ops = Counter(n.op_type for n in fused.graph.node)
    assert ops == Counter({"Conv": 1, "Transpose": 1, "Sub": 1}), ops
    x = {"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(_run(fused, x), _run(model, x), rtol=1e-5, atol=1e-5)


def test_gelu_final_half_is_not_folded_into_the_next_conv():
    """``Mul(x, 1 + erf(x/√2)) · ½ → Conv``: the ½ stays, so onnxruntime still sees a GELU; a plain
    scalar Mul before a Conv is still folded."""
    rng = np.random.default_rng(2)
    inits = {"W": rng.normal(0, 0.3, (4, 3, 1, 1)).astype(np.float32), "V": rng.normal(0, 0.3, (4, 4, 1, 1)).astype(np.float32),
             "r2": np.array(1.4142135, np.float32), "one": np.array(1, np.float32), "half": np.array(0.5, np.float32),
             "k": np.array(1.5, np.float32)}
    nodes = [
        helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"]), helper.make_node("Conv", ["g", "W"], ["c"]),
        helper.make_node("Mul", ["c", "k"], ["s"]), helper.make_node("Conv", ["s", "V"], ["y"]),
    ]
    model = _model(nodes, inits, [1, 3, 4, 4], [1, 4, 4, 4])
    fused = fuse_patterns(model)
    ops = Counter(n.op_type for n in fused.graph.node)
    assert ops == Counter({"Div": 1, "Erf": 1, "Add": 1, "Mul": 2, "Conv": 2}), ops
    x = {"x": rng.normal(0, 1, (1, 3, 4, 4)).astype(np.float32)}
    np.testing.assert_allclose(_run(fused, x), _run(model, x), rtol=1e-5, atol=1e-5)


def test_a_layernorm_spelt_inside_an_if_branch_fuses_there():
    """openWakeWord's classifiers hold their network in an If's then-branch with two mean/variance LayerNorms; left
    spelt out there (and kept float inside by graph/structure.py), onnxruntime's own LayerNormFusion took a BF16
    quantizer's Cast input as the fused op's X beside a float scale and refused the model (zoo oww_hey_jarvis)."""
    rng = np.random.default_rng(4)
    ln = [helper.make_node("ReduceMean", ["x", "axes"], ["mu"], keepdims=1),
          helper.make_node("Sub", ["x", "mu"], ["d"]),
          helper.make_node("Pow", ["d", "two"], ["d2"]),
          helper.make_node("ReduceMean", ["d2", "axes"], ["var"], keepdims=1),
          helper.make_node("Add", ["var", "eps"], ["ve"]),
          helper.make_node("Sqrt", ["ve"], ["sd"]),
          helper.make_node("Div", ["d", "sd"], ["n"]),
          helper.make_node("Mul", ["n", "gamma"], ["ng"]),
          helper.make_node("Add", ["ng", "beta"], ["ln_out"])]
    then = helper.make_graph(ln, "then", [], [helper.make_tensor_value_info("ln_out", TensorProto.FLOAT, [2, 16])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["passed"])], "else", [],
                              [helper.make_tensor_value_info("passed", TensorProto.FLOAT, [2, 16])])
    nodes = [helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
             helper.make_node("Greater", ["peak", "low"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    inits = {"axes": np.array([-1], np.int64), "two": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
             "gamma": rng.standard_normal(16).astype(np.float32), "beta": rng.standard_normal(16).astype(np.float32),
             "low": np.array(-1e30, np.float32)}
    model = _model(nodes, inits, [2, 16], [2, 16])
    fused = fuse_patterns(model)
    branch = next(n for n in fused.graph.node if n.op_type == "If").attribute
    then_ops = Counter(x.op_type for a in branch if a.name == "then_branch" for x in a.g.node)
    assert then_ops == Counter({"LayerNormalization": 1}), then_ops
    feed = {"x": (3.0 + rng.standard_normal((2, 16))).astype(np.float32)}
    np.testing.assert_allclose(_run(fused, feed), _run(model, feed), rtol=1e-5, atol=1e-5)
