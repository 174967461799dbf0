"""The held-out feeds' float outputs from the calibration's own session, statistics or not (issue 26 item 1).

Where calibration collects statistics (the integer presets), the accuracy floor's held-out feeds
were run through a second float session on the same model (``calibrate.float_outputs_of``: its
creation and a serialization of the model). They now run first in the calibration's session
(their outputs decide how the judged calibration feeds' outputs are held as they are recorded:
tests/test_calibration_held_recording.py): held here that they add nothing to the statistics,
that their outputs are the second session's to a few ulps on a real model (bit for bit on some CPUs), and that no second
session is opened.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq.pipeline.calibrate as cal
from onnxptq.calibration import runner
from onnxptq.config.presets import get_preset
from testkit.models import model_path


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.uniform(-1.0, 1.0, size=(4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("spec", ["minmax", {"method": "percentile", "percentile": 99.9}])
def test_also_run_feeds_add_nothing_to_the_statistics(spec):
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(6)]
    wild = [{"x": rng.uniform(-50, 50, (1, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
    plain = runner.collect(_model(), {"c": spec, "y": spec}, feeds, model_outputs=[], model_output_batches=2)
    outs: list = []
    with_also = runner.collect(_model(), {"c": spec, "y": spec}, feeds, model_outputs=[], model_output_batches=2,
                               also_run=wild, also_outputs=outs)
    for name in ("c", "y"):
        assert plain[name].min == with_also[name].min and plain[name].max == with_also[name].max
        assert plain[name].batches == with_also[name].batches
    assert len(outs) == 3 and set(outs[0]) == {"y"}
    assert max(float(o["y"].max()) for o in outs) > 10  # the wild feeds did run


def test_held_out_outputs_from_the_calibration_session(monkeypatch):
    path = str(model_path("cls"))
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    data = [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(12)]
    cfg = get_preset("A8W8")
    real = cal.float_outputs_of
    calls: list[int] = []
    monkeypatch.setattr(cal, "float_outputs_of", lambda *a, **k: calls.append(1) or real(*a, **k))
    calibrated = cal.calibrate_once(path, cfg, data, holdout=4)
    assert calibrated.stats and calibrated.holdout and not calibrated.holdout_reused
    assert calls == [], "a second float session ran the held-out feeds"
    want = real(calibrated.prepared, calibrated.holdout, cfg)
    assert len(calibrated.holdout_outputs) == len(want)
    # Not bit for bit: the calibration session runs the augmented graph (intermediates fetched and
    # reduced), whose optimised float kernels can differ from the bare model's in the last bits on
    # some CPUs (AVX2 without AVX-512: up to 4 ulps of the output's scale on this model). A few ulps
    # of the largest output still tell the held-out feeds' own float outputs from any other feed's
    # or a quantized model's (differences of 1e-2 and more here).
    for got, ref in zip(calibrated.holdout_outputs, want):
        assert set(got) == set(ref)
        for k in ref:
            assert got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape, k
            ulp = float(np.spacing(np.abs(ref[k]).max().astype(ref[k].dtype)))
            assert float(np.abs(got[k] - ref[k]).max()) <= 8 * ulp, k


def test_held_out_runs_fetch_the_model_outputs_only(monkeypatch):
    """The held-out feeds add nothing to the statistics, so their runs hand over the model's outputs
    alone, not every fetched tensor and reduction of the augmented graph (whose copies raised PP-OCRv4
    rec A8W8's calibration peak by 8 MiB; bench/RESULTS.md, branch blockquant6): same outputs."""
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.uniform(0, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    held = [{"x": rng.uniform(-5, 5, (1, 3, 8, 8)).astype(np.float32)} for _ in range(2)]
    sessions: list[list[list[str]]] = []
    opened = runner._session

    def spying(*a, **k):
        session, asked = opened(*a, **k), []
        sessions.append(asked)
        run = session.run
        session.run = lambda names, feed, *r: asked.append(list(names)) or run(names, feed, *r)
        return session

    monkeypatch.setattr(runner, "_session", spying)
    spec = {"method": "percentile", "percentile": 99.9}
    outs: list = []
    runner.collect(_model(), {"c": spec, "y": spec}, feeds, model_outputs=[], model_output_batches=2, also_run=held,
                   also_outputs=outs)
    asked = sessions[-1]  # the calibration session (an earlier one finds the sample axes)
    assert len(asked) == len(feeds) + len(held) and all(len(names) > 1 for names in asked[len(held):]), asked
    # the held-out runs, first (their outputs decide how the recorded ones are held): the model output alone
    assert asked[:len(held)] == [["y"], ["y"]], asked
    import onnxruntime as ort

    plain = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    for feed, got in zip(held, outs):
        assert np.array_equal(got["y"], plain.run(["y"], feed)[0])


def test_the_calibration_session_runs_without_a_memory_pattern(monkeypatch):
    """Calibration opens its session without onnxruntime's memory pattern (a planned block per input
    shape beside the arena: PP-OCRv4 rec A8W8's calibration peak 282-295 -> 276 MiB; bench/RESULTS.md,
    quanttime7); the statistics and the held-out outputs are the pattern's, bit for bit."""
    import onnxptq.sessions as sessions

    opened = runner._session
    options: list = []

    def spying(*a, **k):
        session = opened(*a, **k)
        options.append(session.get_session_options().enable_mem_pattern)
        return session

    rng = np.random.default_rng(3)
    feeds = [{"x": rng.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(5)]
    held = [{"x": rng.uniform(-5, 5, (1, 3, 8, 8)).astype(np.float32)} for _ in range(2)]
    spec = {"method": "percentile", "percentile": 99.9}

    def collect():
        outs: list = []
        stats = runner.collect(_model(), {"c": spec, "y": spec}, feeds, model_outputs=[], model_output_batches=2,
                               also_run=held, also_outputs=outs)
        return stats, outs

    with monkeypatch.context() as m:
        m.setattr(runner, "_session", spying)
        stats, outs = collect()
    assert options and options[-1] is False, options
    real = sessions.open_session
    with monkeypatch.context() as m:  # the same calibration with the pattern on
        m.setattr(runner, "open_session", lambda *a, **k: real(*a, **{**k, "memory_pattern": True}))
        m.setattr(runner, "_session", spying)
        patterned, outs_p = collect()
    assert options[-1] is True
    for name in ("c", "y"):
        assert stats[name].min == patterned[name].min and stats[name].max == patterned[name].max
        assert np.array_equal(stats[name].hist.counts, patterned[name].hist.counts) and stats[name].hist.counts.sum() > 0
    for a, b in zip(outs, outs_p):
        assert np.array_equal(a["y"], b["y"])
