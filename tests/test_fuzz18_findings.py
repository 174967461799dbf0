"""fuzz18's findings (issue 27 items 1 and 3), each on a small synthetic graph that failed before.

* A log-softmax written out (``x − max(x) − log Σ exp(x − max(x))``: ``jax.nn.log_softmax`` through jax2tf,
  a CTC head's log-probabilities) was no structure region: its normalizing step is a ``Log``, not a root,
  so BF16's plan rounded the max, the shifted logits and the log-sum to bfloat16 — three rounding steps the
  single ``LogSoftmax`` op does not have. It is one region now, kept float inside like the written softmax.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.graph.structure import find_regions

D, CLASSES, STEPS = 8, 6, 5


def _log_softmax_written(read_on: bool) -> onnx.ModelProto:
    """x → MatMul → Relu → MatMul + b (logits) → the written-out log-softmax → the graph output, or
    (``read_on``) → a MatMul that reads the log-probabilities (a head fed log-probs)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (D, D)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 1.0, (D, CLASSES)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.3, (CLASSES,)).astype(np.float32), "b2"),
             numpy_helper.from_array(np.asarray([-1], np.int64), "last")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="act"),
             helper.make_node("MatMul", ["r", "w2"], ["l0"], name="fc2"),
             helper.make_node("Add", ["l0", "b2"], ["logits"], name="bias"),
             helper.make_node("ReduceMax", ["logits"], ["m"], axes=[-1], keepdims=1, name="max"),
             helper.make_node("Sub", ["logits", "m"], ["shifted"], name="shift"),
             helper.make_node("Exp", ["shifted"], ["e"], name="exp"),
             helper.make_node("ReduceSum", ["e", "last"], ["s"], keepdims=1, name="sum"),
             helper.make_node("Log", ["s"], ["lse"], name="log"),
             helper.make_node("Sub", ["shifted", "lse"], ["logp"], name="normalize")]
    out = "logp"
    if read_on:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.4, (CLASSES, 4)).astype(np.float32), "w3"))
        nodes.append(helper.make_node("MatMul", ["logp", "w3"], ["y"], name="fc3"))
        out = "y"
    shape = ["batch", STEPS, CLASSES if not read_on else 4]
    graph = helper.make_graph(nodes, "ctc_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", STEPS, D])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.normal(0, 1, (1, STEPS, D)) * np.linspace(0.5, 2, D)).astype(np.float32)} for _ in range(n)]


INTERIOR = {"m", "shifted", "e", "s", "lse"}


def test_a_written_out_log_softmax_is_one_region():
    regions = find_regions(_log_softmax_written(read_on=False))
    assert [(r.kind, r.x, r.y) for r in regions] == [("log-softmax", "logits", "logp")]
    assert set(regions[0].interior) == INTERIOR


def test_bf16_keeps_a_written_out_log_softmax_float_inside():
    """On main BF16's plan rounded ``m``, ``shifted`` and ``lse`` to bfloat16 (fuzz18's ``logsoftmax_heads`` corner);
    now only the region's input and output may carry a quantizer, as for the single ``LogSoftmax`` op."""
    for read_on in (False, True):
        res = quantize(_log_softmax_written(read_on), get_preset("BF16").replace(repair=False), data=_feeds(16, 1))
        planned = {t.name for t in res.plan.tensors.values() if t.role == "activation"}
        assert not planned & INTERIOR, (read_on, sorted(planned & INTERIOR))
        assert "r" in planned  # the rest of the graph is still quantized


@pytest.mark.parametrize("opset", [13, 18])
def test_the_drawn_spellings_of_fuzz18_compute_what_they_name(opset):
    """testkit's four new op-set steps, run by onnxruntime, against NumPy written from the operators' definitions:
    a written-out log-softmax, a LayerNorm floored by Max(var, ε) then Reciprocal(Sqrt), SpaceToDepth (DCR order)
    and a Dropout/Identity leftover (the identity at inference)."""
    from testkit.fuzz import run_step

    x = np.random.default_rng(1).normal(0, 2, (3, 6)).astype(np.float32)
    x64 = x.astype(np.float64)
    got, _ = run_step("LogSoftmaxWritten", x, opset)
    shifted = x64 - x64.max(-1, keepdims=True)
    np.testing.assert_allclose(got, shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-6)
    got, b = run_step("LayerNormMaxEps", x, opset)
    inits = {t.name: numpy_helper.to_array(t) for t in b.inits}
    scale, shift = inits[b.nodes[-2].input[1]], inits[b.nodes[-1].input[1]]
    d = x64 - x64.mean(-1, keepdims=True)
    ref = d / np.sqrt(np.maximum((d * d).mean(-1, keepdims=True), 1e-5)) * scale + shift
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    got, _ = run_step("DropoutIdentity", x, opset)
    np.testing.assert_array_equal(got, x)

    img = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
    got, _ = run_step("SpaceToDepth", img, opset)
    ref = img.reshape(2, 3, 2, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(2, 12, 2, 3)  # the operator's definition
    np.testing.assert_array_equal(got, ref)
