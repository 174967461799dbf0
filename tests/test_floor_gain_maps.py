"""A sigmoid gain spread over its range is read as values, a thresholded probability map still by its masks.

DeepFilterNet3's ERB decoder returns ``Sigmoid → m [1, 1, T, 32]``, a gain per band and frame that its package
multiplies onto the spectrum. Read as a probability map, its masks' IoU at 0.5 of its range fell to 0.86-0.95 at a
cosine of 0.9991+ and repair stepped up every node while the enhanced speech kept every frame (analysis/maps.py,
"Gains"). A small decoder of the same shape is built here: features over time and bands, two convolutions, a
sigmoid whose values sit mostly in the middle of its range, and a planted node (``Conv_2``'s channel 0, 40 times
larger weights on a 40 times weaker channel) that moves them by a few codes. The text detector of
tests/test_floor_maps.py is the map a user thresholds.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.maps import LEVELS, MAX_MIDDLE, MIN_SPAN, MaskAgreement, probability_maps, spread_share
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from test_floor_maps import pages, text_detector

T, BANDS = 96, 32
A8W8 = resolve_config("A8W8").replace(repair=False)


def gain_decoder(outlier: float = 40.0) -> onnx.ModelProto:
    """``feat [1, 1, T, 32] → Conv → Relu → Conv_2 (the planted node) → Sigmoid → m [1, 1, T, 32]``: small logits,
    so the gain spreads over its range as an ERB gain does."""
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((8, 1, 3, 3)) * 0.4
    b1 = np.full(8, 0.1)
    w2 = rng.standard_normal((1, 8, 3, 3)) * 0.08
    w1[0] /= outlier  # channel 0 responds ``outlier`` times weaker, its next weights ``outlier`` times larger
    b1[0] /= outlier
    w2[:, 0] *= outlier
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n)
             for v, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (np.array([0.0]), "b2"))]
    nodes = [helper.make_node("Conv", ["feat", "w1", "b1"], ["c1"], name="Conv_1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="Relu_1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["logits"], name="Conv_2", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["logits"], ["m"], name="Sigmoid_1")]
    graph = helper.make_graph(nodes, "gain_decoder", [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 1, T, BANDS])],
                              [helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 1, T, BANDS])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def clips(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Band features over time: noise over a tilt across the bands."""
    rng = np.random.default_rng(seed)
    return [{"feat": (rng.standard_normal((1, 1, T, BANDS)) + np.linspace(-1.0, 1.0, BANDS)).astype(np.float32)}
            for _ in range(n)]


def _outputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [session.run(None, f)[0] for f in feeds]


def test_a_gain_spread_over_its_range_is_read_as_values_not_by_masks():
    model = gain_decoder()
    assert probability_maps(model) == {"m": ()}  # by structure a map: the data decides
    result = quantize(model, A8W8, clips(24))
    check = result.floor.outputs["m"]
    assert check.mask is None and check.regions is None
    assert "a sigmoid's gain, not a thresholded map" in check.note and "judged as values" in check.note
    assert result.floor.ok and check.cosine >= result.floor.floor.cosine
    assert "gain, not a thresholded map" in result.summary()
    # read as a map, the same outputs break: the masks at 0.5 of the range keep under 0.95 of float's
    held = clips(8, seed=7)
    ref, got = _outputs(gain_decoder(), held), _outputs(result.model, held)
    assert spread_share(ref) > MAX_MIDDLE
    masks = MaskAgreement()
    for r, g in zip(ref, got):
        masks.add(r, g)
    assert masks.worst() is not None and masks.worst()[1] < 0.95


def test_a_thresholded_probability_map_keeps_its_masks():
    result = quantize(text_detector(), A8W8, pages(24))
    check = result.floor.outputs["prob"]
    assert "gain" not in (check.note or "")
    assert check.mask is not None and check.mask[1] < 0.95 and not result.floor.ok  # the planted node, found by its masks
    assert spread_share(_outputs(text_detector(), pages(8))) is None


def test_the_share_between_the_levels_on_the_feeds_that_set_them():
    rng = np.random.default_rng(0)
    ground = (rng.uniform(0, 1, (1, 1, 64, 64)) < 0.2).astype(np.float32)  # figures on a ground: all at the ends
    soft = rng.uniform(0, 1, (1, 1, 64, 64)).astype(np.float32)  # a gain over its whole range
    assert spread_share([ground, ground]) is None
    lo, hi = LEVELS[0], LEVELS[-1]
    assert abs(spread_share([soft]) - float(np.mean((soft > lo) & (soft < hi)))) < 0.01
    # pooled over the feeds: one soft feed beside three grounds is still a map
    assert spread_share([soft, ground, ground, ground]) is None
    # a feed spanning less than MIN_SPAN sets no level and adds nothing, either way
    narrow = (0.5 + (MIN_SPAN / 2) * (soft - 0.5)).astype(np.float32)
    assert spread_share([narrow]) is None and spread_share([narrow, soft]) == spread_share([soft])
    # a constant the graph compares it with is a threshold that is read: a map whatever its spread
    assert spread_share([soft], thresholds=(0.3,)) is None
