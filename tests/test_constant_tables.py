"""Large constants of few distinct values are stored compactly and decode bit-exactly (graph/passes/constant_tables).

Why: DAT-light x2's shifted-window attention masks are fp32 [1, 16, 1, 256, 256] addends holding 0 and -100
only (4.2 MB each), and no format stores an addend narrower: they were 8.4 MB of its 10.6 MB MXINT8 file. The
graphs here are that pattern small: an addend of two (or five) values beside an activation, an int64 index of
small values, a float tensor every value of which bfloat16 holds.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxptq
from onnxptq.graph.passes import constant_tables
from onnxptq.graph.passes.constant_tables import compact_constants

SHAPE = (1, 16, 64, 128)  # 131 072 elements: 512 KiB as fp32, 256 KiB as bf16


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.where(rng.random(SHAPE) < 0.3, np.float32(-100.0), np.float32(0.0)).astype(np.float32)
    mask[0, 0, 0, :4] = -0.0  # a negative zero is a third bit pattern: the Gather form, bit-exact
    levels = np.array([-3.5, -1.0, 0.0, 0.25, 7.0], np.float32)[rng.integers(0, 5, SHAPE)]
    index = rng.integers(0, 945, 65536).astype(np.int64)
    halfs = (rng.normal(size=SHAPE) * 1e6).astype(ml_dtypes.bfloat16).astype(np.float32)  # bf16-exact, past fp16
    return {"mask": mask, "levels": levels, "index": index, "halfs": halfs}


def _model(values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """y = ((x + mask) * levels + halfs) and the rows of a [945, 1] table gathered through ``index``."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(v, k) for k, v in values.items()]
    inits.append(numpy_helper.from_array(rng.normal(size=(945, 1)).astype(np.float32), "table"))
    nodes = [helper.make_node("Add", ["x", "mask"], ["a"]), helper.make_node("Mul", ["a", "levels"], ["b"]),
             helper.make_node("Add", ["b", "halfs"], ["y"]), helper.make_node("Gather", ["table", "index"], ["g"])]
    graph = helper.make_graph(nodes, "masks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE)),
                               helper.make_tensor_value_info("g", TensorProto.FLOAT, [65536, 1])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _session(model: onnx.ModelProto, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_each_constant_takes_its_compact_form_and_decodes_bit_identically():
    values = _values()
    model = _model(values)
    before = model.SerializeToString()
    undo = compact_constants(model)
    ops = {n.output[0]: n.op_type for n in model.graph.node}
    assert ops["mask"] == "Gather"  # three bit patterns (0, -0, -100): codes + a table
    assert ops["levels"] == "Gather" and ops["index"] == "Cast" and ops["halfs"] == "Cast"
    stored = {t.name: t for t in model.graph.initializer}
    assert stored["index__narrow"].data_type == TensorProto.INT16
    assert stored["halfs__narrow"].data_type == TensorProto.BFLOAT16
    onnx.checker.check_model(model)
    assert len(model.SerializeToString()) < 0.45 * len(before)
    # the decoded tensors, by an evaluator that is not onnxruntime, bit for bit
    names = list(values)
    decode = helper.make_model(helper.make_graph(list(model.graph.node)[:-4], "decode", [],
                                                 [helper.make_tensor_value_info(k, TensorProto.UNDEFINED, None) for k in names],
                                                 initializer=[t for t in model.graph.initializer if t.name not in names]),
                               opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    for name, got in zip(names, ReferenceEvaluator(decode).run(None, {})):
        want = values[name]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), name
    # onnxruntime folds the decodes at load and computes the same outputs as from the original file
    x = {"x": np.random.default_rng(2).normal(size=SHAPE).astype(np.float32)}
    compact = _session(model).run(None, x)
    undo()
    assert model.SerializeToString() == before  # the undo puts back exactly the model it was given
    for a, b in zip(_session(model).run(None, x), compact):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    for a, b in zip(_session(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, x), compact):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))  # unfolded, the chain runs: the same values


