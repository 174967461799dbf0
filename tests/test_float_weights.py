"""The summary says how many weight bytes stayed float, where, and why (analysis/float_weights.py).

Round 27 of outside models: a scikit-learn forest converted by skl2onnx keeps its trees in a
``TreeEnsembleClassifier``'s attributes, so an MXINT8 or A8W8 file is the float file's size while the
summary spoke only of the floor. The graphs below are that shape: a small quantizable MatMul beside
a large ``ai.onnx.ml`` op whose data no quantizer reaches.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.analysis.float_weights import ConstantBytes, constant_table, float_share, float_weight_line
from onnxptq.config.presets import get_preset


def _regressor(targets: int) -> onnx.ModelProto:
    """X [N, 64] → MatMul W [64, 16] (4 KB) → LinearRegressor with ``targets`` outputs (64 B × targets in attributes)."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, (64, 16)).astype(np.float32)
    reg = helper.make_node("LinearRegressor", ["z"], ["y"], domain="ai.onnx.ml", targets=targets,
                           coefficients=rng.normal(0, 0.1, 16 * targets).astype(np.float32).tolist(),
                           intercepts=np.zeros(targets, np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["z"], name="matmul"), reg], "reg",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, targets])],
        initializer=[numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    onnx.checker.check_model(model)
    return model


def _data(n: int = 24) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [{"X": rng.normal(0, 1, (2, 64)).astype(np.float32)} for _ in range(n)]


def test_the_table_counts_initializers_by_reader_and_attribute_data_by_node():
    table = constant_table(_regressor(256))
    assert table["W"] == ConstantBytes(64 * 16 * 4, ("MatMul",), ("matmul",))
    (attr,) = [c for name, c in table.items() if name != "W"]
    assert attr.attribute and attr.ops == ("LinearRegressor",) and attr.nbytes == 4 * (16 * 256 + 256)


def test_a_planned_weight_is_not_left_float_and_attribute_data_always_is():
    table = {"W": ConstantBytes(4000, ("MatMul",), ("mm",)),
             "bank": ConstantBytes(2000, ("Conv",), ("dw",)),
             "tree/attributes": ConstantBytes(6000, ("TreeEnsembleClassifier",), ("tree",), attribute=True)}
    share = float_share(table, planned={"W", "tree/attributes"}, skipped={"dw": "depthwise stays float"})
    assert (share.total, share.left) == (12000, 8000)
    assert share.by_op == {"Conv": (1, 2000), "TreeEnsembleClassifier": (1, 6000)}
    assert share.reasons["Conv"] == "depthwise stays float"
    line = float_weight_line(share)
    assert line is not None and line.index("TreeEnsembleClassifier") < line.index("Conv")  # largest first
    assert float_weight_line(float_share(table, planned={"W", "bank"}, skipped={})) is not None  # 6000/12000
    assert float_weight_line(float_share({"W": table["W"]}, planned={"W"}, skipped={})) is None


@pytest.mark.parametrize("preset", ["A8W8", "MXINT8"])
def test_a_model_whose_bytes_sit_in_an_unquantizable_op_says_so_in_summary_and_warning(preset, caplog):
    caplog.set_level(logging.WARNING, logger="onnxptq")
    result = onnxptq.quantize(_regressor(1024), get_preset(preset), data=_data())
    line = next((x for x in result.summary().splitlines() if "weights left float" in x), None)
    assert line is not None and "LinearRegressor ×1" in line and "(94 %)" in line, result.summary()
    assert any("stays mostly float" in r.getMessage() and "LinearRegressor" in r.getMessage() for r in caplog.records)


def test_a_model_quantized_whole_prints_no_such_line_and_no_warning(caplog):
    caplog.set_level(logging.WARNING, logger="onnxptq")
    result = onnxptq.quantize(_regressor(1), get_preset("A8W8"), data=_data())  # 68 B of attributes: not counted
    assert "weights left float" not in result.summary()
    assert not any("stays mostly float" in r.getMessage() for r in caplog.records)
