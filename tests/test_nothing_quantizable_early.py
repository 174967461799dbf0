"""A model with no op the configuration quantizes is refused before preparation.

The pattern (luscinia 1.0.0's LightGBM word-stress classifier, bench/RESULTS.md "eighth round"):
OnnxMLTools writes a gradient-boosted model as one ``TreeEnsembleClassifier`` (194 MB of tree
attributes) and a ``ZipMap``. Nothing in it is quantizable, yet quantize() prepared it first
(every shape-inference step round-trips the tree attributes through onnx-ir) and took more than
600 s to say so. Built here small: the same two ops with a three-tree ensemble.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.pipeline import calibrate
from onnxptq.pipeline.calibrate import NothingToQuantizeError


def _tree_classifier() -> onnx.ModelProto:
    # three stumps on features 0, 1, 2: leaf weights vote for class 0 or 1
    ids = [0, 1, 2]
    kw = dict(
        nodes_treeids=[t for t in ids for _ in range(3)], nodes_nodeids=[0, 1, 2] * 3,
        nodes_featureids=[f for f in ids for _ in range(3)], nodes_values=[0.5, 0.0, 0.0] * 3,
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * 3, nodes_truenodeids=[1, 0, 0] * 3,
        nodes_falsenodeids=[2, 0, 0] * 3, nodes_hitrates=[1.0] * 9, nodes_missing_value_tracks_true=[0] * 9,
        class_treeids=[t for t in ids for _ in range(2)], class_nodeids=[1, 2] * 3, class_ids=[0, 1] * 3,
        class_weights=[1.0, -1.0] * 3, classlabels_int64s=[0, 1], post_transform="LOGISTIC",
    )
    nodes = [
        helper.make_node("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml", name="trees", **kw),
        helper.make_node("ZipMap", ["scores"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1], name="zip"),
    ]
    graph = helper.make_graph(
        nodes, "trees", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
         helper.make_value_info("probabilities", helper.make_sequence_type_proto(
             helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_refused_before_preparation(tmp_path, monkeypatch):
    """On main: preparation runs (here it raises the sentinel below) before the refusal."""
    path = tmp_path / "trees.onnx"
    onnx.save(_tree_classifier(), path)

    def no_prepare(*args, **kwargs):
        raise AssertionError("prepared a model with nothing to quantize")

    monkeypatch.setattr(calibrate, "prepare_for_quantization", no_prepare)
    feeds = [{"x": np.random.default_rng(i).random((4, 3)).astype(np.float32)} for i in range(4)]
    with pytest.raises(NothingToQuantizeError, match="TreeEnsembleClassifier"):
        onnxptq.quantize(str(path), "A8W8", data=feeds)
