"""Integer presets store an embedding table (a ``Gather`` whose data is a float constant) as int8 per
row and dequantize the gathered rows, not the table.

Why: on the CPU target a data-movement op was quantized only behind an integer producer, and a
table has none, so minilm_l3's 30522×384 word table stayed float under A8W8 (file ×0.77 of fp32,
bench/RESULTS.md "eighth round"). And ``DequantizeLinear(table) → Gather`` would dequantize the
whole table at every run (onnxruntime neither folds nor fuses it): the rows are gathered as
integers and dequantized after (graph/passes/lookup_tables.py), bit for bit the fake-quantized
table's rows. Built here: a word and a position table added, then a MatMul.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset

V, P, H = 300, 16, 32


def _embedder() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((V, H)) * 0.1).astype(np.float32), "word"),
             numpy_helper.from_array((rng.standard_normal((P, H)) * 0.02).astype(np.float32), "position"),
             numpy_helper.from_array((rng.standard_normal((H, 8)) / np.sqrt(H)).astype(np.float32), "W")]
    nodes = [helper.make_node("Gather", ["word", "ids"], ["we"], name="word_lookup"),
             helper.make_node("Gather", ["position", "pos"], ["pe"], name="position_lookup"),
             helper.make_node("Add", ["we", "pe"], ["e"], name="add"),
             helper.make_node("MatMul", ["e", "W"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "embedder",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, P]),
                               helper.make_tensor_value_info("pos", TensorProto.INT64, [1, P])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, P, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"ids": rng.integers(0, V, (1, P)).astype(np.int64), "pos": np.arange(P, dtype=np.int64)[None]} for _ in range(n)]


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_integer_presets_store_tables_int8_per_row(tmp_path, preset):
    out = tmp_path / f"{preset}.onnx"
    # repair off: the floor's verdict on 8 built samples is not what is tested (the stored table is)
    onnxptq.quantize(_embedder(), get_preset(preset).replace(repair=False), data=_feeds(8, 1), output=str(out))
    model = onnx.load(out)
    inits = {t.name: t for t in model.graph.initializer}
    tables = [t for t in inits.values() if list(t.dims) in ([V, H], [P, H])]
    assert len(tables) == 2 and all(t.data_type == TensorProto.INT8 for t in tables), \
        [(t.name, t.data_type) for t in tables]
    # the lookups read the integers; nothing dequantizes a whole table
    producer = {o: n for n in model.graph.node for o in n.output}
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input[0] in {t.name for t in tables}:
            assert node.input[0] in inits
        if node.op_type == "DequantizeLinear":
            assert node.input[0] not in {t.name for t in tables}
    # the rows are the fake-quantized table's: int8 × one scale per row, bit for bit
    feed = _feeds(1, 7)[0]
    word = next(t for t in tables if list(t.dims) == [V, H])
    q = numpy_helper.to_array(word).astype(np.float32)
    gather = next(n for n in model.graph.node if n.op_type == "Gather" and n.input[0] == word.name)
    rows = next(n for n in model.graph.node if n.op_type == "Mul" and any(
        producer.get(i) is not None and producer[i].op_type == "Cast" and producer[i].input[0] == gather.output[0] for i in n.input))
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info(rows.output[0], TensorProto.FLOAT, None))
    got = _run(probe, feed)[-1]
    scale_name = next(i for i in rows.input if producer.get(i) is not None and producer[i].op_type == "Gather"
                      and producer[i].input[0] in inits and inits[producer[i].input[0]].data_type == TensorProto.FLOAT)
    scales = numpy_helper.to_array(inits[producer[scale_name].input[0]]).reshape(-1)
    assert scales.size == V  # per row
    np.testing.assert_array_equal(got, (q * scales[:, None])[feed["ids"]])
    # and the table is close to the float one
    table = numpy_helper.to_array(_embedder().graph.initializer[0])
    assert np.abs(q * scales[:, None] - table).max() <= scales.max() / 2 + 1e-7
    ref = _run(_embedder(), feed)[0]
    y = _run(model, feed)[0]
    assert np.dot(ref.ravel(), y.ravel()) / np.linalg.norm(ref) / np.linalg.norm(y) > 0.999


def _dq_gather(per_row: bool, zero_point: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    q = rng.integers(0 if zero_point else -127, 256 if zero_point else 128, (V, H)).astype(np.uint8 if zero_point else np.int8)
    scale = (rng.random(V if per_row else ()) * 0.01 + 1e-3).astype(np.float32)
    zp = (rng.integers(100, 150, V if per_row else ()) if zero_point else np.zeros(V if per_row else (), np.int64)).astype(q.dtype)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["table"], axis=0, name="dq"),
             helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup"),
             helper.make_node("Gather", ["table", "ids2"], ["rows2"], name="lookup2"),
             helper.make_node("Add", ["rows", "rows2"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "dq_gather",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5]),
                               helper.make_tensor_value_info("ids2", TensorProto.INT64, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, H]),
                               helper.make_tensor_value_info("rows", TensorProto.FLOAT, [2, 5, H])],
                              [numpy_helper.from_array(q, "q"), numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("per_row,zero_point", [(True, False), (True, True), (False, False), (False, True)])
def test_rows_dequantized_after_the_lookup_are_bit_identical(per_row, zero_point):
    from onnxptq.graph.passes.lookup_tables import dequantize_after_lookup

    model = _dq_gather(per_row, zero_point)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert dequantize_after_lookup(rewritten) == 2
    onnx.checker.check_model(rewritten)
    assert not any(n.op_type == "DequantizeLinear" and n.input[0] == "q" for n in rewritten.graph.node)
    ints = [n for n in rewritten.graph.node if n.name in ("lookup_int", "lookup2_int")]
    assert len(ints) == 2 and all(n.op_type == "Gather" and n.input[0] == "q" for n in ints)
    rng = np.random.default_rng(5)
    feed = {"ids": rng.integers(0, V, (2, 5)).astype(np.int64), "ids2": rng.integers(0, V, (2, 5)).astype(np.int64)}
    for a, b in zip(_run(model, feed), _run(rewritten, feed)):
        np.testing.assert_array_equal(a, b)


def test_a_table_read_by_anything_else_keeps_its_dequantize():
    """A tied table (also read by a Transpose for an lm_head) keeps one DQ for all its readers."""
    from onnxptq.graph.passes.lookup_tables import dequantize_after_lookup

    model = _dq_gather(True, False)
    model.graph.node.append(helper.make_node("Transpose", ["table"], ["tied"], name="tied"))
    model.graph.output.append(helper.make_tensor_value_info("tied", TensorProto.FLOAT, [H, V]))
    assert dequantize_after_lookup(model) == 0


def test_a_table_gathered_along_axis_1_dequantizes_its_columns_bit_for_bit():
    from onnxptq.graph.passes.lookup_tables import dequantize_after_lookup

    rng = np.random.default_rng(9)
    q = rng.integers(-127, 128, (H, V)).astype(np.int8)
    scale = (rng.random(V) * 0.01 + 1e-3).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["table"], axis=1, name="dq"),
             helper.make_node("Gather", ["table", "ids"], ["y"], axis=1, name="lookup")]
    graph = helper.make_graph(nodes, "columns", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [H, 2, 5])],
                              [numpy_helper.from_array(q, "q"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert dequantize_after_lookup(rewritten) == 1
    feed = {"ids": rng.integers(0, V, (2, 5)).astype(np.int64)}
    np.testing.assert_array_equal(_run(model, feed)[0], _run(rewritten, feed)[0])
