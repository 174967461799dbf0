"""Exporters' spellings that crashed quantize (bench/export_fuzz.py's findings), one tiny model each.

Each test builds the smallest graph that shows one pattern the export fuzz found in torch's
exporters' output, and checks what used to raise a raw exception now quantizes into a model stock
onnxruntime runs on every input the float model takes.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes.shape_inference import _trusted, infer_shapes


def _stale_trace_model() -> onnx.ModelProto:
    """x (batch, seq, 16) -> MatMul -> Relu -> MatMul -> y, the Relu's output declared (batch, 15, 16):
    dynamo's value_info after an LSTM keeps the traced sequence length beside a symbolic input."""
    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array((rng.normal(size=(16, 16)) / 4).astype(np.float32), n) for n in ("w1", "w2"))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "stale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 15, 16])], [w1, w2],
                              value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [None, 15, 16])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_inference_replaces_a_traced_length_by_the_inputs_symbol():
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in infer_shapes(_stale_trace_model()).graph.value_info}
    assert shapes["r"] == ["batch", "seq", 16]
    # where inference knows nothing the declared dim stays
    assert _trusted(ir.Shape([None, 15, 16]), ir.Shape([None, None, 16])) == ir.Shape([None, 15, 16])


def test_block_format_runs_on_other_lengths_than_the_traced_one():
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(size=(1, int(t), 16)).astype(np.float32)} for t in rng.integers(6, 17, 12)]
    result = onnxptq.quantize(_stale_trace_model(), "BFP16", feeds)  # raised onnxruntime's Reshape failure
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for t in (7, 15, 20):
        x = rng.normal(size=(2, t, 16)).astype(np.float32)
        assert session.run(None, {"x": x})[0].shape == (2, t, 16)


def test_a_batched_matmul_weight_runs_in_integer_kernels():
    """x (batch, seq, 16) @ w (1, 16, 16), dynamo's spelling of a broadcast matmul: a per-channel
    weight's Q/DQ fused into MatMulIntegerToFloat failed at run time (1-D zero point, 3-D B)."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.normal(size=(1, 16, 16)) / 4).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "bcast",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    feeds = [{"x": rng.normal(size=(1, 12, 16)).astype(np.float32)} for _ in range(12)]
    result = onnxptq.quantize(model, "A8W8", feeds)
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = feeds[0]["x"]
    got = session.run(None, {"x": x})[0]
    want = x @ numpy_helper.to_array(w)
    assert float(np.abs(got - want).max()) < 0.05 * float(np.abs(want).max())
