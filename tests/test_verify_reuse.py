"""The delivered build of a repair takes the judgement a candidate made on its very bytes (pipeline/verify.py).

Repair ends with the delivered build (``complete`` with the search's answer), which used to run the
held-out feeds (and the calibration feeds a reads judgement pools) again on the finish session. An
integer plan's candidates are built as they are delivered, so the search's last held candidate often
*is* the delivered file, byte for byte; where its session was also configured as finish's, the
judgement is taken instead of made again (lore_detect A8W8: ~7 of 33 CPU s; bench/RESULTS.md, branch
blockquant6). What these tests would catch: a reused judgement that differs from the one the runs
give (verdict, figures, file), a reuse across a different session (thread count) or different bytes,
and the reuse silently lost (the feeds run again).
"""

from __future__ import annotations

import hashlib
import json

import onnx
import pytest

from onnxptq.algorithms import repair as repair_module
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline import complete as complete_module
from onnxptq.pipeline import finish as finish_module
from onnxptq.pipeline import verify
from test_repair_step_up import activation_feeds, spread_activations


@pytest.fixture(scope="module")
def spread():
    return spread_activations(), activation_feeds()


@pytest.fixture(scope="module")
def reused(spread):
    """The quantization that reuses (finish's session at one thread, as the candidates')."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _quantize(*spread, monkeypatch, threads=1)


def _quantize(model, feeds, monkeypatch, threads: int, reuse: bool = True):
    """A8W8 with repair (a budget no loaded machine reaches: the same search every time), finish's
    session at ``threads`` intra-op threads; returns the result, the feeds each verification ran and
    how many sessions finish opened."""
    runs: list[int] = []
    opened: list[int] = []
    feeding, opening = complete_module.run_feeds, finish_module.open_session

    def spy(session, names, fs, *reduce):
        runs.append(len(fs))
        return feeding(session, names, fs, *reduce)

    def open_spy(*a, **k):
        opened.append(1)
        return opening(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(complete_module, "run_feeds", spy)
        m.setattr(finish_module, "open_session", open_spy)
        # Every held candidate remembered, whatever the CPU clock says (worth_remembering compares
        # the runs' CPU with the judgement's: on this small chain the two are close)
        m.setattr(repair_module, "worth_remembering", lambda runs, judged: True)
        m.setattr(finish_module, "run_threads", lambda: threads)
        if not reuse:
            m.setattr(verify.Verified, "recall", lambda self, model, signature, digest=None: None)
        result = quantize(model, resolve_config("A8W8").replace(repair_budget=50.0), feeds)
    return result, runs, len(opened)


def _same(a, b) -> None:
    assert hashlib.sha256(a.model.SerializeToString()).digest() == hashlib.sha256(b.model.SerializeToString()).digest()
    assert json.dumps(a.floor.to_json(), sort_keys=True) == json.dumps(b.floor.to_json(), sort_keys=True)
    assert a.metrics == b.metrics
    assert a.repair["evaluations"] == b.repair["evaluations"] and a.repair["stepped_up"] == b.repair["stepped_up"]


def test_the_delivered_build_takes_its_bytes_judgement(spread, reused, monkeypatch):
    model, feeds = spread
    reused, runs, opened = reused
    assert reused.repair["stepped_up"] and reused.floor.ok
    # The plain build's verification ran its feeds (the held-out ones, then the calibration feeds the
    # reads judgement pools); the delivered build ran none.
    assert runs and len(runs) <= 2, runs
    # ... and finish opened no session for it: one session, the plain build's (blockquant10)
    assert opened == 1
    again, runs_again, opened_again = _quantize(model, feeds, monkeypatch, threads=1, reuse=False)
    assert runs_again == runs + runs, runs_again  # judged by its own runs: the same feeds once more
    assert opened_again == 2
    _same(reused, again)


def test_a_session_unlike_the_candidates_is_judged_again(spread, reused, monkeypatch):
    """Finish's session with two threads (the candidates' had one): not the same session, so the
    delivered build runs its feeds; the file and the judgement are those of the reuse all the same."""
    model, feeds = spread
    reused, runs, _ = reused
    judged, runs_judged, opened = _quantize(model, feeds, monkeypatch, threads=2)
    assert runs_judged == runs + runs, runs_judged
    assert opened == 2  # and finish opened a session for the delivered build
    _same(reused, judged)


@pytest.fixture(scope="module")
def judged(spread):
    """The plain A8W8 build of the chain through finish (its bytes' digest taken from finish's own
    serialization), with its runs on the held-out and the pooled calibration feeds."""
    from onnxptq.pipeline.calibrate import calibrate_once
    from onnxptq.pipeline.build import build_model
    from onnxptq.pipeline.finish import finish
    from onnxptq.sessions import run_feeds

    model, feeds = spread
    cfg = resolve_config("A8W8")
    calibrated = calibrate_once(model, cfg, feeds, holdout=8)
    digests = []
    built, session = finish(build_model(calibrated, cfg).model, "spread", lambda data: digests.append(verify.bytes_digest(data)))
    names = [o.name for o in calibrated.prepared.graph.output]
    got = [dict(zip(names, out)) for out in run_feeds(session, names, calibrated.holdout)]
    pooled = calibrated.judged_calibration_feeds(8)
    seen = [dict(zip(names, out)) for out in run_feeds(session, names, pooled)]
    return cfg, calibrated, built, verify.session_signature(session), digests, names, got, pooled, seen


def test_finish_tells_its_sessions_signature_without_opening_one(judged):
    """``finish_signature`` (what a recall is looked up with before finish decides to open its
    session) is the signature of the session finish opens; a thread count of its own moves both."""
    from onnxptq.pipeline.finish import finish_signature

    signature = judged[3]
    assert finish_signature() == signature
    with pytest.MonkeyPatch.context() as m:
        m.setattr(finish_module, "run_threads", lambda: 3)
        assert finish_signature() == signature[:1] + (3,) + signature[2:]


def test_other_bytes_are_not_recalled(judged):
    """A judgement is keyed by the model's serialized bytes and its session's signature; finish hands
    out the digest of the bytes it serialized, the one a second serialization gives."""
    cfg, calibrated, built, signature, digests, names, got, pooled, seen = judged
    assert digests == [verify.model_digest(built)]
    known = verify.Verified(calibrated, 8)
    assert known.recall(built, signature) is None  # nothing remembered
    # The reads judgement pools the first calibration feeds: without their runs, nothing to remember.
    assert not known.remember(built, signature, cfg, got)
    assert known.remember(built, signature, cfg, got, pooled, seen)
    verdict, metrics = known.recall(built, signature)
    assert set(metrics) == set(names) and verdict.outputs
    assert known.recall(built, signature, digests[0])[0] is verdict
    assert known.recall(built, signature, "0" * 64) is None  # the digest given is the one looked up
    other = onnx.ModelProto()
    other.CopyFrom(built)
    other.doc_string = "one byte more"
    assert known.recall(other, signature) is None
    assert known.recall(built, signature[:1] + (signature[1] + 1,) + signature[2:]) is None


def test_a_candidates_verdict_is_taken_not_measured_again(judged, monkeypatch):
    """``remember`` given the verdict a candidate's floor gave on these outputs (pooled feeds beside
    them) measures only what that verdict cannot say (whether the pooled feeds are asked for), and
    its judgement is the one measuring everything gives; under another floor it measures again."""
    from onnxptq.analysis import floor as floor_module

    cfg, calibrated, built, signature, digests, names, got, pooled, seen = judged
    floor = floor_module.floor_for(cfg)
    candidate = floor_module.measure(calibrated.holdout_outputs, got, floor, reused=calibrated.holdout_reused,
                                     seen=(calibrated.judged_float_outputs(pooled[:len(seen)]), seen), **calibrated.readings)
    everything = verify.Verified(calibrated, 8)
    assert everything.remember(built, signature, cfg, got, pooled, seen)
    expected = everything.recall(built, signature)
    calls = []
    measuring = floor_module.measure
    monkeypatch.setattr(floor_module, "measure", lambda *a, **k: calls.append(k.get("seen") is not None) or measuring(*a, **k))
    taken = verify.Verified(calibrated, 8)
    assert taken.remember(built, signature, cfg, got, pooled, seen, verdict=candidate, floor=floor)
    assert calls == [False]
    verdict, metrics = taken.recall(built, signature)
    assert verdict is candidate and metrics == expected[1]
    assert json.dumps(verdict.to_json(), sort_keys=True) == json.dumps(expected[0].to_json(), sort_keys=True)
    calls.clear()
    other = verify.Verified(calibrated, 8)
    assert other.remember(built, signature, cfg, got, pooled, seen, verdict=candidate,
                          floor=floor_module.Floor(floor.family, 0.5, 0.5))
    assert calls == [False, True]


class _Judge:
    """A stand-in build of COST CPU s (every candidate breaks: the search keeps splitting); with
    ``remembering``, each also spends COST CPU s judging for the delivered build, as ``untimed``."""

    COST = 0.02

    def __init__(self, remembering: bool) -> None:
        self.evaluations, self.untimed, self.remembering, self.spent = 0, 0.0, remembering, 0.0

    @staticmethod
    def _burn(seconds: float) -> None:
        import time

        end = time.process_time() + seconds
        while time.process_time() < end:
            pass

    def __call__(self, kept, rung=None):
        import time
        from types import SimpleNamespace

        self.evaluations += 1
        self._burn(self.COST)
        self.spent += self.COST  # the budget's work seconds: the build's, never the judging kept for delivery
        if self.remembering:
            started = time.process_time()
            self._burn(self.COST)
            self.untimed += time.process_time() - started
        return SimpleNamespace(ok=False)


def test_judging_for_the_delivered_build_is_off_the_search_budget():
    """The CPU a judge spends on judgements kept for the delivered build does not count against
    the search's time cap: with it the search makes the builds it makes without it (twice the CPU per
    build otherwise stopped it at half the builds)."""
    import time

    from onnxptq.algorithms import repair

    builds = []
    for remembering in (False, True):
        judge = _Judge(remembering)
        cap = 12.5 * _Judge.COST
        repair._search(judge, [f"n{i}" for i in range(64)], 100, cap=cap, last_cost=_Judge.COST)
        builds.append(judge.evaluations)
    assert builds[0] > 8 and builds[1] == builds[0], builds


def test_worth_remembering_where_the_runs_cost_more_than_a_judgement():
    assert verify.worth_remembering(5.0, 0.7) and not verify.worth_remembering(0.1, 0.3)
