"""A constant read only by shape arithmetic stays float with it (graph/shape_values.py).

RetinaFace's tf2onnx export (bench/RESULTS.md, newmodels30) computes its prior grid's size as
``Ceil(Cast(Shape(x)[1:3]) * [[1/8], [1/16], [1/32]])``. The shape values themselves stayed float, but A16W8 gave the
reciprocal constant an 8-bit weight grid: 1/16 came back as 0.06299, ``ceil(608 * 0.06299)`` = 39 rows of cells instead
of 38, and the priors (20218) no longer matched the box regression (19950) inside quantize's own run, a raw
onnxruntime error for the user. A size is exact or wrong; the constants it is computed from belong to it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.shape_values import CONSTANT_REASON, REASON, shape_value_float_tensors


def _grid_model() -> onnx.ModelProto:
    """x [1, 3, h, w] → Conv → Relu → y; and cells = Range(Σ ceil(h·r)·ceil(w·r) for r in 1/8, 1/16, 1/32)."""
    rng = np.random.default_rng(0)
    c = lambda name, v: numpy_helper.from_array(np.asarray(v), name)  # noqa: E731
    inits = [c("W", (rng.normal(size=(8, 3, 3, 3)) * 0.2).astype(np.float32)),
             c("s0", np.array([2], np.int64)), c("s1", np.array([4], np.int64)),
             c("recip", np.array([[1 / 8], [1 / 16], [1 / 32]], np.float32)),
             c("ax1", np.array([1], np.int64)), c("zero", np.array(0, np.int64)), c("one", np.array(1, np.int64))]
    nodes = [helper.make_node("Conv", ["x", "W"], ["cv"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["cv"], ["y"]),
             helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "s0", "s1"], ["hw"]),
             helper.make_node("Cast", ["hw"], ["hwf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["hwf", "recip"], ["grid"]), helper.make_node("Ceil", ["grid"], ["gc"]),
             helper.make_node("Cast", ["gc"], ["gi"], to=TensorProto.INT64),
             helper.make_node("ReduceProd", ["gi", "ax1"], ["per"], keepdims=0),
             helper.make_node("ReduceSum", ["per"], ["tot"], keepdims=0),
             helper.make_node("Range", ["zero", "tot", "one"], ["r"]),
             helper.make_node("Cast", ["r"], ["cells"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "grid", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, "h", "w"]),
                               helper.make_tensor_value_info("cells", TensorProto.FLOAT, ["n"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_the_reciprocal_strides_of_a_shape_computation_stay_float():
    why = shape_value_float_tensors(_grid_model())
    assert why.get("recip") == CONSTANT_REASON  # main: only the shape values, so the constant kept a weight grid
    assert why.get("grid") == REASON and why.get("gi") == REASON
    assert "W" not in why and "cv" not in why  # the data path keeps its quantizers


def test_a16w8_keeps_the_grid_size_exact(tmp_path):
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.random((1, 3, 608, 800), dtype=np.float32)} for _ in range(4)]
    out = tmp_path / "grid_a16w8.onnx"
    onnxptq.quantize(_grid_model(), "A16W8", data=feeds, output=out)
    quantized = onnx.load(out)
    assert not [n for n in quantized.graph.node if "recip" in n.input and n.op_type == "DequantizeLinear"]
    assert any(n.op_type == "QuantizeLinear" for n in quantized.graph.node)  # the Conv is still quantized
    import onnxruntime as ort
    cells = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(["cells"], feeds[0])[0]
    assert cells.shape == (76 * 100 + 38 * 50 + 19 * 25,)
