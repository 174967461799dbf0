"""scikit-learn models as skl2onnx/onnxmltools write them: ``ai.onnx.ml`` ops and a ZipMap output.

Found on onnxruntime's own ``datasets/logreg_iris.onnx`` (OnnxMLTools: LinearClassifier →
Normalizer → ZipMap, importing only ``ai.onnx.ml``): every preset raised a bare ``ValueError: the
model imports no default ONNX ('') opset``. With that fixed, any classifier ending in a ZipMap
(skl2onnx's default for every classifier: ``probabilities`` is ``seq(map(int64, float))``) failed
in onnx-ir ("Map types are not supported yet", an ``onnx_ir.serde.SerdeError``), and past that in
the accuracy floor (a cosine of a list of dicts). Now a model of only ``ai.onnx.ml`` ops gets the
documented ``NothingToQuantizeError`` naming its ops, and an MLP classifier with a ZipMap is
quantized, its ZipMap output typed as before and left out of the comparison (the floor judges the
tensors; a ZipMap only re-labels them).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.pipeline.calibrate import NothingToQuantizeError

SEQ_MAP = helper.make_sequence_type_proto(
    helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))


def _iris_like() -> onnx.ModelProto:
    """logreg_iris.onnx's structure: LinearClassifier → Normalizer(L1) → ZipMap, no default-domain import."""
    coef = np.random.default_rng(0).normal(0, 1, (3, 4)).round(3).astype(np.float32)
    nodes = [
        helper.make_node("LinearClassifier", ["float_input"], ["label", "scores"], domain="ai.onnx.ml",
                         coefficients=coef.ravel().tolist(), intercepts=[0.2, 1.1, -1.3], classlabels_ints=[0, 1, 2],
                         multi_class=1, post_transform="LOGISTIC"),
        helper.make_node("Normalizer", ["scores"], ["probs"], domain="ai.onnx.ml", norm="L1"),
        helper.make_node("ZipMap", ["probs"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]),
    ]
    graph = helper.make_graph(nodes, "logreg", [helper.make_tensor_value_info("float_input", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                               helper.make_value_info("probabilities", SEQ_MAP)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _mlp_classifier(classes: int = 3, hidden: int = 32, features: int = 8) -> onnx.ModelProto:
    """An MLPClassifier as skl2onnx writes it: MatMul/Add/Relu, MatMul/Add → Softmax; ArgMax → label;
    the probabilities through ZipMap."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, features ** -0.5, (features, hidden)).astype(np.float32), "coefficient"),
             numpy_helper.from_array(rng.normal(0, 0.1, hidden).astype(np.float32), "intercepts"),
             numpy_helper.from_array(rng.normal(0, hidden ** -0.5, (hidden, classes)).astype(np.float32), "coefficient1"),
             numpy_helper.from_array(np.zeros(classes, np.float32), "intercepts1")]
    nodes = [helper.make_node("MatMul", ["input", "coefficient"], ["mul_result"], name="MatMul"),
             helper.make_node("Add", ["mul_result", "intercepts"], ["add_result"], name="Add"),
             helper.make_node("Relu", ["add_result"], ["next_activations"], name="Relu"),
             helper.make_node("MatMul", ["next_activations", "coefficient1"], ["mul_result1"], name="MatMul1"),
             helper.make_node("Add", ["mul_result1", "intercepts1"], ["add_result1"], name="Add1"),
             helper.make_node("Softmax", ["add_result1"], ["out_activations_result"], name="Softmax", axis=1),
             helper.make_node("ArgMax", ["out_activations_result"], ["label"], name="ArgMax", axis=1, keepdims=0),
             helper.make_node("ZipMap", ["out_activations_result"], ["output_probability"], name="ZipMap",
                              domain="ai.onnx.ml", classlabels_int64s=list(range(classes)))]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, features])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
                               helper.make_value_info("output_probability", SEQ_MAP)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(name: str, width: int, seed: int, count: int = 12) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{name: rng.normal(0, 1, (16, width)).astype(np.float32)} for _ in range(count)]


def test_a_model_of_only_ml_ops_gets_the_documented_error():
    with pytest.raises(NothingToQuantizeError, match="LinearClassifier"):
        quantize(_iris_like(), "A8W8", _feeds("float_input", 4, 0))


@pytest.mark.parametrize("preset", ["A8W8", "BF16"])
def test_a_classifier_with_a_zipmap_is_quantized(preset):
    model = _mlp_classifier()
    result = quantize(model, preset, _feeds("input", 8, 0))
    out = {o.name: o for o in result.model.graph.output}
    assert out["output_probability"].type == SEQ_MAP  # the map type put back after onnx-ir
    assert any(n.op_type in ("QuantizeLinear", "DequantizeLinear", "Cast") for n in result.model.graph.node)
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(result.model.SerializeToString())
    held = _feeds("input", 8, 1000, 4)
    same = np.mean([np.mean(ref.run(["label"], f)[0] == got.run(["label"], f)[0]) for f in held])
    assert same >= 0.95
    probs = got.run(["output_probability"], held[0])[0]
    assert isinstance(probs, list) and set(probs[0]) == {0, 1, 2}
