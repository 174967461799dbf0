"""SmoothQuant (pipeline/refine/smooth_quant.py) on small graphs: where 1/s goes, float equivalence, the
statistics pass on one-shot data, and the calibration runner bug it exposed.

The transformer figures (A8W8 on all-MiniLM-L6-v2 with and without smoothing) are in
tests/test_minilm_a8w8.py and bench/minilm.py.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.pipeline.refine.smooth_quant import smooth_quant, smoothing_scales, smoothing_targets
from onnxptq.api import quantize
from onnxptq.calibration import collectors, runner
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import ConfigError
from onnxptq.sessions import open_session

HIDDEN = 8


def _model() -> onnx.ModelProto:
    """Three smoothable activations, one per way of absorbing 1/s:

    - ``ln_a`` (LayerNorm read by two MatMuls only): folded into LayerNorm's scale and bias;
    - ``ln_b`` (LayerNorm read by a MatMul and a residual Add): an inserted Mul;
    - ``m`` (Mul by a per-channel constant, read by a Gemm with transB only): folded into the constant.
    """
    rng = np.random.default_rng(0)

    def c(name, *shape, scale=0.5):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    inits = [c("g_a", HIDDEN), c("b_a", HIDDEN), c("g_b", HIDDEN), c("b_b", HIDDEN),
             c("Wq", HIDDEN, 6), c("Wk", HIDDEN, 6), c("Wf", HIDDEN, HIDDEN), c("bf", HIDDEN),
             c("k", HIDDEN), c("Wg", 5, HIDDEN), c("bg", 5)]
    # Outlier channels, as in a transformer's LayerNorm outputs.
    inits[0] = numpy_helper.from_array(np.array([0.5, 8.0, 0.4, 0.6, 12.0, 0.5, 0.3, 0.7], np.float32), "g_a")
    inits[2] = numpy_helper.from_array(np.array([0.5, 0.4, 9.0, 0.6, 0.5, 0.5, 6.0, 0.7], np.float32), "g_b")
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g_a", "b_a"], ["ln_a"], name="ln_a", axis=-1),
        helper.make_node("MatMul", ["ln_a", "Wq"], ["q"], name="mm_q"),
        helper.make_node("MatMul", ["ln_a", "Wk"], ["k_out"], name="mm_k"),
        helper.make_node("LayerNormalization", ["x", "g_b", "b_b"], ["ln_b"], name="ln_b", axis=-1),
        helper.make_node("MatMul", ["ln_b", "Wf"], ["f"], name="mm_f"),
        helper.make_node("Add", ["f", "bf"], ["fb"], name="add_bias"),
        helper.make_node("Add", ["fb", "ln_b"], ["res"], name="residual"),
        helper.make_node("ReduceMean", ["res"], ["pooled"], name="pool", axes=[1], keepdims=0),
        helper.make_node("Mul", ["pooled", "k"], ["m"], name="scale"),
        helper.make_node("Gemm", ["m", "Wg", "bg"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "smooth", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, HIDDEN])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("q", "k_out", "res", "y")], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _feeds(n: int = 6, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (2, 4, HIDDEN)).astype(np.float32)} for _ in range(n)]


def _run(model, feed):
    return open_session(model, threads=1).run(None, feed)


def test_targets_group_the_readers_of_one_activation():
    targets = {t.activation: sorted(n.name for n, _, _ in t.readers) for t in smoothing_targets(_model())}
    assert targets == {"ln_a": ["mm_k", "mm_q"], "ln_b": ["mm_f"], "m": ["fc"]}


def test_scales_follow_the_formula():
    s = smoothing_scales(np.array([4.0, 1.0]), np.array([1.0, 4.0]), 0.5)
    np.testing.assert_allclose(s, [2.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(smoothing_scales(np.array([4.0]), np.array([9.0]), 1.0), [4.0])


@pytest.mark.parametrize("alpha", [0.5, 0.85])
def test_float_model_unchanged_and_each_absorption_used(alpha):
    model = _model()
    smoothed, how = smooth_quant(model, _feeds(), alpha)
    assert how == {"ln_a": "LayerNormalization", "ln_b": "inserted Mul", "m": "Mul"}
    assert sum(n.op_type == "Mul" for n in smoothed.graph.node) == 2  # the folded one and the inserted one
    inits = {t.name: numpy_helper.to_array(t) for t in smoothed.graph.initializer}
    orig = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert not np.allclose(inits["g_a"], orig["g_a"]) and not np.allclose(inits["Wf"], orig["Wf"])
    for feed in _feeds(3, seed=7):  # data the statistics never saw
        for ref, got in zip(_run(model, feed), _run(smoothed, feed)):
            assert np.max(np.abs(ref - got)) <= 1e-5 * max(1.0, float(np.max(np.abs(ref))))


def test_smoothing_flattens_the_activation_channels():
    model = _model()
    stats = runner.collect(model, {"ln_a": functools.partial(collectors.PerChannelMinMaxCollector, 2)}, _feeds())
    before = np.maximum(np.abs(stats["ln_a"].channel_min), np.abs(stats["ln_a"].channel_max))
    smoothed, _ = smooth_quant(model, _feeds(), 0.5)
    after_stats = runner.collect(smoothed, {"ln_a": functools.partial(collectors.PerChannelMinMaxCollector, 2)}, _feeds())
    after = np.maximum(np.abs(after_stats["ln_a"].channel_min), np.abs(after_stats["ln_a"].channel_max))
    assert after.max() / after.min() < before.max() / before.min() / 2


def test_per_channel_reductions_alone_run():
    """The calibration runner fed its row-count input (``__onnxptq_calib_rows``) whenever a
    reduction existed, but only min/max and tail reductions declare it: a pass whose reductions
    are all per channel (SmoothQuant's) failed in onnxruntime with 'Invalid input name'."""
    stats = runner.collect(_model(), {"ln_b": functools.partial(collectors.PerChannelMinMaxCollector, 2)}, _feeds(2))
    assert stats["ln_b"].channel_max.shape == (HIDDEN,)


def test_quantize_with_smooth_quant_on_one_shot_data_sees_every_sample():
    cfg = resolve_config("A8W8").replace(smooth_quant=True)
    result = quantize(_model(), cfg, iter(_feeds(5)), eval_samples=0)
    assert result.calibration_samples == 5
    assert "smooth quant" in result.timings
    assert any(n.op_type == "Mul" and n.name.endswith("__smooth_mul") for n in result.model.graph.node)


def test_automatic_rule_leaves_graphs_without_attention_alone():
    result = quantize(_model(), "A8W8", _feeds(2), eval_samples=0)
    assert "smooth quant" not in result.timings


def test_alpha_out_of_range_is_refused():
    with pytest.raises(ConfigError, match="smooth_alpha"):
        resolve_config("A8W8").replace(smooth_alpha=1.5)


@pytest.mark.parametrize("flags, smoothed", [(["--smooth-quant", "--smooth-alpha", "0.7"], True), (["--no-smooth-quant"], False)])
def test_cli_flags(tmp_path, flags, smoothed):
    from onnxptq.cli import main as cli_main

    src, out, data = tmp_path / "m.onnx", tmp_path / "q.onnx", tmp_path / "d.npz"
    onnx.save(_model(), src)
    np.savez(data, x=np.concatenate([f["x"] for f in _feeds(2)]))
    assert cli_main(["quantize", str(src), "-o", str(out), "--data", str(data), "--no-progress", *flags]) == 0
    assert any(n.name.endswith("__smooth_mul") for n in onnx.load(out).graph.node) == smoothed
