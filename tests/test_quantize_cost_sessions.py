"""What a quantization spends in onnxruntime sessions and memory, held without timing (issue 26).

Block-format models carry hundreds of function calls; creating a session on them and running it
are most of their quantize time. These tests hold the cuts made there, each with the property
that makes it safe: (1) finish's session inlines functions after the level-1 optimisers and gives
the same outputs as a default session; (2) held-out feeds that are the kept feeds are not run a
second time, and the verdict is the one a fresh run gives; (3) function bodies built once per
process are copies, equal to a fresh build; (4) the guard's per-channel SQNR is bit-identical to
its straightforward formula; (5) freed memory goes back to the OS where the C library allows it.
"""

from __future__ import annotations

import dataclasses
import platform
import sys

import numpy as np
import pytest

import onnxptq.pipeline.complete as complete_mod
import onnxptq.pipeline.guard as guard
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.memory import release_freed
from onnxptq.pipeline.finish import finish, finish_file
from onnxptq.sessions import open_session

from test_quantize_cost import conv_chain

AOT_KEY = "session.disable_aot_function_inlining"


def _cfg(name: str, **changes):
    cfg = get_preset(name)
    return cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False), **changes)


def _data(n: int, hw: int = 24, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0, 1, (1, 4, hw, hw)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("fmt", ["MX9", "BFP16"])
def test_finish_session_inlines_after_level1_and_matches_the_default_session(fmt):
    result = quantize(conv_chain(3), _cfg(fmt, repair=False), _data(4), eval_samples=2)
    assert result.model.functions, "a block-format model calls functions"
    _, session = finish(result.model, "test")
    assert session.get_session_options().get_session_config_entry(AOT_KEY) == "1"
    default = open_session(result.model)
    for feed in _data(3, seed=7):
        np.testing.assert_array_equal(session.run(None, feed)[0], default.run(None, feed)[0])


class _Counting:
    """A session proxy counting its runs."""

    def __init__(self, session) -> None:
        self.session, self.runs = session, 0

    def run(self, *a, **k):
        self.runs += 1
        return self.session.run(*a, **k)

    def run_with_iobinding(self, *a, **k):  # sessions.run_feeds: outputs bound to arrays of its own
        self.runs += 1
        return self.session.run_with_iobinding(*a, **k)

    def __getattr__(self, name):
        return getattr(self.session, name)


def _count_finish_runs(monkeypatch) -> list[_Counting]:
    """Wrap ``finish``'s session so each quantize's runs are counted; the list fills per call."""
    seen: list[_Counting] = []

    def counting_finish(model, source, *hooks, **options):
        model, session = finish(model, source, *hooks, **options)
        seen.append(_Counting(session))
        return model, seen[-1]

    def counting_file(*args, **options):  # finish's session on the file's bytes (pipeline/finish.py finish_file)
        found = finish_file(*args, **options)
        if found is None:
            return None
        session, names, file = found
        seen.append(_Counting(session))
        return seen[-1], names, file

    monkeypatch.setattr(complete_mod, "finish", counting_finish)
    monkeypatch.setattr(complete_mod, "finish_file", counting_file)
    return seen


def test_held_out_feeds_that_are_the_kept_feeds_are_not_run_twice(monkeypatch):
    seen = _count_finish_runs(monkeypatch)
    # 4 feeds: too few to hold any out (calibrate.MIN_SPLIT), so the held-out feeds are the 4 kept ones
    result = quantize(conv_chain(2), _cfg("MX9", repair=False), _data(4), eval_samples=4)
    assert result.floor is not None and result.floor.samples == 4
    assert [s.runs for s in seen] == [4]  # the held-out feeds once: the floor and the figures share the runs
    # the verdict a fresh run of every held-out feed gives
    from onnxptq.analysis.floor import floor_for, measure, readings_of
    from onnxptq.pipeline.prepare import prepare_for_quantization

    prepared = prepare_for_quantization(conv_chain(2), _cfg("MX9"))
    names = [o.name for o in prepared.graph.output]
    feeds = _data(4)
    ref, quant = open_session(prepared), open_session(result.model)
    want = measure([dict(zip(names, ref.run(names, f))) for f in feeds], [dict(zip(names, quant.run(names, f))) for f in feeds],
                   floor_for(result.config), reused=True, **readings_of(prepared))
    assert want.to_json() == result.floor.to_json()


def test_held_out_feeds_of_their_own_are_run(monkeypatch):
    result = quantize(conv_chain(2), _cfg("A8W8", repair=False), _data(30), eval_samples=2)
    assert result.floor is not None and result.floor.samples == 8 and not result.floor.reused
    seen = _count_finish_runs(monkeypatch)
    # 12 feeds: a third (4) held out of calibration and run once; the figures are theirs, so the
    # 4 kept calibration feeds are not run (they were, for the figures, before)
    result = quantize(conv_chain(2), _cfg("MX9", repair=False), _data(12), eval_samples=4)
    assert result.floor.samples == 4 and not result.floor.reused and result.calibration_samples == 8
    assert [s.runs for s in seen] == [4]
    assert result.metrics_samples == "4 held-out samples"


@pytest.mark.parametrize("fmt", ["bfp", "mx"])
def test_function_bodies_built_once_are_copies_equal_to_a_fresh_build(fmt):
    from onnxptq.onnx_ops import bfp, mx

    if fmt == "bfp":
        attrs = get_preset("MX9").activation.attr_dict
        first = bfp.build("bfp", "a", "b", name="n1", opset=17, shape=[1, 40, 8, 8], dtype="float32", **attrs)
        fresh = bfp._function(bfp.normalize_attrs(**attrs), max(17, bfp.MIN_OPSET), first.functions[0].name,
                              bfp.body_view(bfp.normalize_attrs(**attrs), [1, 40, 8, 8]), True)
    else:
        attrs = get_preset("MXINT8").activation.attr_dict
        first = mx.build("mx", "a", "b", name="n1", opset=17, shape=[1, 40, 8, 8], dtype="float32", **attrs)
        fresh = None
    body = first.functions[0].SerializeToString()
    first.functions[0].name = "changed"
    del first.functions[0].node[:]
    again = (bfp.build("bfp", "c", "d", name="n2", opset=17, shape=[1, 40, 8, 8], dtype="float32", **attrs) if fmt == "bfp"
             else mx.build("mx", "c", "d", name="n2", opset=17, shape=[1, 40, 8, 8], dtype="float32", **attrs))
    assert again.functions[0].SerializeToString() == body  # the caller's edit did not reach the cache
    if fresh is not None:
        assert fresh.SerializeToString() == body


def _sqnr_formula(x, q, axis):
    """The guard's per-channel SQNR as first written (whole float64 copies at once)."""
    xm = np.moveaxis(np.asarray(x, dtype=np.float64), axis, 0).reshape(x.shape[axis], -1)
    qm = np.moveaxis(np.asarray(q, dtype=np.float64), axis, 0).reshape(x.shape[axis], -1)
    signal, noise = np.sum(xm * xm, axis=1), np.sum((xm - qm) ** 2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sqnr = np.where(noise == 0, guard._EXACT, 10.0 * np.log10(signal / np.where(noise == 0, 1.0, noise)))
    peak = np.max(np.abs(xm), axis=1)
    live = peak > guard.DEAD_CHANNEL * max(float(np.max(peak)) if peak.size else 0.0, 1e-30)
    return np.minimum(sqnr, guard._EXACT), live


@pytest.mark.parametrize("shape", [(4, 40, 6625), (4, 48, 1, 80), (3, 5, 7001), (2, 7)])
def test_channel_sqnr_is_bit_identical_to_its_formula(shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * rng.uniform(0, 10, shape[-1:])).astype(np.float32)
    x[..., 0] = 0.0  # a dead channel along the last axis
    q = np.round(x * 4) / 4
    for axis in range(len(shape)):
        got, want = guard.channel_sqnr(x, q, axis), _sqnr_formula(x, q, axis)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_release_freed_where_the_c_library_has_malloc_trim():
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert release_freed() is glibc


# --- issue 26 item 1, third round (branch qtime3): the finish session without spinning,
# --- verification runs two at a time, the held-out float outputs from the calibration's session


def test_verification_runs_two_at_a_time_give_each_feed_its_own_outputs():
    """sessions.run_feeds on a block-format PP-OCR cls (MX9, ~50 function calls): every feed's
    outputs are the ones a run of that feed alone gives, in the feeds' order (a mix-up of order or
    a shared output buffer fails here: the feeds differ)."""
    from onnxptq.sessions import run_feeds
    from testkit.models import model_path

    rng = np.random.default_rng(3)
    feeds = [{"x": rng.random((1, 3, 48, 192), dtype=np.float32) * (i + 1)} for i in range(6)]
    result = quantize(model_path("cls"), _cfg("MX9"), None)  # a block format needs no data to quantize
    session = open_session(result.model, spinning=False)
    names = [o.name for o in session.get_outputs()]
    alone = [session.run(names, feed) for feed in feeds]
    together = run_feeds(session, names, feeds)
    assert len(together) == len(feeds)
    for a, b in zip(alone, together):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert not np.array_equal(alone[0][0], alone[1][0])  # the feeds are told apart


def test_finish_reports_the_checker_first_and_its_session_does_not_spin():
    import onnx
    from onnx import TensorProto, helper

    def model(op: str, domain: str = "") -> onnx.ModelProto:
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain=domain)], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        m = helper.make_model(graph, opset_imports=opsets)
        m.ir_version = 8
        return m

    # No such op: the checker and onnxruntime both refuse it; the checker's verdict is the one given.
    with pytest.raises(RuntimeError, match="fails the ONNX checker"):
        finish(model("NoSuchOp"), "m1")
    # An op of an unknown domain passes the checker; onnxruntime's refusal is reported as such.
    with pytest.raises(RuntimeError, match="onnxruntime cannot load"):
        finish(model("Mystery", "example.unknown"), "m2")
    _, session = finish(model("Relu"), "m3")
    assert session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
    np.testing.assert_array_equal(session.run(None, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])


