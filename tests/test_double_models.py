"""A float64 model is refused with a message that names its double tensors and says to convert it.

Why: converters of tree ensembles and linear models emit whole models in float64 (atspm-detector 1.1.0's
LightGBM ``phase_lgbm_v5_s0.onnx``: one ``X`` double input and one ai.onnx.ml ``TreeEnsemble``, bench/RESULTS.md
"thirteenth round"); "quantization starts from a float model" alone reads as nonsense to its owner.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.check import ModelCheckError


def _tree_ensemble_double() -> onnx.ModelProto:
    """A one-tree, one-split regressor in the ai.onnx.ml-5 form onnxmltools gives LightGBM: X double [N, 2]."""
    def t(name: str, values, dtype) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(values, dtype), name)

    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml",
        n_targets=1, aggregate_function=1, post_transform=0,
        tree_roots=[0], nodes_modes=t("nodes_modes", [0], np.uint8), nodes_featureids=[1],
        nodes_splits=t("nodes_splits", [0.5], np.float64),
        nodes_truenodeids=[0], nodes_trueleafs=[1], nodes_falsenodeids=[1], nodes_falseleafs=[1],
        leaf_targetids=[0, 0], leaf_weights=t("leaf_weights", [-1.0, 2.0], np.float64),
    )
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [None, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)],
                             ir_version=10)


def _matmul_double() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.eye(4), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [1, 4])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("preset", ["A8W8", "BF16", "MXFP8_E4M3"])
def test_double_tree_ensemble_names_its_input(tmp_path, preset: str) -> None:
    path = tmp_path / "phase_lgbm.onnx"
    onnx.save(_tree_ensemble_double(), path)
    with pytest.raises(ModelCheckError, match=r"phase_lgbm\.onnx: .*float64 \(double\): input 'X'; .*convert it to float32"):
        onnxptq.quantize(str(path), preset, data=[{"X": np.random.default_rng(0).random((4, 2))}])


def test_double_weights_named_too() -> None:
    from onnxptq.graph.check import check_model

    with pytest.raises(ModelCheckError, match=r"mm\.onnx: .*float64 \(double\): input 'x', initializer 'W'"):
        check_model(_matmul_double(), "mm.onnx")


def test_integer_model_keeps_the_plain_message() -> None:
    from onnxptq.graph.check import check_model

    model = _matmul_double()
    model.graph.input[0].type.tensor_type.elem_type = TensorProto.INT32
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.eye(4, dtype=np.int32), "W"))
    with pytest.raises(ModelCheckError, match="ints.onnx: .*no float32/float16.*starts from a float model") as err:
        check_model(model, "ints.onnx")
    assert "float64" not in str(err.value)
