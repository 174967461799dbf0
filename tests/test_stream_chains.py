"""A streamed output's evidence counts clips, not chunks (analysis/evidence.py, "Chains of calls"). Issue 27: the floor's
share bound counted each held-out chunk of decibri's FastEnhancer-T as an independent draw, but the held-out calls of
one clip (one chain of calls, each fed the state of the one before) share its noise and the state the model drifted
into: 48 chunks of 1 clip confirm nothing about the next clip."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from onnxptq.analysis.evidence import Chains, ShareBound, clips, reads_to_confirm, share_bound
from onnxptq.analysis.floor import floor_for, floor_lines, measure, unconfirmed_text
from onnxptq.analysis.streams import Stream, held_out_chains
from onnxptq.config.presets import get_preset
from testkit.stream import stream_feeds, stream_model


def _kish(units: list[float], free: float) -> float:
    """Kish's effective count written as the design effect (an independent form of ``Chains.draws``): ``n / deff``,
    ``deff = 1 + (m̃ − 1) ρ`` at ``ρ = 1``, ``m̃`` the size-weighted mean cluster size, every free unit a cluster of one."""
    sizes = list(units) + [1.0] * int(free)
    n = sum(sizes)
    mean_size = sum(m * m for m in sizes) / n
    return n / (1.0 + (mean_size - 1.0) * 1.0)


def test_the_draws_of_chained_calls():
    # alike chains: the number of chains, whatever the units per call
    assert Chains((16, 16, 16), 48).draws(48) == pytest.approx(3.0)
    assert Chains((21, 21, 21), 63).draws(48) == pytest.approx(3.0)
    # no chain (every call independent): the count itself, so every unchained bound is the one it was
    assert Chains((), 64).draws(256) == 256
    for count in (7, 48, 200):
        b = ShareBound.of(47 / 48, count, "rows", 0.95)
        assert (b.low, b.high) == share_bound(47 / 48 * count, count) and b.draws is None
    # uneven chains and free calls: Kish's design effect at rho = 1
    chains = Chains((30, 2), 40)  # 8 calls in no chain
    per = 80 / 40
    assert chains.draws(80) == pytest.approx(_kish([per * 30, per * 2], 8 * per))
    assert chains.draws(80) < 2 + 16  # one long clip holds most of the units: not the 2 clips + 16 free units
    # never above the count; more chains never fewer draws
    assert Chains((2, 2), 4).draws(1) <= 1
    draws = [Chains((8,) * c, 8 * c).draws(8 * c) for c in range(1, 9)]
    assert draws == sorted(draws) and draws[-1] == pytest.approx(8.0)


def test_held_out_chains_count_the_held_out_calls_of_each_chain():
    # held-out feeds first (0..5), then calibration feeds: chain A holds held-out 0, 1, 2; chain B holds 3; 4, 5 none
    stream = Stream(pairs=(("h_in", "h_out"),), chains=((0, 6, 1, 7, 2), (8, 3, 9), (10, 11)))
    assert held_out_chains(stream, 6) == Chains((3, 1), 6)
    assert held_out_chains(stream, 6).clips == 4  # A, B, and the held-out calls 4 and 5 in no chain, each its own


def _rows(rng: np.random.Generator, lost: int, rows: int = 8, classes: int = 100) -> tuple[dict, dict]:
    """One call's class rows, float's and a candidate's with ``lost`` rows' runner-up raised just past the top-1."""
    ref = rng.normal(size=(rows, classes)).astype(np.float32)
    got = ref.copy()
    for r in range(lost):
        second = int(np.argsort(ref[r])[-2])
        got[r, second] = ref[r].max() + 0.01
    return {"p": ref}, {"p": got}


def test_one_bad_clip_among_correlated_chunks_does_not_hold():
    """8 clips of 8 held-out calls, 8 rows a call: 7 clips keep every row, the bad one loses 12 of its 64 rows (on
    its later calls: a drift through the state). 500 of 512 rows (0.977) counted as independent draws confirm the
    8-bit floor; counted as the 8 clips they are, the bound reaches below it: could NOT confirm, said in clips."""
    rng = np.random.default_rng(0)
    n_clips, calls = 8, 8
    losses = [[0] * calls for _ in range(n_clips)]
    losses[5][2:] = [2, 2, 2, 2, 2, 2]
    pairs = [_rows(rng, lost) for clip in losses for lost in clip]
    reference, candidate = [r for r, _ in pairs], [g for _, g in pairs]
    floor = floor_for(get_preset("A8W8"))
    alone = measure(reference, candidate, floor, {"p"})  # the same calls, independent (no stream): as before
    assert alone.ok and not alone.unconfirmed and alone.outputs["p"].top1 == pytest.approx(500 / 512)
    chains = Chains((calls,) * n_clips, n_clips * calls)
    verdict = measure(reference, candidate, floor, {"p"}, chains=chains)
    check = verdict.outputs["p"]
    assert verdict.ok and verdict.unconfirmed == ["p"], "one bad clip of 8 confirmed the floor"
    bound = check.unconfirmed
    assert bound.count == 512 and bound.chains == n_clips and bound.draws == pytest.approx(8.0)
    assert bound.low < floor.top1 <= bound.share
    assert bound.to_confirm == reads_to_confirm(bound.share, floor.top1, 8)  # clips like these, not rows
    state = " ".join(floor_lines(verdict))
    assert "NOT CONFIRMED" in state and f"of {clips(n_clips)}" in state and " clips like these" in state
    assert f"give data of at least {clips(bound.to_confirm)}" in unconfirmed_text(verdict)
    # the losses still break the floor where they are many: a break stays judged on the rows seen
    worse = [_rows(rng, 6 if k // calls == 5 else 0) for k in range(n_clips * calls)]
    broken = measure([r for r, _ in worse], [g for _, g in worse], floor, {"p"}, chains=chains)
    assert not broken.ok


def test_a_streamed_quantization_says_its_clips(caplog):
    """The pipeline: two clips of the testkit stream, 64 held-out calls. Every audible chunk within 20 dB of float's
    under FP16; before, its 64 chunks confirmed the 16-bit floor ("holds"); now the bound counts 2 clips."""
    import onnxptq

    model = stream_model()
    feeds = [f for clip in range(2) for f in stream_feeds(model, 96, seed=clip)]
    with caplog.at_level(logging.WARNING):
        result = onnxptq.quantize(model, dataclasses.replace(get_preset("FP16"), repair=False), data=feeds)
    verdict = result.floor
    check = verdict.outputs["y"]
    assert verdict.ok and check.chunks[0] == 1.0 and check.chunks[1] == verdict.samples == 64
    assert verdict.unconfirmed == ["y"], "64 chunks of 2 clips confirmed the floor"
    assert check.unconfirmed.chains == 2 and check.unconfirmed.draws == pytest.approx(2.0)
    assert verdict.streamed is not None and "in 2 clips" in verdict.streamed
    assert "NOT CONFIRMED" in result.summary() and "of 2 clips" in result.summary()
    assert any("could NOT confirm" in r.getMessage() and "of 2 clips" in r.getMessage() for r in caplog.records)
    assert verdict.to_json()["outputs"]["y"]["unconfirmed"]["chains"] == 2
