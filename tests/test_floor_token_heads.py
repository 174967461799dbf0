"""Class scores over an integer input's tokens, judged as their users read them (issue 27).

A tagger's emissions (khmersm: ``x`` ids → ``[1, T, 2]``, a CRF outside the graph) are read per
token, not as one read per sentence: 2 flipped tags of 286 made 12 sentences' reads 0.846 and a
repair of up to 136 nodes while word-start F1 was ≥ 0.997. A decoder step's next-token scores
(arabic-name-romanizer: ``prefix`` ids → ``logprobs [B, 148]`` over the same 148 characters) are
read by a beam search through their top-k: said by structure, judged when declared (``topk:K``).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.declared_readings import declared_readings
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.analysis.token_heads import NEXT, TAGS, kind_for
from onnxptq.config.floor_readings import parse_reading
from onnxptq.config.schema import ConfigError

SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])


def _tagger():
    """x int64 [B, T] → Gather(emb [30, 8]) → MatMul [8, 2] → Add → emissions [B, T, 2]: khmersm's head."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((30, 8)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.standard_normal((8, 2)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(2, np.float32), "b")]
    nodes = [helper.make_node("Gather", ["emb", "x"], ["h"], name="embed"),
             helper.make_node("MatMul", ["h", "w"], ["z"], name="head"), helper.make_node("Add", ["z", "b"], ["emissions"], name="bias")]
    graph = helper.make_graph(nodes, "tagger", [helper.make_tensor_value_info("x", TensorProto.INT64, ["B", "T"])],
                              [helper.make_tensor_value_info("emissions", TensorProto.FLOAT, ["B", "T", 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _decoder_step(vocab: int = 20):
    """prefix int64 [B, t] → its last token → Gather(emb [vocab, 8]) → MatMul [8, vocab] → LogSoftmax: a decoder step."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, 8)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.standard_normal((8, vocab)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1], np.int64), "start"), numpy_helper.from_array(np.array([1 << 30], np.int64), "end"),
             numpy_helper.from_array(np.array([1], np.int64), "axis")]
    nodes = [helper.make_node("Slice", ["prefix", "start", "end", "axis"], ["last"], name="last"),
             helper.make_node("Squeeze", ["last", "axis"], ["token"], name="squeeze"),
             helper.make_node("Gather", ["emb", "token"], ["h"], name="embed"),
             helper.make_node("MatMul", ["h", "w"], ["z"], name="head"),
             helper.make_node("LogSoftmax", ["z"], ["logprobs"], name="logsoftmax", axis=-1)]
    graph = helper.make_graph(nodes, "step", [helper.make_tensor_value_info("prefix", TensorProto.INT64, ["B", "t"])],
                              [helper.make_tensor_value_info("logprobs", TensorProto.FLOAT, ["B", vocab])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tags(sentences: int, length: int, flips: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Float's two-class emissions (class 1, "inside", the background; word starts ~30 %) and a copy
    moved by a little noise with ``flips`` word starts read as "inside"."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(sentences):
        start = rng.random(length) < 0.3
        z = np.zeros((1, length, 2), np.float32)
        margin = rng.uniform(0.5, 4.0, length)
        z[0, :, 0] = np.where(start, margin, -margin) / 2
        z[0, :, 1] = -z[0, :, 0] + rng.normal(0, 0.5, length)
        refs.append(z)
        gots.append((z + rng.normal(0, 0.01, z.shape)).astype(np.float32))
    where = [(i, t) for i, r in enumerate(refs) for t in range(length) if r[0, t, 0] > 0][:flips * 7:7]
    for i, t in where:  # one flip per sentence, spread: the reads of as many sentences change
        gots[i][0, t, 0] = gots[i][0, t, 1] - 0.05
    return [{"emissions": r} for r in refs], [{"emissions": g} for g in gots]


def test_a_tagger_is_found_by_its_token_input_and_judged_per_token():
    readings = readings_of(_tagger())
    assert readings["tokens"] == {"emissions": frozenset({30})} and kind_for(2, readings["tokens"]["emissions"]) == TAGS
    reference, candidate = _tags(12, 30, 2)
    told = measure(reference, candidate, SIXTEEN, **readings)
    check = told.outputs["emissions"]
    assert told.ok and check.positions is not None and check.positions.per_token
    assert check.positions.flipped == 2 and check.top1 >= SIXTEEN.top1 and "tokens" in check.describe()
    # the same outputs judged as one read per sentence (the reading before): two changed sentences of 12 break it
    per_read = measure(reference, candidate, SIXTEEN, **dict(readings, tokens={}))
    assert not per_read.ok and per_read.outputs["emissions"].top1 < 0.9
    # a real break stays one: a tag in ten flipped
    reference, candidate = _tags(12, 30, 11)
    broken = measure(reference, candidate, SIXTEEN, **readings)
    assert not broken.ok and broken.outputs["emissions"].positions.per_token


def _steps(feeds: int, swapped: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Float's next-token log-probabilities over 20 tokens (a clear best, a second and a third 0.05 apart)
    and a copy in which ``swapped`` of the rows read the third as the second, the best kept."""
    rng = np.random.default_rng(seed)
    refs, gots = [], []
    for _ in range(feeds):
        z = rng.uniform(-8.0, -5.0, (8, 20))
        g = z.copy()
        for row in range(8):
            best, second, third = rng.permutation(20)[:3]
            z[row, [best, second, third]] = -0.1, -3.0, -3.05
            g[row, [best, second, third]] = (-0.1, -3.05, -3.0) if rng.random() < swapped else (-0.1, -3.0, -3.05)
        refs.append(z.astype(np.float32))
        gots.append((g + rng.normal(0, 1e-4, g.shape)).astype(np.float32))
    return [{"logprobs": r} for r in refs], [{"logprobs": g} for g in gots]


def test_a_decoder_steps_runner_ups_are_said_and_judged_where_declared():
    readings = readings_of(_decoder_step())
    assert kind_for(20, readings["tokens"]["logprobs"]) == NEXT
    reference, candidate = _steps(8, 0.25)
    plain = measure(reference, candidate, SIXTEEN, **readings)
    check = plain.outputs["logprobs"]
    # the top-1 of every row holds: the floor holds, and says what a beam search would read
    assert plain.ok and check.top1 == 1.0 and check.advisory is not None and "topk:K" in check.advisory
    declared = measure(reference, candidate, SIXTEEN, **readings, declared=declared_readings({"logprobs": "topk:2"}, ["logprobs"]))
    told = declared.outputs["logprobs"]
    assert not declared.ok and told.top_k == 2 and told.top1 < SIXTEEN.top1 and "top-2 set" in told.describe()
    # float's top two kept: nothing said, the declared reading holds
    reference, candidate = _steps(8, 0.0)
    assert measure(reference, candidate, SIXTEEN, **readings).outputs["logprobs"].advisory is None
    assert measure(reference, candidate, SIXTEEN, **readings, declared=declared_readings({"logprobs": "topk:2"}, ["logprobs"])).ok


@pytest.mark.parametrize("text", ["topk", "topk:0", "topk:two", "topk:-1"])
def test_a_top_k_reading_needs_its_beam_width(text):
    with pytest.raises(ConfigError, match="topk:K"):
        parse_reading("logprobs", text)
    assert parse_reading("logprobs", "topk:3").k == 3


# Few reads (analysis/evidence.py): a share below the floor breaks only where its losses say so.

EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def test_the_binomial_tail_is_a_direct_sum_and_decides_as_the_romanizers_rows_ask():
    from math import comb

    from onnxptq.analysis.evidence import surely_below, tail

    for lost, count, floor in ((2, 64, 0.97), (5, 64, 0.97), (13, 64, 0.95), (4, 79, 0.95), (1, 1, 0.9), (0, 10, 0.97)):
        p = 1 - floor
        direct = sum(comb(count, i) * p ** i * (1 - p) ** (count - i) for i in range(lost, count + 1))
        assert abs(tail(lost, count, floor) - direct) < 1e-9
    # 2 of 64 at 0.97 (anr_fa_decoder A16W8 / BFP16: 0.990 / 0.982 of 512 other rows) is chance; 5 of 64 is not
    assert not surely_below(62, 64, 0.97) and surely_below(59, 64, 0.97)
    assert surely_below(51, 64, 0.95)  # anr_fa_decoder MXFP8_E4M3's 13 of 64
    assert not surely_below(75, 79, 0.95)  # khmersm MXFP8_E4M3's 4 of 79 held-out word starts (F1 0.979 on 32 sentences)
    assert not surely_below(64, 64, 0.97) and not surely_below(0, 0, 0.97)


def _swapped(rows: int, swapped: int, seed: int = 3) -> tuple[list[dict], list[dict]]:
    """``rows // 8`` feeds of 8 next-token rows (a clear best, a second and a third 0.05 apart), exactly
    ``swapped`` rows of which read the third as the second, the best kept."""
    rng = np.random.default_rng(seed)
    refs, gots, row = [], [], 0
    for _ in range(rows // 8):
        z = rng.uniform(-8.0, -5.0, (8, 20))
        g = z.copy()
        for r in range(8):
            best, second, third = rng.permutation(20)[:3]
            z[r, [best, second, third]] = -0.1, -3.0, -3.05
            g[r, [best, second, third]] = (-0.1, -3.05, -3.0) if row < swapped else (-0.1, -3.0, -3.05)
            row += 1
        refs.append({"logprobs": z.astype(np.float32)})
        gots.append({"logprobs": g.astype(np.float32)})
    return refs, gots


def test_two_runner_ups_of_64_rows_are_no_warning_and_a_declared_top_k_could_not_judge_them():
    from onnxptq.analysis.floor import unjudged_text

    readings = readings_of(_decoder_step())
    topk = declared_readings({"logprobs": "topk:2"}, ["logprobs"])
    reference, candidate = _swapped(64, 2)
    assert measure(reference, candidate, SIXTEEN, **readings).outputs["logprobs"].advisory is None
    told = measure(reference, candidate, SIXTEEN, **readings, declared=topk)
    check = told.outputs["logprobs"]
    assert told.ok and told.unjudged == ["logprobs"] and check.within_chance is not None and check.within_chance > 0.5
    assert abs(check.top1 - 62 / 64) < 1e-9 and "NOT JUDGED" in check.describe()
    assert "top-2 set of logprobs" in unjudged_text(told) and "not known to break it" in unjudged_text(told)
    # a real loss stays one: 6 of 64 rows (0.906, the Arabic decoder's MXFP8_E4M3 share) warns and breaks
    reference, candidate = _swapped(64, 6)
    assert measure(reference, candidate, SIXTEEN, **readings).outputs["logprobs"].advisory is not None
    broken = measure(reference, candidate, SIXTEEN, **readings, declared=topk)
    assert not broken.ok and broken.outputs["logprobs"].within_chance is None


def test_a_taggers_few_flipped_word_starts_could_not_judge_and_many_break():
    from onnxptq.algorithms.repair import moved_unjudged_reads

    readings = readings_of(_tagger())
    # 4 sentences, ~80 word starts, 4 flipped against the 8-bit floor (khmersm MXFP8_E4M3: 4 of 79, 0.949 < 0.95)
    reference, candidate = _tags(4, 60, 4)
    told = measure(reference, candidate, EIGHT, **readings)
    check = told.outputs["emissions"]
    assert check.positions.per_token and check.positions.flipped == 4 and check.top1 < EIGHT.top1
    assert told.ok and told.unjudged == ["emissions"] and check.within_chance is not None
    # not taken for a hold by repair's search either
    assert moved_unjudged_reads(told) == ["emissions"]
    # 2 sentences of 30 tokens: 3 of 16 word starts flipped (0.81), surely below: broken
    reference, candidate = _tags(2, 30, 4)
    few = measure(reference, candidate, EIGHT, **readings)
    assert not few.ok and few.outputs["emissions"].within_chance is None


def test_the_beam_warning_asks_for_the_calibration_rows_where_the_held_out_ones_cannot_decide():
    readings = readings_of(_decoder_step())
    reference, candidate = _swapped(64, 3)  # 0.953 < 0.97, as a model at the floor does on 30 % of draws
    plain = measure(reference, candidate, SIXTEEN, **readings)
    assert plain.ok and plain.outputs["logprobs"].advisory is None and plain.wants_calibration_feeds
    assert not plain.ok_needs_calibration_feeds  # a warning only: repair needs no calibration feeds for it
    more_ref, more_got = _swapped(128, 8, seed=4)  # with them, 11 of 192 (0.943): said
    told = measure(reference, candidate, SIXTEEN, **readings, seen=(more_ref, more_got))
    assert told.ok and "the held-out and 16 calibration samples" in (told.outputs["logprobs"].advisory or "")
    more_ref, more_got = _swapped(128, 0, seed=4)  # 3 of 192 (0.984): nothing said
    assert measure(reference, candidate, SIXTEEN, **readings, seen=(more_ref, more_got)).outputs["logprobs"].advisory is None
