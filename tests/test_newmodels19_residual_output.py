"""Round 19's RivaGAN watermark encoder: an output that adds a residual to the model's input is judged by the residual.

invisible-watermark's encoder writes ``output = frame + 0.016 · tanh(conv(...))``. The output's cosine is the frame's:
under MXFP8_E4M3 it read 0.99994 while the residual — the mark — kept cosine 0.92 of float's and the float decoder
lost payload bits on 2 of 32 images (bench/RESULTS.md, "Round 19's silent rows"). analysis/decisions.py now captures
the residual as it captures a decision's tensor and holds its cosine against the cosine floor. The graph below is
that tail at a small size.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.decisions import KEY, find_decisions
from onnxptq.analysis.floor import floor_for, measure, readings_of
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset, resolve_config


def _marking(add_to_input: bool = True) -> onnx.ModelProto:
    """frame [1, 3, 16, 16] → Conv 3→8 (3×3) → Tanh → Conv 8→3 → Tanh → Mul 0.016 → Add(frame, ·): the marked image
    (``add_to_input=False``: added to a constant instead, no input passed through)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.5, (3, 8, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(0.016, np.float32), "strength"),
             numpy_helper.from_array(np.zeros((1, 3, 16, 16), np.float32), "canvas")]
    nodes = [helper.make_node("Conv", ["frame", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Tanh", ["c"], ["h"], name="tanh"),
             helper.make_node("Conv", ["h", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Tanh", ["c2"], ["t"], name="tanh2"),
             helper.make_node("Mul", ["t", "strength"], ["mark"], name="mul"),
             helper.make_node("Add", ["frame" if add_to_input else "canvas", "mark"], ["marked"], name="add")]
    graph = helper.make_graph(nodes, "marking", [helper.make_tensor_value_info("frame", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("marked", TensorProto.FLOAT, [1, 3, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_residual_added_to_an_input_is_found():
    (found,) = find_decisions(_marking())
    assert (found.node, found.tensor, found.kind, found.index) == ("add", "mark", "residual", 1)
    assert find_decisions(_marking(add_to_input=False)) == []


def test_the_floor_holds_the_residual_to_the_cosine_floor():
    rng = np.random.default_rng(1)
    reference, candidate = [], []
    for _ in range(4):
        frame = rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
        mark = 0.016 * np.tanh(rng.normal(0, 2, frame.shape)).astype(np.float32)
        moved = mark + rng.normal(0, 0.006, frame.shape).astype(np.float32)  # the mark's cosine about 0.93
        reference.append({"marked": frame + mark, KEY + "add": mark})
        candidate.append({"marked": frame + moved, KEY + "add": moved})
    floor = floor_for(resolve_config("MXFP8_E4M3"))
    verdict = measure(reference, candidate, floor, **readings_of(_marking()))
    assert verdict.outputs["marked"].ok and verdict.outputs["marked"].cosine > 0.999  # the frame passed through
    residual = verdict.outputs[KEY + "add"]
    assert not verdict.ok and not residual.ok and 0.9 < residual.cosine < floor.cosine


def test_quantize_captures_the_residual_on_both_models():
    rng = np.random.default_rng(2)
    data = [{"frame": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(12)]
    result = quantize(_marking(), dataclasses.replace(get_preset("A8W8"), repair=False), data=data)
    check = result.floor.outputs[KEY + "add"]
    assert 0.98 <= check.cosine < 1.0 and check.ok  # judged on the held-out frames: 8-bit keeps a plain mark
