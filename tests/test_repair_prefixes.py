"""Repair on a single-output model whose error is spread: ranked prefixes after a broken first trial
(algorithms/repair.py, ``_Prefixes`` and ``interleaved``; issue 27 item 2, sscd_distilled).

sscd_distilled (round 22) has one output, so no head rung and no ends trial; its error is spread over its
MobileNet, so the ranking's first few nodes do not hold, and bisection in graph order hands back one end of
the graph with each half: every build broke and the block formats were delivered with 91 of 91 nodes in BF16.

The planted model: one output read by its cosine, a chain of MatMuls in which four layers' int8 weight grids
are set by an outlier reading a unit that never fires (tests/_structure_graphs.planted_model's story, at
outliers 8, 3, 6 and 4: a coarse grid, not a dead one). Under A16W8 the whole plan with 16-bit weights holds;
the ranking's first trial keeps only the worst layer (``MatMul_hot0``) and breaks; each half of the graph
holds two of the layers, so both halves handed back break too: main stepped up all 13 nodes in its 4 builds.
The ranked prefixes keep ``MatMul_hot0``, ``MatMul_hot2`` and ``MatMul_hot3`` with one other node (4 of 13).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from _structure_graphs import H, S, _B, pattern_data
from onnxptq.algorithms import repair
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

#: the outliers of the four coarse layers, in graph order
OUTLIERS = (8.0, 3.0, 6.0, 4.0)


def _coarse(b: _B, src: str, rng: np.random.Generator, outlier: float, name: str) -> str:
    """A layer whose int8 weight grid (one per output column) is set by ``outlier`` in the row that reads a unit
    the layer before never fires: float never sees the row, 8-bit weights round every other weight coarsely."""
    dead = rng.standard_normal((H, H)) / np.sqrt(H)
    dead[:, 0] = 0.0
    h = b.op("MatMul", src, b.const(dead))
    hot = rng.standard_normal((H, H)) / np.sqrt(H)
    hot[0] = outlier
    b.nodes.append(helper.make_node("MatMul", [h, b.const(hot)], [name + "_out"], name=name))
    return name + "_out"


def spread_chain() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    b = _B()
    src = "x"
    for i, outlier in enumerate(OUTLIERS):
        src = _coarse(b, src, rng, outlier, f"MatMul_hot{i}")
        src = b.op("MatMul", src, b.const(np.eye(H) + 0.05 * rng.standard_normal((H, H))))
    b.nodes.append(helper.make_node("MatMul", [src, b.const(rng.standard_normal((H, 1)) / np.sqrt(H))], ["out"],
                                    name="MatMul_out"))
    graph = helper.make_graph(b.nodes, "spread_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", S, H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", S, 1])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def repaired():
    return quantize(spread_chain(), resolve_config("A16W8"), data=pattern_data(24))


def test_a_spread_error_on_one_output_is_held_by_a_ranked_prefix(repaired):
    record = repaired.repair
    assert record["before"]["ok"] is False
    assert record["order"]["first"] == ["MatMul_hot0"]  # the first trial: the worst layer alone, which breaks
    stepped = set(record["stepped_up"])
    assert {"MatMul_hot0", "MatMul_hot2", "MatMul_hot3"} <= stepped, stepped
    # main: 13 of 13 (the first trial and both graph halves broke in its 4 builds)
    assert len(stepped) <= 5, stepped
    assert record["evaluations"] <= record["allowance"] == 4
    assert record["order"]["prefixes"][0] == [7, True]
    assert repaired.floor.ok
    # the mildest coarse layer is handed back with its 8-bit weights
    weight = next(n.input[1] for n in spread_chain().graph.node if n.name == "MatMul_hot1")
    assert "MatMul_hot1" not in stepped and repaired.plan.tensors[weight].quant.format == "int8"


def test_interleaved_takes_the_ranking_and_the_input_side_in_turn():
    assert repair.interleaved(["d", "b", "a", "c"], ["a", "b", "c", "d"]) == ["d", "a", "b", "c"]
    assert repair.interleaved(["c", "a", "b"], ["a", "b", "c"]) == ["c", "a", "b"]


def test_prefixes_bisect_between_the_longest_broken_and_the_shortest_held():
    p = repair._Prefixes(1, 13)
    assert p.first() and p.next() == 7
    p.tried(7, True)
    assert not p.first() and p.next() == 4
    p.tried(4, False)
    assert p.next() == 5
    p.tried(5, True)
    assert p.next() is None  # 4 broke, 5 held: found
