"""An int32 bias on a tiny input scale is fitted, not saturated (pipeline/bias_fit.py).

napari-czann-segment's nucleus U-Net (tf2onnx, an EfficientNet encoder) has a squeeze-excite block
whose reduce Conv puts out −15 … −80 on every tile: its SiLU (``x·Sigmoid(x)``) is ≈ −10⁻⁶, so
the expand Conv after it gets an input scale near 10⁻¹⁰ and its biases (≈ 1) need 10¹¹ int32
steps. Saturated, every gate became Sigmoid(0.0035) ≈ 0.5 instead of Sigmoid(bias), and A16W8
kept 0.59 of the nucleus IoU (bench/RESULTS.md, "czann's A16W8 loss"). The graph here is that
block as tf2onnx writes it (NCHW after its transposes): a Conv feature map, SiLU, GlobalAveragePool,
a reduce Conv into the strongly negative, SiLU, an expand Conv with a bias, Sigmoid, the Mul with
the feature map, a 1×1 projection.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.formats import integer
from onnxptq.pipeline.bias_fit import BIAS_LIMIT, weight_stretch

C, R = 16, 2


def _se_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    arrays = {
        "w_feat": rng.normal(0, 0.3, (C, 4, 3, 3)), "b_feat": rng.normal(0, 0.5, C),
        # the reduce Conv of a gate the training switched off: small weights, a bias of -14
        "w_red": rng.normal(0, 0.05, (R, C, 1, 1)), "b_red": np.full(R, -14.0) + rng.normal(0, 1, R),
        "w_exp": rng.normal(0, 0.5, (C, R, 1, 1)), "b_exp": rng.normal(0, 1.5, C),
        "w_proj": rng.normal(0, 0.3, (4, C, 1, 1)), "b_proj": rng.normal(0, 0.2, 4),
    }
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w_feat", "b_feat"], ["f0"], pads=[1, 1, 1, 1], name="conv"),
        n("Sigmoid", ["f0"], ["f0s"], name="act/Sigmoid"), n("Mul", ["f0", "f0s"], ["f"], name="act/mul"),
        n("GlobalAveragePool", ["f"], ["pool"], name="se_squeeze"),
        n("Conv", ["pool", "w_red", "b_red"], ["r0"], name="se_reduce"),
        n("Sigmoid", ["r0"], ["r0s"], name="se_reduce/Sigmoid"), n("Mul", ["r0", "r0s"], ["r"], name="se_reduce/mul"),
        n("Conv", ["r", "w_exp", "b_exp"], ["e0"], name="se_expand"),
        n("Sigmoid", ["e0"], ["gate"], name="se_expand/Sigmoid"),
        n("Mul", ["f", "gate"], ["fx"], name="se_excite"),
        n("Conv", ["fx", "w_proj", "b_proj"], ["y"], name="project"),
    ]
    graph = helper.make_graph(nodes, "se_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 24, 24])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0, 1, (1, 4, 24, 24)).astype(np.float32)} for _ in range(n)]


def test_weight_stretch_brings_the_bias_to_the_limit_and_no_further():
    bias = np.array([0.5, -1.0, 2.0e-3])
    sx, sw = np.float32(3.5e-10), np.array([4e-3, 2e-3, 1e-2])
    factor = weight_stretch(bias, sx, sw)
    steps = np.abs(bias) / (float(sx) * sw * factor)
    assert factor.shape == sw.shape and np.all(factor >= 1.0)
    assert np.all(steps <= BIAS_LIMIT * (1 + 1e-9))
    assert steps[factor > 1].min() == pytest.approx(BIAS_LIMIT)  # stretched exactly to the limit
    assert factor[2] == 1.0  # 2e-3 / (3.5e-10 · 1e-2) = 5.7e8 < 2^31: that channel is left alone
    assert weight_stretch(bias, np.float32(1e-3), sw) is None  # an ordinary input scale: nothing to do
    per_tensor = weight_stretch(bias, sx, np.float32(4e-3))
    assert per_tensor.shape == () and float(per_tensor) == pytest.approx(1.0 / (3.5e-10 * 4e-3 * BIAS_LIMIT), rel=1e-6)


def test_a16w8_keeps_the_squeeze_excite_gates(tmp_path, caplog):
    model = _se_model()
    out = tmp_path / "se.a16w8.onnx"
    cfg = dataclasses.replace(resolve_config("A16W8"), repair=False)
    quantize(model, cfg, data=_feeds(8, 1), output=str(out))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    a = np.stack([ref.run(None, f)[0] for f in _feeds(6, 1000)]).ravel()
    b = np.stack([got.run(None, f)[0] for f in _feeds(6, 1000)]).ravel()
    err = np.abs(a - b).max() / np.abs(a).max()
    assert err < 0.02, err  # main: the gates at 0.5 instead of Sigmoid(bias), 20-60 % off
    q = onnx.load(str(out))
    values = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    # the expand Conv's int32 bias: no element at the clip, and it dequantizes to the float bias
    dq = [nd for nd in q.graph.node if nd.op_type == "DequantizeLinear" and values.get(nd.input[0]) is not None
          and values[nd.input[0]].dtype == np.int32 and values[nd.input[0]].size == C]
    assert dq, "the expand Conv's bias is no longer int32: the test no longer sees the case"
    b_exp = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "b_exp"))
    for nd in dq:
        qb, scale = values[nd.input[0]].astype(np.int64), values[nd.input[1]].astype(np.float64)
        if np.allclose(qb * scale, b_exp, atol=0.05):
            assert np.abs(qb).max() <= BIAS_LIMIT * 1.0001  # float32 scales; main: all 16 at 2^31 - 1, i.e. a bias of ~0.003
            break
    else:
        pytest.fail(f"no int32 bias of {C} values dequantizes to the expand Conv's bias (main saturates it)")


def test_the_rule_leaves_fitting_biases_alone():
    """A bias on an ordinary input scale (the feature Conv's, the projection's) is untouched: the
    stretched weights are only those ``quantize_bias`` would clip."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.3, (8, 4, 3, 3))
    lo, hi = integer.weight_range(w, 0)
    sw, _ = integer.compute_scale_zp(lo, hi, "int8", symmetric=True)
    assert weight_stretch(rng.normal(0, 2, 8), np.float32(1 / 32767), sw) is None
    q, _ = integer.quantize_bias(rng.normal(0, 2, 8), np.float32(1 / 32767), sw)
    assert np.abs(q.astype(np.int64)).max() < BIAS_LIMIT
