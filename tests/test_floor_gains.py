"""A sigmoid map shaped like the model's input is advised on as a gain (analysis/gains.py): NSNet2's
suppression gain ``[B, T, 513]`` is multiplied into the noisy spectrum outside the graph, and under
MXFP8_E4M3 0.931 of its speech frames kept float's enhanced spectrum (task floor 0.95) while the gain's
cosine and masks held the floor, silently (bench/RESULTS.md, branch floorsilent). The floor cannot weigh
the gain's errors by that signal, so it says so; told the reading, it judges it and says nothing more.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of
from onnxptq.analysis.gains import gain_outputs
from onnxptq.config.presets import get_preset

FLOOR = Floor("8-bit", *FAMILY_FLOORS["8-bit"])
BINS, HIDDEN = 24, 16


def _denoiser(out_dims: list | None = None, head: int = BINS) -> onnx.ModelProto:
    """NSNet2's layout, small: log spectrum ``[1, T, BINS]`` → MatMul → Relu → MatMul + bias → Sigmoid →
    Clip, the gain's last axis declared by a symbol of the exporter's own (as NSNet2's ``Clipoutput_dim_2``)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (BINS, HIDDEN)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 1.0, (HIDDEN, head)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.full(head, -4.0, np.float32), "b2"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(1.0, np.float32), "hi")]
    nodes = [helper.make_node("MatMul", ["input", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["z0"]), helper.make_node("Add", ["z0", "b2"], ["z"]),
             helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Clip", ["s", "lo", "hi"], ["output"])]
    graph = helper.make_graph(nodes, "denoiser", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, "time", BINS])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_dims or [1, "time", "Clipoutput_dim_2"])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [{"output": sess.run(None, f)[0]} for f in feeds]


def _feeds(n: int = 4, frames: int = 64) -> list[dict[str, np.ndarray]]:
    """Speech frames and pauses: a frame in four near silence (the gain shuts every bin there)."""
    rng = np.random.default_rng(1)
    level = np.where(np.arange(frames) % 4 == 3, 0.02, 1.5)[None, :, None]
    return [{"input": (level * rng.normal(0.0, 1.0, (1, frames, BINS))).astype(np.float32)} for _ in range(n)]


def _scaled(outputs: list[dict[str, np.ndarray]], by: float) -> tuple[list[dict[str, np.ndarray]], int, int]:
    """The gain of each quiet frame (every bin below a tenth of the way up the feed's range, so no mask a
    threshold cuts moves) scaled by ``by``: each frame's direction kept (its cosine 1), the energy the
    caller's product keeps in it not. Returns the outputs, the frames scaled and all frames."""
    got, scaled, frames = [], 0, 0
    for o in outputs:
        g = o["output"].copy()
        quiet = g.max(axis=-1) < g.min() + 0.1 * (g.max() - g.min())
        g[quiet] *= by
        got.append({"output": g})
        scaled, frames = scaled + int(quiet.sum()), frames + quiet.size
    return got, scaled, frames


def test_the_gain_is_found_by_its_layout_and_nothing_else() -> None:
    assert gain_outputs(_denoiser()) == {"output": "input"}  # the symbol resolved by shape inference (24 bins)
    assert gain_outputs(_denoiser([1, "time", BINS])) == {"output": "input"}
    assert gain_outputs(_denoiser(head=1)) == {}  # one score a frame ([1, T, 1]): not an element-wise gain
    assert gain_outputs(_denoiser(head=BINS // 2)) == {}  # fewer bins than the input has


def test_a_gain_whose_frames_moved_is_named_not_held_silently() -> None:
    model, feeds = _denoiser(), _feeds()
    ref = _run(model, feeds)
    got, scaled, frames = _scaled(ref, by=0.7)  # the quiet frames lose half their energy: far from float's product there
    assert frames > scaled > (1 - FLOOR.top1) * frames  # more than the floor allows
    readings = readings_of(model)
    verdict = measure(ref, got, FLOOR, **readings)
    check = verdict.outputs["output"]
    assert verdict.ok, verdict.describe()  # cosine, masks: the gain's figures hold (what main said, with no word more)
    advice = check.advisory
    assert advice is not None and "shaped like input 'input'" in advice and "could NOT judge the product" in advice
    assert "floor_output_agreement={'output':" in advice and f"{frames - scaled} of {frames} frames" in advice, advice
    # a rounding far inside the floor's cosine distance: nothing to say
    small = measure(ref, _scaled(ref, by=0.99)[0], FLOOR, **readings)
    assert small.outputs["output"].advisory is None
    # a model whose output is no gain (one score a frame) with the same error gets no such word
    model1 = _denoiser(head=1)
    ref1 = _run(model1, feeds)
    assert measure(ref1, _scaled(ref1, by=0.7)[0], FLOOR, **readings_of(model1)).outputs["output"].advisory is None


def test_told_reading_replaces_the_advice_and_is_judged() -> None:
    model, feeds = _denoiser(), _feeds()
    ref = _run(model, feeds)
    got, scaled, count = _scaled(ref, by=0.7)
    frames = lambda r, g: float(np.mean(((r - g) ** 2).sum(-1) <= 0.01 * (r * r).sum(-1)))  # noqa: E731
    verdict = measure(ref, got, FLOOR, **{**readings_of(model), "agreements": {"output": frames}})
    check = verdict.outputs["output"]
    share = np.mean([frames(r["output"], g["output"]) for r, g in zip(ref, got)])
    assert check.advisory is None and check.user_agreement == (share, 4) and share < FLOOR.top1
    assert not verdict.ok  # the quiet frames moved, below the 8-bit top-1 floor 0.95: repair would answer it


def test_quantize_names_the_gain_in_its_warning(caplog) -> None:
    """The pipeline reads the gain from the prepared model and the warning reaches the log: MXFP4 moves
    the frames' small gains (a sigmoid of logits near -4: a logit's error is the gain's relative error)
    while the gain's cosine (0.97) and masks hold the 4/6-bit floor."""
    model = _denoiser()
    with caplog.at_level(logging.WARNING, logger="onnxptq"):
        result = onnxptq.quantize(model, get_preset("MXFP4").replace(repair=False), data=_feeds(12, 32))
    assert result.floor is not None and result.floor.ok, result.floor.describe()
    assert any("shaped like input 'input'" in r.getMessage() for r in caplog.records)
    assert "A gain shaped like its input" in result.summary()
