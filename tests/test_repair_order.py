"""Repair's search in the order of the error each node adds (algorithms/repair_order.py, issue 27 item 2).

The planted graph: two parallel branches, each with one node whose int8 weight grid wipes out its
output (the dead-unit outlier of tests/_structure_graphs.planted_model), one near the start of the
node list and one near its end, among 2 × ``DEPTH`` ordinary layers. In graph order the bisection
finds the two far-apart culprits in separate chunks (many builds); ranked by the error each node
adds in the plain build, both fall into the first trial's kept set and the rest goes back in one
build. What each test would catch:

* an order that is not used, or a ranking that misses the culprits: the number of builds and the
  nodes kept float against the graph-order search of the same graph (``added_error`` made to fail:
  the search's fallback);
* a first split that cuts two alike culprits apart, or a score that credits a node with the error
  it reads: the split and the score on numbers.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from _structure_graphs import H, S, _B, pattern_data
from onnxptq.algorithms import repair, repair_order
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

# The float search is what this pins (the 16-bit step, tests/test_repair_step_up.py, off).
A8W8 = resolve_config("A8W8").replace(repair_step_up=False, repair_budget=50.0)
DEPTH = 4


def _hot(b: _B, src: str, rng: np.random.Generator, name: str) -> str:
    """A layer whose int8 weight grid is set by an outlier reading a unit that never fires (the
    planted_model story): quantized, its output vanishes; float or 16-bit, it holds."""
    dead = rng.standard_normal((H, H)) / np.sqrt(H)
    dead[:, 0] = 0.0
    h = b.op("MatMul", src, b.const(dead))
    hot = rng.standard_normal((H, H)) / np.sqrt(H)
    hot[0] = 1000.0
    b.nodes.append(helper.make_node("MatMul", [h, b.const(hot)], [name + "_out"], name=name))
    return b.op("Relu", b.op("MatMul", name + "_out", b.const(rng.standard_normal((H, H)) / np.sqrt(H))))


def _plain(b: _B, src: str, rng: np.random.Generator, depth: int) -> str:
    for i in range(depth):
        w = b.const(np.eye(H) + 0.05 * rng.standard_normal((H, H)))
        src = b.op("Relu", b.op("MatMul", src, w)) if i % 2 else b.op("MatMul", src, w)
    return src


def far_apart_model() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    b = _B()
    a = _plain(b, _hot(b, "x", rng, "MatMul_hot_first"), rng, DEPTH)  # the first culprit: early in the list
    c = _hot(b, _plain(b, "x", rng, DEPTH), rng, "MatMul_hot_last")  # the second: late
    s = b.op("Add", a, c)
    b.nodes.append(helper.make_node("MatMul", [s, b.const(rng.standard_normal((H, 1)))], ["out"], name="MatMul_out"))
    graph = helper.make_graph(b.nodes, "far_apart", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", S, H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", S, 1])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture
def judged(monkeypatch):
    """``(nodes kept float, held)`` of each candidate the search judged, in order (the plain
    build's known verdict, never built, is not one)."""
    seen: list[tuple[int, bool]] = []
    call = repair._Judge.__call__

    def recorded(self, kept, rung=None):
        before = self.evaluations
        verdict = call(self, kept, rung)
        if self.evaluations > before:
            seen.append((len(kept), verdict is not None and verdict.ok))
        return verdict

    monkeypatch.setattr(repair._Judge, "__call__", recorded)
    return seen


def _kept_after(judged: list[tuple[int, bool]], builds: int) -> int:
    """How many nodes a search stopped after ``builds`` builds would deliver float: the smallest
    kept set that held among them (the kept set only shrinks)."""
    return min(n for n, held in judged[:builds] if held)


def test_the_ranked_search_finds_far_apart_culprits_in_fewer_builds(judged, monkeypatch):
    model, data = far_apart_model(), pattern_data(16)
    ranked = quantize(model, A8W8, data)
    ranked_builds = list(judged)
    record = ranked.repair
    assert record["finished"] and ranked.floor.ok
    assert record["order"]["by"] == "added error"
    # Both culprits ranked first, kept by the first trial; everything else back in that one build.
    assert set(record["order"]["first"]) == {"MatMul_hot_first", "MatMul_hot_last"}
    assert set(record["kept_float"]) == {"MatMul_hot_first", "MatMul_hot_last"}
    # the probe (every node float), the first trial (the two ranked first: it holds), then each of
    # the two tried back alone (both break)
    assert ranked_builds == [(record["candidates"], True), (2, True), (1, False), (1, False)]

    def no_estimate(*a, **k):
        raise RuntimeError("no estimate")

    judged.clear()
    monkeypatch.setattr(repair, "added_error", no_estimate)
    graph_order = quantize(model, A8W8, data)
    assert graph_order.repair["order"]["by"] == "graph" and graph_order.floor.ok
    assert record["candidates"] == graph_order.repair["candidates"] >= 20
    # In graph order the two culprits sit in different halves, each bisected down: many more
    # builds (measured: 17, main 17 too) to the same two nodes, and stopped after the ranked search's four
    # builds it would have delivered half the graph float.
    assert len(judged) > 2 * len(ranked_builds)
    assert set(graph_order.repair["kept_float"]) == set(record["kept_float"])
    assert _kept_after(judged, len(ranked_builds)) >= record["candidates"] // 2 > _kept_after(ranked_builds, len(ranked_builds))


def test_the_first_split_keeps_the_dominant_nodes_and_their_likes():
    order = [f"n{i}" for i in range(10)]
    scores = {"n0": 9.0, "n1": 6.0, **{f"n{i}": 0.01 for i in range(2, 10)}}
    # n0 alone carries half of the total; n1 scores alike (within ALIKE): kept with it
    assert repair_order.first_split(order, scores) == (order[:2], order[2:])
    assert repair_order.first_split(order, dict(scores, n1=1.0)) == (order[:1], order[1:])
    # an even spread: half by mass, never more than half the nodes, never none
    assert repair_order.first_split(order, {n: 1.0 for n in order}) == (order[:5], order[5:])
    # without any measured error, the halves by count
    assert repair_order.first_split(order, {n: 0.0 for n in order}) == (order[:5], order[5:])
    assert repair_order.ranked(["a", "b", "c"], {"b": 2.0, "c": np.inf}) == ["c", "b", "a"]


def test_the_score_is_what_a_node_adds_to_what_it_reads():
    # a clean input made noise scores far above an error only amplified (U²-Net-p's Conv_787 and its side outputs)
    assert repair_order.divergence(3.3, 1e-9) > 10 * repair_order.divergence(10.0, 3.3)
    assert repair_order.divergence(1e-3, 2e-3) == 0.0
    assert repair_order.divergence(1.2e-4, 1e-4) == pytest.approx((2e-5) ** 2 / 2e-4, rel=0.1)
    b = _B()
    y = b.op("Relu", "x")  # Relu_1 writes relu_1 (unmeasured here: it carries its input's error)
    z = b.op("Neg", y)
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info(z, TensorProto.FLOAT, [1])])
    scores = repair_order.node_scores(graph, {"x": 0.1, z: 0.5})
    assert scores == {"Relu_1": 0.0, "Neg_2": pytest.approx(repair_order.divergence(0.5, 0.1))}
    # what Neg_2 reads measured (a dequantized input noisier than relu_1): scored against that
    scores = repair_order.node_scores(graph, {"x": 0.1, z: 0.5, repair_order._read_key("Neg_2", 0): 0.4})
    assert scores["Neg_2"] == pytest.approx(repair_order.divergence(0.5, 0.4))


