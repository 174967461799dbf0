"""A written-out SiLU's input gets a lower saturation limit, and a limit binds under symmetric
MinMax activations (the reference tool's A8W8 recipe).

YOLOv8-style blocks: a BatchNorm-folded Conv whose output reaches far below zero (YOLOv8n's
``model.2`` convs: -95 where the positive side ends at 55), then ``x·σ(x)`` written as Sigmoid and
Mul, as PyTorch exports SiLU. Below ``x = -T`` the SiLU is within ``T·e^{-T}`` of 0, so the
quantizer of ``x`` needs no codes there (bench/RESULTS.md "Per-tensor integer presets, second
round": the reference A8W8 on YOLOv8n, box F1 vs float 0.852 -> 0.881 on 96 images)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.compat.options import to_quant_config
from testkit.reference import reference_config


def _model() -> onnx.ModelProto:
    """Conv(3→16) → SiLU → Conv(16→16) → SiLU → Conv(16→8): the first conv's weights have a strong
    negative mean per channel on non-negative images (a folded BatchNorm's shift), so its output
    reaches about -40 below and +12 above."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((16, 3, 3, 3)) * 0.6 - 0.45
    b1 = rng.uniform(0.0, 3.0, 16)
    w2 = rng.standard_normal((16, 16, 3, 3)) * 0.15
    w3 = rng.standard_normal((8, 16, 1, 1)) * 0.3
    inits = {"W1": w1, "B1": b1, "W2": w2, "B2": rng.standard_normal(16) * 0.1, "W3": w3, "B3": np.zeros(8)}
    nodes = []
    x = "x"
    for i, (w, b) in enumerate((("W1", "B1"), ("W2", "B2")), 1):
        nodes += [helper.make_node("Conv", [x, w, b], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"a{i}"], name=f"silu{i}")]
        x = f"a{i}"
    nodes.append(helper.make_node("Conv", [x, "W3", "B3"], ["y"], name="conv3"))
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 24, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 24, 24])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _images(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0.0, 1.0, (1, 3, 24, 24)).astype(np.float32) ** 0.5} for _ in range(n)]


def _float_range(model: onnx.ModelProto, name: str, feeds) -> tuple[float, float]:
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    s = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = np.concatenate([s.run([name], f)[0].ravel() for f in feeds])
    return float(values.min()), float(values.max())


def test_silu_input_limit_binds_under_symmetric_minmax():
    """The reference tool's A8W8 (symmetric MinMax activations, per-tensor weights): the SiLU
    input's grid is set by its positive side, not by the tail the SiLU maps to ~0. Before, the
    plan had no limit there, and a limit cut a range already made symmetric, so it never bound."""
    model, calib = _model(), _images(8, 1)
    low, high = _float_range(model, "c1", calib)
    assert low < -3 * high, (low, high)  # the tail the rule is for
    cfg = to_quant_config(reference_config("A8W8")).replace(repair=False)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    result = quantize(model, cfg, calib, eval_samples=0)
    t = result.plan.tensors["c1"]
    assert t.limits is not None and -10.5 < t.limits[0] < -9.0 and t.limits[1] is None, t.limits
    assert t.quant.symmetric and t.quant.calibration == "minmax"
    scale = float(np.asarray(result.params["c1"].scale))
    # uint8 symmetric: 255 codes over [-m, m]; m = max(|limit|, high), far below |low|
    assert scale < 1.01 * 2 * max(-t.limits[0], high) / 255, (scale, low, high, t.limits)


def test_silu_input_limit_on_our_a8w8_and_not_without_a_silu():
    """Our A8W8 (asymmetric percentile) gets the same limit; a Conv output read by a Sigmoid and
    by some other op (not x·σ(x)) gets none, nor one whose SiLU output leaves the graph float."""
    model, calib = _model(), _images(8, 1)
    cfg = get_preset("A8W8").replace(repair=False)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    result = quantize(model, cfg, calib, eval_samples=0)
    assert result.plan.tensors["c1"].limits[0] > -10.5 and result.plan.tensors["c2"].limits is not None
    lo = float(-np.asarray(result.params["c1"].zero_point, np.float64) * np.asarray(result.params["c1"].scale))
    assert lo > -10.5, lo  # the grid starts at the limit, not at the tail (about -40)
    # Mul(x, Sigmoid(x)) with x read once more (a residual): no limit
    other = _model()
    other.graph.node.append(helper.make_node("Add", ["c1", "c1"], ["extra"], name="extra"))
    other.graph.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, [1, 16, 24, 24]))
    result = quantize(other, cfg, calib, eval_samples=0)
    assert result.plan.tensors["c1"].limits is None
