"""Repair's ends trial: where a broken output's head alone stepped up still breaks, the graph's middle is handed
back in one build, keeping its input side and its head stepped up (algorithms/repair.py, ``graph_ends``).

uvdoc BFP16 (round 20) held with its heads and the backbone's first quarter in BF16 (34 of 108 nodes), and repair
delivered all 108 in BF16: the head alone broke, and bisection from the whole plan gave back halves that each held
one of the two ends (bench/RESULTS.md, repair12). The planted model: output ``a`` is the difference of two
projections of the input that differ by a little (``stem`` feeds a backbone of MatMuls to output ``b`` and
``project``; ``project``, ``twin`` and ``diff`` are ``a``'s head), so ``a`` needs both the stem's and the head's rounding fine: the head alone
stepped up breaks, the stem and the head together hold, and the backbone keeps its 8 bits.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.algorithms.repair import graph_ends
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

from test_repair_head_rung import WIDTH, feeds  # the same 16-wide normal feeds

BACKBONE = 6


def stem_and_head() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    ws = rng.normal(0, 1, (WIDTH, WIDTH)).astype(np.float32)
    wa = (np.eye(WIDTH) + rng.normal(0, 0.1, (WIDTH, WIDTH))).astype(np.float32)
    # the twin reads the input with the stem and the head's weights in one, a little off
    wt = (ws.astype(np.float64) @ wa + rng.normal(0, 0.02, ws.shape)).astype(np.float32)
    inits = [numpy_helper.from_array(ws, "ws"), numpy_helper.from_array(wa, "wa"), numpy_helper.from_array(wt, "wt")]
    nodes = [helper.make_node("MatMul", ["x", "ws"], ["s"], name="stem")]
    h = "s"
    for i in range(BACKBONE):
        inits.append(numpy_helper.from_array(rng.normal(0, 0.3, (WIDTH, WIDTH)).astype(np.float32), f"w{i}"))
        out = f"m{i}"
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [out], name=f"matmul{i}"))
        h = out
    # b's first row wins by far: its arg-max read is sure, the backbone's 8 bits never move it
    inits.append(numpy_helper.from_array(np.array([[50.0] + [0.0] * (WIDTH - 1)], np.float32), "lead"))
    nodes += [helper.make_node("Add", [h, "lead"], ["b"], name="b_out"),
              helper.make_node("MatMul", ["x", "wt"], ["t"], name="twin"),
              helper.make_node("MatMul", ["s", "wa"], ["p"], name="project"),
              helper.make_node("Sub", ["p", "t"], ["a"], name="diff")]
    graph = helper.make_graph(nodes, "stem_and_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, WIDTH]) for o in "ab"], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnxruntime 1.32 reads IR 8 models of opset 17
    return model


def test_the_ends_are_the_first_and_last_quarter_with_the_head():
    names = [f"n{i}" for i in range(12)]
    assert graph_ends(names, frozenset({"n5"})) == frozenset({"n0", "n1", "n2", "n9", "n10", "n11", "n5"})
    assert graph_ends(names[:2], frozenset()) == frozenset()  # no middle to hand back


@pytest.fixture(scope="module")
def repaired():
    return quantize(stem_and_head(), resolve_config("A8W8"), data=feeds())


def test_the_stem_and_the_head_are_found_together(repaired):
    record = repaired.repair
    assert record["before"]["ok"] is False
    assert [n for n, c in record["before"]["outputs"].items() if not c["ok"]] == ["a"]
    stepped = set(record["stepped_up"])
    assert {"stem", "twin", "project"} <= stepped, stepped
    # the backbone's middle keeps its 8 bits (main stepped up every node: the head alone broke, and the
    # bisection's halves each held one end)
    assert len(stepped) <= 6, stepped
    assert repaired.floor.ok
    assert record["ends"] == {"nodes": 6, "held": True}
    assert all(repaired.plan.tensors[f"w{i}"].quant.format == "int8" for i in (2, 3, 4))
