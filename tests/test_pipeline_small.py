"""The quantizer end to end on a small synthetic CNN: structure, numerics of the params, errors."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from conftest import make_small_cnn, small_cnn_feeds
from onnxptq.api import NothingToQuantizeError, quantize
from onnxptq.config.presets import get_preset
from onnxptq.config.schema import QuantConfig, TensorQuant


def _run(model: onnx.ModelProto, feed: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


def _inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_a8w8_minmax_per_tensor_matches_reference_params(small_cnn):
    """Spec test vector F: input scale = max|input|/127, weight scale = max|W1|/127, bias = product."""
    feeds = small_cnn_feeds()
    config = QuantConfig(activation=TensorQuant("int8", calibration="minmax"), weight=TensorQuant("int8"), bias="int32")
    result = quantize(small_cnn, config, feeds)
    amax = max(float(np.abs(f["x"]).max()) for f in feeds)
    w1 = numpy_helper.to_array(next(t for t in small_cnn.graph.initializer if t.name == "W1"))
    p = result.params
    np.testing.assert_allclose(p["x"].scale, amax / 127, rtol=1e-6)
    np.testing.assert_allclose(p["W1"].scale, np.abs(w1).max() / 127, rtol=1e-6)
    np.testing.assert_allclose(p["B1"].scale, p["x"].scale * p["W1"].scale, rtol=1e-6)
    assert p["x"].zero_point.dtype == np.int8 and int(p["x"].zero_point) == 0
    inits = _inits(result.model)
    assert inits["W1_quantized"].dtype == np.int8
    assert inits["B1_quantized"].dtype == np.int32
    assert "W1" not in inits, "the float weight must be replaced by its integer form"
    ops = Counter(n.op_type for n in result.model.graph.node)
    assert ops["QuantizeLinear"] >= 4 and ops["DequantizeLinear"] > ops["QuantizeLinear"]
    assert ops["Relu"] == 1, "Relu is kept (fused with the Conv: no Q/DQ between them)"
    conv1_out_q = [n for n in result.model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "c1"]
    assert not conv1_out_q, "no Q/DQ between Conv and its single Relu"


def test_a8w8_preset_per_channel_close_to_float(small_cnn):
    feeds = small_cnn_feeds(8)
    result = quantize(small_cnn, "A8W8", feeds)
    w1_scale = result.params["W1"].scale
    assert w1_scale.shape == (8,), "A8W8 weights are per output channel"
    for feed in small_cnn_feeds(3, seed=7):
        ref, got = _run(small_cnn, feed), _run(result.model, feed)
        cos = float(np.dot(ref.ravel(), got.ravel()) / np.linalg.norm(ref) / np.linalg.norm(got))
        assert cos > 0.995
    assert result.metrics["y"]["cosine"] > 0.995
    assert result.model.ir_version <= 10


@pytest.mark.parametrize("preset", ["A16W8", "U8S8", "BF16", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3", "MXFP4", "FP16", "A8W4"])
def test_presets_run_and_stay_close(small_cnn, preset):
    feeds = small_cnn_feeds(4)
    result = quantize(small_cnn, preset, feeds)
    floor = {"MXFP4": 0.9, "A8W4": 0.95}.get(preset, 0.99)
    assert result.metrics["y"]["cosine"] > floor, result.metrics
    out = _run(result.model, feeds[0])
    assert np.all(np.isfinite(out))


def test_bf16_is_exact_bf16_of_weights(small_cnn):
    import ml_dtypes

    result = quantize(small_cnn, "BF16", small_cnn_feeds(2))
    inits = _inits(result.model)
    folded = [v for k, v in inits.items() if k.startswith("W1")]
    assert folded, inits.keys()
    w = folded[0]
    np.testing.assert_array_equal(w, w.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_saves_atomically_and_never_overwrites_input(tmp_path, small_cnn_path):
    out = tmp_path / "q.onnx"
    result = quantize(small_cnn_path, "A8W8", small_cnn_feeds(), output=out)
    assert result.output_path == out and out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    with pytest.raises(ValueError, match="input"):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(), output=small_cnn_path)


def test_errors_are_specific_and_write_nothing(tmp_path, small_cnn_path, small_cnn):
    out = tmp_path / "out.onnx"
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        quantize(tmp_path / "missing.onnx", "A8W8", small_cnn_feeds(), output=out)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf at all \x00\xff" * 10)
    with pytest.raises(ValueError, match="junk.onnx"):
        quantize(junk, "A8W8", small_cnn_feeds(), output=out)
    with pytest.raises(ValueError, match="empty"):
        quantize(small_cnn_path, "A8W8", [], output=out)
    with pytest.raises(ValueError, match="'y'|names|input"):
        quantize(small_cnn_path, "A8W8", [{"y": np.zeros((1, 3, 16, 16), np.float32)}], output=out)
    with pytest.raises(ValueError, match="dtype|int64|type"):
        quantize(small_cnn_path, "A8W8", [{"x": np.zeros((1, 3, 16, 16), np.int64)}], output=out)
    with pytest.raises(ValueError, match="rank"):
        quantize(small_cnn_path, "A8W8", [{"x": np.zeros((3, 16, 16), np.float32)}], output=out)
    with pytest.raises(FileNotFoundError, match="folder"):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(), output=tmp_path / "nope" / "q.onnx")
    with pytest.raises(ValueError, match="preset"):
        quantize(small_cnn_path, "A8W9", small_cnn_feeds(), output=out)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.onnx", "small_cnn.onnx"]


def test_unwritable_folder(tmp_path, small_cnn_path, monkeypatch):
    """CI runs as root, which may write anywhere: simulate the permission answer instead."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(ro) else real_access(p, mode))
    with pytest.raises(PermissionError, match="writable"):
        quantize(small_cnn_path, "A8W8", small_cnn_feeds(), output=ro / "q.onnx")
    assert list(ro.iterdir()) == []


def test_nothing_to_quantize(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(NothingToQuantizeError, match="quantizes nothing"):
        quantize(model, "A8W8", [{"x": np.zeros((2, 3), np.float32)}])


def test_input_model_object_untouched(small_cnn):
    before = small_cnn.SerializeToString()
    quantize(small_cnn, "A8W8", small_cnn_feeds())
    assert small_cnn.SerializeToString() == before
