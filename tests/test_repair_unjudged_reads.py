"""Repair's search does not accept a candidate that changed one of reads too few to judge
(algorithms/repair.moved_unjudged_reads).

On fewer reads than the floor needs, one changed read passes a verdict (it could be an accident);
taken over the dozens of candidates of a search it selected those that lose reads while the cosine
holds: tinyocr_rec MXINT8 on 12 lines, searched for 8 builds, 30 nodes float and 0.781 of 32 other
lines read as float's (bench/RESULTS.md, this branch's section). The rule is read off the verdict's
checks: a CTC reader's strings changed at a position float is sure of, or a sequence's flipped
decision, on an output whose reads were not judged.
"""

from __future__ import annotations

import numpy as np

from onnxptq.algorithms.repair import moved_unjudged_reads
from onnxptq.analysis.class_scores import judge_positions
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, OutputCheck, Verdict

FLOOR = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
BLANK, T, C = 0, 24, 40


def _lines(n: int, seed: int) -> list[np.ndarray]:
    """``[1, T, C]`` Softmax CTC scores: characters separated by blanks, float sure of every frame."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        logits = rng.normal(0.0, 0.3, (T, C))
        for t in range(T):
            logits[t, BLANK if t % 3 else int(rng.integers(1, C))] += 8.0
        e = np.exp(logits - logits.max(-1, keepdims=True))
        out.append((e / e.sum(-1, keepdims=True))[None].astype(np.float32))
    return out


def _verdict(refs: list[np.ndarray], gots: list[np.ndarray], unjudged: bool = True) -> Verdict:
    positions = judge_positions(refs, gots, strings_only=True)
    assert positions is not None and positions.strings
    check = OutputCheck("probs", 0.999, 0.99, ok=True, top1_unjudged=unjudged, positions=positions, needed=FLOOR.needed)
    return Verdict(FLOOR, {"probs": check}, samples=len(refs))


def test_a_changed_read_among_unjudged_reads_is_not_accepted():
    refs = _lines(12, 0)
    gots = [r.copy() for r in refs]
    t = 3  # a character frame of the first line read as another character: its string changes
    top = int(gots[0][0, t].argmax())
    gots[0][0, t, top], gots[0][0, t, top % (C - 1) + 1] = gots[0][0, t, top % (C - 1) + 1], gots[0][0, t, top]
    verdict = _verdict(refs, gots)
    assert verdict.ok and verdict.outputs["probs"].positions.changed == 1  # the floor lets one changed read pass
    assert moved_unjudged_reads(verdict) == ["probs"]
    assert moved_unjudged_reads(_verdict(refs, gots, unjudged=False)) == []  # judged reads: the floor's own verdict rules


def test_noise_that_keeps_every_read_is_accepted():
    refs = _lines(12, 1)
    rng = np.random.default_rng(2)
    gots = [np.clip(r + rng.normal(0, 0.01, r.shape).astype(np.float32), 0, 1) for r in refs]
    verdict = _verdict(refs, gots)
    assert verdict.outputs["probs"].positions.changed == 0
    assert moved_unjudged_reads(verdict) == []
