"""BF16 Cast pairs on tensors already bfloat16-exact are dropped, bit-exactly, and only those."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.graph.passes import drop_exact_casts
from onnxptq.pipeline import on_grid


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
    monkeypatch.setattr(drop_exact_casts, "drop_exact_casts", lambda m: 0)
    monkeypatch.setattr(on_grid, "on_grid_tensors", lambda *a, **k: {})  # emit's own skip of bf16 copies (fp16size)
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
    # Without graph optimisations: onnxruntime's fusions and layouts (NCHWc on AVX2 vs AVX-512) may differ
    # between the two graphs and move a last bit; what the pass claims is that the graphs compute the same.
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ys = [ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
          for m in (dropped, kept)]
    assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32))


def _c(name: str, value) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(value, np.float32), name)


#: (label, node on the exact tensor "q" giving "t", its constants, whether t's pair is dropped).
#: Each op the pass keeps, and beside it a case where the same op must not be trusted.
_OPS = [
    ("Max exact bound", helper.make_node("Max", ["q", "lo"], ["t"]), [_c("lo", -0.400390625)], True),
    ("Max inexact bound", helper.make_node("Max", ["q", "lo"], ["t"]), [_c("lo", -0.4)], False),
    ("Min of two exact", helper.make_node("Min", ["q", "q"], ["t"]), [], True),
    ("Clip 0..6", helper.make_node("Clip", ["q", "z", "six"], ["t"]), [_c("z", 0.0), _c("six", 6.0)], True),
    ("Clip max only", helper.make_node("Clip", ["q", "", "six"], ["t"]), [_c("six", 6.0)], True),
    ("Clip 0..6.1", helper.make_node("Clip", ["q", "z", "six"], ["t"]), [_c("z", 0.0), _c("six", 6.1)], False),
    ("Pad zeros", helper.make_node("Pad", ["q", "pads"], ["t"]), [onnx.numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")], True),
    ("Pad 0.1", helper.make_node("Pad", ["q", "pads", "v"], ["t"]),
     [onnx.numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"), _c("v", 0.1)], False),
    ("Pad reflect", helper.make_node("Pad", ["q", "pads"], ["t"], mode="reflect"),
     [onnx.numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")], True),
    ("Neg", helper.make_node("Neg", ["q"], ["t"]), [], True),
    ("Abs", helper.make_node("Abs", ["q"], ["t"]), [], True),
    ("AveragePool", helper.make_node("AveragePool", ["q"], ["t"], kernel_shape=[2, 2]), [], False),
    ("GlobalAveragePool", helper.make_node("GlobalAveragePool", ["q"], ["t"]), [], False),
    ("Mul by 2", helper.make_node("Mul", ["q", "two"], ["t"]), [_c("two", 2.0)], False),
]


def _pair(src: str, dst: str) -> list[onnx.NodeProto]:
    return [helper.make_node("Cast", [src], [dst + "_b"], to=TensorProto.BFLOAT16),
            helper.make_node("Cast", [dst + "_b"], [dst], to=TensorProto.FLOAT)]


@pytest.mark.parametrize("label,node,consts,dropped", _OPS, ids=[o[0] for o in _OPS])
def test_each_op_keeps_exactness_or_not(label, node, consts, dropped):
    """The pass on x → pair → op → pair: the second pair goes exactly when the op keeps bfloat16
    values (module docstring), and the outputs are bit-identical either way, on zeros, ±Inf, NaN,
    subnormals and values that round."""
    graph = helper.make_graph(_pair("x", "q") + [node] + _pair("t", "y") + [helper.make_node("Sigmoid", ["y"], ["out"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    before = onnx.ModelProto()
    before.CopyFrom(model)
    assert drop_exact_casts.drop_exact_casts(model) == int(dropped), label
    x = np.random.default_rng(2).normal(0, 3, (1, 2, 4, 4)).astype(np.float32)
    x[0, 0, 0] = [np.inf, -np.inf, np.nan, -0.0]
    x[0, 0, 1] = [1e-41, -3e-39, 0.400001, 6.05]
    ys = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
          for m in (model, before)]
    assert np.array_equal(ys[0].view(np.uint32), ys[1].view(np.uint32)), label


def test_a_fed_initializer_and_a_packed_weight():
    """An initializer that is also a graph input can be fed another value: not a constant. A bf16
    initializer decoded by a Cast (a packed weight) is exact."""
    tail = [helper.make_node("Sigmoid", ["y"], ["out"])]
    nodes = _pair("x", "q") + [helper.make_node("Max", ["q", "lo"], ["t"])] + _pair("t", "y") + tail
    lo = _c("lo", 0.5)
    fed = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                         helper.make_tensor_value_info("lo", TensorProto.FLOAT, [])],
                            [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [lo])
    assert drop_exact_casts.drop_exact_casts(helper.make_model(fed, opset_imports=[helper.make_opsetid("", 17)])) == 0
    packed = helper.make_tensor("w", TensorProto.BFLOAT16, [], [0x3F00], raw=False)  # 0.5 in bfloat16 bits
    nodes = (_pair("x", "q") + [helper.make_node("Cast", ["w"], ["lo"], to=TensorProto.FLOAT),
                                helper.make_node("Max", ["q", "lo"], ["t"])] + _pair("t", "y") + tail)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [packed])
    assert drop_exact_casts.drop_exact_casts(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])) == 1
