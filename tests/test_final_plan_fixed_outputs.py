"""The final plan reads float's outputs fixed per calibration: a second look does not move it.

pipeline/final_plan.py tells a sampling grid among the graph outputs by float's values on the held-out
samples (pipeline/plan/coordinates.py). The second look (pipeline/second_look.py) adds a reserve of
held-out samples to them; read from all of them, a build after the look could find grids the builds
before it did not (or lose one), so the plan moved within one quantization. It reads the first held-out
samples' outputs (``Calibrated.first_outputs``), which no look changes.

The model: a 1×1 Conv that passes a two-channel ``[1, 2, 8, 8]`` input through, a graph output of a
grid's shape. The first feeds are page grids in [-1, 1] (so the output is a grid: uint8 over [-1, 1]
steps 2/255, coarser than a pixel, and the plan makes it 16-bit); the feeds the reserve draws are noise,
which is no grid: read from every held-out sample, the output would go back to 8 bits after the look.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.final_plan import final_plan

SIDE = 8
FEEDS = 48  # 8 held out of the first 24, a reserve of 8 (every third after them): a second look is possible


def passthrough() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.eye(2, dtype=np.float32).reshape(2, 2, 1, 1), "w")
    node = helper.make_node("Conv", ["x", "w"], ["grid"], name="conv")
    graph = helper.make_graph([node], "passthrough", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, SIDE, SIDE])],
                              [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 2, SIDE, SIDE])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def feeds() -> list[dict[str, np.ndarray]]:
    """Page grids (x along W, y along H, a little noise) for the first 24 feeds, noise in [-1, 1] after."""
    rng = np.random.default_rng(0)
    axis = np.linspace(-0.9, 0.9, SIDE)
    ys, xs = np.meshgrid(axis, axis, indexing="ij")
    page = np.stack([xs, ys])[None]
    out = []
    for i in range(FEEDS):
        x = page + rng.normal(0, 0.01, page.shape) if i < 24 else rng.uniform(-1, 1, page.shape)
        out.append({"x": x.astype(np.float32)})
    return out


@pytest.fixture(scope="module")
def calibrated():
    cfg = resolve_config("A8W8")
    return cfg, calibrate_once(passthrough(), cfg, feeds(), holdout=8)


def test_the_plan_after_a_second_look_is_the_plan_before_it(calibrated):
    cfg, cal = calibrated
    assert cal.reserve and not cal.looked_again  # the data leaves a reserve for a second look
    before = final_plan(cal, cfg)
    assert before.tensors["grid"].quant.format == "uint16"  # read as a grid on the first held-out samples
    assert before.guard["grid"]["rule"] == "coordinates"
    first = list(cal.holdout_outputs)
    cal.look_again()
    assert len(cal.holdout_outputs) > len(first)  # the reserve's noise joined the held-out outputs ...
    assert len(cal.first_outputs) == len(first) and all(a is b for a, b in zip(cal.first_outputs, first))
    after = final_plan(cal, cfg)
    # ... and the plan is read from the first ones still: the grid stays 16-bit (read from all, uint8)
    assert after.tensors["grid"].quant.format == "uint16"
    assert after.to_json()["tensors"] == before.to_json()["tensors"]
