"""Node names made up for unnamed nodes never take a name the model already uses (issue 27, tenth round).

lineless-table-rec's LORE table-logic transformer reached the plan with two nodes named
'Shape_282' (an unnamed Shape at index 282 after prepare's folds, named ``{op}_{index}``, and an
exporter's 'Shape_282' elsewhere) and every preset raised ``ValueError: node 282 (Shape) repeats
the name 'Shape_282'``."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.graph.naming import check_node_names, node_names


def _model() -> onnx.ModelProto:
    """Four MatMuls: the first named ``MatMul_1`` by its exporter (the name the second, unnamed,
    gets by its index), the third unnamed (``MatMul_2`` by its index) and the fourth named
    ``MatMul_2`` by its exporter."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 16)).astype(np.float32), f"W{i}") for i in range(4)]
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["a"], name="MatMul_1"),
             helper.make_node("MatMul", ["a", "W1"], ["b"]),
             helper.make_node("MatMul", ["b", "W2"], ["c"]),
             helper.make_node("MatMul", ["c", "W3"], ["y"], name="MatMul_2")]
    graph = helper.make_graph(nodes, "names", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_made_up_name_skips_one_an_earlier_or_later_node_holds():
    model = _model()
    names = node_names(model)
    assert len(set(names)) == 4 and names[0] == "MatMul_1" and names[3] == "MatMul_2"  # the exporter's names kept
    check_node_names(model)


def test_quantize_runs_on_a_model_whose_exporter_took_an_index_name():
    rng = np.random.default_rng(1)
    result = quantize(_model(), resolve_config("A8W8"), data=[{"x": rng.normal(0, 1, (1, 16)).astype(np.float32)} for _ in range(8)])
    assert {"MatMul_1", "MatMul_2"} <= {n.name for n in result.model.graph.node}
