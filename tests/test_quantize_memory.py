"""Peak memory of a quantization, held without measuring RSS (issue 26 item 4, PP-OCRv4 rec A8W8).

Each cut that lowered rec A8W8's peak is held by the property that made it work, on the real
model, and by the one that makes it safe (the same figures as before):

1. the float outputs calibration records own their memory: an array onnxruntime returns holds its
   session's output buffer and with it the session's whole arena (~55 MiB on rec) after the
   session is gone;
2. ``release_freed(collect=True)`` collects reference cycles (the preparation's ``onnx_ir``
   graphs hold copies of the weights in cycles), and calibration asks for it on rec;
3. a feed that fills a group's input bytes alone runs alone and skips the grouping checks (their
   run of two feeds together sized the arena for two), with the statistics of one-at-a-time runs;
4. the guard simulates a large tensor one sample at a time, bit-identical to the whole tensor at
   once, on the real candidates' values of rec (integer and block quantizers);
5. the floor's pooled cosine, taken feed by feed, is the concatenation's.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref

import numpy as np
import pytest

import onnxptq.pipeline.guard as guard
from onnxptq.analysis.floor import _pooled_cosine
from onnxptq.analysis.metrics import cosine_similarity
from onnxptq.calibration import runner
from onnxptq.config.presets import get_preset
from onnxptq.memory import release_freed
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.final_plan import first_plan
from onnxptq.sessions import open_session
from testkit import ocr
from testkit.models import model_path


def _cfg(name: str):
    cfg = get_preset(name)
    return cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))


@pytest.fixture(scope="module")
def rec_lines() -> list[dict[str, np.ndarray]]:
    images, _ = ocr.render_lines(4, 11, characters=ocr.load_characters(model_path("rec")))
    return [{"x": img[None]} for img in images]


#: the ``collect`` argument of every release_freed call of the rec_calibrated fixture's calibration
RELEASES: list[bool] = []


@pytest.fixture(scope="module")
def rec_calibrated(rec_lines):
    import onnxptq.pipeline.calibrate as calibrate

    def recording(collect: bool = False) -> bool:
        RELEASES.append(collect)
        return release_freed(collect)

    calibrate.release_freed = recording
    try:
        return calibrate_once(str(model_path("rec")), _cfg("A8W8"), rec_lines, eval_samples=4)
    finally:
        calibrate.release_freed = release_freed


def _owns(a: np.ndarray) -> bool:
    return a.base is None and a.flags.owndata


def test_recorded_float_outputs_own_their_memory_and_are_the_models_outputs(rec_calibrated, rec_lines):
    cal = rec_calibrated
    assert len(cal.float_outputs) == 4
    session = open_session(cal.prepared)
    names = [o.name for o in session.get_outputs()]
    for feed, recorded in zip(rec_lines, cal.float_outputs):
        assert set(recorded) == set(names)
        for name, want in zip(names, session.run(names, feed)):
            assert _owns(recorded[name]), f"{name}: the recorded output is onnxruntime's buffer (keeps its arena alive)"
            np.testing.assert_allclose(recorded[name], want, rtol=1e-5, atol=1e-6)


def test_calibration_collects_the_preparations_cycles_on_rec(rec_calibrated):
    assert RELEASES and RELEASES[0] is True  # before calibration: rec's 10 MiB of weights are worth it


def test_release_freed_collects_reference_cycles():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle, as onnx_ir's nodes and values
    gone = weakref.ref(a)
    gc.disable()  # no automatic collection in between: release_freed must do it
    try:
        del a, b
        assert gone() is not None
        release_freed()
        assert gone() is not None  # a plain release leaves the collector alone (it costs ~45 ms)
        release_freed(collect=True)
        assert gone() is None
    finally:
        gc.enable()


def test_a_feed_that_fills_a_group_runs_alone_without_the_grouping_checks(rec_calibrated, rec_lines, monkeypatch, caplog):
    cal = rec_calibrated
    names = sorted(cal.plan.needs_calibration())[:40]
    specs = {n: cal.plan.tensors[n].collector_spec(_cfg("A8W8").calibration.num_bins) for n in names}  # as A8W8 calibrates
    assert rec_lines[0]["x"].nbytes > runner._GROUP_BYTES // 2  # one rec line fills a group on its own

    def no_probe(*args, **kwargs):
        raise AssertionError("the grouping checks ran for feeds that cannot be grouped")

    monkeypatch.setattr(runner, "sample_axes", no_probe)
    with caplog.at_level("DEBUG", logger=runner.__name__):
        alone = runner.collect(cal.prepared, specs, rec_lines)
    assert "one feed fills a group" in caplog.text
    monkeypatch.undo()
    single = runner.collect(cal.prepared, specs, rec_lines, max_group=1)
    for name in names:
        _assert_same_state(alone[name], single[name], name)


def _assert_same_state(a, b, where: str) -> None:
    """Two collectors (or parts of one) hold the same statistics."""
    if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
        return
    if hasattr(a, "_data") and hasattr(a, "size"):  # a value buffer: its valid part, in any order
        assert type(a) is type(b), where
        np.testing.assert_array_equal(np.sort(a._data[: a.size]), np.sort(b._data[: b.size]), err_msg=where)
        return
    if hasattr(a, "__dict__") and not isinstance(a, (int, float, str)):
        assert type(a) is type(b), where
        state_a, state_b = dict(vars(a)), dict(vars(b))
        assert state_a.keys() == state_b.keys(), where
        for key in state_a:
            _assert_same_state(state_a[key], state_b[key], f"{where}.{key}")
        return
    assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def rec_guard(rec_calibrated):
    """rec A8W8's guard candidates, their values on the kept lines (fetched as the guard does) and a checker."""
    cal, cfg = rec_calibrated, _cfg("A8W8")
    plan = first_plan(cal, cfg)
    candidates = guard._candidates(cal.prepared, plan)
    values = guard.GuardValues(cal.prepared, cal.kept).get([t.name for t in candidates],
                                                           {t.name: guard._measured_axes(t) for t in candidates})
    return candidates, values, guard._Checker(plan, cal.stats, values, cfg.range_guard_sqnr_db)


