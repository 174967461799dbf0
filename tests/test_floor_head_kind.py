"""A linear head's regression fields are judged by their error, not as class scores (issue 27 item 2).

brainmaze's EEG spindle detector ends in ``MatMul [51, 3]`` → ``detection [1, 30, 3]``: per segment a
confidence logit, a centre offset and a half-duration. The class-score rule took the three for
classes, judged their arg-max (offset against duration) and repair kept 22-154 nodes float while the
task held (IoU 0.99). The detector is rebuilt here the way it is shaped: a feature extractor over
time steps and a linear head of three independent values with their own levels. Its twin has the
same layer with the columns a softmax-trained head has (zero-sum: the common shift never trains,
analysis/head_kind.py); only that one is judged by arg-max.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import Scores, class_like_outputs
from onnxptq.analysis.head_kind import regression_like, shift_share
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

T, F, HID = 30, 16, 32
A8W8 = resolve_config("A8W8").replace(repair=False)


def _head(zero_sum: bool) -> onnx.ModelProto:
    """``x [1, T, F] → MatMul → Relu → MatMul [HID, 3] → Add → detection [1, T, 3]``: confidence (a
    logit around −4, wide), offset (around 0) and half-duration (around −0.3) per step; offset and
    duration cross each other at many steps (close values: an arg-max over them flips on rounding).
    ``zero_sum``: the same columns less their mean (and the bias's), as a softmax-trained head's."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((F, HID)) / np.sqrt(F)
    w2 = np.stack([2.0 * rng.standard_normal(HID), 0.25 * rng.standard_normal(HID), 0.25 * rng.standard_normal(HID)], 1)
    w2 /= np.sqrt(HID)
    bias = np.array([-4.0, 0.0, -0.05])
    if zero_sum:
        w2, bias = w2 - w2.mean(1, keepdims=True), bias - bias.mean()
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for v, n in ((w1, "w1"), (w2, "w2"), (bias, "b2"))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="MatMul_1"),
             helper.make_node("Relu", ["h"], ["r"], name="Relu_1"),
             helper.make_node("MatMul", ["r", "w2"], ["m"], name="MatMul_head"),
             helper.make_node("Add", ["m", "b2"], ["detection"], name="Add_head")]
    graph = helper.make_graph(nodes, "spindle_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, F])],
                              [helper.make_tensor_value_info("detection", TensorProto.FLOAT, [1, T, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, T, F)).astype(np.float32)} for _ in range(n)]


def _float_outputs(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [session.run(None, f)[0] for f in feeds]


def test_a_regression_head_is_judged_by_its_error_and_its_class_twin_by_arg_max():
    regression, classes = _head(False), _head(True)
    # by structure both are a linear head of 3 columns ...
    assert class_like_outputs(regression) == class_like_outputs(classes) == {"detection": Scores(3, "linear")}
    # ... their data tells them apart: the common shift is most of the regression head's spread
    share_r, _ = shift_share(_float_outputs(regression, _feeds(4)))
    share_c, _ = shift_share(_float_outputs(classes, _feeds(4)))
    assert share_r > 0.5 and share_c < 1e-3
    assert regression_like(_float_outputs(regression, _feeds(4))) and not regression_like(_float_outputs(classes, _feeds(4)))

    result = quantize(regression, A8W8, _feeds(24))
    check = result.floor.outputs["detection"]
    assert check.positions is None and check.top1 is None  # no arg-max judged over fields
    assert check.worst_field is not None and check.worst_field[0] == 2  # each field's error is
    assert result.floor.ok, result.floor.describe()
    assert "regression" in result.summary() and "reads" not in result.summary()

    twin = quantize(classes, A8W8, _feeds(24))
    tcheck = twin.floor.outputs["detection"]
    # the same layer as class scores: judged by arg-max, and the flips between its close columns break it
    assert tcheck.positions is not None and tcheck.positions.flipped >= 1
    assert not twin.floor.ok


def test_few_positions_do_not_decide_and_wide_heads_stay_classes():
    rng = np.random.default_rng(0)
    independent = rng.standard_normal((1, 8, 3)) * [4.0, 1.0, 0.5] + [-4.0, 0.0, -0.8]
    assert not regression_like([independent])  # 8 positions: not told, class scores as before
    assert regression_like([np.concatenate([independent] * 5, 1)])
    wide = rng.standard_normal((1, 64, 6)) * [4.0, 1.0, 0.5, 1.0, 2.0, 1.0]
    assert not regression_like([wide])  # more columns than a value head's: class scores
    assert not regression_like([independent[0]] * 8)  # rank-2 rows (a classifier's): class scores
