"""Repair's candidates reuse the plain build's work, and what it delivers is the build from scratch of
its kept set (issue 27 item 2, branch repaircost: algorithms/repair.py, analysis/maps.py).

What each test would catch:

* a candidate build that calibrates again (a second statistics pass), runs the float model on the
  held-out feeds again (the floor's reference outputs are the plain build's), or writes a file
  before delivery, or a delivered build that plans its kept set again (its candidate's plan is
  taken): counted by spies on one quantize with repair that builds several candidates;
* a reuse that changes what is delivered (a weight, a plan or a float judgement served to the wrong
  candidate): the delivered file must be byte for byte the file a fresh quantize of the delivered
  kept set writes, with nothing shared between the two;
* float's mask labels remembered for the wrong mask (maps.region_counts, which every candidate's
  judgement of a thresholded map calls with the same float masks): its counts against an
  independent breadth-first labelling, before and after the memo holds the masks.

PP-OCR's direction classifier (a real MobileNet-style CNN) under MX9 with a floor tighter than the
family's (cosine 0.9999) so that repair acts, at the search's least count of builds.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import onnx
import pytest

from onnxptq.algorithms import repair
from onnxptq.analysis import maps
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.graph import io as model_io
from onnxptq.pipeline import build as build_module, calibrate
from testkit.models import model_path


def _feeds(n: int = 12) -> list[dict[str, np.ndarray]]:
    name = onnx.load(str(model_path("cls")), load_external_data=False).graph.input[0].name
    rng = np.random.default_rng(0)
    return [{name: rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(n)]


# The float search is what is tested: no BF16 rung before it (algorithms/step_up.py).
CFG = resolve_config("MX9").replace(floor_cosine=0.9999, repair_budget=0.5, repair_step_up=False)


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    """One quantize with repair, spied on: statistics passes, float runs of the held-out feeds,
    candidate builds and files written, each as (before the search's first build, after it)."""
    counts = {key: [0, 0] for key in ("statistics", "held_out_float", "builds", "saves", "plans")}
    state = {"search": 0}
    collect, build, save = calibrate.collect_statistics, repair.build_model, model_io.save_model
    plan = build_module.final_plan

    def planned(*args, **kw):
        counts["plans"][state["search"]] += 1
        return plan(*args, **kw)

    def collected(*args, **kw):
        counts["statistics"][state["search"]] += 1
        if kw.get("also_run"):
            counts["held_out_float"][state["search"]] += 1
        return collect(*args, **kw)

    def built(*args, **kw):
        state["search"] = 1
        counts["builds"][1] += 1
        return build(*args, **kw)

    def saved(*args, **kw):
        counts["saves"][state["search"]] += 1
        return save(*args, **kw)

    out = tmp_path_factory.mktemp("repair_reuse") / "repaired.onnx"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(calibrate, "collect_statistics", collected)
        mp.setattr(repair, "build_model", built)
        mp.setattr(model_io, "save_model", saved)
        mp.setattr(build_module, "final_plan", planned)
        result = quantize(str(model_path("cls")), CFG, _feeds(), output=str(out))
    return result, counts, out


def test_candidates_reuse_the_plain_calibration_and_float_outputs(repaired):
    result, counts, _ = repaired
    record = result.repair
    assert record is not None and record.get("kept_float"), "the floor held or nothing was kept: nothing was tested"
    assert record["evaluations"] >= 3 and counts["builds"][1] >= 3, (record["evaluations"], counts)
    assert counts["statistics"] == [1, 0], f"statistics passes (plain, search): {counts['statistics']}"
    # the held-out feeds' float outputs: computed once, by the calibration pass, before the search
    assert counts["held_out_float"] == [1, 0], f"float runs of the held-out feeds: {counts['held_out_float']}"
    assert counts["saves"] == [0, 1], f"files written (before, after the search began): {counts['saves']}"
    # one plan per candidate: the delivered build takes the plan its kept set was judged with (build._planned)
    assert counts["plans"] == [1, counts["builds"][1]], f"plans made (plain, search): {counts['plans']}, builds {counts['builds']}"
    assert result.floor is not None and result.floor.ok


def test_the_delivered_file_is_the_build_from_scratch_of_its_kept_set(repaired, tmp_path):
    result, _, out = repaired
    record = result.repair
    assert not record["stepped_up"], "repair_step_up=False: a float search was expected"
    kept = tuple(record["kept_float"])
    assert kept
    fresh = tmp_path / "fresh.onnx"
    again = quantize(str(model_path("cls")), CFG.replace(repair=False, nodes_to_exclude=CFG.nodes_to_exclude + kept),
                     _feeds(), output=str(fresh))
    assert again.floor is not None and again.floor.ok  # the kept set holds on its own build too
    assert fresh.read_bytes() == out.read_bytes(), "repair delivered other bytes than a fresh build of its kept set"


def _bfs_counts(a: np.ndarray, b: np.ndarray, min_region: int, iou: float) -> tuple[int, int, int]:
    """maps.region_counts' figures by a breadth-first labelling (face neighbours on every axis but the first)."""

    def labels(mask: np.ndarray) -> list[set[tuple[int, ...]]]:
        seen, out = set(), []
        for start in zip(*np.nonzero(mask)):
            if start in seen:
                continue
            comp, todo = set(), deque([start])
            seen.add(start)
            while todo:
                cell = todo.popleft()
                comp.add(cell)
                for ax in range(1, mask.ndim):
                    for step in (-1, 1):
                        nxt = list(cell)
                        nxt[ax] += step
                        nxt = tuple(nxt)
                        if 0 <= nxt[ax] < mask.shape[ax] and mask[nxt] and nxt not in seen:
                            seen.add(nxt)
                            todo.append(nxt)
            out.append(comp)
        return out

    ra, rb = labels(a), labels(b)

    def match(x: set, y: set) -> bool:
        shared = len(x & y)
        return shared > 0 and shared / len(x | y) >= iou

    big_a, big_b = [r for r in ra if len(r) >= min_region], [r for r in rb if len(r) >= min_region]
    lost = sum(not any(match(r, s) for s in rb) for r in big_a)
    spurious = sum(not any(match(r, s) for s in ra) for r in big_b)
    return len(big_a), lost, spurious


def test_float_mask_labels_remembered_give_the_same_counts():
    rng = np.random.default_rng(3)
    cases = []
    for k in range(24):
        shape = (1, 2, 9, 11) if k % 2 else (2, 13, 7)
        a = rng.random(shape) < 0.45
        b = a.copy() if k % 3 == 0 else a ^ (rng.random(shape) < 0.08)
        cases.append((a, b, 1 + k % 3, (0.0, 0.5, 1.0)[k % 3]))
    with maps.remembered_float_labels():
        for round_ in range(2):  # the second round: every float mask's labels are remembered
            for a, b, min_region, iou in cases:
                assert maps.region_counts(a, b, min_region=min_region, iou=iou) == _bfs_counts(a, b, min_region, iou), round_
                # the same float mask as another array (the next candidate's judgement) and a mask of other content
                assert maps.region_counts(a.copy(), ~b, min_region=min_region, iou=iou) == _bfs_counts(a, ~b, min_region, iou)
        assert 0 < len(maps._LABELS.entries) <= len(cases)
    assert not maps._LABELS.entries  # let go with the search
    a, b, min_region, iou = cases[1]
    assert maps.region_counts(a, b, min_region=min_region, iou=iou) == _bfs_counts(a, b, min_region, iou)
    assert not maps._LABELS.entries  # nothing kept outside a search
