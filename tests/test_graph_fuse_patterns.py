"""Pattern fusions: affine folds, HardSwish, LayerNorm — exact on synthetic graphs and PP-OCR."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import prepare
from onnxptq.graph.passes.fuse_patterns import fuse_patterns
from onnxptq.testing.models import model_path


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
