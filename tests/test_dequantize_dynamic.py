"""conversion.dequantize_dynamic: a model onnxruntime's quantize_dynamic made int8 (the only file some
packages ship: text2tashkeel's BiLSTM, pyfrspell's seq2seq, round 14 of bench/newmodels.py) turns
back into the float model its int8 weights describe, and onnxptq.quantize then takes it.

The fixture is a built graph of the shapes those models have (an embedding Gather, a bidirectional
LSTM, a MatMul head), quantized by onnxruntime itself; the reference is the float model it came
from, with its weights rounded to the same grids by NumPy (int8 symmetric per output column or LSTM
gate row, uint8 per tensor for the embedding table, as quantize_dynamic per_channel QInt8 does).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.conversion.dequantize import NotRecoverableError, dequantize_dynamic
from onnxptq.graph.check import AlreadyQuantizedError, quantized_node_counts
from onnxptq.sessions import open_session

T, B, V, E, H, C = 7, 3, 20, 8, 6, 5


def _float_model(rng: np.random.Generator) -> onnx.ModelProto:
    """ids [T, B] -> Gather(embedding) -> bidirectional LSTM -> [T, B, 2H] -> MatMul -> logits [T, B, C]."""
    emb = rng.normal(0, 1, (V, E)).astype(np.float32)
    w = rng.normal(0, 0.4, (2, 4 * H, E)).astype(np.float32)
    r = rng.normal(0, 0.4, (2, 4 * H, H)).astype(np.float32)
    bias = rng.normal(0, 0.1, (2, 8 * H)).astype(np.float32)
    head = rng.normal(0, 0.5, (2 * H, C)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["x"]),
        helper.make_node("LSTM", ["x", "W", "R", "Bias"], ["y"], direction="bidirectional", hidden_size=H),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["yt", "shape"], ["feat"]),
        helper.make_node("MatMul", ["feat", "head"], ["logits"]),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((emb, "emb"), (w, "W"), (r, "R"), (bias, "Bias"), (head, "head"),
                                                         (np.array([T, B, 2 * H], np.int64), "shape"))]
    graph = helper.make_graph(nodes, "tagger", [helper.make_tensor_value_info("ids", TensorProto.INT64, [T, B])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [T, B, C])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _int8_grid(w: np.ndarray, axis: int) -> np.ndarray:
    """Symmetric int8 rounding with one scale per slice along ``axis`` (max |w| / 127), dequantized."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    scale = np.abs(w).max(axis=other, keepdims=True) / 127.0
    return (np.clip(np.round(w / scale), -127, 127) * scale).astype(np.float32)


