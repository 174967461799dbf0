"""A streamed model judged as it is used (analysis/streams.py, pipeline/streamed.py), and a waveform chunk
shorter than a frame read by its SNR (analysis/waveform_reads.py, "Chunks"). Issue 27: decibri's
FastEnhancer-T, per call within 20 dB of float on every held-out chunk under A16W8 and MX9, drifted through
its caches when streamed; and its ``[1, 256]`` chunk was read by a cosine that allows ~17 dB SNR."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxptq.analysis.floor import floor_for, floor_lines, measure
from onnxptq.analysis.streams import carried_outputs, find_stream, state_pairs, streamed_outputs
from onnxptq.analysis.waveform_reads import CHUNK_SNR_DB, chunk_snr, is_chunk, waveform_outputs
from onnxptq.config.presets import get_preset
from testkit.stream import STATE, run, stream_feeds, stream_model

CALLS = 48


@pytest.fixture(scope="module")
def stream():
    model = stream_model()
    feeds = stream_feeds(model, CALLS)
    step = run(model)
    return model, feeds, [step(f) for f in feeds]


def test_the_stream_is_found_by_the_values_fed_back(stream):
    model, feeds, ref = stream
    assert ("h_in", "h_out") in state_pairs(model)
    found = find_stream(feeds, ref, state_pairs(model))
    assert found is not None and found.pairs == (("h_in", "h_out"),)
    assert found.chains == (tuple(range(CALLS)),)
    order = np.random.default_rng(1).permutation(CALLS)  # the feeds in any order: the chain is the calls' order
    shuffled = find_stream([feeds[k] for k in order], [ref[k] for k in order], state_pairs(model))
    assert shuffled is not None and [int(order[k]) for k in shuffled.chains[0]] == list(range(CALLS))
    # states not fed back (each call's state its own): no stream, whatever the shapes say
    rng = np.random.default_rng(2)
    alone = [dict(f, h_in=rng.normal(size=(1, STATE)).astype(np.float32)) for f in feeds]
    assert find_stream(alone, [run(model)(f) for f in alone], state_pairs(model)) is None


def test_a_drift_through_the_state_breaks_the_floor_only_streamed(stream):
    """A candidate whose loop gain is 1 % off: every call within 20 dB of float's with float's state, far from it
    fed its own; the state output is judged through what it feeds."""
    model, feeds, ref = stream
    candidate = run(stream_model(drift=0.01))
    per_call = [candidate(f) for f in feeds]
    found = find_stream(feeds, ref, state_pairs(model))
    streamed = streamed_outputs(candidate, feeds, found)
    streamed_list = [streamed[k] for k in range(CALLS)]
    floor = floor_for(get_preset("A16W8"))
    carried = carried_outputs(found, list(ref[0]))
    assert carried == {"h_out"}
    waveforms = waveform_outputs(model)
    alone = measure(ref, per_call, floor, waveforms=waveforms, carried=carried)
    assert alone.ok and alone.outputs["y"].chunks[0] == 1.0 and "h_out" not in alone.outputs
    judged = measure(ref, streamed_list, floor, waveforms=waveforms, carried=carried)
    assert not judged.ok and judged.outputs["y"].chunks[0] < floor.top1
    assert judged.outputs["y"].cosine >= floor.cosine  # the cosine alone would have passed it
    judged.streamed = found.describe()
    assert any("judged streamed" in line and "h_in ← h_out" in line for line in floor_lines(judged))


def _chunk_model(out_len: int, in_len: int) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_len])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_len])],
                              [onnx.numpy_helper.from_array(np.array([v], np.int64), n)
                               for v, n in ((0, "s"), (out_len, "e"), (1, "a"))])
    return helper.make_model(graph)


def test_a_short_waveform_chunk_is_read_by_its_snr():
    """A [1, 256] chunk at 15 dB SNR: its cosine (0.984) passes the 8-bit floor's 0.98; its SNR reading breaks it."""
    assert waveform_outputs(_chunk_model(256, 512)) == {"y"}
    assert waveform_outputs(_chunk_model(128, 1000)) == set()  # not a whole fraction of the window: not a hop
    assert waveform_outputs(_chunk_model(32, 128)) == set()  # too short to be a chunk (a class count, a code)
    assert waveform_outputs(_chunk_model(64, 512)) == set()  # an eighth of the window: not a hop of it
    assert waveform_outputs(_chunk_model(256, 256)) == set()  # as long as the input: a state carried, not a hop
    rng = np.random.default_rng(0)
    t = np.arange(256 * 16).reshape(16, 1, 256) / 16000.0
    ref = [{"y": (0.3 * np.sin(2 * np.pi * 300 * t[k] + k)).astype(np.float32)} for k in range(16)]
    noisy = []
    for r in ref:
        noise = rng.normal(size=r["y"].shape)
        noise *= np.sqrt((r["y"] ** 2).sum() / (noise ** 2).sum() / 10 ** 1.5)
        noisy.append({"y": (r["y"] + noise).astype(np.float32)})
    floor = floor_for(get_preset("A8W8"))
    assert measure(ref, noisy, floor).ok  # read by its cosine alone
    verdict = measure(ref, noisy, floor, waveforms={"y"})
    check = verdict.outputs["y"]
    assert check.cosine >= floor.cosine and not verdict.ok
    assert check.chunks[0] == 0.0 and check.chunks[1] == 16 and abs(check.chunks[2] - 15.0) < 0.5
    assert "within 20 dB SNR" in check.describe()
    quiet = chunk_snr([(r["y"], r["y"] * 1.001) for r in ref])  # 60 dB: every chunk holds
    assert quiet.share == 1.0 and quiet.worst_db > CHUNK_SNR_DB
    # a track of symbolic length, its feeds' rows of several lengths: read alike (swift_f0's pitch: not a signal)
    sines = [np.sin(np.arange(n) / 5.0)[None] for n in (111, 127)]
    assert is_chunk(sines) and not is_chunk([np.abs(v) + 1.0 for v in sines])
    silent = chunk_snr([(np.zeros((1, 256)), np.ones((1, 256)) * 1e-3)])
    assert silent is None  # nothing audible: no reading


