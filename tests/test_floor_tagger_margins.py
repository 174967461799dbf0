"""A tagger's reads judged from margins that a single small one does not decide (issue 27).

sudachi's tagger (ALBERT → ``ArgMax`` over each character's tag logits) broke the floor under BF16,
A16W8 and A8W8 with no position of 125 flipped, and repair delivered the float model
(bench/RESULTS.md, "More models outside the zoo, seventh round"). Two causes, two tests:

* the margins' estimate of the flip rate took the margin CDF's slope at 0 from the smallest margin
  alone, ``1 / ((n + 1) m₁)``: one margin that falls short by chance multiplies the estimate, and more
  data does not help (``class_scores._margin_cdf``);
* the graph's own ``ArgMax`` was judged on the 4 held-out sentences only, while the floor's output
  reads pooled the calibration feeds (``decisions._judge_argmax``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onnxptq import get_preset
from onnxptq.analysis.class_scores import judge_positions
from onnxptq.analysis.decisions import KEY, find_decisions
from onnxptq.analysis.floor import Floor, measure
from onnxptq.api import quantize
from test_floor_decisions import _reader, _reader_feeds

READS, T, C = 5, 31, 12


def _tags(margins: np.ndarray, loss: float) -> tuple[np.ndarray, np.ndarray]:
    """``[READS, T, C]`` tag logits whose decision positions have ``margins`` (float's best 10, its
    runner-up 10 − margin, the rest 4) and the quantized copy that takes ``loss`` off every best
    score: no arg-max flips where every margin exceeds it."""
    ref = np.full((READS * T, C), 4.0)
    rows = np.arange(READS * T)
    top = 1 + rows % (C - 1)
    ref[rows, top] = 10.0
    ref[rows, (top % (C - 1)) + 1] = 10.0 - margins
    got = ref.copy()
    got[rows, top] -= loss
    return ref.reshape(READS, T, C), got.reshape(READS, T, C)


def test_one_small_margin_does_not_break_a_tagger_that_flips_nothing():
    """Margins at the expected order statistics of a uniform spread over [0, 4] (the density at 0 is
    1/4, which the smallest margin gives exactly) and a loss of 0.0025 a position: a flip rate of
    6·10⁻⁴, reads of 31 positions 0.98. One margin falls short by chance (0.012 for the largest):
    main's estimate doubled, 1.3·10⁻³ a position, reads 0.959 < 0.97, broken with 0 of 155 flipped;
    the chord to the 5th margin keeps it at 7.8·10⁻⁴ (0.976). A loss 16 times larger still breaks."""
    n = READS * T
    margins = 4.0 * (np.arange(n) + 1) / (n + 1)
    margins[-1] = 0.012
    ref, got = _tags(margins, 0.0025)
    small = judge_positions([ref], [got])
    assert small.flipped == 0 and small.positions == n and small.ties == 0
    assert small.agreement > 0.97, small.describe()
    assert (1.0 - small.estimated) < 0.7 * 0.0025 / ((n + 1) * 0.012)  # below the first chord's estimate
    ref, got = _tags(margins, 0.04)
    large = judge_positions([ref], [got])
    assert large.flipped == 2 and large.agreement < 0.9, large.describe()


def test_margins_that_keep_away_from_zero_keep_the_first_chord():
    """Where every margin is at least 1 (a reader's margins to a string-changing class), the chord to
    the 5th margin would be 5 times the first one's: the estimate keeps the first (what main gave)."""
    margins = 1.0 + (np.arange(READS * T) + 0.5) / (READS * T)
    ref, got = _tags(margins, 0.05)
    p = judge_positions([ref], [got])
    first = 0.05 / ((READS * T + 1) * margins.min())  # the slope through the smallest margin, times the loss
    assert p.flipped == 0 and abs((1.0 - p.estimated) - first) < 1e-9


def test_an_in_graph_argmax_pools_the_calibration_feeds():
    """The reader's ``ArgMax`` (test_floor_decisions' built CTC reader) is judged on the held-out
    feeds and on them and the calibration feeds together, as the floor's own reads are, and
    calibration keeps as many feeds as confirm a verdict on reads (54 at 0.97: Floor.reads_wanted): with 48
    feeds, 8 held out, 8 in the second look's reserve (pipeline/calibrate.reserve_stream) and all 32 others kept, the
    reads are judged (before: 8 held-out lines, the calibration feeds unused)."""
    model = _reader()
    assert [d.op for d in find_decisions(model)] == ["ArgMax"]
    result = quantize(model, dataclasses.replace(get_preset("FP16"), repair=False), data=_reader_feeds(48, 1))
    check = result.floor.outputs[KEY + "argmax"]
    assert check.seen_feeds == 32 and check.positions.reads == 40 and not check.top1_unjudged, check.describe()
    assert result.floor.ok and "on the held-out and 32 calibration samples" in check.describe()


def test_held_out_flips_still_break_beside_a_pooled_judgement():
    """Beside the pooled judgement the held-out feeds count the flips they show: two flips on the
    held-out lines break the floor whatever the calibration lines say."""
    margins = 4.0 * (np.arange(READS * T) + 0.5) / (READS * T)
    ref, got = _tags(margins, 0.0)
    flipped = got.copy()
    for read in (0, 1):  # two positions of clear margin (3.9) flipped
        top = int(np.argmax(ref[read, -1]))
        flipped[read, -1, top] -= 5.0
    from onnxptq.analysis.decisions import Decision

    d = Decision("argmax", "ArgMax", 0, "logits", "argmax", axis=-1)
    floor = Floor("16-bit", 0.0, 0.97)
    held = measure([{KEY + "argmax": ref}], [{KEY + "argmax": flipped}], floor, decisions=[d],
                   seen=([{KEY + "argmax": ref}] * 4, [{KEY + "argmax": got}] * 4))
    assert not held.ok and held.outputs[KEY + "argmax"].positions.flipped == 2
    calm = measure([{KEY + "argmax": ref}], [{KEY + "argmax": got}], floor, decisions=[d],
                   seen=([{KEY + "argmax": ref}] * 4, [{KEY + "argmax": got}] * 4))
    assert calm.ok and calm.outputs[KEY + "argmax"].seen_feeds == 4