@pytest.mark.parametrize("preset", ["A8W8", "MX9"])
def test_guard_simulates_large_tensors_sample_by_sample_bit_identically(rec_guard, monkeypatch, preset):
    candidates, values, checker = rec_guard
    default_chunk = guard.SIMULATE_CHUNK
    # rec's 4x40x6625 softmax logits made the guard's peak; they are class scores now, kept float
    # (analysis/class_scores.score_float_tensors), and the largest candidates left are the head's
    # inputs, of the chunk's order: simulated in parts below at a chunk of 1.
    assert max(values[t.name].size for t in candidates) > default_chunk // 2
    quant = _cfg(preset).activation
    several = [t for t in candidates if values.get(t.name) is not None and values[t.name].ndim >= 2 and values[t.name].shape[0] >= 2]
    if not quant.is_integer:  # the block reference is slow: the largest tensors only
        several = sorted(several, key=lambda t: -values[t.name].size)[:2]
    assert len(several) >= (20 if quant.is_integer else 2)
    for t in several:
        x = values[t.name]
        if quant.is_integer:
            tplan, params = t, checker.params(t)
        else:  # the block quantizer along the channel axis, on the same real values
            tplan, params = dataclasses.replace(t, quant=quant, axis=1), None
        monkeypatch.setattr(guard, "SIMULATE_CHUNK", 1 << 40)
        whole = guard.simulate(x, tplan, params)
        monkeypatch.setattr(guard, "SIMULATE_CHUNK", 1)
        parts = guard.simulate(x, tplan, params)
        assert parts.dtype == whole.dtype == np.float32
        np.testing.assert_array_equal(parts, whole, err_msg=t.name)


