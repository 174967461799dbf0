"""``torch.nan_to_num`` as TorchScript exports it (pymupdf-layout's graph convs, round 19; bench/RESULTS.md, layout19
and the lead's section): ``Where(IsNaN(x), 0, x)`` → ``Where(Cast(IsInf(Cast(x))) & Cast(x > 0), +finfo.max, ·)`` →
the same with ``x < 0`` and ``-finfo.max``. Two faults, each held here on the smallest graph that shows it:

* the ``+finfo.max`` constant was planned as an A16W8 weight (graph/sentinels.py knew only the negative twin) and
  ``ScaleOverflowError`` stopped the quantization;
* the sign tests ``x > 0`` / ``x < 0`` were judged as in-graph decisions (analysis/decisions.py): a ReLU'd tensor's
  tiny positives rounding to 0 broke the floor with the output's agreement at 0.9997, and repair kept 58-149 nodes.
  Their outcome reaches nothing while ``x`` is finite: read only through ``And`` with ``IsInf``/``IsNaN`` of the
  same tensor, they are no decision.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.analysis.decisions import find_decisions
from onnxptq.graph.sentinels import is_sentinel_constant

FMAX = float(np.finfo(np.float32).max)


def _nan_to_num(sign_test_read_elsewhere: bool = False) -> onnx.ModelProto:
    """x0 → Relu x → nan_to_num's +inf branch (with TorchScript's bool Casts) → MatMul. With
    ``sign_test_read_elsewhere`` the comparison also feeds a Where of its own: then it is a decision."""
    c = lambda n, v: helper.make_tensor(n, TensorProto.FLOAT, [], [v])  # noqa: E731
    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("Cast", ["x"], ["xc"], to=TensorProto.FLOAT),
             helper.make_node("IsInf", ["xc"], ["inf"]),
             helper.make_node("Cast", ["inf"], ["inf_b"], to=TensorProto.BOOL),
             helper.make_node("Greater", ["x", "zero"], ["pos"], name="sign_test"),
             helper.make_node("Cast", ["pos"], ["pos_b"], to=TensorProto.BOOL),
             helper.make_node("And", ["inf_b", "pos_b"], ["pinf"]),
             helper.make_node("Where", ["pinf", "fmax", "x"], ["x1"]),
             helper.make_node("MatMul", ["x1", "w"], ["y"])]
    if sign_test_read_elsewhere:
        nodes += [helper.make_node("Where", ["pos", "x", "zero"], ["kept"]), helper.make_node("Add", ["y", "kept"], ["y2"])]
    graph = helper.make_graph(nodes, "nan_to_num", [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [6, 16])],
                              [helper.make_tensor_value_info("y2" if sign_test_read_elsewhere else "y", TensorProto.FLOAT, [6, 16])],
                              [c("fmax", FMAX), c("zero", 0.0), numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_the_sign_test_of_nan_to_num_is_no_decision_but_a_comparison_read_elsewhere_is():
    assert [d.key for d in find_decisions(_nan_to_num())] == []
    assert [d.key for d in find_decisions(_nan_to_num(sign_test_read_elsewhere=True))] == ["decision:sign_test"]


def test_positive_float_max_is_a_sentinel_like_its_negative_twin():
    assert is_sentinel_constant(np.array(FMAX, np.float32)) and is_sentinel_constant(np.array(-FMAX, np.float32))
    assert is_sentinel_constant(np.array([0.0, np.inf], np.float32))
    assert not is_sentinel_constant(np.array([1.0e4, 3.0e30], np.float32))  # large weights are not sentinels
    with np.errstate(over="raise"):  # float16: +inf alone, no overflowing cast of the float32 bound
        assert is_sentinel_constant(np.array([0.0, np.inf], np.float16))
        assert not is_sentinel_constant(np.array([1.0, 65504.0], np.float16))


def test_a16w8_quantizes_nan_to_num_and_keeps_the_floor():
    feeds = [{"x0": np.random.default_rng(i).normal(size=(6, 16)).astype(np.float32)} for i in range(8)]
    result = onnxptq.quantize(_nan_to_num(), "A16W8", data=feeds)  # raised ScaleOverflowError on 'fmax'
    assert result.floor is not None and result.floor.ok
