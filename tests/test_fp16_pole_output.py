"""FP16: the output of a pole read from a tensor kept float for underflow stays float too (issue 27, fp16pole22).

``keep_underflowing_float`` (pesto22) keeps a tiny positive tensor float where a Reciprocal, a divisor or a negative
Pow reads it. What that pole computes from it, ``Pow(σ(h)·1e-6, −0.5) = 1000/√σ(h)``, is then bounded by nothing
calibration saw: it grows without bound as the input gets quieter than the quietest calibrated one. fuzz22 found it
(bench/RESULTS.md, "fuzz22", ``recip.py``): calibrated max 14 186, under the overflow rule's 2× headroom, 150 318 on
fresh inputs → inf in fp16. The graph here is that probe: MatMul → Sigmoid → ·1e-6 → Pow(−0.5) → ·1e-6 → MatMul.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset


def _pole(op: str) -> onnx.ModelProto:
    """x [N, 8] → MatMul → Sigmoid → Mul 1e-6 (tiny, positive) → ``op`` (a pole at 0) → Mul 1e-6 → MatMul → y;
    ``Div``: z / (σ(x)·1e-6)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 4)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 1, (4 if op == "Pow" else 8, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "tiny"),
             numpy_helper.from_array(np.array(-0.5, np.float32), "k")]
    pole = {"Pow": helper.make_node("Pow", ["base", "k"], ["pole"]), "Div": helper.make_node("Div", ["z", "base"], ["pole"])}[op]
    # the divisor's Sigmoid reads the input itself: after a MatMul, the Div would join that MatMul's fused epilogue
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]) if op == "Pow" else helper.make_node("Identity", ["x"], ["h"]),
             helper.make_node("Sigmoid", ["h"], ["s"]),
             helper.make_node("Mul", ["s", "tiny"], ["base"]),
             pole,
             helper.make_node("Mul", ["pole", "tiny"], ["small"]),
             helper.make_node("MatMul", ["small", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "pole", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])]
                              + [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 8])] * (op == "Div"),
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int, seed: int, spread: float, numerator: bool = False) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    feeds = [{"x": rng.normal(0, spread, (4, 8)).astype(np.float32)} for _ in range(n)]
    return [dict(f, z=rng.normal(0, 1e-3, (4, 8)).astype(np.float32)) for f in feeds] if numerator else feeds


def _pole_peak(feeds: list[dict[str, np.ndarray]]) -> float:
    """The largest ``Pow(σ(h)·1e-6, −0.5)`` over ``feeds``, in float64."""
    w1 = numpy_helper.to_array(_pole("Pow").graph.initializer[0]).astype(np.float64)
    h = np.concatenate([f["x"] for f in feeds]).astype(np.float64) @ w1
    return float(np.max((1e-6 / (1 + np.exp(-h))) ** -0.5))


def _run(path: str | bytes, feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, f)[0] for f in feeds])


def test_fp16_keeps_a_negative_pow_of_a_tiny_tensor_float_and_the_output_stays_finite(tmp_path):
    src, out = tmp_path / "pole.onnx", tmp_path / "pole.fp16.onnx"
    onnx.save(_pole("Pow"), str(src))
    result = quantize(str(src), dataclasses.replace(get_preset("FP16"), repair=False), data=_feeds(12, 1, 1.0), output=str(out))
    # calibration saw the Pow's output within fp16's range with headroom: only the pole rule can keep it float
    # fresh inputs further out than calibration's: σ(h) quieter, 1000/√σ(h) past 65504 on some rows
    fresh = _feeds(6, 7, 4.0)
    want, got = _run(str(src), fresh), _run(str(out), fresh)
    assert _pole_peak(_feeds(12, 1, 1.0)) < 65504 / 2 < 65504 < _pole_peak(fresh)  # the probe is what it claims
    assert np.isfinite(want).all()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3 * np.abs(want).max())
    assert "no bound from calibration" in result.plan.float_tensors.get("pole", ""), result.plan.float_tensors
    assert "small" in result.plan.tensors  # what reads the pole's output in float and scales it down is fp16 again


def test_fp16_keeps_a_quotient_by_a_tiny_divisor_float():
    """The divisor's quotient z / (σ(x)·1e-6) has the same pole: kept float whatever its calibrated range."""
    model = _pole("Div")
    result = quantize(model, dataclasses.replace(get_preset("FP16"), repair=False), data=_feeds(12, 1, 0.2, numerator=True))
    assert "pole" not in result.plan.tensors and "base" not in result.plan.tensors
    fresh = _feeds(6, 7, 3.0, numerator=True)  # σ(x) down to ~1e-4: quotients past 65504, not past it once scaled
    want, got = _run(model.SerializeToString(), fresh), _run(result.model.SerializeToString(), fresh)
    assert np.isfinite(want).all() and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3 * np.abs(want).max())
    assert "no bound from calibration" in result.plan.float_tensors.get("pole", ""), result.plan.float_tensors