def test_pooled_cosine_is_the_concatenations():
    rng = np.random.default_rng(3)
    refs = [rng.standard_normal((1, 40, 661)).astype(np.float32) for _ in range(5)]
    gots = [r + 0.05 * rng.standard_normal(r.shape).astype(np.float32) for r in refs]
    want = cosine_similarity(np.concatenate([r.ravel() for r in refs]), np.concatenate([g.ravel() for g in gots]))
    got = _pooled_cosine([r.ravel() for r in refs], [g.ravel() for g in gots])
    assert got == pytest.approx(want, rel=1e-12, abs=1e-14)
    assert _pooled_cosine([np.zeros(3)], [np.zeros(3)]) == 1.0
    assert _pooled_cosine([np.zeros(3)], [np.ones(3)]) == 0.0
    assert _pooled_cosine([refs[0]], [-refs[0]]) == pytest.approx(-1.0)


def test_repair_orders_estimate_holds_one_session_at_a_time_with_the_same_errors(rec_calibrated, monkeypatch):
    """Repair's order estimate (algorithms/repair_order.tensor_errors) on rec A8W8's plain build: the
    float and the quantized session never live at once, each frees a full tensor once its thinned
    copy is taken (priority order), and the errors are those of both sessions opened side by side in
    graph order, as before, to the bit. Both open at once were rec A8W8's peak: 417 MiB against 293
    for the rest of its quantization (bench/RESULTS.md, quanttime8)."""
    import onnxptq.algorithms.repair_order as order
    from onnxptq.pipeline.build import build_model

    cal = rec_calibrated
    quantized = build_model(cal, _cfg("A8W8")).model
    feeds = (cal.holdout or cal.kept)[:order.FEEDS]
    assert feeds
    live: list[weakref.ref] = []
    most, options = [0], []

    def opened(model, **kw):
        gc.collect()
        alive = [r for r in live if r() is not None]
        session = open_session(model, **kw)
        live.append(weakref.ref(session))
        most[0] = max(most[0], len(alive) + 1)
        options.append(kw)
        return session

    monkeypatch.setattr(order, "open_session", opened)
    errors = order.tensor_errors(cal.prepared, quantized, feeds)
    assert len(options) == 2 and most[0] == 1, f"{most[0]} estimate sessions alive at once"
    assert all(kw["priority_order"] and kw["optimization"] == "none" for kw in options)

    # as before: both sessions, graph order, opened side by side
    pairs_f = sorted({n for n in cal.prepared.graph.node for n in n.output} & set(errors))
    ref_model, ref_out = order._thinned(cal.prepared, pairs_f)
    q_model, q_out = order._thinned(quantized, pairs_f)
    fs = open_session(ref_model, log_severity=3, threads=1, optimization="none")
    qs = open_session(q_model, log_severity=3, threads=1, optimization="none", inline_functions_first=False)
    fetched_f = [fs.run([ref_out[n] for n in pairs_f], dict(feed)) for feed in feeds]
    fetched_q = [qs.run([q_out[n] for n in pairs_f], dict(feed)) for feed in feeds]
    for i, name in enumerate(pairs_f):
        f = np.concatenate([run[i] for run in fetched_f]).astype(np.float64)
        q = np.concatenate([run[i] for run in fetched_q]).astype(np.float64)
        if f.shape != q.shape:
            continue
        want = float((q - f) @ (q - f)) / float(f @ f) if float(f @ f) > 0 else errors[name]
        assert errors[name] == pytest.approx(want, rel=1e-12, abs=0), name
    assert len(pairs_f) > 100  # rec's activations, not a handful


def test_walking_a_models_graphs_leaves_no_reference_cycle(rec_calibrated):
    """graph/walk.walk_scopes' scopes die with their last reference, not at the collector's next full
    run: a recursive closure over the scope list kept every walked graph (and its model's whole
    protobuf) alive in a cycle; repair walks each candidate, and rec A8W8's dead candidates stayed
    through the next ones' runs (its peak 318 -> 295-300 MiB; bench/RESULTS.md, quanttime8)."""
    from onnxptq.graph.walk import ScopeIndex, walk_scopes

    graph = rec_calibrated.prepared.graph
    gc.disable()
    try:
        scopes = walk_scopes(graph)
        index = ScopeIndex(rec_calibrated.prepared)
        alive = [weakref.ref(scopes[0]), weakref.ref(index.main)]
        assert len(scopes) == 1 and len(scopes[0].nodes) == len(graph.node)
        del scopes, index
        assert [r() for r in alive] == [None, None]
    finally:
        gc.enable()
