"""Tests for outlier channel splitting: float outputs unchanged, the outlier shared out so the
per-tensor max falls, the budget and the gain rule kept, the layers it must leave alone; on
hand-built graphs and on both PP-OCR models as the quantizer prepares them."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.config.schema import ConfigError, OutlierSplitOptions
from onnxptq.graph.passes.split_outliers import split_outliers, split_threshold, split_weight

RNG = np.random.default_rng(0)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _model(nodes, inits, x_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _outlier_weight(shape: tuple[int, ...]) -> np.ndarray:
    """Gaussian weights with a re-parameterized-identity-like diagonal outlier (40) and a second
    outlier (-18) in another input channel."""
    w = RNG.standard_normal(shape).astype(np.float32)
    w[3, 7, ...] = 0.0
    w[(3, 7) + (0,) * (len(shape) - 2)] = 40.0
    w[(9, 20) + (0,) * (len(shape) - 2)] = -18.0
    return w


def _pointwise(kernel: int = 1) -> onnx.ModelProto:
    """HardSwish → Conv 40→16: the non-homogeneous activation that equalization cannot pass."""
    inits = {"W": _outlier_weight((16, 40, kernel, kernel)), "B": RNG.standard_normal(16).astype(np.float32)}
    nodes = [helper.make_node("HardSwish", ["x"], ["h"]),
             helper.make_node("Conv", ["h", "W", "B"], ["y"], name="pw", pads=[kernel // 2] * 4)]
    return _model(nodes, inits, [2, 40, 6, 6])


def _weight(model: onnx.ModelProto, name: str = "W") -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


@pytest.mark.parametrize("kernel", [1, 3])
def test_conv_float_outputs_unchanged_and_outlier_shared_out(kernel):
    model = _pointwise(kernel)
    out = split_outliers(model, OutlierSplitOptions(expand_ratio=0.1))
    feeds = {"x": RNG.standard_normal((2, 40, 6, 6)).astype(np.float32) * 3}
    ref = _run(model, feeds)
    assert np.abs(_run(out, feeds) - ref).max() <= 1e-5 * np.abs(ref).max()
    w = _weight(out)
    assert w.shape[1] == 40 + 4  # budget floor(0.1 * 40)
    t = float(np.abs(w).max())
    assert t <= 40.0 / 4  # 40 → 10 (3 extra copies of channel 7) and -18 → 2 pieces (1 of channel 20)
    gather = next(n for n in out.graph.node if n.op_type == "Gather")
    indices = _weight(out, gather.input[1])
    np.testing.assert_array_equal(indices, np.r_[np.arange(40), [7, 7, 7, 20]])
    # the copies of channel 7 sum to the original column; the outlier's pieces are ±T exactly
    col = w[:, 7] + w[:, 40:43].sum(axis=1)
    np.testing.assert_allclose(col, _weight(model)[:, 7], rtol=1e-6, atol=1e-6)
    assert np.sum(np.isclose(np.abs(w), t, rtol=0, atol=0)) >= 4
    # weights below the threshold stay where they were, unchanged
    small = np.abs(_weight(model)) <= t
    np.testing.assert_array_equal(w[:, :40][small], _weight(model)[small])


def test_per_tensor_int8_error_falls():
    """The reason for the pass: one int8 scale per tensor resolves the bulk of the split weight."""
    model = _pointwise()
    out = split_outliers(model, OutlierSplitOptions(expand_ratio=0.1))
    feeds = {"x": RNG.standard_normal((2, 40, 6, 6)).astype(np.float32)}

    def rounded(m: onnx.ModelProto) -> float:
        q = onnx.ModelProto()
        q.CopyFrom(m)
        for t in q.graph.initializer:
            if t.name == "W":
                w = numpy_helper.to_array(t)
                s = np.abs(w).max() / 127
                t.CopyFrom(numpy_helper.from_array((np.clip(np.round(w / s), -127, 127) * s).astype(np.float32), "W"))
        ref = _run(model, feeds)
        return float(np.linalg.norm(_run(q, feeds) - ref) / np.linalg.norm(ref))

    before, after = rounded(model), rounded(out)
    assert after < before / 3, (before, after)


def test_gemm_and_matmul():
    """MatMul B [K, N] splits rows (Gather on the last axis); Gemm with transB splits B's columns."""
    w_mm = RNG.standard_normal((40, 12)).astype(np.float32)
    w_mm[7, 3], w_mm[20, 9] = 40.0, -18.0  # input channels (rows of B) 7 and 20
    w_g = RNG.standard_normal((6, 12)).astype(np.float32)  # Gemm transB: [N, K]
    w_g[3, 5] = 50.0
    inits = {"WM": w_mm, "WG": w_g, "BG": RNG.standard_normal(6).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "WM"], ["m"], name="mm"),
             helper.make_node("Gemm", ["m", "WG", "BG"], ["y"], name="fc", transB=1)]
    model = _model(nodes, inits, [5, 40])
    out = split_outliers(model, OutlierSplitOptions(expand_ratio=0.1, min_gain=2))
    feeds = {"x": RNG.standard_normal((5, 40)).astype(np.float32)}
    ref = _run(model, feeds)
    assert np.abs(_run(out, feeds) - ref).max() <= 1e-5 * np.abs(ref).max()
    axes = sorted(next(a.i for a in n.attribute if a.name == "axis") for n in out.graph.node if n.op_type == "Gather")
    assert axes == [-1, 1]
    assert _weight(out, "WM").shape == (44, 12) and np.abs(_weight(out, "WM")).max() <= 10.0 + 1e-5
    assert _weight(out, "WG").shape == (6, 13) and np.abs(_weight(out, "WG")).max() <= 25.0 + 1e-5


