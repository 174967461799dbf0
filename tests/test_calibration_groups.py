"""Calibration runs over groups of feeds: the same statistics, feed by feed, as one run per feed.

The runner concatenates consecutive feeds of equal shapes on axis 0 once a probe showed the
model keeps samples apart; every reduction still reports per feed. These tests compare every
collector's full state between ``max_group=1`` and grouped runs, on models that keep the samples
on axis 0, move them to another axis, or mix them (where grouping must be refused).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration.collectors import HistogramCollector, PerChannelMinMaxCollector, TailCollector
from onnxptq.calibration.runner import collect

RUNNER_LOG = "onnxptq.calibration.runner"


def _model(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, None])], list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def sample_wise_model() -> onnx.ModelProto:
    """x[N,4,L] -> Relu r -> Transpose t[4,N,L] (samples on axis 1) -> Mul m -> Transpose y[N,4,L]."""
    w = numpy_helper.from_array(np.array([1.0, -2.0, 0.5, 3.0], np.float32).reshape(4, 1, 1), "w")
    return _model([
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Mul", ["t", "w"], ["m"]),
        helper.make_node("Transpose", ["m"], ["y"], perm=[1, 0, 2]),
    ], [w])


def batch_mixing_model() -> onnx.ModelProto:
    """y = x - mean over the batch: a feed's values depend on the other feeds of its run."""
    return _model([
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[0], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["y"]),
    ])


def fixed_batch_model() -> onnx.ModelProto:
    """A Reshape that hard-codes batch 1: two feeds together do not even run."""
    shape = numpy_helper.from_array(np.array([1, 4, -1], np.int64), "shape")
    return _model([helper.make_node("Reshape", ["x", "shape"], ["z"]), helper.make_node("Neg", ["z"], ["y"])], [shape])


def feeds(shapes: list[tuple[int, int, int]], seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for i, shape in enumerate(shapes):
        x = rng.standard_normal(shape).astype(np.float32) * (1 + i % 3)
        x.flat[rng.integers(x.size)] = 40.0 * (1 + i % 5)  # an outlier per feed: the tails differ by feed
        out.append({"x": x})
    return out


def state(c) -> dict:
    """Everything a collector holds, in comparable form."""
    s = {k: getattr(c, k) for k in ("min", "max", "count", "batches", "batch_min_sum", "batch_max_sum", "skipped_batches")}
    if isinstance(c, TailCollector):
        s.update(top=np.sort(c.top), bottom=np.sort(c.bottom), top_floor=c.top_floor, bottom_ceiling=c.bottom_ceiling,
                 grid=(c.grid.counts.size, c.grid.width))
    if isinstance(c, HistogramCollector):
        s.update(counts=c.hist.counts.copy(), width=c.hist.width)
    if isinstance(c, PerChannelMinMaxCollector):
        s.update(channel_min=c.channel_min.copy(), channel_max=c.channel_max.copy())
    return s


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        for key, value in a[name].items():
            other = b[name][key]
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, other, err_msg=f"{name}.{key}")
            else:
                assert value == pytest.approx(other, rel=1e-12, abs=0), f"{name}.{key}"


SPECS = {
    "r": {"method": "minmax"},
    "t": {"method": "percentile", "percentile": 99.999, "symmetric": False},
    "m": {"method": "percentile", "percentile": 99.999},
    "y": {"method": "entropy"},
}


def run(model, data, max_group, specs=SPECS, **kw):
    specs = {n: (s() if callable(s) else dict(s)) for n, s in specs.items()}
    return {n: state(c) for n, c in collect(model, specs, data, max_group=max_group, **kw).items()}


def test_groups_give_the_statistics_of_single_runs(caplog):
    model = sample_wise_model()
    data = feeds([(1, 4, 300)] * 21)
    single = run(model, data, 1)
    with caplog.at_level(logging.DEBUG, logger=RUNNER_LOG):
        grouped = run(model, data, 8)
    assert "feeds run up to 8 at a time; samples on another axis than 0 in 2 tensor(s)" in caplog.text
    assert_same_state(single, grouped)
    assert single["t"]["batches"] == 21 and single["t"]["count"] == 21 * 1200


