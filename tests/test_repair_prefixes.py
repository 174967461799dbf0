"""Repair on a single-output model whose error is spread: the graph's prefixes bisected after a broken ranked
first trial (algorithms/repair.py, ``_Prefixes``; issue 27 item 2, sscd_distilled).

sscd_distilled (round 22) has one output, so no head rung and no ends trial; its error is spread over its
MobileNet, so the ranking's first few nodes do not hold, and bisection in graph order's halves hands back one
end of the graph with each half: every build broke and BFP16 was delivered with 91 of 91 nodes in BF16.

The planted model: one output read by its cosine, a chain of MatMuls in which three layers' int8 weight grids
are set by an outlier reading a unit that never fires (tests/_structure_graphs.planted_model's story, at
outliers 10, 3 and 7: a coarse grid, not a dead one), the third in the middle of the chain, five ordinary layers
after it. Under A16W8 the whole plan with 16-bit weights holds; the ranking's first trial keeps only the worst
layer (``MatMul_hot0``) and breaks; each half of the graph holds a coarse layer, so both halves handed back break
too: main stepped up all 13 nodes in its 4 builds. The graph's first 7 nodes (the three coarse layers and what
reads them) hold, its first 4 do not: 7 of 13 stepped, the last five layers and the output keep 8-bit weights.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from _structure_graphs import H, S, _B, pattern_data
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

#: each coarse layer's outlier and the ordinary layers after it, in graph order
LAYERS = ((10.0, 0), (3.0, 1), (7.0, 5))


def spread_chain(layers: tuple[tuple[float, int], ...] = LAYERS, act: str | None = None) -> onnx.ModelProto:
    """A chain of MatMuls, each coarse layer a MatMul whose weights' column 0 is zero (a unit that never fires)
    and one whose weight row 0, reading that unit, holds the outlier: float never sees the row, while its int8
    grid (one per output column) rounds every other weight coarsely. ``act``: an activation op after every MatMul but
    the coarse ones and the output (tests/test_repair_changed_nodes.py: nodes with no weight)."""
    rng = np.random.default_rng(5)
    b = _B()
    src = "x"
    for i, (outlier, ordinary) in enumerate(layers):
        dead = rng.standard_normal((H, H)) / np.sqrt(H)
        dead[:, 0] = 0.0
        h = b.op("MatMul", src, b.const(dead))
        h = b.op(act, h) if act else h
        hot = rng.standard_normal((H, H)) / np.sqrt(H)
        hot[0] = outlier
        b.nodes.append(helper.make_node("MatMul", [h, b.const(hot)], [f"MatMul_hot{i}_out"], name=f"MatMul_hot{i}"))
        src = f"MatMul_hot{i}_out"
        for _ in range(ordinary):
            src = b.op("MatMul", src, b.const(np.eye(H) + 0.05 * rng.standard_normal((H, H))))
            src = b.op(act, src) if act else src
    b.nodes.append(helper.make_node("MatMul", [src, b.const(rng.standard_normal((H, 1)) / np.sqrt(H))], ["out"],
                                    name="MatMul_out"))
    x, out = (helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", S, w]) for n, w in (("x", H), ("out", 1)))
    model = helper.make_model(helper.make_graph(b.nodes, "spread_chain", [x], [out], b.inits),  # IR 8: onnxruntime 1.32
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def repaired():
    return quantize(spread_chain(), resolve_config("A16W8"), data=pattern_data(24))


def test_a_spread_error_on_one_output_is_held_by_a_prefix_of_the_graph(repaired):
    record = repaired.repair
    assert record["before"]["ok"] is False and record["candidates"] == 13
    assert record["order"]["first"] == ["MatMul_hot0"]  # the first trial: the worst layer alone, which breaks
    stepped = set(record["stepped_up"])
    assert {"MatMul_hot0", "MatMul_hot1", "MatMul_hot2"} <= stepped, stepped
    # main: 13 of 13 (the first trial and both of graph order's halves broke in its 4 builds)
    assert len(stepped) == 7, stepped
    assert record["evaluations"] <= record["allowance"] == 4
    assert record["order"]["prefixes"] == [[7, True], [4, False]]
    assert repaired.floor.ok
    # the chain's last layers keep their 8-bit weights
    model = spread_chain()
    last = [n for n in model.graph.node][-3:]
    assert all(n.name not in stepped and repaired.plan.tensors[n.input[1]].quant.format == "int8" for n in last)


def test_prefixes_bisect_between_the_longest_broken_and_the_shortest_held():
    from onnxptq.algorithms.repair import _Prefixes

    p = _Prefixes(1, 13)
    assert p.next() == 7
    p.tried(7, True)
    assert p.next() == 4
    p.tried(4, False)
    assert not p.missed() and p.next() == 5
    p.tried(5, True)
    assert p.next() is None  # 4 broke, 5 held: found


def test_prefixes_go_on_past_one_broken_length_and_stop_at_two_with_none_held():
    from onnxptq.algorithms.repair import PREFIX_MISSES, _Prefixes

    assert PREFIX_MISSES == 2
    p = _Prefixes(6, 91)  # sscd_distilled MXINT8: the ranked trial kept 6
    assert p.next() == 48
    p.tried(48, False)
    assert not p.missed() and p.next() == 69  # main: graph order's halves here
    p.tried(69, False)
    assert p.missed()


def test_a_prefix_past_the_first_broken_one_holds_where_graph_orders_halves_broke():
    """sscd_distilled MXINT8's shape: the input side needs more than the first prefix tried (its 62 of 91 nodes; the
    first length, 48, broke). Here four coarse layers, the last at the graph's 10th node of 14: the ranked trial
    (``MatMul_hot0`` alone) and the first prefix (7) break; main then went to graph order's halves, each of which
    hands back one end with a coarse layer, and delivered 14 of 14 stepped; the next length, 10, holds."""
    model = spread_chain(((10.0, 0), (3.0, 1), (7.0, 1), (5.0, 3)))
    result = quantize(model, resolve_config("A16W8"), data=pattern_data(24))
    record = result.repair
    assert record["candidates"] == 14 and record["order"]["first"] == ["MatMul_hot0"]
    assert record["order"]["prefixes"] == [[7, False], [10, True]]  # main: [[7, False]], then halves
    stepped = set(record["stepped_up"])
    assert len(stepped) == 10, stepped  # main: 14
    assert {f"MatMul_hot{i}" for i in range(4)} <= stepped
    assert record["evaluations"] <= record["allowance"] == 4 and result.floor.ok


def test_graph_order_tries_the_input_side_first_where_no_ranking_is_afforded():
    """sscd_distilled A8W8's shape: the ladder's first rung (16-bit activations) breaks, the second (weights too)
    holds, so two builds are left and no ranking is made. Graph order's halves handed back the input side first
    (broke) and then kept the graph's first half: 8 of 17. The prefixes keep the input side from the first build:
    the first 8 hold, the first 4 (both coarse layers) too."""
    model = spread_chain(((10.0, 0), (7.0, 12)))
    result = quantize(model, resolve_config("A8W8"), data=pattern_data(24))
    record = result.repair
    assert record["candidates"] == 17 and record["order"]["by"] == "graph"
    assert record["order"]["prefixes"] == [[8, True], [4, True]]  # main: no prefixes, graph order's halves
    stepped = set(record["stepped_up"])
    assert stepped == {"MatMul_2", "MatMul_hot0", "MatMul_5", "MatMul_hot1"}, stepped  # main: 8 of 17
    assert record["evaluations"] <= record["allowance"] == 4 and result.floor.ok
