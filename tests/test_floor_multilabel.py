"""A wide linear head of independent columns (a piano roll) is judged per column, not by its arg-max (issue 27).

madmom's piano-note model ends in ``MatMul → Add → [T, 88]``: one activation per key and frame, read by
a threshold per key. 96 % of its frames are silence, every key within ±0.1, so the per-frame arg-max the
class-score rule judged is noise: FP16 "broke" the floor at top-1 0.86 with cosine 1.0000 and repair kept
nodes float for nothing (analysis/multilabel.py). Rebuilt here small: a linear layer of 24 columns whose
float outputs are a mostly silent roll (a shared hidden state moves all keys of a frame together, and a
few keys are on for a few frames at a time), and its twin of the same width fed class logits (one winner
per position). Only the roll leaves the arg-max; a flipped onset still breaks it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import Scores, class_like_outputs
from onnxptq.analysis.floor import Floor, measure, readings_of
from onnxptq.analysis.multilabel import margin_share, multilabel_like

T, C = 160, 24
FLOOR = Floor("16-bit", 0.99, 0.97)


def _head() -> onnx.ModelProto:
    """``x [T, C] → MatMul [C, C] (identity) → Add (zero bias) → y [T, C]``: a linear head whose outputs
    are its inputs, so the feeds set float's data."""
    inits = [numpy_helper.from_array(np.eye(C, dtype=np.float32), "w"), numpy_helper.from_array(np.zeros(C, np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="MatMul_head"),
             helper.make_node("Add", ["m", "b"], ["y"], name="Add_head")]
    graph = helper.make_graph(nodes, "roll_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, C])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, C])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _roll(seed: int) -> np.ndarray:
    """A mostly silent roll ``[T, C]``: a common drift per frame (±0.05) and cell noise (±0.01), and 12
    notes of 4-9 frames at 0.7-1.0 on random keys, decaying."""
    rng = np.random.default_rng(seed)
    x = 0.03 * rng.standard_normal((T, 1)) + 0.005 * rng.standard_normal((T, C))
    for _ in range(12):
        start, length, key = rng.integers(0, T - 10), rng.integers(4, 10), rng.integers(0, C)
        x[start:start + length, key] += rng.uniform(0.7, 1.0) * np.linspace(1.0, 0.6, length)
    return x.astype(np.float32)


def _logits(seed: int) -> np.ndarray:
    """Class logits ``[T, C]``: one winner per position by 2-6 over the others' noise."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, C))
    x[np.arange(T), rng.integers(0, C, T)] += rng.uniform(2.0, 6.0, T)
    return x.astype(np.float32)


def _run(model: onnx.ModelProto, inputs: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [{"y": session.run(None, {"x": x})[0]} for x in inputs]


def _fp16(feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """FP16-like error: every value moved by ±0.001 (a 16-bit network's error, a thousandth of a note's
    height; madmom's FP16 kept cosine 1.0000) and rounded to float16: tiny against the notes, not
    against the silent keys' spread."""
    rng = np.random.default_rng(99)
    return [{"y": (f["y"] + 1e-3 * rng.standard_normal(f["y"].shape)).astype(np.float16).astype(np.float32)} for f in feeds]


def _runs_of(column: np.ndarray, level: float = 0.35) -> list[tuple[int, int]]:
    on = np.concatenate([[False], column >= level, [False]])
    edges = np.flatnonzero(on[1:] != on[:-1])
    return list(zip(edges[::2], edges[1::2]))


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _head()


@pytest.fixture(scope="module")
def rolls(model) -> list[dict[str, np.ndarray]]:
    return _run(model, [_roll(s) for s in range(4)])


def test_the_roll_is_told_from_class_logits_of_the_same_width(model, rolls):
    assert class_like_outputs(model) == {"y": Scores(C, "linear")}  # by structure, class scores
    roll = [f["y"] for f in rolls]
    logits = [f["y"] for f in _run(model, [_logits(s) for s in range(4)])]
    assert margin_share(roll) < 0.1 < 1.0 < margin_share(logits)
    assert multilabel_like(roll) and not multilabel_like(logits)
    assert not multilabel_like([r[:16] for r in roll[:1]])  # 16 positions: not told


def test_fp16_noise_holds_and_a_flipped_onset_breaks(model, rolls):
    readings = readings_of(model)
    fp16 = _fp16(rolls)
    # the arg-max of the silent frames is noise: FP16's rounding alone moves it below the floor
    silent_top1 = np.mean([np.argmax(r["y"], 1) == np.argmax(g["y"], 1) for r, g in zip(rolls, fp16)])
    assert silent_top1 < FLOOR.top1
    verdict = measure(rolls, fp16, FLOOR, **readings)
    check = verdict.outputs["y"]
    assert check.top1 is None and check.positions is None  # no arg-max judged
    decisions, f1, *_ = check.columns
    assert decisions >= FLOOR.needed and f1 > 0.99 and verdict.ok, verdict.describe()
    assert "multi-label" in verdict.describe()

    # onsets flipped: 3 notes lost, 2 invented among ~48, at every threshold (FP16 noise elsewhere)
    flipped = [{"y": f["y"].copy()} for f in fp16]
    lost = 0
    for f in flipped:
        y = f["y"]
        for key in range(C):
            for start, stop in _runs_of(y[:, key]):
                if lost < 3:
                    y[start:stop, key] = 0.0
                    lost += 1
    flipped[1]["y"][40:46, 3] += 0.9
    flipped[2]["y"][100:105, 7] += 0.9
    verdict = measure(rolls, flipped, FLOOR, **readings)
    decisions, f1, *_ = verdict.outputs["y"].columns
    assert lost == 3 and f1 < FLOOR.top1 and not verdict.ok, verdict.describe()


def test_flips_only_the_calibration_feeds_show_break_it(model, rolls):
    """As reads are: a format's rounding flips a note on any feed, so the calibration feeds are judged too."""
    readings = readings_of(model)
    seen_ref = _run(model, [_roll(s) for s in range(10, 14)])
    seen_got = _fp16(seen_ref)
    for f in seen_got:  # every note of the calibration feeds lost at its frames over 0.6
        f["y"][f["y"] > 0.6] = 0.0
    held = measure(rolls, _fp16(rolls), FLOOR, **readings)
    assert held.ok and held.wants_calibration_feeds
    verdict = measure(rolls, _fp16(rolls), FLOOR, seen=(seen_ref, seen_got), **readings)
    check = verdict.outputs["y"]
    assert not verdict.ok and check.seen_feeds == 4 and verdict.ok_needs_calibration_feeds, verdict.describe()


def test_a_class_head_of_the_same_width_is_still_read_by_arg_max(model):
    readings = readings_of(model)
    ref = _run(model, [_logits(s) for s in range(4)])
    got = [{"y": f["y"].copy()} for f in ref]
    got[0]["y"][:, 0] += 10.0  # column 0 wins every position of one feed
    verdict = measure(ref, got, FLOOR, **readings)
    check = verdict.outputs["y"]
    assert check.columns is None and check.top1 is not None and check.top1 < FLOOR.top1 and not verdict.ok


def test_too_few_notes_are_not_judged_and_said_so(model, rolls):
    from onnxptq.analysis.floor import unjudged_text

    verdict = measure(rolls[:1], _fp16(rolls[:1]), FLOOR, **readings_of(model))
    check = verdict.outputs["y"]
    assert check.columns is not None and check.columns[0] < FLOOR.needed
    assert verdict.ok and verdict.unjudged == ["y"] and "multi-label head y" in unjudged_text(verdict)
