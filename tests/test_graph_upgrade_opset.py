"""Tests for upgrade_opset: conversion runs, functions follow the model opset, errors are clear."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.graph.passes import OpsetUpgradeError, model_opset, upgrade_opset


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _model(opset: int = 11, functions: list[onnx.FunctionProto] = ()) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("ReduceSum", ["c"], ["s"], axes=[1], keepdims=1),  # axes moved to an input in 13
        helper.make_node("Squeeze", ["s"], ["sq"], axes=[1]),
    ]
    if functions:
        nodes.append(helper.make_node("Twice", ["sq"], ["y"], domain="onnxptq"))
    else:
        nodes.append(helper.make_node("Relu", ["sq"], ["y"]))
    inits = [numpy_helper.from_array(np.float32(-1), "lo"), numpy_helper.from_array(np.float32(1), "hi")]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        inits,
    )
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("onnxptq", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=7, functions=list(functions))


def _function(op: str) -> onnx.FunctionProto:
    inputs = ["a", "a"] if op == "Add" else ["a"]
    return helper.make_function("onnxptq", "Twice", ["a"], ["b"], [helper.make_node(op, inputs, ["b"])], [helper.make_opsetid("", 11)])


def test_upgrade_to_21_runs_and_matches() -> None:
    model = _model()
    up = upgrade_opset(model, 21)
    assert model_opset(up) == 21 and model_opset(model) == 11
    assert up.ir_version == 10
    onnx.checker.check_model(up)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_run(up, {"x": x})[0], _run(model, {"x": x})[0])


def test_function_opset_follows_model() -> None:
    model = _model(functions=[_function("Add")])  # Add changed at 13/14 -> must error
    with pytest.raises(OpsetUpgradeError, match="function onnxptq::Twice .*Add"):
        upgrade_opset(model, 21)
    model = _model(functions=[_function("Softsign")])  # Softsign: one definition from opset 1 to 21
    up = upgrade_opset(model, 21)
    assert [f.name for f in up.functions] == ["Twice"]  # the converter drops them; we keep them
    assert up.functions[0].opset_import[0].version == 21
    onnx.checker.check_model(up)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_run(up, {"x": x})[0], _run(model, {"x": x})[0])


def test_downgrade_and_bad_model_raise() -> None:
    with pytest.raises(OpsetUpgradeError, match="above the target"):
        upgrade_opset(_model(17), 13)
    bad = _model()
    bad.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(OpsetUpgradeError, match="from opset 11 to 21"):
        upgrade_opset(bad, 21)


def test_unchanged_ops_raise_the_import_without_the_converter(monkeypatch):
    """MatMul/Relu are the same at opset 17 and 21: no converter call (it cannot take >2 GB models)."""
    import onnx.version_converter

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def refuse(*args, **kwargs):
        raise AssertionError("the converter was called")

    monkeypatch.setattr(onnx.version_converter, "convert_version", refuse)
    upgraded = upgrade_opset(model, 21)
    assert model_opset(upgraded) == 21 and model_opset(model) == 17
    onnx.checker.check_model(upgraded)


def _weighty_model() -> onnx.ModelProto:
    """Opset 11, every storage form of a large float tensor the converter carries: raw float32 (an
    initializer, with a doc_string and metadata_props it drops), float_data in a Constant, float16 in
    int32_data, a large one inside an If branch; and ops whose definition changes up to 21 (Unsqueeze's
    and ReduceSum's axes become inputs), so the converter itself runs."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "w")
    w.doc_string = "dropped by the converter"
    w.metadata_props.add(key="k", value="v")
    w.data_location = TensorProto.DEFAULT  # set explicitly, as some exporters write it: the converter drops it
    c = helper.make_tensor("c", TensorProto.FLOAT, [4, 256], rng.standard_normal(1024).astype(np.float32).tolist())
    h = helper.make_tensor("h", TensorProto.FLOAT16, [256, 256],
                           rng.standard_normal(65536).astype(np.float16).view(np.uint16).tolist())
    inner = numpy_helper.from_array(rng.standard_normal((1, 256)).astype(np.float32), "inner")  # 1 KiB: a reference
    branch = helper.make_graph([helper.make_node("Add", ["m", "inner"], ["b"])], "then", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)], [inner])
    other = helper.make_graph([helper.make_node("Identity", ["m"], ["b2"])], "else", [],
                              [helper.make_tensor_value_info("b2", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Constant", [], ["cv"], value=c),
        helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "w"], ["m0"]),
        helper.make_node("MatMul", ["m0", "hf"], ["m1"]),
        helper.make_node("ReduceSum", ["cv"], ["cs"], axes=[0], keepdims=1),
        helper.make_node("Add", ["m1", "cs"], ["m"]),
        helper.make_node("If", ["flag"], ["r"], then_branch=branch, else_branch=other),
        helper.make_node("Unsqueeze", ["r"], ["y"], axes=[0]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64]),
                                           helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, h])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def test_the_converter_is_given_the_weights_as_references_and_the_result_is_its_own(monkeypatch) -> None:
    """The converter copies its input ~8 times over (PP-OCRv4 rec: +73 MiB of high-water mark for 10.9 MB
    of weights); given the large float tensors as keyed references it returns the same model, byte for
    byte, once they are put back (graph/passes/lean_convert.py)."""
    import onnx.version_converter

    model = _weighty_model()
    source = model.SerializeToString()
    expected = onnx.version_converter.convert_version(model, 21)
    plain = upgrade_opset(model, 21)  # what the stage returns, whatever it gives the converter
    sizes: list[int] = []
    real = onnx.version_converter.convert_version

    def recording(m: onnx.ModelProto, target: int) -> onnx.ModelProto:
        sizes.append(m.ByteSize())
        return real(m, target)

    monkeypatch.setattr(onnx.version_converter, "convert_version", recording)
    up = upgrade_opset(model, 21)
    assert model.ByteSize() > 200_000 and sizes and max(sizes) < 2048, (sizes, model.ByteSize())
    assert model.SerializeToString() == source  # the caller's model untouched
    assert up.SerializeToString() == plain.SerializeToString()
    from onnxptq.graph.passes.lean_convert import convert_version_lean

    assert convert_version_lean(model, 21).SerializeToString() == expected.SerializeToString()
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        np.testing.assert_array_equal(_run(up, feeds)[0], _run(model, feeds)[0])
