"""A stepped search bisects the nodes its rung changes (algorithms/step_up.changed_nodes; issue 27 item 2, repair19).

Under A16W8 the ladder's one rung is 16-bit weights: a node that reads no weight (a Relu, a Softmax, a Reshape, an Add of
two activations) steps to nothing, so a candidate stepping it is the plain build again. Repair's search counted such
nodes as candidates: its prefixes were lengths over them, its ranked first trial could be one of them (a fuzzed
attention module's Softmax: that build was the plain model, bench/RESULTS.md repair19), and the record named them
"stepped up" (58 of 58 nodes where 9 MatMuls carried a weight). The planted chain: tests/test_repair_prefixes.py's
coarse int8 weight grids (outliers 10, 3, 7 and 5) with a Relu after every MatMul. main stepped 8 MatMuls and 4 Relus
(its prefixes 12 ✓, 6 ✗ counted the Relus); here the prefixes count MatMuls (7 ✓, 4 ✓) and 4 MatMuls are stepped.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from _structure_graphs import pattern_data
from test_repair_prefixes import spread_chain
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

LAYERS = ((10.0, 0), (3.0, 1), (7.0, 1), (5.0, 3))


def relu_chain(layers: tuple[tuple[float, int], ...] = LAYERS) -> onnx.ModelProto:
    """test_repair_prefixes.spread_chain's coarse layers (a dead unit's weight row holding the outlier) with a Relu after
    every MatMul but the coarse ones and the output."""
    return spread_chain(layers, act="Relu")


def _pooled_cosine(a: onnx.ModelProto, b: onnx.ModelProto, feeds) -> float:
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]) for m in (a, b)]
    ref = np.concatenate([run[0].run(None, f)[0].ravel() for f in feeds]).astype(np.float64)
    got = np.concatenate([run[1].run(None, f)[0].ravel() for f in feeds]).astype(np.float64)
    return float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)))


@pytest.fixture(scope="module")
def repaired():
    model = relu_chain()
    return model, quantize(model, resolve_config("A16W8"), data=pattern_data(24))


def test_a_weights_rung_steps_only_nodes_with_a_weight(repaired):
    model, result = repaired
    record = result.repair
    ops = {n.name: n.op_type for n in model.graph.node}
    stepped = set(record["stepped_up"])
    assert stepped and all(ops[n] == "MatMul" for n in stepped), stepped  # main: Relu_3, Relu_7, Relu_11, Relu_14 too
    assert record["order"]["prefixes"] == [[7, True], [4, True]]  # lengths over the nodes the rung changes; main: 12, 6
    assert stepped == {"MatMul_2", "MatMul_hot0", "MatMul_6", "MatMul_hot1"}, stepped  # main: 8 MatMuls
    assert record["evaluations"] <= record["allowance"] == 4 and result.floor.ok
    fresh = pattern_data(200, seed=11)
    assert _pooled_cosine(model, result.model, fresh) >= 0.99  # holds on other rows, by an independent cosine


def test_changed_nodes_are_those_reading_or_writing_a_tensor_the_rung_widens(repaired):
    from onnxptq.algorithms.step_up import changed_nodes, ladder

    model, _ = repaired
    plan = quantize(model, resolve_config("A16W8").replace(repair=False), data=pattern_data(24)).plan  # the plain plan
    weights_rung = ladder(plan)[-1]  # A16W8: 16-bit weights, the only rung
    assert [sorted(r.roles) for r in ladder(plan)] == [["weight"]]
    changed = changed_nodes(plan, weights_rung)
    ops = {n.name: n.op_type for n in model.graph.node}
    assert changed == {n for n in plan.nodes if ops[n] == "MatMul"}
    a8w8 = quantize(model, resolve_config("A8W8").replace(repair=False), data=pattern_data(24)).plan
    activations = ladder(a8w8)[0]  # 16-bit activations: every node reading or writing an 8-bit activation, Relus too
    assert {n for n in changed_nodes(a8w8, activations) if ops[n] == "Relu"}
