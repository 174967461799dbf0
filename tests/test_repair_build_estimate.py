"""Repair does not start a build its budget cannot pay for (algorithms/repair._search).

The budget was checked between builds only, so a build that started just before the deadline ran
whole past it: on napari-czann-segment's 1024² U-Net one candidate build is ~17 CPU s, the size of
the budget itself (bench/RESULTS.md, sixth round). Past the :data:`MIN_TRIALS` builds every search
gets, the search now expects the next build to cost what the last one did and stops before a build
that would end past the deadline. A judge that burns a fixed CPU time per build stands in for the
pipeline's builds here (what is tested is the search's bookkeeping, not a model).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from onnxptq.algorithms import repair

COST = 0.05  # CPU s per stand-in build


class _BurningJudge:
    """Every candidate breaks the floor (the search keeps splitting); each costs COST CPU s."""

    def __init__(self) -> None:
        self.evaluations = 0

    def __call__(self, kept, rung=None):  # _Judge's signature
        self.evaluations += 1
        end = time.process_time() + COST
        while time.process_time() < end:
            pass
        return SimpleNamespace(ok=False)


def test_no_build_starts_that_would_end_past_the_budget():
    judge = _BurningJudge()
    start = time.process_time()
    deadline = start + (repair.MIN_TRIALS + 0.5) * COST  # room for the minimum and half a build more
    kept, finished = repair._search(judge, [f"n{i}" for i in range(64)], deadline)
    assert not finished and len(kept) == 64
    # main: the 9th build started at ~8 COST (before the deadline) and ended at ~9 COST, past it
    assert judge.evaluations == repair.MIN_TRIALS
    assert time.process_time() <= deadline + 0.25 * COST


def test_the_minimum_of_builds_is_still_granted():
    judge = _BurningJudge()
    kept, finished = repair._search(judge, [f"n{i}" for i in range(64)], time.process_time())  # no budget at all
    assert judge.evaluations == repair.MIN_TRIALS and not finished
