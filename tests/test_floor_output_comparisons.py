"""An integer output counted from a float graph output is judged by the floor (issue 27: never silent).

fuzz22 (bench/RESULTS.md, "Looked at, handed over" 2): export_fuzz's ``count = (y > 0).sum(-1)`` beside
``y`` under MXFP8_E4M3 kept float's count on 0.76 of its elements while the verdict said "holds": the
comparison read a graph output, and ``find_decisions`` left every decision on a graph output to that
output's own judgement (its cosine, which says nothing of the sides of 0). Built here as that tail.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.decisions import KEY, find_decisions, judge_decisions
from onnxptq.analysis.floor import Floor, _enough
from onnxptq.api import quantize


def _counter() -> onnx.ModelProto:
    """``y = x @ w`` (an output) and ``count = ReduceSum(Cast(y > 0))`` over its last axis (int64), with
    ``n = Shape(x)``: an integer output that only passes a shape through."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="head"),
             helper.make_node("Greater", ["y", "zero"], ["pos"], name="positive"),
             helper.make_node("Cast", ["pos"], ["ones"], name="ones", to=TensorProto.INT64),
             helper.make_node("ReduceSum", ["ones", "last"], ["count"], name="count", keepdims=0),
             helper.make_node("Shape", ["x"], ["n"], name="shape")]
    graph = helper.make_graph(nodes, "counter", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 8]),
                               helper.make_tensor_value_info("count", TensorProto.INT64, [1, 32]),
                               helper.make_tensor_value_info("n", TensorProto.INT64, [3])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_count_of_a_float_outputs_signs_is_judged_by_its_comparison():
    model = _counter()
    (d,) = find_decisions(model)  # the Shape output passes nothing float through: no decision for it
    assert (d.kind, d.node, d.tensor, d.threshold) == ("threshold", "positive", "y", 0.0)
    rng = np.random.default_rng(4)
    floor = Floor("8-bit", 0.98, 0.95)
    ref = [{d.key: rng.standard_normal((1, 32, 8))} for _ in range(8)]
    # The values move a little (cosine ≈ 0.999) but keep their sides away from 0: holds.
    calm = [{d.key: r[d.key] * 1.02} for r in ref]
    (check,) = judge_decisions([d], ref, calm, floor, _enough)
    assert check.ok and check.top1 == 1.0 and check.count >= 100, check.text
    # One in ten values flips side (beyond the tie band): the count changes, the comparison breaks.
    flip = [{d.key: np.where(np.arange(r[d.key].size).reshape(r[d.key].shape) % 10 == 0, -r[d.key], r[d.key])} for r in ref]
    (check,) = judge_decisions([d], ref, flip, floor, _enough)
    assert not check.ok and check.top1 < 0.95, check.text

    # End to end: the floor's copies judge the comparison on `y`; the delivered model keeps its outputs.
    data = [{"x": rng.standard_normal((1, 32, 16)).astype(np.float32)} for _ in range(12)]
    result = quantize(model, "BF16", data=data)
    assert KEY + "positive" in result.floor.outputs, sorted(result.floor.outputs)
    assert [o.name for o in result.model.graph.output] == ["y", "count", "n"]
    # The summary names what judges the count's share of equal elements; the shape passed through is not judged.
    lines = {ln.split(":")[0].strip(): ln for ln in result.summary().splitlines() if ln.strip().startswith("output ")}
    assert "(judged by decision:positive)" in lines["output count"], lines
    assert "judged by" not in lines["output n"], lines
