"""Tests for eliminate_identity: Identity/Dropout go, graph output names and outer scopes stay."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import eliminate_identity


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _vi(name: str, shape: list[int], dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_identity_and_dropout_removed_output_names_kept() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["i"]),
        helper.make_node("Dropout", ["i", "ratio", "train"], ["d"], ),
        helper.make_node("Sigmoid", ["d"], ["s"]),
        helper.make_node("Identity", ["s"], ["y"]),  # graph output: s gets renamed to y
        helper.make_node("Dropout", ["x"], ["z", "mask"]),  # mask is unused
    ]
    inits = [numpy_helper.from_array(np.float32(0.5), "ratio"), numpy_helper.from_array(np.array(False), "train")]
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 3])], [_vi("y", [2, 3]), _vi("z", [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    out = eliminate_identity(model)
    onnx.checker.check_model(out)
    assert [o.name for o in out.graph.output] == ["y", "z"]
    assert "Dropout" not in _ops(out)
    # x -> z cannot lose its node: an input cannot also be renamed to an output.
    assert _ops(out).count("Identity") == 1
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for a, b in zip(_run(out, {"x": x}), _run(model, {"x": x})):
        np.testing.assert_array_equal(a, b)


def test_training_dropout_and_used_mask_kept() -> None:
    nodes = [
        helper.make_node("Dropout", ["x", "ratio", "train"], ["a"]),
        helper.make_node("Dropout", ["x"], ["b", "mask"]),
        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a", "m"], ["y0"]),
        helper.make_node("Add", ["y0", "b"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.float32(0.5), "ratio")]
    graph = helper.make_graph(
        nodes, "g", [_vi("x", [2]), _vi("train", [], TensorProto.BOOL)], [_vi("y", [2])], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    assert _ops(eliminate_identity(model)).count("Dropout") == 2


def test_output_pair_and_outer_scope_identity_kept() -> None:
    # y = Identity(r) with both r and y graph outputs: renaming r would drop the output 'r'.
    # Inside an If branch, e_out = Identity(r) with r from the outer graph must not rename r.
    then_g = helper.make_graph([helper.make_node("Neg", ["r"], ["t_out"])], "then", [], [_vi("t_out", [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["r"], ["e_out"])], "else", [], [_vi("e_out", [2])])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes, "g", [_vi("x", [2]), _vi("cond", [], TensorProto.BOOL)], [_vi("r", [2]), _vi("y", [2]), _vi("z", [2])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    out = eliminate_identity(model)
    onnx.checker.check_model(out)
    assert [o.name for o in out.graph.output] == ["r", "y", "z"]
    for cond in (True, False):
        feeds = {"x": np.float32([-1.0, 2.0]), "cond": np.array(cond)}
        for a, b in zip(_run(out, feeds), _run(model, feeds)):
            np.testing.assert_array_equal(a, b)


def test_same_type_casts_removed_in_prepare_others_kept() -> None:
    """float → float and int64 → int64 Casts go (bit-identical outputs, names kept); a real
    float → float16 Cast stays."""
    from collections import Counter

    from onnxptq.pipeline.prepare import prepare

    nodes = [
        helper.make_node("Cast", ["x"], ["c1"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Cast", ["r"], ["c2"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["c2"], ["y"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["r"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["z"], to=TensorProto.INT64),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT16, [2, 3]),
                               helper.make_tensor_value_info("z", TensorProto.INT64, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    out = prepare(model, fold_constants=True)
    casts = [n for n in out.graph.node if n.op_type == "Cast"]
    assert [(n.output[0], n.attribute[0].i) for n in casts] == [("h", TensorProto.FLOAT16)], casts
    assert [o.name for o in out.graph.output] == ["y", "h", "z"]
    x = np.array([[-1.5, 0.0, 2.25], [np.nan, -np.inf, 3e38]], np.float32)
    a = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    b = ort.InferenceSession(out.SerializeToString()).run(None, {"x": x})
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert Counter(n.op_type for n in out.graph.node)["Relu"] == 1
