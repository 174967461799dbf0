"""A boolean mask cast to float, and a tensor multiplied by it, are exact in BF16/FP16 (bf16lat18, issue 26 item 3).

romanizer_encoder masks its GRU memory: ``Cast(Unsqueeze(Not(src_mask)), FLOAT)`` then ``Mul(memory, mask)``. BF16
rounded both: the mask (0 and 1 are values of every format, but the cast's input was an ``Unsqueeze``, not a boolean op,
so the rule for a Cast of a boolean did not see it) and the masked memory ``[batch, src_len, 256]`` (``x·1 = x``,
``x·0 = ±0``, NaN and ``Inf·0`` give NaN: values of the format when ``x`` is one).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.graph.passes import drop_exact_casts

BF16, F16, F32 = TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT


def _pair(src: str, dst: str, to: int) -> list[onnx.NodeProto]:
    return [helper.make_node("Cast", [src], [dst + "_q"], name=dst + "_q", to=to),
            helper.make_node("Cast", [dst + "_q"], [dst], name=dst + "_dq", to=F32)]


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)) for x, y in zip(a, b))


def _masked(to: int, mask_type: int = TensorProto.BOOL, x_rounded: bool = True) -> onnx.ModelProto:
    """x [2, 5, 4] (rounded or not), m [2, 5] of ``mask_type``: ReduceSum(x · Cast(Unsqueeze(Not-or-Identity(m))))."""
    first = "Not" if mask_type == TensorProto.BOOL else "Identity"
    nodes = ([helper.make_node(first, ["m"], ["nm"]), helper.make_node("Unsqueeze", ["nm", "ax"], ["um"]),
              helper.make_node("Cast", ["um"], ["mf"], to=F32)] + _pair("mf", "mq", to)
             + (_pair("x", "xq", to) if x_rounded else [helper.make_node("Sigmoid", ["x"], ["xq"])])
             + [helper.make_node("Mul", ["xq", "mq"], ["p"])] + _pair("p", "pq", to)
             + [helper.make_node("ReduceSum", ["pq", "one"], ["y"], keepdims=0)])
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 5, 4]), helper.make_tensor_value_info("m", mask_type, [2, 5])],
        [helper.make_tensor_value_info("y", F32, [2, 4])],
        [onnx.numpy_helper.from_array(np.array([2], np.int64), "ax"), onnx.numpy_helper.from_array(np.array([1], np.int64), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("to", [BF16, F16], ids=["bf16", "fp16"])
def test_a_mask_and_the_masked_tensor_lose_their_roundings(to):
    model = _masked(to)
    before = onnx.ModelProto.FromString(model.SerializeToString())
    assert drop_exact_casts.drop_exact_casts(model) == 2  # the mask's and the product's; x's stays
    onnx.checker.check_model(model)
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, (2, 5, 4)).astype(np.float32)
    x.reshape(-1)[:10] = [np.inf, -np.inf, np.nan, -0.0, 1e-41, 3.4e38, 65519.0, 1.00390625, -2e-45, 7e4]
    for m in (rng.random((2, 5)) < 0.5, np.zeros((2, 5), bool), np.ones((2, 5), bool)):
        feed = {"x": x, "m": m}
        assert _same_bits(_run(model, feed), _run(before, feed))


@pytest.mark.parametrize("case", ["int8 mask", "unrounded factor"])
def test_what_is_not_a_mask_keeps_its_roundings(case):
    """An int8 tensor cast to float is exact (|v| ≤ 127) but not 0/1: its product rounds; a product
    with a factor not exact in the format rounds."""
    if case == "int8 mask":
        model = _masked(BF16, TensorProto.INT8)
        assert drop_exact_casts.drop_exact_casts(model) == 1  # the int8 cast's own rounding only
    else:
        model = _masked(BF16, x_rounded=False)
        assert drop_exact_casts.drop_exact_casts(model) == 1  # the mask's only
    assert any(n.op_type == "Cast" and n.input[0] == "p" for n in model.graph.node)


def test_romanizer_encoder_masked_memory_is_not_rounded_again(monkeypatch):
    """The zoo's romanizer_encoder under BF16: neither its mask nor its masked GRU memory is rounded,
    outputs bit-equal to the file that rounds every planned tensor (held-out sentences)."""
    from testkit import zoo

    m = zoo.get("romanizer_encoder")
    lean = onnxptq.quantize(m.path(), "BF16", None).model
    monkeypatch.setattr(drop_exact_casts, "drop_exact_casts", lambda model: 0)
    every = onnxptq.quantize(m.path(), "BF16", None).model
    producer = {o: n for n in lean.graph.node for o in n.output}
    rounded = [producer.get(n.input[0]) for n in lean.graph.node
               if n.op_type == "Cast" and any(a.name == "to" and a.i == BF16 for a in n.attribute)]
    assert not [p for p in rounded if p is not None and p.op_type in ("Mul", "Cast")]
    names = {i.name for i in lean.graph.input}
    for feed in m.samples("heldout")[:4]:
        feed = {k: v for k, v in feed.items() if k in names}
        assert _same_bits(_run(lean, feed), _run(every, feed))
