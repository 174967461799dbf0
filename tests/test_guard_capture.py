"""The range guard's float values fetched by the calibration pass itself (issue 26 item 1).

The plain build's guard used to open a float session of its own and run the first kept samples
again; :class:`onnxptq.pipeline.guard.CalibrationCapture` has calibration's runs of those very
feeds fetch the same thinned values. Held here: the runner hands each of the first feeds' values
to the side fetch and its statistics do not change; the seed holds every guard candidate with
the values the guard's own session gives (float rounding apart); the guard then opens no session
and decides exactly as before, on a graph where it acts (a detector head's mixed-range Concat) and
on a real model, whose delivered file is byte-identical with and without the seed.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxptq.pipeline.guard as guard
from _box_score_head import box_score_head
from onnxptq.api import quantize
from onnxptq.calibration import runner
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.final_plan import final_plan
from onnxptq.sessions import open_session
from testkit.models import model_path


def _head() -> onnx.ModelProto:
    """x [N,4,8,8] → boxes = Relu(Conv) in 0..600, scores = Sigmoid(Conv); Concat on axis 1, read by a
    Conv: the guard flushes the scores under one scale or one exponent per block across channels."""
    return box_score_head(2, 6, next_channels=3)

def _data(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0.0, 1.0, size=(1, 4, 8, 8)).astype(np.float32)} for _ in range(n)]


class _Recorder(runner.SideFetch):
    def __init__(self, outputs: list[str], feeds: int) -> None:
        self.outputs, self.feeds, self.got = outputs, feeds, []

    def take(self, values):
        self.got.append({k: np.array(v) for k, v in values.items()})


@pytest.mark.parametrize("spec", ["minmax", {"method": "percentile", "percentile": 99.9}])
def test_runner_hands_each_first_feed_to_the_side_fetch_and_keeps_its_statistics(spec):
    model, feeds = _head(), _data(10)
    plain = runner.collect(model, {"y": spec, "boxes": spec}, feeds)
    side = _Recorder(["y", "scores"], 3)
    sided = runner.collect(model, {"y": spec, "boxes": spec}, feeds, side=side)
    ref = open_session(model).run  # the float values, one feed at a time
    assert len(side.got) == 3
    fetch = helper.make_model(model.graph, opset_imports=model.opset_import)
    fetch.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "scores")])
    fetch.ir_version = model.ir_version
    run = open_session(fetch).run
    for feed, got in zip(feeds, side.got):
        want = dict(zip(["y", "scores"], run(["y", "scores"], feed)))
        for name in ("y", "scores"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-4)
    del ref
    for name in ("y", "boxes"):
        assert plain[name].min == sided[name].min and plain[name].max == sided[name].max
        assert plain[name].batches == sided[name].batches


EVERY = dict(quantize_postprocessing=True, int_block_dot_operands_only=False)


def test_a_statistics_pass_seeds_the_guard_too():
    """A8W8 gathers statistics: the thinning nodes run on every feed of that pass (one Slice a
    tensor), and the guard reads the first four feeds' values from it instead of a float session
    of its own (four whole runs; lore_detect A16W8: ~10 of 48 CPU s). Main: no seed here."""
    cfg = get_preset("A8W8").replace(**EVERY)
    calibrated = calibrate_once(_head(), cfg, _data(12), holdout=4)
    assert calibrated.stats and calibrated.guard_seed
    assert "y" in final_plan(calibrated, cfg).guard


@pytest.mark.parametrize("preset", ["MXINT8", "BFP16", "MX9", "A8W8"])
def test_seeded_guard_opens_no_session_and_decides_as_its_own_session(preset, monkeypatch):
    cfg = get_preset(preset).replace(**EVERY)
    calibrated = calibrate_once(_head(), cfg, _data(12), holdout=4)
    seed = calibrated.guard_seed
    assert seed, "the calibration pass fetched no guard values"
    candidates = [t.name for t in guard._candidates(calibrated.prepared, calibrated.plan)]
    assert set(candidates) <= set(seed), (candidates, sorted(seed))
    protect = {n: seed[n][1] for n in candidates}
    own = guard._tensor_values(calibrated.prepared, candidates, calibrated.kept[: guard.MAX_SAMPLES], protect)
    for name in candidates:
        assert seed[name][0].shape == own[name].shape, name
        np.testing.assert_allclose(seed[name][0], own[name], rtol=1e-5, atol=1e-5 * float(np.abs(own[name]).max()))

    # Without the seed: the guard's own session (as on main).
    calibrated.guard_seed = None
    unseeded = final_plan(calibrated, cfg)
    calibrated.guard_seed = seed

    real = guard._tensor_values

    def single_positions_refused(model, names, samples, protect=None, run=1):
        # Block runs (a block-format tensor flagged, retried along another axis) are the guard's
        # own fetch still; the single positions every check reads come from calibration.
        assert run != 1, f"the guard ran the float model for {names} although calibration fetched them"
        return real(model, names, samples, protect, run)

    monkeypatch.setattr(guard, "_tensor_values", single_positions_refused)
    seeded = final_plan(calibrated, cfg)
    assert "y" in unseeded.guard  # the guard acts here
    assert set(seeded.guard) == set(unseeded.guard)
    for name, d in unseeded.guard.items():
        e = seeded.guard[name]
        assert (e["action"], e["axis"], e["worst_channel"], e["flushed_channels"], e["channels"]) == \
            (d["action"], d["axis"], d["worst_channel"], d["flushed_channels"], d["channels"])
        assert abs(e["worst_sqnr_db"] - d["worst_sqnr_db"]) <= 0.02
    assert sorted(seeded.tensors) == sorted(unseeded.tensors)
    assert {n: t.axis for n, t in seeded.tensors.items()} == {n: t.axis for n, t in unseeded.tensors.items()}


def test_the_seed_holds_only_for_the_samples_the_guard_reads():
    cfg = get_preset("MXINT8").replace(**EVERY)
    calibrated = calibrate_once(_head(), cfg, _data(2))
    # Two feeds where four were expected (the budget per sample was the four's): no seed, the
    # guard reads the two itself.
    assert len(calibrated.kept) == 2 and calibrated.guard_seed is None
    capture = guard.CalibrationCapture(calibrated.prepared, calibrated.plan, 8)
    assert capture.feeds == guard.MAX_SAMPLES
    one = {capture.fetched[n]: np.ones((1, 8, 8, 8), np.float32) for n in capture.parts}
    capture.take(one)
    assert capture.seed(8) is None  # four samples expected, one taken: the guard fetches its own
    for _ in range(guard.MAX_SAMPLES - 1):
        capture.take(one)
    assert capture.seed(3) is None  # the guard would read three samples (another budget)
    assert capture.seed(8) is not None


@pytest.mark.parametrize("preset", ["MXINT8"])  # A8W8's path (statistics collected too): the head graph above
def test_real_model_file_is_the_same_with_the_seed(preset, monkeypatch):
    path = str(model_path("cls"))
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    data = [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(8)]
    cfg = get_preset(preset).replace(repair=False)  # the plain build (repair's builds share its guard values)
    opened = []
    real_open = guard.open_session
    monkeypatch.setattr(guard, "open_session", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    seeded = quantize(path, cfg, data=data)
    assert opened == [], "the plain build's guard opened a float session"
    monkeypatch.setattr(guard.CalibrationCapture, "seed", lambda self, kept: None)
    unseeded = quantize(path, cfg, data=data)
    assert opened, "without the seed the guard runs its own session"
    digest = lambda r: hashlib.sha256(r.model.SerializeToString(deterministic=True)).hexdigest()  # noqa: E731
    assert digest(seeded) == digest(unseeded)
    assert seeded.plan.guard == unseeded.plan.guard


def test_static_thinning_takes_the_runtime_thinnings_indices():
    """A tensor of known extents is thinned by one constant Slice, one of extents known at run time
    only by five nodes that compute the steps: both take every ``floor(d / 32) + 1``-th index of
    each thinned axis, as the one Slice per axis before them (subsample.thin_in_graph)."""
    from onnxptq.pipeline.subsample import thin_in_graph

    rng = np.random.default_rng(3)
    for shape, protect in [((1, 8, 70, 33), (1,)), ((1, 8, 70, 33), (1, -1)), ((1, 5, 31), (-1,)), ((1, 100, 7), (1,)),
                           ((1, 40, 6, 90), (2,)), ((1, 3, 64, 65), (1,))]:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
        outs = {}
        for mode, dims in (("dynamic", None), ("static", list(shape))):
            graph = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "g", [x], [])
            out, nodes = thin_in_graph(graph, "t", len(shape), protect, dims=dims)
            graph.node.extend(nodes)
            graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            outs[mode] = (len(nodes), open_session(model))
        assert outs["static"][0] == 1 and outs["dynamic"][0] == 5
        feed = {"x": rng.normal(size=shape).astype(np.float32)}
        a, b = outs["dynamic"][1].run(None, feed)[0], outs["static"][1].run(None, feed)[0]
        # every axis but 0 and the protected ones: every floor(d / 32) + 1-th index
        kept = {a_ % len(shape) for a_ in protect} | {0}
        want = feed["x"][tuple(slice(None) if ax in kept else slice(None, None, shape[ax] // 32 + 1)
                               for ax in range(len(shape)))]
        assert np.array_equal(a, want) and np.array_equal(b, want), shape