def _uint8_grid(w: np.ndarray) -> np.ndarray:
    """Asymmetric uint8 rounding, one scale for the tensor (its range with 0 in it, over 255), dequantized."""
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    scale = np.float32((hi - lo) / 255.0)
    zp = np.round(-lo / scale)
    return ((np.clip(np.round(w / scale) + zp, 0, 255) - zp) * scale).astype(np.float32)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("dyn")
    fp = _float_model(np.random.default_rng(0))
    onnx.save(fp, folder / "float.onnx")
    quantize_dynamic(str(folder / "float.onnx"), str(folder / "int8.onnx"), per_channel=True, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul", "LSTM", "Gather"])
    feeds = [{"ids": np.random.default_rng(s).integers(0, V, (T, B)).astype(np.int64)} for s in range(4)]
    return fp, onnx.load(folder / "int8.onnx"), feeds


def _run(model: onnx.ModelProto, feed) -> np.ndarray:
    return open_session(model).run(None, feed)[0]


def test_the_fixture_is_what_quantize_dynamic_ships(models):
    _, int8, _ = models
    counts = quantized_node_counts(int8)
    assert counts["MatMulInteger"] == 1 and counts["DynamicQuantizeLSTM"] == 1 and counts["DequantizeLinear"] >= 1
    with pytest.raises(AlreadyQuantizedError, match=r"dynamic int8: `onnxptq dequantize` / onnxptq\.conversion\.dequantize_dynamic recovers it"):
        onnxptq.quantize(int8, "BF16", data=[])


def test_recovered_model_is_the_float_model_on_the_int8_grid(models):
    fp, int8, feeds = models
    rec = dequantize_dynamic(int8, "int8.onnx")
    assert not quantized_node_counts(rec)
    assert {n.op_type for n in rec.graph.node} >= {"LSTM", "MatMul", "Gather"}
    assert all(op.domain != "com.microsoft" for op in rec.opset_import)

    # The NumPy reference: the float graph with its weights on quantize_dynamic's grids (int8 per
    # direction x gate row for the LSTM, per output column for the head; uint8 per tensor for the
    # embedding table).
    inits = {t.name: numpy_helper.to_array(t) for t in fp.graph.initializer}
    grid = {"emb": _uint8_grid(inits["emb"]),
            "W": np.stack([_int8_grid(d, 0) for d in inits["W"]]),
            "R": np.stack([_int8_grid(d, 0) for d in inits["R"]]),
            "head": _int8_grid(inits["head"], 1)}
    ref = onnx.ModelProto()
    ref.CopyFrom(fp)
    for t in ref.graph.initializer:
        if t.name in grid:
            t.CopyFrom(numpy_helper.from_array(grid[t.name], t.name))
    for feed in feeds:
        got, want, orig = _run(rec, feed), _run(ref, feed), _run(fp, feed)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert np.abs(got - orig).max() < 0.1 * np.abs(orig).max()  # the grid's error, small: nothing mislaid


def test_the_recovered_model_quantizes(models):
    _, int8, feeds = models
    rec = dequantize_dynamic(int8, "int8.onnx")
    result = onnxptq.quantize(rec, "A16W8", data=feeds)
    q = result.model if hasattr(result, "model") else onnx.load(result)
    for feed in feeds:
        a, b = _run(rec, feed), _run(q, feed)
        assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.999


def test_static_qlinear_ops_are_named_not_guessed():
    a = numpy_helper.from_array(np.ones((4, 4), np.uint8), "Bq")
    scalars = [numpy_helper.from_array(np.array(v, dt), n) for v, dt, n in
               ((0.1, np.float32, "as"), (128, np.uint8, "az"), (0.1, np.float32, "bs"), (128, np.uint8, "bz"),
                (0.1, np.float32, "ys"), (128, np.uint8, "yz"))]
    node = helper.make_node("QLinearMatMul", ["xq", "as", "az", "Bq", "bs", "bz", "ys", "yz"], ["yq"])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("xq", TensorProto.UINT8, [2, 4])],
                              [helper.make_tensor_value_info("yq", TensorProto.UINT8, [2, 4])], [a, *scalars])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(NotRecoverableError, match=r"static\.onnx: cannot recover float for 1 .*QLinearMatMul"):
        dequantize_dynamic(model, "static.onnx")


def test_a_float_model_comes_back_byte_identical(models):
    """Nothing of quantize_dynamic's in it: no rewrite, no clean-up (an initializer's value_info stays)."""
    fp, _, _ = models
    model = onnx.ModelProto()
    model.CopyFrom(fp)
    model.graph.value_info.append(helper.make_tensor_value_info("emb", TensorProto.FLOAT, [V, E]))
    assert dequantize_dynamic(model).SerializeToString() == model.SerializeToString()


def test_the_command_writes_the_float_model(models, tmp_path, capsys):
    from onnxptq.cli import main

    _, int8, feeds = models
    onnx.save(int8, tmp_path / "int8.onnx")
    assert main(["dequantize", str(tmp_path / "int8.onnx"), "-o", str(tmp_path / "float.onnx")]) == 0
    rec = onnx.load(tmp_path / "float.onnx")
    assert not quantized_node_counts(rec)
    np.testing.assert_array_equal(_run(rec, feeds[0]), _run(dequantize_dynamic(int8), feeds[0]))
    assert main(["dequantize", str(tmp_path / "int8.onnx"), "-o", str(tmp_path / "int8.onnx")]) == 2  # never over its input
