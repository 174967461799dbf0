"""Repair's search stops at a count of builds, not at a fraction of the plain build's CPU (algorithms/repair._search).

Past the first chunk handed back, the budget alone ruled, so a search of cheap builds ran
``repair_budget`` × the plain quantization's CPU ÷ a build's: tinyocr_rec MXINT8's plain build got
12 % cheaper and its search stopped after 4 builds instead of 6, delivering another kept set
(bench/RESULTS.md, "Spatial ReduceMean"). The :data:`~onnxptq.algorithms.repair.MIN_TRIALS` builds
now hold for the whole float search (within ``MIN_TRIALS_PLAINS`` × the plain quantization), so two
plain costs 20 % apart give the same search. A judge that burns a fixed CPU time per build stands in
for the pipeline's builds (what is tested is the search's bookkeeping, not a model).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from onnxptq.algorithms import repair

COST = 0.04  # CPU s per stand-in build
CANDIDATES = [f"n{i}" for i in range(32)]


class _Culprit:
    """The floor holds while ``n5`` is kept float; each build costs COST CPU s."""

    def __init__(self) -> None:
        self.evaluations = 0

    def __call__(self, kept, rung=None):  # _Judge's signature
        self.evaluations += 1
        end = time.process_time() + COST
        while time.process_time() < end:
            pass
        return SimpleNamespace(ok="n5" in kept)


def _search(plain_builds: float) -> tuple[frozenset[str], int, bool]:
    """The search after a float probe, with a budget of 1× a plain quantization that costs
    ``plain_builds`` builds, as enforce_floor sets it up."""
    judge = _Culprit()
    start = time.process_time()
    plain = plain_builds * COST
    kept, finished = repair._search(judge, CANDIDATES, start + plain, cap=start + repair.MIN_TRIALS_PLAINS * plain,
                                    spent=1, last_cost=COST, reserve=True)
    return kept, judge.evaluations, finished


def test_the_search_does_not_move_with_the_plain_build_cost():
    small, large = _search(5.0), _search(6.0)
    # main: the first half (n16-n31) is back after 2 builds, then the budget ruled: 3 builds against
    # a 5-build plain quantization, 4 against a 6-build one; two kept sets
    assert small == large, (small, large)
    kept, evaluations, finished = small
    assert evaluations == repair.MIN_TRIALS - 1 and not finished  # the probe counts against the minimum
    assert "n5" in kept and len(kept) < 8, kept  # graph-order bisection down to n4-n5 within the minimum


def test_a_larger_budget_still_finishes_the_search():
    judge = _Culprit()
    start = time.process_time()
    kept, finished = repair._search(judge, CANDIDATES, start + 40 * COST, cap=start + 160 * COST, spent=1,
                                    last_cost=COST, reserve=True)
    assert finished and kept == frozenset({"n5"}), kept
