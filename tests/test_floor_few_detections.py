"""A detector judged on too few images says so instead of holding (issue 27, "never silent").

captcha-recognizer's slider-gap detector (a YOLOv8-seg head: ``output0 [1, 4 + 1 + 32, anchors]``,
box rows, one sigmoid class row, mask coefficients) lost 1-3 of 32 captchas under BF16, A16W8,
A8W8 and MXINT8: candidates scoring 0.50-0.63 against the package's 0.5 crossed it. On the floor's
12 images one best candidate per image gave too few logit shifts to estimate from, and the verdict
said "holds" on the cosine alone; nudenet's MXINT8 (box F1 0.966 on 160 images) held on 12 images
whose class peaks moved no more than MX9's (0.974). A verdict that holds now needs as many
images as the floor needs rows (34 at 0.97), as a classifier's top-1 does, and the floor keeps as
many calibration feeds for it (analysis/score_rows.py, pipeline/calibrate.reads_feeds).

The head is built as ultralytics exports YOLOv8-seg (boxes in pixels, a ``Sigmoid`` class row and
mask-coefficient rows ``Concat``-ed), on noisy images with one to three bright blobs; nothing is
planted (BF16's own rounding, as on slider).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.score_rows import detector_score_rows
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import reads_feeds
from test_floor_rare_decisions import images as blob_images

S, STRIDE, COEFFS = 16, 8, 2
BF16 = resolve_config("BF16")


def seg_head() -> onnx.ModelProto:
    """``output0 [1, 4 + 1 + COEFFS, S·S] = Concat(boxes, Sigmoid(class), coefficients)``."""
    rng = np.random.default_rng(4)
    col, row = np.meshgrid(np.arange(S), np.arange(S))
    grid = np.stack([(col + 0.5) * STRIDE, (row + 0.5) * STRIDE, np.full((S, S), 24.0), np.full((S, S), 24.0)]).reshape(1, 4, S * S)
    inits = {"w1": np.abs(rng.standard_normal((8, 3, 3, 3))) * 0.2 + 0.1, "b1": np.full(8, -0.3),
             "wc": np.full((1, 8, 1, 1), 0.12), "bc": np.array([-3.0]), "wb": rng.standard_normal((4, 8, 1, 1)) * 0.02,
             "bb": np.zeros(4), "wm": rng.standard_normal((COEFFS, 8, 1, 1)), "bm": np.zeros(COEFFS),
             "stride": np.full((1, 1, 1), float(STRIDE)), "grid": grid}
    tensors = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()]
    tensors += [numpy_helper.from_array(np.array(v, np.int64), n)
                for n, v in (("cls_shape", [1, 1, S * S]), ("box_shape", [1, 4, S * S]), ("coef_shape", [1, COEFFS, S * S]))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="Conv_1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["h"], name="Relu_1"),
             helper.make_node("Conv", ["h", "wc", "bc"], ["cl"], name="Conv_cls"),
             helper.make_node("Reshape", ["cl", "cls_shape"], ["clr"], name="Reshape_cls"),
             helper.make_node("Sigmoid", ["clr"], ["scores"], name="Sigmoid_cls"),
             helper.make_node("Conv", ["h", "wb", "bb"], ["bo"], name="Conv_box"),
             helper.make_node("Reshape", ["bo", "box_shape"], ["bor"], name="Reshape_box"),
             helper.make_node("Mul", ["bor", "stride"], ["bos"], name="Mul_stride"),
             helper.make_node("Add", ["bos", "grid"], ["boxes"], name="Add_grid"),
             helper.make_node("Conv", ["h", "wm", "bm"], ["co"], name="Conv_coef"),
             helper.make_node("Reshape", ["co", "coef_shape"], ["coefs"], name="Reshape_coef"),
             helper.make_node("Concat", ["boxes", "scores", "coefs"], ["output0"], name="Concat_out", axis=1)]
    graph = helper.make_graph(nodes, "seg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, S, S])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 5 + COEFFS, "anchors"])], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def images(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Noisy images with one to three bright blobs ("gaps") each."""
    return blob_images(n, seed, size=S)


def test_a_detector_on_fewer_images_than_the_floor_needs_is_not_judged():
    assert detector_score_rows(seg_head()) == {"output0": (1, ((4, 5),), ((0, 4), (5, 5 + COEFFS)))}
    few = quantize(seg_head(), BF16.replace(repair=False), images(12))
    check = few.floor.outputs["output0"]
    # main: "holds" on the cosine alone, nothing said of the detections
    assert few.floor.ok and check.top1_unjudged and check.images == 12 and few.floor.unjudged == ["output0"]
    assert "could NOT judge the detections of output0: 12 images (4 held-out and 8 calibration samples)" in few.summary()
    # with the data the advice asks for, the floor keeps as many calibration feeds and judges
    assert reads_feeds(seg_head(), BF16) == 54  # as many as confirm the floor with every read kept (Floor.reads_wanted)
    enough = quantize(seg_head(), BF16.replace(repair=False), images(48))
    judged = enough.floor.outputs["output0"]
    assert not judged.top1_unjudged and judged.kept is not None and judged.kept_seen + enough.floor.samples >= 34
    assert enough.floor.ok and judged.kept.figure >= 0.97