def test_left_alone_without_gain_grouped_or_shared():
    # no outlier: splitting cannot lower the max fourfold within the budget
    w = RNG.uniform(-1, 1, (16, 40, 1, 1)).astype(np.float32)
    assert split_threshold(w, 1, OutlierSplitOptions()) is None
    # depthwise: the group structure would break
    w_dw = RNG.standard_normal((40, 1, 1, 1)).astype(np.float32)
    w_dw[7] = 40.0
    dw = _model([helper.make_node("Conv", ["x", "W"], ["y"], group=40)], {"W": w_dw}, [1, 40, 4, 4])
    assert not any(n.op_type == "Gather" for n in split_outliers(dw, OutlierSplitOptions(expand_ratio=0.5)).graph.node)
    # a weight two layers read: growing it under one would break the other
    shared = _model([helper.make_node("Conv", ["x", "W"], ["a"]), helper.make_node("Conv", ["x", "W"], ["b"]),
                     helper.make_node("Add", ["a", "b"], ["y"])], {"W": _outlier_weight((16, 40, 1, 1))}, [1, 40, 4, 4])
    assert not any(n.op_type == "Gather" for n in split_outliers(shared, OutlierSplitOptions(expand_ratio=0.5)).graph.node)


def test_budget_and_remainders():
    w = np.zeros((2, 10, 1, 1), np.float32)
    w[0, :, 0, 0] = [9.0, 1.0, 0.5, 0, 0, 0, 0, 0, 0, 0.7]
    w[1, 0, 0, 0] = -4.0
    assert split_threshold(w, 1, OutlierSplitOptions(expand_ratio=0.2)) is None  # 9 → 3: gain 3 < 4
    t = split_threshold(w, 1, OutlierSplitOptions(expand_ratio=0.2, min_gain=2))  # budget 2
    assert t == pytest.approx(3.0, rel=1e-6)  # 9 → 3 pieces: 2 extra copies of channel 0
    new, sources = split_weight(w, 1, t)
    np.testing.assert_array_equal(sources, [0, 0])
    np.testing.assert_allclose(new[0, [0, 10, 11], 0, 0], [3.0, 3.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(new[1, [0, 10, 11], 0, 0], [-1.0, -3.0, 0.0], rtol=1e-6)  # -4 = -1 + (-3)
    assert split_threshold(w, 1, OutlierSplitOptions(expand_ratio=0.05, min_gain=2)) is None  # budget 0


def test_bad_options_raise():
    with pytest.raises(ConfigError, match="expand_ratio"):
        OutlierSplitOptions(expand_ratio=0)
    with pytest.raises(ConfigError, match="min_gain"):
        OutlierSplitOptions(min_gain=0.5)


# ------------------------------------------------------------------------------------------------
# the real PP-OCR models


@pytest.mark.slow
@pytest.mark.parametrize("name, layers", [("rec", 5), ("cls", 0)])
def test_real_models_float_outputs_unchanged(name, layers):
    """Split as the quantizer does (per-tensor weights: after folding, fusions and equalization):
    outputs equal the source model's within float rounding. rec: 5 layers split, among them the
    two last-stage pointwise convolutions (max |w| 58.2 → 6.6 and 43.4 → 7.9); cls: after
    equalization no layer gains fourfold within the budget, so it is left as it was."""
    import dataclasses

    from onnxptq import get_preset
    from onnxptq.pipeline.prepare import prepare_for_quantization
    from testkit import ocr
    from testkit.models import model_path

    cfg = get_preset("A8W8")
    cfg = cfg.replace(weight=dataclasses.replace(cfg.weight, per_channel=False))
    assert cfg.outlier_split_active()
    source = onnx.load(model_path(name))
    plain = prepare_for_quantization(source, cfg.replace(split_outliers=False))
    split = prepare_for_quantization(source, cfg)
    gathers = sum(n.op_type == "Gather" and n.name.endswith("_ocs_gather") for n in split.graph.node)
    assert gathers == layers
    if not layers:
        assert split.graph == plain.graph
        return
    images = ocr.render_lines(8, seed=5)[0] if name == "rec" else ocr.render_cls(8, seed=5)[0]
    feeds = {"x": images}
    ref = _run(source, feeds)
    delta = float(np.abs(_run(split, feeds) - ref).max())
    base = float(np.abs(_run(plain, feeds) - ref).max())
    print(f"{name}: {gathers} split layer(s); max |Δ| {delta:.3g} (without the split {base:.3g}) on outputs of max {np.abs(ref).max():.3g}")
    assert delta <= 1e-4 * max(1.0, float(np.abs(ref).max()))


def test_automatic_only_for_per_tensor_integer_weights():
    """Every shipped preset keeps its results: splitting runs by itself only where an integer weight
    is per tensor (as equalization and bias correction), and either way can be forced."""
    import dataclasses

    from onnxptq.config.presets import _PRESETS, get_preset

    for name in _PRESETS:
        cfg = get_preset(name)
        assert cfg.outlier_split_active() == cfg.equalization_active(), name
        per_tensor = cfg.weight is not None and cfg.weight.is_integer and not cfg.weight.per_channel
        assert cfg.outlier_split_active() is per_tensor, name
    a8w8 = get_preset("A8W8")
    assert not a8w8.outlier_split_active() and a8w8.replace(split_outliers=True).outlier_split_active()
    pt = a8w8.replace(weight=dataclasses.replace(a8w8.weight, per_channel=False))
    assert pt.outlier_split_active() and not pt.replace(split_outliers=False).outlier_split_active()
