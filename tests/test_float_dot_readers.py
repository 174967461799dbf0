"""A dot product kept float reads its activation float, not through a DequantizeLinear that would
make onnxruntime quantize its weight after all (pipeline/plan/float_dot_readers.py).

The graph is the shape of U²-Net-p's ``Conv_787`` (bench/RESULTS.md, "u2netp"): a Conv reads a
ReLU map whose channel 0 is a near-constant level of about 200 (a large bias upstream) and cancels
it with large weights and a matching bias, so any 8-bit weight grid leaves a residual ×200 that
swamps the Conv's real output. Kept float by ``nodes_to_exclude``, the Conv must run with its float
weight: in the written model it reads the float ReLU output (the ReLU is not folded into the
map's quantizer), not a DequantizeLinear output, and the model tracks float in a stock session.
(This small graph does not itself trip onnxruntime's rewrite: its excluded Conv's output is not
quantized behind it; bench/conv_weight_rounding.py measures the effect on u2netp.) Must-nots:
with nothing excluded the plan is unchanged (no exclusive tensor), and the other reader of the
shared map still reads it quantized.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

C, H = 8, 12
LEVEL = 200.0


def dc_cancelling_convs() -> onnx.ModelProto:
    """x [1, 8, 12, 12] → conv_a (channel 0: bias LEVEL) → Relu → r; r → conv_b (channel 0's weights
    large, their level cancelled by conv_b's bias) → Relu → Add(·, z) → y (conv_b's output quantized
    for the Add, as onnxruntime's rewrite wants it); r → conv_c → z (a second, quantized reader)."""
    rng = np.random.default_rng(0)
    wa = (rng.standard_normal((C, C, 3, 3)) * 0.1).astype(np.float32)
    wa[0] *= 0.05  # channel 0 varies by about ±1 around its level
    ba = np.full(C, 0.5, np.float32)
    ba[0] = LEVEL
    wb = (rng.standard_normal((C, C, 3, 3)) * 0.1).astype(np.float32)
    wb[:, 0] = (rng.standard_normal((C, 3, 3)) * 3.0).astype(np.float32)
    bb = (-LEVEL * wb[:, 0].sum(axis=(1, 2)) + 0.2).astype(np.float32)  # cancels channel 0's level (interior pixels)
    wc = (rng.standard_normal((C, C, 1, 1)) * 0.1).astype(np.float32)
    wc[:, 0] = 0.0
    inits = [numpy_helper.from_array(a, n) for a, n in ((wa, "wa"), (ba, "ba"), (wb, "wb"), (bb, "bb"), (wc, "wc"))]
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"], name="relu_a"),
             helper.make_node("Conv", ["r", "wb", "bb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["b"], ["rb"], name="relu_b"),
             helper.make_node("Add", ["rb", "z"], ["y"], name="add_y"),
             helper.make_node("Conv", ["r", "wc"], ["z"], name="conv_c")]
    graph = helper.make_graph(nodes, "dc_cancel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, C, H, H]) for n in ("y",)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, C, H, H)).astype(np.float32)} for _ in range(n)]


def _run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # stock options
    return [session.run(["y"], f)[0] for f in feeds]


def _cosine(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    x = np.concatenate([v.ravel() for v in a]).astype(np.float64)
    y = np.concatenate([v.ravel() for v in b]).astype(np.float64)
    return float(x @ y / np.linalg.norm(x) / np.linalg.norm(y))


def test_excluded_conv_runs_with_its_float_weight(tmp_path):
    model = dc_cancelling_convs()
    config = onnxptq.get_preset("A8W8").replace(repair=False, nodes_to_exclude=("conv_b",))
    out = tmp_path / "q.onnx"
    onnxptq.quantize(model, config, data=_feeds(8, 1), output=str(out))
    quantized = onnx.load(str(out))
    producer = {o: n.op_type for n in quantized.graph.node for o in n.output}
    reads = {n.name: n.input[0] for n in quantized.graph.node if n.op_type == "Conv"}
    # main's wiring: conv_b read r through its DequantizeLinear, which makes onnxruntime's basic
    # optimizations quantize wb/bb at session start (u2netp's Conv_787: output cosine 0.75)
    assert reads["conv_b"] == "r" and producer["r"] == "Relu"  # the float Relu output (not folded into r's Q)
    assert producer[reads["conv_c"]] == "DequantizeLinear"
    held = _feeds(4, 100)
    assert _cosine(_run(model, held), _run(quantized, held)) > 0.995
    plan = make_plan(prepare_for_quantization(model, config), config)
    r = plan.tensors["r"]
    assert r.exclusive and r.consumers == ["conv_c"]  # conv_c still reads the quantized map


def test_nothing_excluded_leaves_the_plan_alone():
    model = dc_cancelling_convs()
    config = onnxptq.get_preset("A8W8")
    plan = make_plan(prepare_for_quantization(model, config), config)
    r = plan.tensors["r"]
    assert not r.exclusive and sorted(r.consumers) == ["conv_b", "conv_c"]