@pytest.mark.parametrize("fmt", ["MX9", "A8W8"])
def test_held_out_float_outputs_come_from_the_calibration_session_where_it_collects_nothing(monkeypatch, fmt):
    """A block format collects no statistics: its calibration session runs the held-out feeds too
    (one float session, each feed once, no grouping probe); their outputs are those a separate
    session gives. A format with statistics keeps its separate run."""
    from onnxptq.calibration import runner
    from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, calibrate_once, float_outputs_of

    sessions: list[_Counting] = []
    made = runner._session

    def counting(*a, **k):
        sessions.append(_Counting(made(*a, **k)))
        return sessions[-1]

    monkeypatch.setattr(runner, "_session", counting)
    cfg = _cfg(fmt)
    calibrated = calibrate_once(conv_chain(2), cfg, _data(12), eval_samples=4, holdout=DEFAULT_HOLDOUT)
    assert len(calibrated.holdout) == 4 and not calibrated.holdout_reused
    if fmt == "MX9":
        assert len(sessions) == 1  # was two: calibration's, then float_outputs_of's
        assert sessions[0].runs == len(calibrated.float_outputs) + len(calibrated.holdout) == 8  # no probe run
    else:  # statistics: the held-out feeds run in a float session of their own, as before
        assert len(sessions) >= 2 and sessions[-1].runs >= len(calibrated.holdout)
    monkeypatch.setattr(runner, "_session", made)
    fresh = float_outputs_of(calibrated.prepared, calibrated.holdout, cfg)
    assert len(fresh) == len(calibrated.holdout_outputs) == 4
    for a, b in zip(fresh, calibrated.holdout_outputs):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