def test_each_tensor_is_thinned_right_after_its_producer():
    """The estimate's thinning nodes sit right after the node writing their tensor (onnxruntime's
    priority order runs ready nodes lowest index first: appended at the graph's end, every full tensor
    lived to the run's end, zoo ddddocr_det A8W8's peak, 406 MiB against 340 for calibration), with
    the values of the old layout (thinning appended at the end) to the bit."""
    from onnxptq.sessions import open_session

    rng = np.random.default_rng(5)
    nodes, inits, src = [], [], "x"
    for i in range(6):
        w = f"w{i}"
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), w))
        nodes += [helper.make_node("MatMul", [src, w], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        src = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 16])],
                              [helper.make_tensor_value_info(src, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    names = ["x"] + [f"m{i}" for i in range(6)] + ["r2"]
    thinned, out = repair_order._thinned(model, names)
    order = [n.output[0] for n in thinned.graph.node]
    for name in names:
        reader = next(i for i, n in enumerate(thinned.graph.node) if n.op_type == "Reshape" and n.input[0] == name)
        written = order.index(name) if name in order else -1
        between = [n.op_type for n in thinned.graph.node[written + 1 : reader]]
        assert all(n.output[0].startswith("_repair_order_") for n in thinned.graph.node[written + 1 : reader]), (name, between)
    # the old layout: the same nodes, the thinning ones at the end
    old = onnx.ModelProto()
    old.CopyFrom(thinned)
    mine = [n for n in old.graph.node if n.output[0].startswith("_repair_order_")]
    theirs = [n for n in old.graph.node if not n.output[0].startswith("_repair_order_")]
    del old.graph.node[:]
    old.graph.node.extend(theirs + mine)
    feed = {"x": rng.standard_normal((64, 16)).astype(np.float32)}
    fetch = [out[n] for n in names]
    new_runs = open_session(thinned, optimization="none", priority_order=True).run(fetch, feed)
    old_runs = open_session(old, optimization="none", priority_order=True).run(fetch, feed)
    for a, b in zip(new_runs, old_runs):
        np.testing.assert_array_equal(a, b)
