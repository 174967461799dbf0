"""A landmark head beside an in-graph sigmoid probability is a regression, not class scores (issue 27 item 5).

MediaPipe's hand landmark model (mediapipe 0.10.14's ``hand_landmark_full.tflite``, tflite2onnx 0.4.1) ends in four
heads on one pooled feature: ``Gemm [63]`` image landmarks (21 points × x, y, z in pixels of the 224 crop),
``Gemm [1] → Sigmoid`` hand presence, ``Gemm [1] → Sigmoid`` handedness and ``Gemm [63]`` world landmarks. The
class-score rule (analysis/class_scores.py, rule 3) took the landmark heads for 63 classes and judged their arg-max:
the largest coordinate flips between two fingertips under BF16 (output cosine 0.998), the floor broke and repair kept
93-94 of 94 nodes float under BF16 and BFP16 (bench/RESULTS.md, "The twenty-fifth round of outside models"). The
tail is rebuilt here as it is shaped: a convolution, a global pooling and the four heads.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import Scores, class_like_outputs
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

CH = 24


def _hand_tail(sigmoid: bool = True) -> onnx.ModelProto:
    """``x [1, 3, 32, 32] → Conv → Relu → ReduceMean → {Gemm [63] landmarks, Gemm [1] → Sigmoid presence, Gemm [1]
    → Sigmoid handedness, Gemm [63] world}``; the landmarks' x, y near 112 px with a spread of a few pixels (many
    near-equal coordinates: an arg-max over them flips on rounding), z near 0. ``sigmoid``: False leaves the two
    probability heads as logits (no in-graph probability: rule 3 as before)."""
    rng = np.random.default_rng(5)
    conv_w = rng.standard_normal((CH, 3, 3, 3)) / 3.0
    lm_w = rng.standard_normal((CH, 63)) * 2.0
    lm_b = np.tile([112.0, 112.0, 0.0], 21) + rng.uniform(-20, 20, 63) * np.tile([1, 1, 0], 21)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for v, n in (
        (conv_w, "conv_w"), (lm_w, "lm_w"), (lm_b, "lm_b"), (rng.standard_normal((CH, 1)), "p_w"), (np.zeros(1), "p_b"),
        (rng.standard_normal((CH, 1)), "h_w"), (np.zeros(1), "h_b"), (rng.standard_normal((CH, 63)) * 0.01, "w_w"),
        (np.zeros(63), "w_b"))]
    nodes = [helper.make_node("Conv", ["x", "conv_w"], ["c"], pads=[1, 1, 1, 1], name="Conv_0"),
             helper.make_node("Relu", ["c"], ["r"], name="Relu_0"),
             helper.make_node("ReduceMean", ["r"], ["pooled"], axes=[2, 3], keepdims=0, name="ReduceMean_0"),
             helper.make_node("Gemm", ["pooled", "lm_w", "lm_b"], ["landmarks"], name="Gemm_landmarks"),
             helper.make_node("Gemm", ["pooled", "p_w", "p_b"], ["presence_logit" if sigmoid else "presence"],
                              name="Gemm_presence"),
             helper.make_node("Gemm", ["pooled", "h_w", "h_b"], ["handed_logit" if sigmoid else "handedness"],
                              name="Gemm_handedness"),
             helper.make_node("Gemm", ["pooled", "w_w", "w_b"], ["world"], name="Gemm_world")]
    if sigmoid:
        nodes += [helper.make_node("Sigmoid", ["presence_logit"], ["presence"], name="Sigmoid_presence"),
                  helper.make_node("Sigmoid", ["handed_logit"], ["handedness"], name="Sigmoid_handedness")]
    graph = helper.make_graph(nodes, "hand_tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, w])
                               for n, w in (("landmarks", 63), ("presence", 1), ("handedness", 1), ("world", 63))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_landmark_heads_beside_sigmoid_probabilities_are_not_class_scores():
    assert class_like_outputs(_hand_tail()) == {}
    # without the in-graph probabilities the structure cannot tell: rule 3 reads both 63-column heads as before
    assert class_like_outputs(_hand_tail(sigmoid=False)) == {"landmarks": Scores(63, "linear"),
                                                             "world": Scores(63, "linear")}


def test_bf16_judges_landmarks_by_their_error_and_repairs_nothing():
    model = _hand_tail()
    onnx.checker.check_model(model)
    data = np.random.default_rng(0).uniform(0, 1, (24, 1, 3, 32, 32)).astype(np.float32)
    result = quantize(model, resolve_config("BF16"), [{"x": x} for x in data])
    check = result.floor.outputs["landmarks"]
    assert check.top1 is None and check.positions is None  # no arg-max judged over coordinates
    assert result.floor.ok, result.floor.describe()
    assert not (result.repair or {}).get("kept_float")
