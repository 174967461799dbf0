"""Repair's search stops at a count of builds, not at a time; the time is only a cap (algorithms/repair._search).

Why a count (issue 27 item 2, "the delivered file should not depend on load"): the search used to
stop where the next build would end past 1× the plain quantization's CPU, and some searches sat
within 0.1 s of that line: lore_detect A8W8 delivered 52 or 104 stepped nodes, mp_face_short MXINT8
stopped after 2 to 4 builds, as the load moved their CPU. Now it makes ``allowance`` builds
whatever each costs; the CPU cap stops only a search far past its usual cost (a build that would
end past the cap is not started: czann's 17 CPU s build started at 16 s of a 17 s budget), and
says so. A judge that burns CPU per build stands in for the pipeline's builds here (what is tested
is the search's bookkeeping, not a model).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from onnxptq.algorithms import repair

COST = 0.02  # CPU s per stand-in build


class _BurningJudge:
    """A candidate holds where it keeps ``n7`` and two more nodes float (``culprit``), else breaks; each
    costs ``cost`` CPU s."""

    def __init__(self, cost: float, culprit: bool = True) -> None:
        self.evaluations, self.cost, self.culprit, self.capped, self.costs = 0, cost, culprit, False, []

    def __call__(self, kept, rung=None):  # _Judge's signature
        self.evaluations += 1
        end = time.process_time() + self.cost
        while time.process_time() < end:
            pass
        self.costs.append(self.cost)
        return SimpleNamespace(ok=self.culprit and "n7" in kept and len(kept) >= 3)


def test_the_search_stops_at_its_allowance_whatever_a_build_costs():
    """A cheap and a dear build (a loaded machine's CPU) make the same builds and keep the same set, under
    a cap that the dear search's seven builds stay well within (the cap, not the cost, is what may stop it)."""
    outcomes = []
    for cost in (0.0, 3 * COST):
        judge = _BurningJudge(cost)
        cap = time.process_time() + 20 * 3 * COST  # seven dear builds take 7 × 3 COST
        kept, finished = repair._search(judge, [f"n{i}" for i in range(64)], 7, cap=cap, last_cost=cost)
        outcomes.append((judge.evaluations, kept, finished, judge.capped))
    assert outcomes[0] == outcomes[1], outcomes
    evaluations, kept, finished, capped = outcomes[0]
    assert evaluations == 7 and not finished and not capped and "n7" in kept and len(kept) < 64


def test_no_build_starts_that_would_end_past_the_cap():
    judge = _BurningJudge(COST, culprit=False)  # every candidate breaks: the search keeps splitting
    start = time.process_time()
    cap = start + 4.5 * COST  # room for four builds and half a build more
    kept, finished = repair._search(judge, [f"n{i}" for i in range(64)], 100, cap=cap, last_cost=COST)
    assert not finished and len(kept) == 64 and judge.capped
    # the fifth build would have started at ~4 COST and ended at ~5 COST, past the cap
    assert judge.evaluations == 4
    assert time.process_time() <= cap + 0.25 * COST


def test_the_allowance_scales_with_the_budget():
    assert repair.builds_allowed(0.0) == 0
    assert repair.builds_allowed(1.0) == repair.BUILDS
    assert repair.builds_allowed(1e-6) == repair.MIN_BUILDS
    assert repair.builds_allowed(2.0) == 2 * repair.BUILDS
