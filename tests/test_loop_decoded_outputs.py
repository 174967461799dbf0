"""A sequence a Loop decodes step by step (a greedy decoder's ArgMax, appended to a loop-carried value by Concat and
returned: g2p_en's phonemes) is judged by the floor as whole sequences, one read a sample.

On main the floor walked from the output through Identity/Cast only, met the Loop and judged nothing but the
accumulated logits' cosine: g2p_en MXFP8_E4M3 "holds — logits: cosine 0.9922" while 0.8625 of 400 words kept float's
phonemes; the hand-built decoder of bench/round32_decoder_floor.py "holds" at 0.9375 of 128 sequences (the floor 0.95).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import onnx

from onnxptq import get_preset, quantize
from onnxptq.analysis.index_outputs import index_outputs, judge_indices
from onnxptq.pipeline.calibrate import reads_feeds

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import round32_decoder_floor as dec  # noqa: E402


def test_the_loop_decoded_tokens_are_an_index_output():
    found = index_outputs(dec.decoder())
    assert set(found) == {"tokens"}
    item = found["tokens"]
    assert (item.op, item.loop, item.axis, item.keepdims) == ("ArgMax", "decode", 1, False)
    # the floor keeps calibration feeds to judge them on, as it does a tagger's reads
    assert reads_feeds(dec.decoder(), get_preset("MXFP8_E4M3")) > 0


def test_a_decoded_sequence_is_kept_only_whole_and_pools_the_calibration_feeds():
    item = index_outputs(dec.decoder())["tokens"]
    ref = [{"tokens": np.array([5, 6, 7])}, {"tokens": np.array([1, 2])}]
    got = [{"tokens": np.array([5, 6, 7])}, {"tokens": np.array([1, 2, 3])}]   # one step longer: changed
    seen = ([{"tokens": np.array([4])}], [{"tokens": np.array([4])}])
    (check,) = judge_indices({"tokens": item}, ref, got, seen)
    assert (check.kept, check.rows, check.seen) == (2, 3, 1)
    assert "decodes by ArgMax" in check.describe() and "2 of 3 samples" in check.describe()


def test_the_floor_no_longer_holds_on_the_logits_alone(tmp_path):
    path, out = tmp_path / "greedy.onnx", tmp_path / "greedy.q.onnx"
    onnx.save(dec.decoder(), str(path))
    cfg = dataclasses.replace(get_preset("MXFP8_E4M3"), repair=False)
    summary = quantize(str(path), cfg, data=dec.feeds(48, 1), output=str(out)).summary()
    verdict = next(line for line in summary.splitlines() if "accuracy floor (" in line)
    assert "the sequence 'tokens' that Loop 'decode' decodes by ArgMax" in verdict
    assert "holds —" not in verdict          # main: "holds — logits: cosine 0.9986 (min 0.9983)"
