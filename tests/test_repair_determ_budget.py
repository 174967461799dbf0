"""Where repair's search stops depends on no clock (issue 27 item 2: the same model, data and options give the same
file, whatever the machine's load; algorithms/repair_cost.py).

repair20 capped the search at one plain quantization's CPU (``time.process_time``); CPU seconds of the same work move
20-50 % with the load on a shared machine, so a search ending near the cap made one build more or less and the file
differed (ddddocr_det A8W8 on the zoo's feeds: ``8dbcc507…`` after 3 builds, ``852fba34…`` after 4; bench/RESULTS.md
packed21, determ21). The budget is now counted in work seconds estimated from the graph and its feeds.

The first test fails on main ``a9a75fc3``: with every clock of the process running 300× as fast once repair starts (a
machine whose load rose as the plain quantization ended), its search stopped at its CPU cap after the probe and kept
every node float, where at the clocks' own rate it made its four builds.
"""

from __future__ import annotations

import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from _structure_graphs import pattern_data, planted_model
from onnxptq.algorithms import repair, repair_cost
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config


def _clocks_at(monkeypatch, rate: float) -> None:
    """``time.process_time`` and ``time.perf_counter`` run ``rate`` times as fast from the moment repair starts."""
    real_pt, real_pc = time.process_time, time.perf_counter
    state = {"rate": 1.0, "pt0": 0.0, "pc0": 0.0}

    def clock(real, key):
        def now() -> float:
            t = real()
            return t if state["rate"] == 1.0 else state[key] + (t - state[key]) * state["rate"]
        return now

    enforce = repair.enforce_floor

    def faster(*a, **k):
        state.update(rate=rate, pt0=real_pt(), pc0=real_pc())
        try:
            return enforce(*a, **k)
        finally:
            state["rate"] = 1.0

    monkeypatch.setattr(time, "process_time", clock(real_pt, "pt0"))
    monkeypatch.setattr(time, "perf_counter", clock(real_pc, "pc0"))
    monkeypatch.setattr(repair, "enforce_floor", faster)  # onnxptq.api reads it from the module at each call


def _delivered(monkeypatch, rate: float) -> tuple:
    cfg = resolve_config("A8W8").replace(repair_step_up=False)
    with monkeypatch.context() as m:
        _clocks_at(m, rate)
        result = quantize(planted_model(depth=10), cfg, pattern_data(32))
    record = result.repair
    return record["evaluations"], sorted(record["kept_float"]), record["capped"], result.model.SerializeToString(), record


def test_the_stop_decision_reads_no_clock(monkeypatch):
    """The same builds, kept set and bytes with the process's clocks at 1× and 300× while repair runs."""
    slow, fast = _delivered(monkeypatch, 1.0), _delivered(monkeypatch, 300.0)
    assert slow[:3] == fast[:3], (slow[:3], fast[:3])
    assert slow[3] == fast[3]
    assert 0 < len(slow[1]) < 11  # the search handed nodes back (MatMul_hot's part kept)


def test_a_search_past_its_work_budget_stops_the_same_way_at_any_clock_and_says_so(monkeypatch):
    """Builds estimated dearer than the budget leaves room for: capped after the same builds at 1× and 300× clocks,
    the record in work seconds, the note naming what was not tried (and no longer "depends on the machine's speed")."""
    monkeypatch.setattr(repair, "MIN_BUDGET_S", 0.0)
    monkeypatch.setattr(repair_cost, "BUILD_NS_PER_NODE", 4e8)  # a build estimated at ~0.4 of the plain quantization
    monkeypatch.setattr(repair_cost, "PLAIN_NS_PER_NODE", 1e9)
    slow, fast = _delivered(monkeypatch, 1.0), _delivered(monkeypatch, 300.0)
    assert slow[:3] == fast[:3] and slow[3] == fast[3], (slow[:3], fast[:3])
    record = slow[4]
    assert record["capped"] and record["evaluations"] < record["allowance"], record
    assert record["spent_units"] <= record["budget_units"] + record["build_units"][0] + 1e-6, record
    assert len(record["build_units"]) == record["evaluations"]
    assert abs(record["budget_units"] - record["plain_units"]) < 1e-3  # CAP_PLAINS (1) × the plain's estimate
    assert "time budget" in record["note"] and "work s = 1 × " in record["note"] and "machine's speed" not in record["note"]
    assert record["not_tried"].startswith("handing back to their formats any of the ")
    assert "budget_seconds" not in record  # no CPU figure is said to be the budget


def test_graph_work_counts_multiply_accumulates_and_activations():
    """A Conv (pads 1: 4×8×8 outputs, 3·3·3 each), a Relu and a MatMul (2×5 by 5×7): counted by hand."""
    w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
    b = numpy_helper.from_array(np.zeros((5, 7), np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MatMul", ["m", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", 8]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None), helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feed = {"x": np.zeros((1, 3, 8, 8), np.float32), "m": np.zeros((2, 5), np.float32)}
    work = repair_cost.graph_work(model, feed)
    assert work.macs == 4 * 8 * 8 * 27 + 2 * 7 * 5
    assert work.elements == 2 * 4 * 8 * 8 + 2 * 7
    assert work.weights == 4 * 27 + 35 and work.nodes == 3
    # a feed twice as wide runs twice the work; the estimate is a pure function of the graph and the feeds
    wide = {"x": np.zeros((1, 3, 8, 16), np.float32), "m": np.zeros((2, 5), np.float32)}
    assert abs(work.run(wide) / work.run(feed) - (3 * 128 + 10) / (3 * 64 + 10)) < 1e-9
    assert repair_cost.graph_work(model, feed) == work