def test_two_values_take_a_bool_mask_and_where():
    mask = np.where(np.random.default_rng(3).random(SHAPE) < 0.5, -100.0, 0.0).astype(np.float32)
    model = _model({"mask": mask, "levels": np.ones(SHAPE, np.float32), "index": np.zeros(65536, np.int64),
                    "halfs": np.zeros(SHAPE, np.float32)})
    compact_constants(model)
    where = [n for n in model.graph.node if n.output[0] == "mask"]
    assert [n.op_type for n in where] == ["Where"]
    stored = {t.name: t for t in model.graph.initializer}
    assert stored["mask__mask"].data_type == TensorProto.BOOL
    got = ReferenceEvaluator(helper.make_model(helper.make_graph(
        where, "w", [], [helper.make_tensor_value_info("mask", TensorProto.FLOAT, None)],
        initializer=[stored["mask__mask"], stored["mask__if_true"], stored["mask__if_false"]]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)).run(None, {})[0]
    assert np.array_equal(got.view(np.uint32), mask.view(np.uint32))


def test_small_or_many_valued_constants_stay_as_they_are():
    rng = np.random.default_rng(4)
    small = np.where(rng.random((1, 4, 32, 32)) < 0.5, -100.0, 0.0).astype(np.float32)  # 16 KiB: saves < MIN_SAVED
    many = rng.normal(size=SHAPE).astype(np.float32)  # fp32 values no narrower type holds
    inits = [numpy_helper.from_array(small, "small"), numpy_helper.from_array(many, "many")]
    nodes = [helper.make_node("Add", ["small", "small"], ["a"]), helper.make_node("Add", ["many", "many"], ["b"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in "ab"],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    before = model.SerializeToString()
    compact_constants(model)
    assert model.SerializeToString() == before


def test_a_dequantized_int16_mask_is_compacted_and_the_optimised_graph_is_the_same(tmp_path):
    """A16W8 quantizes a mask addend to int16 codes read by DequantizeLinear: onnxruntime folds the decode
    before its QDQ passes, so the optimised graph and the outputs are those of the plain initializer."""
    codes = np.where(np.random.default_rng(7).random(SHAPE) < 0.3, np.int16(-3277), np.int16(0)).astype(np.int16)
    inits = [numpy_helper.from_array(codes, "mask_q"), numpy_helper.from_array(np.float32(100 / 3277), "s"),
             numpy_helper.from_array(np.int16(0), "z"), numpy_helper.from_array(np.float32(0.01), "xs"),
             numpy_helper.from_array(np.int16(0), "xz")]
    nodes = [helper.make_node("DequantizeLinear", ["mask_q", "s", "z"], ["mask"]),
             helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("Add", ["xd", "mask"], ["y"])]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    plain = model.SerializeToString()
    compact_constants(model)
    assert [n.op_type for n in model.graph.node][:2] == ["Cast", "Gather"]  # int16 has no folded Where
    assert len(model.SerializeToString()) < 0.6 * len(plain)
    x = {"x": np.random.default_rng(8).normal(size=SHAPE).astype(np.float32)}
    kinds = []
    for i, proto in enumerate((onnx.load_from_string(plain), model)):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(tmp_path / f"opt{i}.onnx")
        out = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, x)[0]
        kinds.append((sorted(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node), out.view(np.uint32)))
    assert kinds[0][0] == kinds[1][0]
    assert np.array_equal(kinds[0][1], kinds[1][1])


def _attention_like() -> onnx.ModelProto:
    """x [1, 16, 64, 128] -> 1x1 Conv -> + mask (0 / -100) -> Softmax -> 1x1 Conv: a window mask beside scores."""
    rng = np.random.default_rng(5)
    mask = np.where(rng.random(SHAPE) < 0.25, -100.0, 0.0).astype(np.float32)
    inits = [numpy_helper.from_array(mask, "mask"),
             numpy_helper.from_array(rng.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Add", ["c1", "mask"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("Conv", ["p", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "att", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("preset", ["BF16", "MXINT8"])
def test_a_quantized_file_stores_the_mask_compactly_with_the_same_outputs(preset, tmp_path):
    model = _attention_like()
    rng = np.random.default_rng(6)
    feeds = [{"x": rng.normal(size=SHAPE).astype(np.float32)} for _ in range(2)]
    out = tmp_path / f"att.{preset}.onnx"
    result = onnxptq.quantize(model, dataclasses.replace(onnxptq.get_preset(preset), repair=False), feeds,
                              output=str(out))
    # the fp32 mask is 512 KiB (bf16 256 KiB): stored as a bool mask or uint8 codes the file is under 160 KiB
    assert out.stat().st_size < 160 * 1024
    assert any(n.op_type in ("Where", "Gather") for n in onnx.load(str(out)).graph.node)
    held = {n.output[0]: n.op_type for n in result.model.graph.node}  # the in-memory model keeps its constant
    assert "mask" not in held
    for f in feeds:
        a, b = _session(result.model).run(None, f)[0], _session(onnx.load(str(out))).run(None, f)[0]
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_the_switch_turns_it_off(monkeypatch):
    model = _model(_values())
    before = model.SerializeToString()
    monkeypatch.setattr(constant_tables, "ENABLED", False)
    compact_constants(model)
    assert model.SerializeToString() == before
