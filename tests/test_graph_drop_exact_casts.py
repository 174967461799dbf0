"""BF16 Cast pairs on tensors already bfloat16-exact are dropped, bit-exactly, and only those."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import onnxptq
from onnxptq.graph.passes import drop_exact_casts


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (8, 4, 3, 3)).astype(np.float32)
    scales = np.array([1, 1, 2, 2], np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 1, 3, 2]),       # exact: dropped
        helper.make_node("MaxPool", ["t"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),  # exact: dropped
        helper.make_node("Resize", ["m", "", "s"], ["rn"], mode="nearest"),  # exact: dropped
        helper.make_node("Resize", ["m", "", "s"], ["rl"], mode="linear"),   # new values: kept
        helper.make_node("Sigmoid", ["rl"], ["g"]),                           # new values: kept
        helper.make_node("Mul", ["rn", "g"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                              initializer=[onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(scales, "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _pairs(model: onnx.ModelProto) -> int:
    return sum(1 for n in model.graph.node if n.op_type == "Cast" and n.attribute[0].i == TensorProto.BFLOAT16)


def test_exact_pairs_dropped_bit_exactly(monkeypatch):
    model = _model()
    cfg = onnxptq.get_preset("BF16")
    dropped = onnxptq.quantize(model, cfg, None).model
    monkeypatch.setattr(drop_exact_casts, "drop_exact_bf16_casts", lambda m: 0)
    kept = onnxptq.quantize(model, cfg, None).model
    assert _pairs(kept) - _pairs(dropped) >= 3
    producers = {o: n for n in dropped.graph.node for o in n.output}
    sources = [producers.get(n.input[0]) for n in dropped.graph.node
               if n.op_type == "Cast" and n.attribute[0].i == TensorProto.BFLOAT16]
    kinds = [(p.op_type, {a.name: a.s for a in p.attribute}.get("mode")) for p in sources if p is not None]
    assert ("Resize", b"linear") in kinds  # new values: its pair stays
    assert not {k for k, _ in kinds} & {"Transpose", "MaxPool"} and ("Resize", b"nearest") not in kinds
    x = np.random.default_rng(1).normal(0, 1, (1, 4, 8, 8)).astype(np.float32)
    x[0, 0, 0, :3] = [np.inf, -0.0, 1e-41]
    ys = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
          for m in (dropped, kept)]
    assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32))