def test_groups_keep_the_callers_batches_and_follow_shape_changes(caplog):
    """Feeds of 3 samples each, widths changing mid-stream, a per-channel statistic, a kept output."""
    model = sample_wise_model()
    data = feeds([(3, 4, 50)] * 5 + [(3, 4, 70)] * 4 + [(3, 4, 50)] * 6 + [(2, 4, 50)] * 2)
    specs = dict(SPECS, r=lambda: PerChannelMinMaxCollector(1))
    kept_single: list = []
    kept_grouped: list = []
    single = run(model, data, 1, specs, model_outputs=kept_single, model_output_batches=3)
    with caplog.at_level(logging.DEBUG, logger=RUNNER_LOG):
        grouped = run(model, data, 4, specs, model_outputs=kept_grouped, model_output_batches=3)
    assert "feeds run up to 4 at a time" in caplog.text
    assert_same_state(single, grouped)
    assert single["m"]["batches"] == len(data)
    assert len(kept_grouped) == 3
    for got, feed in zip(kept_grouped, data):
        w = np.array([1.0, -2.0, 0.5, 3.0], np.float32).reshape(1, 4, 1)
        np.testing.assert_allclose(got["y"], np.maximum(feed["x"], 0) * w, rtol=1e-6)


@pytest.mark.parametrize("make, reason", [
    (batch_mixing_model, "differs when two feeds run together"),
    (fixed_batch_model, "differs when two feeds run together"),  # the doubled axis looks like a sample axis
])
def test_models_that_mix_samples_run_one_feed_at_a_time(make, reason, caplog):
    model = make()
    data = feeds([(1, 4, 64)] * 6)
    specs = {"x": {"method": "minmax"}, "y": {"method": "percentile", "percentile": 99.999}}
    single = run(model, data, 1, specs)
    with caplog.at_level(logging.DEBUG, logger=RUNNER_LOG):
        grouped = run(model, data, 8, specs)
    assert "feeds run one at a time" in caplog.text and reason in caplog.text
    assert_same_state(single, grouped)


def test_groups_on_pp_ocr_rec_equal_single_runs(caplog, monkeypatch):
    """The real model: its attention keeps the samples on axis 1 for 8 tensors. (A rec line fills
    a default group's input bytes on its own; the groups of 4 are allowed here.)"""
    from onnxptq.calibration import runner

    monkeypatch.setattr(runner, "_GROUP_BYTES", 4 * 48 * 320 * 3 * 4)
    from onnxptq.config.presets import get_preset
    from onnxptq.graph import io
    from onnxptq.pipeline.plan import make_plan
    from onnxptq.pipeline.prepare import prepare_for_quantization
    from testkit import ocr
    from testkit.models import model_path

    cfg = get_preset("A8W8")
    proto = io.load_model(str(model_path("rec")))
    prepared = prepare_for_quantization(proto, cfg)
    plan = make_plan(prepared, cfg)
    names = sorted(plan.needs_calibration())
    specs = {n: {"method": "percentile", "percentile": 99.999} for n in names[::2]}
    specs.update({n: {"method": "minmax"} for n in names[1::2]})
    images, _ = ocr.render_lines(6, 7, characters=ocr.load_characters(model_path("rec")))
    data = [{"x": img[None]} for img in images]
    single = run(prepared, data, 1, specs)
    with caplog.at_level(logging.DEBUG, logger=RUNNER_LOG):
        grouped = run(prepared, data, 4, specs)
    assert "feeds run up to 4 at a time" in caplog.text
    for name in single:  # convolutions over 4 samples may round differently in the last bit
        for key, value in single[name].items():
            other = grouped[name][key]
            if key in ("count", "batches", "skipped_batches"):
                assert value == other, f"{name}.{key}"
            else:
                np.testing.assert_allclose(value, other, rtol=1e-4, atol=1e-5, err_msg=f"{name}.{key}")
