"""Every preset refuses a model with no default-domain node before preparing it.

BF16 quantizes every op type (``quantize_all_op_types``), so the early refusal of
tests/test_nothing_quantizable_early.py skipped it: luscinia 1.0.0's 194 MB LightGBM
(``TreeEnsembleClassifier`` + ``ZipMap``, all ``ai.onnx.ml``) took 295 s of preparation to reach the
same refusal (bench/RESULTS.md "eighth round"). The planner quantizes default-domain nodes only,
and preparation never makes one, so the answer is known from the op list.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.graph.check import quantizable_op_types_present
from onnxptq.pipeline import calibrate
from onnxptq.pipeline.calibrate import NothingToQuantizeError
from test_nothing_quantizable_early import _tree_classifier


def _as_exported(model: onnx.ModelProto, cast_to: int = TensorProto.INT64) -> onnx.ModelProto:
    """luscinia's exact layout: the classifier's outputs pass two Identities, the int64 label a Cast
    to int64 (``cast_to``), before the graph's label and the ZipMap."""
    trees, zipmap = model.graph.node
    trees.output[:] = ["label_tensor", "probability_tensor"]
    zipmap.input[:] = ["lgbmprobabilities"]
    del model.graph.node[:]
    model.graph.node.extend([
        trees,
        helper.make_node("Identity", ["label_tensor"], ["lgbmlabel"], name="id_label"),
        helper.make_node("Identity", ["probability_tensor"], ["lgbmprobabilities"], name="id_probs"),
        helper.make_node("Cast", ["lgbmlabel"], ["label"], to=cast_to, name="cast_label"),
        zipmap])
    model.graph.output[0].type.tensor_type.elem_type = cast_to
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("preset", ["BF16", "FP16", "A16W8", "BFP16", "MXFP8_E4M3"])
def test_every_preset_refuses_before_preparation(preset, tmp_path, monkeypatch):
    """On main: BF16 prepares (here: the sentinel's AssertionError) before it refuses."""
    path = tmp_path / "trees.onnx"
    onnx.save(_as_exported(_tree_classifier()), path)

    def no_prepare(*args, **kwargs):
        raise AssertionError("prepared a model with nothing to quantize")

    monkeypatch.setattr(calibrate, "prepare_for_quantization", no_prepare)
    feeds = [{"x": np.random.default_rng(i).random((4, 3)).astype(np.float32)} for i in range(4)]
    with pytest.raises(NothingToQuantizeError, match=r"ai\.onnx\.ml::TreeEnsembleClassifier"):
        onnxptq.quantize(str(path), preset, data=feeds)


def test_a_default_domain_op_beside_them_counts():
    """A Relu on the scores is quantizable under BF16 (every op type), not under A8W8's op list."""
    model = _tree_classifier()
    model.graph.node.append(helper.make_node("Relu", ["scores"], ["relu"], name="relu"))
    model.graph.output.append(helper.make_tensor_value_info("relu", TensorProto.FLOAT, [None, 2]))
    assert quantizable_op_types_present(model, None) == {"Relu"}
    assert quantizable_op_types_present(model, {"Conv", "MatMul"}) == set()
    assert quantizable_op_types_present(_tree_classifier(), None) == set()
    # preparation removes the Identities and the int64 → int64 Cast; a Cast to another type stays
    assert quantizable_op_types_present(_as_exported(_tree_classifier()), None) == set()
    assert quantizable_op_types_present(_as_exported(_tree_classifier()), None, same_type_casts_removed=False) == {"Cast"}
    assert quantizable_op_types_present(_as_exported(_tree_classifier(), TensorProto.INT32), None) == {"Cast"}
