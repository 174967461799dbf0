"""Repair's head rung: where a broken output has a head of its own, that head alone stepped up the ladder's top
rung is tried first (algorithms/repair.py, ``output_branch``).

uvdoc (round 20) reads a page grid and a 3-D grid off one backbone; A8W8 broke the grid, and repair delivered all
102 planned nodes at 16-bit activations (the ladder's first rung that held), 0.868 of the points within a pixel,
where the grid's head (two Convs) at 16 bits, weights too, kept 0.962 (bench/RESULTS.md, repair12). The planted
model: a backbone of three MatMuls, and two heads over it; head ``a``'s weights cancel (pairs of equal features
read by weights ±100 that differ by a little), so its 8-bit weights' rounding swamps what it computes, and 16-bit
weights keep it. Head ``b`` is plain.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.algorithms.repair import output_branch
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

WIDTH = 16


def two_heads(second_head: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    half = WIDTH // 2
    inits, nodes = [], []
    x = "x"
    for i in range(3):  # the backbone: MatMul + Relu, the last layer's features in equal pairs
        w = rng.normal(0, 0.5, (WIDTH, WIDTH)).astype(np.float32)
        if i == 2:
            w[:, half:] = w[:, :half]
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"h{i}"], name=f"relu{i}")]
        x = f"h{i}"
    big = 100.0 * rng.normal(0, 1, (half, WIDTH))
    wa = np.concatenate([big, -big + rng.normal(0, 0.5, (half, WIDTH))]).astype(np.float32)  # cancels to a small sum
    inits.append(numpy_helper.from_array(wa, "wa"))
    nodes.append(helper.make_node("MatMul", [x, "wa"], ["a"], name="head_a"))
    outputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, WIDTH])]
    if second_head:
        inits.append(numpy_helper.from_array(rng.normal(0, 0.5, (WIDTH, WIDTH)).astype(np.float32), "wb"))
        nodes.append(helper.make_node("MatMul", [x, "wb"], ["b"], name="head_b"))
        outputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, WIDTH]))
    graph = helper.make_graph(nodes, "two_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def feeds(n: int = 24) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"x": rng.normal(0, 1, (1, WIDTH)).astype(np.float32)} for _ in range(n)]


def test_the_branch_of_an_output_is_what_only_it_reads():
    model = two_heads()
    names = [n.name for n in model.graph.node]
    assert output_branch(model.graph, ["a"], names) == ["head_a"]
    assert output_branch(model.graph, ["a", "b"], names) == names  # every node reaches a broken output only
    assert output_branch(model.graph, [], names) == []


def test_a_node_an_if_body_reads_is_no_head_of_another_output():
    """A body of an If reads ``h0`` from the outer scope (no input of the If names it): ``matmul0`` feeds output ``b``
    through the If as well as ``a``, so it is no node of ``a``'s head (it was, the If not counted as its reader)."""
    branch = {}
    for key, op in (("then_branch", "Relu"), ("else_branch", "Neg")):
        branch[key] = helper.make_graph([helper.make_node(op, ["h0"], [f"{key}_out"], name=f"{key}_op")], key, [],
                                        [helper.make_tensor_value_info(f"{key}_out", TensorProto.FLOAT, [1, WIDTH])])
    eye = np.eye(WIDTH, dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="matmul0"),
             helper.make_node("MatMul", ["h0", "wa"], ["a"], name="head_a"),
             helper.make_node("If", ["c"], ["b"], name="branch_b", **branch)]
    graph = helper.make_graph(nodes, "if_reads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH]),
                                                  helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, WIDTH]) for o in "ab"],
                              [numpy_helper.from_array(eye, "w0"), numpy_helper.from_array(eye, "wa")])
    onnx.checker.check_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    names = [n.name for n in nodes]
    assert output_branch(graph, ["a"], names) == ["head_a"]
    assert output_branch(graph, ["b"], names) == ["branch_b"]
    assert output_branch(graph, ["a", "b"], names) == names


@pytest.fixture(scope="module")
def repaired():
    return quantize(two_heads(), resolve_config("A8W8"), data=feeds())


def test_a_broken_head_is_stepped_up_alone_in_one_build(repaired):
    record = repaired.repair
    assert record["before"]["ok"] is False and "a" in [n for n, c in record["before"]["outputs"].items() if not c["ok"]]
    assert list(record["stepped_up"]) == ["head_a"] and "16-bit activations and weights" in record["stepped_up"]["head_a"]
    assert record["evaluations"] == 1 and record["finished"] and not record["kept_float"]
    assert repaired.floor.ok
    # the backbone and the other head keep their 8 bits
    plan = repaired.plan
    assert plan.tensors["wb"].quant.format == "int8" and plan.tensors["w0"].quant.format == "int8"
    assert plan.tensors["wa"].quant.format == "int16"


def test_one_output_has_no_head_and_the_ladder_climbs_as_before(monkeypatch):
    import onnxptq.algorithms.repair as repair_mod

    builds_before_climb = []

    def climb(judge, *args, _real=repair_mod._climb, **kwargs):
        builds_before_climb.append(judge.evaluations)
        return _real(judge, *args, **kwargs)
    monkeypatch.setattr(repair_mod, "_climb", climb)
    record = quantize(two_heads(second_head=False), resolve_config("A8W8"), data=feeds()).repair
    assert record["before"]["ok"] is False
    # no head build: the first build is the ladder's first rung (16-bit activations), whose weights still break
    assert builds_before_climb == [0]
    assert record["evaluations"] >= 2 and record["stepped_up"]


#: storage bits of one element, by format (an ``bfp`` element: its ``bit_width``; an OCP MX element: its own width)
BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "bf16": 16, "fp16": 16,
        "fp4_e2m1": 4, "fp6_e2m3": 6, "fp6_e3m2": 6, "fp8_e4m3": 8, "fp8_e5m2": 8, "int8_mx": 8}


def _bits(quant) -> int:
    attrs = quant.attr_dict
    if quant.format == "bfp":
        return attrs["bit_width"]
    if "element_dtype" in attrs:
        return BITS[attrs["element_dtype"] + ("_mx" if attrs["element_dtype"] == "int8" else "")]
    return BITS[quant.format]


@pytest.mark.parametrize("preset", ["A8W8", "A16W8", "MX4", "MX6", "MX9", "BFP16", "MXFP4", "MXFP6_E2M3", "MXFP8_E4M3", "MXINT8"])
def test_the_ladder_climbs_by_cost_weights_bytes_then_activations(preset):
    """Each rung, applied to the whole plan, stores no fewer weight bits than the one below it, and where it
    stores as many, computes on no fewer activation bits: the ladder is ordered by bytes, then run time."""
    from onnxptq.algorithms.step_up import ladder, step_overrides
    from onnxptq.pipeline.plan import make_plan

    plan = make_plan(two_heads(), resolve_config(preset))
    rungs = ladder(plan)
    assert rungs, preset
    costs = []
    for rung in rungs:
        wider = step_overrides(plan, rung, plan.nodes)
        quants = {name: wider.get(name, t.quant) for name, t in plan.tensors.items() if t.quant is not None}
        weights = sum(_bits(q) for n, q in quants.items() if plan.tensors[n].role == "weight")
        acts = sum(_bits(q) for n, q in quants.items() if plan.tensors[n].role == "activation")
        costs.append((weights, acts))
    assert costs == sorted(costs), (preset, [r.describe() for r in rungs], costs)
