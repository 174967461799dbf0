"""A floor with nothing to read says so, not "holds" (analysis/floor.floor_lines).

skl2onnx writes a classifier's outputs as an int64 label and a ZipMap's sequence of maps: the floor judges no float
output and no decision it reads inside the graph (the label is taken by an ``ai.onnx.ml`` TreeEnsembleClassifier), so
the summary of round 27's PCA + forest pipeline read "holds — " with nothing after the dash. The graph below is that
ending in 3 nodes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset


def _tree_classifier() -> onnx.ModelProto:
    """X [N, 8] → MatMul → TreeEnsembleClassifier (one split on the first feature) → label, ZipMap(probabilities)."""
    w = np.random.default_rng(0).normal(0, 1, (8, 4)).astype(np.float32)
    tree = helper.make_node(
        "TreeEnsembleClassifier", ["z"], ["label", "probs"], domain="ai.onnx.ml",
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0], nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 1],
        class_weights=[1.0, 1.0], classlabels_int64s=[0, 1])
    zipmap = helper.make_node("ZipMap", ["probs"], ["probability"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])
    maps = helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["z"]), tree, zipmap], "tree",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None]), helper.make_value_info("probability", maps)],
        initializer=[numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    onnx.checker.check_model(model)
    return model


def test_a_label_and_zipmap_classifier_is_said_not_judged():
    rng = np.random.default_rng(1)
    data = [{"X": rng.normal(0, 1, (1, 8)).astype(np.float32)} for _ in range(24)]
    result = onnxptq.quantize(_tree_classifier(), get_preset("A8W8"), data=data)
    line = next(x for x in result.summary().splitlines() if "accuracy floor (" in x)
    assert "NOT JUDGED" in line and "no float output" in line
    assert ": holds —" not in line
