"""fuzz17's findings (issue 27 items 1 and 4), each on a small synthetic graph that failed before.

* Recurrent weights inside a body (silero VAD's LSTMs sit in ``If`` branches, each branch holding
  its own W/R): under the float formats (BF16, FP16, the block formats) the plan rounded them, but
  emit stored the rounded values as fp32 in the branch, so the file kept every recurrent byte
  (silero_half BF16 1.12× its fp32 file, MXINT8 1.00×) and nothing said so. Packed like the main
  graph's weights, the decode chain folded by onnxruntime at load, the outputs are bit for bit
  those of the unpacked form.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize

HIDDEN, INPUT, STEPS = 64, 32, 6


def _lstm_branch(prefix: str, rng: np.random.Generator) -> onnx.GraphProto:
    """An LSTM over the outer scope's ``x`` with its W, R and B as the branch's own initializers,
    its last hidden state read out by a MatMul (as silero's decoder)."""
    w = rng.normal(0, 0.2, (1, 4 * HIDDEN, INPUT)).astype(np.float32)
    r = rng.normal(0, 0.2, (1, 4 * HIDDEN, HIDDEN)).astype(np.float32)
    b = rng.normal(0, 0.05, (1, 8 * HIDDEN)).astype(np.float32)
    head = rng.normal(0, 0.3, (HIDDEN, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(w, f"{prefix}.W"), numpy_helper.from_array(r, f"{prefix}.R"),
             numpy_helper.from_array(b, f"{prefix}.B"), numpy_helper.from_array(head, f"{prefix}.head"),
             numpy_helper.from_array(np.array([0], np.int64), f"{prefix}.axes")]
    nodes = [helper.make_node("LSTM", ["x", f"{prefix}.W", f"{prefix}.R", f"{prefix}.B"], ["", f"{prefix}.h"],
                              name=f"{prefix}/lstm", hidden_size=HIDDEN),
             helper.make_node("Squeeze", [f"{prefix}.h", f"{prefix}.axes"], [f"{prefix}.hs"], name=f"{prefix}/squeeze"),
             helper.make_node("MatMul", [f"{prefix}.hs", f"{prefix}.head"], [f"{prefix}.y"], name=f"{prefix}/head")]
    return helper.make_graph(nodes, prefix, [], [helper.make_tensor_value_info(f"{prefix}.y", TensorProto.FLOAT, [1, 4])], inits)


def _if_lstm_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Greater", ["sr", "limit"], ["wide"], name="wide?"),
             helper.make_node("If", ["wide"], ["y"], name="by_rate", then_branch=_lstm_branch("hi", rng),
                              else_branch=_lstm_branch("lo", rng))]
    graph = helper.make_graph(nodes, "rates", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [STEPS, 1, INPUT]),
                                               helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array(12000, np.int64), "limit")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (STEPS, 1, INPUT)).astype(np.float32), "sr": np.array(16000 if i % 2 else 8000, np.int64)}
            for i in range(n)]


def _float32_bytes(model: onnx.ModelProto) -> int:
    """Bytes of float32 initializers in every graph of ``model``."""
    total = 0
    stack = [model.graph]
    while stack:
        g = stack.pop()
        total += sum(t.ByteSize() for t in g.initializer if t.data_type == TensorProto.FLOAT)
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
                stack.extend(a.graphs)
    return total


@pytest.mark.parametrize("preset, most", [("BF16", 0.55), ("MXINT8", 0.35)])
def test_recurrent_weights_inside_if_branches_are_stored_packed(preset, most):
    """Both branches' LSTM W/R stored in the format's bytes, not as rounded fp32 (main: the fp32
    initializers stayed, 1.0× the float file's float32 bytes), and the packed file computes what
    the unpacked one does, bit for bit."""
    model = _if_lstm_model()
    calib = _feeds(12, 1)
    config = get_preset(preset).replace(repair=False)
    packed = quantize(model, config, calib).model
    unpacked = quantize(model, config.replace(pack_weights=False), calib).model
    assert _float32_bytes(packed) <= most * _float32_bytes(model), (_float32_bytes(packed), _float32_bytes(model))
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (packed, unpacked)]
    for feed in _feeds(4, 2):
        a, b = (r.run(None, feed)[0] for r in runs)
        assert np.array_equal(a, b), np.abs(a - b).max()


@pytest.mark.parametrize("opset", [14, 18])
def test_the_drawn_written_out_spellings_compute_what_they_name(opset):
    """testkit's SiLU as x / (1 + exp(−x)), softmax as Exp / ReduceSum of x − ReduceMax, and GroupNorm by
    ReduceMean over a 5-D view, run by onnxruntime, against NumPy written from their definitions."""
    from testkit.fuzz import run_step

    x = np.random.default_rng(1).normal(0, 2, (3, 6)).astype(np.float32)
    got, _ = run_step("SiLUDivExp", x, opset)
    np.testing.assert_allclose(got, x / (1 + np.exp(-x.astype(np.float64))), rtol=1e-5, atol=1e-6)
    got, _ = run_step("SoftmaxWritten", x, opset)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)

    x = np.random.default_rng(2).normal(0.5, 2.0, (1, 4, 3, 3)).astype(np.float32)
    got, b = run_step("GroupNorm5D", x, opset)
    inits = {t.name: numpy_helper.to_array(t) for t in b.inits}
    scale, shift = inits[b.nodes[-2].input[1]], inits[b.nodes[-1].input[1]]
    g = x.astype(np.float64).reshape(1, 2, -1)
    normed = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(got, normed * scale + shift, rtol=1e-4, atol=1e-4)