def test_quantize_judges_a_stream_streamed(stream):
    """The pipeline: the held-out calls run streamed over the calibration stream, the summary says so, and the
    integer model that holds call by call is told broken streamed (repair off)."""
    import onnxptq

    model, feeds, ref = stream
    cfg = dataclasses.replace(get_preset("A8W8"), repair=False)
    result = onnxptq.quantize(model, cfg, data=feeds)
    verdict = result.floor
    assert verdict.streamed is not None and "h_in ← h_out" in verdict.streamed
    assert "h_out" not in verdict.outputs and verdict.outputs["y"].chunks is not None
    assert "judged streamed" in result.summary() and "h_in ← h_out" in verdict.to_json()["streamed"]
    assert not verdict.ok and verdict.outputs["y"].chunks[0] < verdict.floor.top1
    # the same held-out calls (every third: calibrate.split_holdout, then the reserve) judged call by call hold
    held = list(range(0, CALLS, 3))[:verdict.samples]
    step = run(result.model)
    alone = measure([ref[k] for k in held], [step(feeds[k]) for k in held], verdict.floor,
                    waveforms={"y"}, carried={"h_out"})
    assert alone.ok


def test_calls_kept_for_a_stream_are_let_go_where_the_data_holds_none(stream):
    """State inputs that are no previous call's output (each call its own state): calibration keeps no more
    calls with float outputs than it would for a stateless model, and nothing is judged streamed."""
    from onnxptq.pipeline.calibrate import DEFAULT_EVAL_SAMPLES, DEFAULT_HOLDOUT, calibrate_once
    from onnxptq.pipeline.streamed import judged_stream

    model, feeds, _ = stream
    rng = np.random.default_rng(3)
    alone = [dict(f, h_in=rng.normal(size=(1, STATE)).astype(np.float32)) for f in feeds]
    calibrated = calibrate_once(model, get_preset("A8W8"), alone, holdout=DEFAULT_HOLDOUT)
    assert judged_stream(calibrated) is None and "carried" not in calibrated.readings
    assert calibrated.reads_kept == [] and len(calibrated.float_outputs) <= max(DEFAULT_EVAL_SAMPLES, len(calibrated.kept))
    streamed = calibrate_once(model, get_preset("A8W8"), feeds, holdout=DEFAULT_HOLDOUT)
    assert judged_stream(streamed) is not None and len(streamed.float_outputs) > len(calibrated.float_outputs)


def test_states_the_model_returns_alone_are_judged_beside_its_inner_decisions():
    """A model whose only outputs are its states keeps them judged, even where the floor also reads a decision inside
    the graph (its ``decision:`` key is no output: rv13's note, streamed.py:68)."""
    from onnxptq.analysis.decisions import KEY
    from onnxptq.analysis.streams import Stream

    stream = Stream(pairs=(("h_in", "h_out"),), chains=((0, 1),))
    assert carried_outputs(stream, ["h_out", KEY + "argmax"]) == frozenset()
    assert carried_outputs(stream, ["h_out", "y", KEY + "argmax"]) == {"h_out"}
