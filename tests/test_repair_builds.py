"""How many models repair builds (issue 26 item 1, issue 27 item 2: algorithms/repair.py).

Each candidate the search judges is a build, a session and its runs: on real models 1-6 CPU s, and
the search's minimum of :data:`~onnxptq.algorithms.repair.MIN_TRIALS` trials made repair cost
1.2-3.8x the plain quantization (bench/RESULTS.md "Repair's cost"). Two of those builds told the
search nothing: nothing kept float (the plain build, whose broken verdict is already known) and
the same kept set twice. Every node float is the probe, built first (tests/test_repair_probe.py).
What each test would catch:

* a search that builds the plain model again, or more builds for the same kept set: the planted
  graph's exact sequence of builds (the nodes each kept float) is asserted;
* a probe that is skipped: the all-float build is made first, and a floor broken even then ends
  the search there, reported as "not the quantizers'".

The planted graph (tests/_structure_graphs.planted_model, 21 quantized nodes, one responsible)
quantizes and repairs in well under a second of CPU.
"""

from __future__ import annotations

import pytest

from _structure_graphs import pattern_data, planted_model
from onnxptq.algorithms import repair
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

# The float search is what these tests pin: the 16-bit step (tests/test_repair_step_up.py) off.
A8W8 = resolve_config("A8W8").replace(repair_step_up=False)


@pytest.fixture
def builds(monkeypatch):
    """The number of nodes each candidate build of the search keeps float, in order."""
    kept: list[int] = []
    build = repair.build_model

    def counted(calibrated, cfg, **kw):
        kept.append(len(cfg.nodes_to_exclude))
        return build(calibrated, cfg, **kw)

    monkeypatch.setattr(repair, "build_model", counted)
    return kept


def test_repair_builds_no_candidate_whose_verdict_it_knows(builds):
    # A budget no loaded machine reaches: the search finishes, so its builds depend on the graph only.
    result = quantize(planted_model(depth=10), A8W8.replace(repair_budget=50.0), pattern_data(32))
    record = result.repair
    assert record["finished"] and list(record["kept_float"]) == ["MatMul_hot"] and result.floor.ok
    assert record["candidates"] == 21
    # The all-float probe first (21 kept: it says whether any search can help, tests/test_repair_probe.py),
    # never the plain one (0 kept); then the nodes ranked by the error each adds (algorithms/repair_order.py):
    # MatMul_hot alone kept, everything else back in one build. In graph order MatMul_hot's half was
    # bisected down to it, [21, 11, 6, 3, 3, 2, 1, 1]; before the known verdicts were cached: 9 builds.
    assert builds == [21, 1]
    assert record["evaluations"] == len(builds)


def test_the_float_probe_stops_a_search_that_cannot_help(builds, monkeypatch):
    # Every candidate judged broken (as a floor broken by the float graph itself would judge them):
    # the all-float probe is built once, first, and the search stops there (it was built after the
    # two halves had failed: [11, 10, 21]).
    def broken(self, model):
        return self.cache[(None, frozenset())]

    monkeypatch.setattr(repair._Judge, "run", broken)
    result = quantize(planted_model(depth=10), A8W8.replace(repair_budget=50.0), pattern_data(32))
    assert builds == [21]
    assert "breaks even with every quantized node float" in result.repair["note"]
    assert not result.floor.ok and not result.plan.skipped_nodes.get("MatMul_hot", "").startswith("kept float")
