"""Judged outputs held in the form their readings need (analysis/held_outputs.py, issue 26 item 4).

A candidate's outputs on the calibration feeds the floor pools with the held-out ones are held per
position where the floor reads them only as CTC strings, and whole otherwise. The verdict must be
the same to the bit either way; a reading that needs a held output whole must fail loudly (then the
feeds are judged whole), never judge something else."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxptq.analysis.class_scores import judge_positions
from onnxptq.analysis.floor import Floor, measure, readings_of
from onnxptq.analysis.held_scores import is_held
from onnxptq.analysis.held_outputs import (HeldFloat, HeldOutputError, HeldScores, held_form_outputs, hold_float, hold_scores,
                                           holder)
from onnxptq.pipeline.verify import measure_seen
from onnxptq.sessions import open_session, run_feeds
from test_floor_sequences import _G
from test_floor_strings import C, F, T, lines, softmax_reader

FLOOR = Floor("8-bit", 0.98, 0.95)


def _outputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], hold=None) -> list[dict[str, np.ndarray]]:
    names = [o.name for o in model.graph.output]
    return [dict(zip(names, out)) for out in run_feeds(open_session(model), names, feeds, hold)]


def _judged_both_ways(model: onnx.ModelProto, candidate: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                      held: frozenset[str] | None = None):
    """``candidate``'s verdict with its 32 calibration feeds' outputs whole, and held (the floor's choice,
    or ``held``) as they come out of the runs; and how many whole re-runs the held judgement asked for."""
    readings = readings_of(model)
    heldout, seen_feeds = feeds[:8], feeds[8:]
    ref, got = _outputs(model, heldout), _outputs(candidate, heldout)
    ref_seen = _outputs(model, seen_feeds)
    names = [o.name for o in candidate.graph.output]
    whole = _outputs(candidate, seen_feeds)
    chosen = held_form_outputs(ref, **readings) if held is None else held
    ref_held = [{n: hold_float(n, v) if n in chosen else v for n, v in o.items()} for o in ref_seen]
    kept = _outputs(candidate, seen_feeds, holder(chosen, names, ref_held))
    reruns = []

    def judge(seen, whole=True):
        return measure(ref, got, FLOOR, seen=(ref_seen if whole else ref_held, seen), **readings)

    def again():
        reruns.append(1)
        return _outputs(candidate, seen_feeds)

    return judge(whole), measure_seen(judge, kept, again), chosen, kept + ref_held, reruns


def _same(a, b) -> bool:
    return a.ok == b.ok and repr(a.outputs) == repr(b.outputs) and a.describe() == b.describe()


def _log(model: onnx.ModelProto) -> onnx.ModelProto:
    """The reader with a ``LogSoftmax`` head: log-probabilities, the judge's probabilities its softmax."""
    for node in model.graph.node:
        if node.op_type == "Softmax":
            node.op_type = "LogSoftmax"
    return model


@pytest.mark.parametrize("blank, head", [(0, "Softmax"), (C - 1, "Softmax"), (0, "LogSoftmax")])
def test_a_ctc_readers_strings_are_judged_the_same_from_held_scores(blank, head):
    """The CTC strings judgement on held scores: the same Positions to the bit, for a candidate that
    only moves characters' edges (holds) and one that reads glyphs as others (breaks)."""
    feeds = lines(40, blank)
    spell = _log if head == "LogSoftmax" else (lambda m: m)
    model = spell(softmax_reader(blank))
    verdicts = []
    for candidate in (softmax_reader(blank, blank_shift=2.0), softmax_reader(blank, confuse=(5, 7)),
                      softmax_reader(blank, blank_shift=0.7, confuse=(3, 9)), softmax_reader(blank, outlier=30.0)):
        whole, held, chosen, kept, reruns = _judged_both_ways(model, spell(candidate), feeds)
        assert chosen == {"probs"} and not reruns
        assert all(isinstance(k["probs"], HeldScores) for k in kept) and isinstance(kept[-1]["probs"], HeldFloat)
        assert whole.outputs["probs"].positions.strings
        assert _same(whole, held), (whole.describe(), held.describe())
        verdicts.append(whole)
    assert any(v.ok for v in verdicts) and any(not v.ok for v in verdicts)
    assert any(v.outputs["probs"].seen_feeds == 32 for v in verdicts)  # the pooled judgement shown, from held scores


def test_a_time_first_readers_pooled_strings_are_judged_the_same_from_held_scores():
    """A ``[T, 1, C]`` reader (time first): its held scores are read in their ``[reads, T]`` view, not
    their whole array's shape. Calibration lines whose glyphs fill every frame touch, and pooled with
    the held-out lines they no longer read as a CTC reader's: no judgement, held or whole (read in
    ``[T, 1]`` rows, the held lines showed no touching glyphs and the strings were judged)."""
    feeds = lines(16) + [{"x": f["x"] + 3.0 * _glyph_every_frame(i)} for i, f in enumerate(lines(3, seed=9))]

    def time_first(model):
        return [np.ascontiguousarray(o[0].transpose(1, 0, 2)) for o in run_feeds(open_session(model), ["probs"], feeds)]

    ref, got = time_first(softmax_reader()), time_first(softmax_reader(blank_shift=0.7, confuse=(3, 9)))
    assert ref[0].shape == (T, 1, C)
    float_held = [hold_float("probs", r) for r in ref[16:]]
    held = judge_positions(ref[:16] + float_held, got[:16] + [hold_scores("probs", h, g) for h, g in zip(float_held, got[16:])],
                           strings_only=True)
    assert judge_positions(ref, got, strings_only=True) is None and held is None
    assert judge_positions(ref[:16], got[:16], strings_only=True).strings  # the held-out lines alone read as CTC


def _rows_model(seed: int = 0, noise: float = 0.0) -> onnx.ModelProto:
    """Three outputs no held form covers: class rows ``[8, 10]`` (Softmax), a mask ``[1, T, 4]``
    (Sigmoid) and a regression ``[1, T, 3]`` (MatMul + Add)."""
    rng = np.random.default_rng(seed)
    jitter = np.random.default_rng(100 + seed)
    w = lambda *shape: rng.standard_normal(shape) / np.sqrt(shape[0]) + noise * jitter.standard_normal(shape)  # noqa: E731
    g = _G()
    flat = g.node("Reshape", ["x", g.const([8, -1], "rows", np.int64)], "flat", "Reshape_rows")
    g.node("Softmax", [g.node("MatMul", [flat, g.const(w(T * F // 8, 10), "wc")], "cls_logits", "MatMul_cls")], "cls", "Softmax_cls")
    g.node("Sigmoid", [g.node("MatMul", ["x", g.const(3 * w(F, 4), "wm")], "mask_logits", "MatMul_mask")], "mask", "Sigmoid_mask")
    g.node("Add", [g.node("MatMul", ["x", g.const(w(F, 3), "wr")], "reg0", "MatMul_reg"), g.const(rng.standard_normal(3), "br")],
           "reg", "Add_reg")
    model = g.model("rows_mask_regression", [1, T, F], "cls", [8, 10])
    model.graph.output.extend([onnx.helper.make_tensor_value_info("mask", onnx.TensorProto.FLOAT, [1, T, 4]),
                               onnx.helper.make_tensor_value_info("reg", onnx.TensorProto.FLOAT, [1, T, 3])])
    return model


def test_outputs_no_held_form_covers_stay_whole_and_judge_the_same():
    feeds = lines(40)
    model = _rows_model()
    whole, held, chosen, kept, reruns = _judged_both_ways(model, _rows_model(noise=0.05), feeds)
    assert chosen == frozenset() and not reruns
    assert all(isinstance(v, np.ndarray) for k in kept for v in k.values())
    assert {"cls", "mask", "reg"} <= set(whole.outputs) and _same(whole, held)


def test_a_held_output_read_whole_fails_loudly_and_is_judged_whole():
    """A softmax sequence float does not read as CTC (glyphs fill every frame: no blank separates
    them) is not held by the floor's choice. Held anyway, its per-row judgement raises instead of
    judging something else, and ``measure_seen`` judges the feeds' outputs run again whole: the same figures."""
    feeds = [{"x": f["x"] + 3.0 * _glyph_every_frame(i)} for i, f in enumerate(lines(40))]
    model, candidate = softmax_reader(), softmax_reader(blank_shift=0.5, confuse=(5, 7))
    ref = _outputs(model, feeds[:8])
    assert held_form_outputs(ref, **readings_of(model)) == frozenset()
    ref_seen = _outputs(model, feeds[8:])
    ref_held = [{"probs": hold_float("probs", r["probs"])} for r in ref_seen]
    kept = _outputs(candidate, feeds[8:], holder({"probs"}, ["probs"], ref_held))
    assert all(isinstance(k["probs"], HeldScores) for k in kept)
    refs = [r["probs"] for r in ref_seen]
    with pytest.raises(HeldOutputError, match="probs"):
        judge_positions(refs, [k["probs"] for k in kept])
    with pytest.raises(HeldOutputError, match="probs"):
        judge_positions([r["probs"] for r in ref_held], [k["probs"] for k in kept], strings_only=False)
    reruns = []

    def again():
        reruns.append(1)
        return _outputs(candidate, feeds[8:])

    judged = measure_seen(lambda seen, whole: judge_positions(refs if whole else [r["probs"] for r in ref_held],
                                                              [s["probs"] for s in seen]), kept, again)
    assert reruns == [1] and judged is not None and not judged.strings
    assert judged == judge_positions(refs, [g["probs"] for g in _outputs(candidate, feeds[8:])])


def _glyph_every_frame(seed: int) -> np.ndarray:
    from test_floor_strings import _prototypes

    rng = np.random.default_rng(seed)
    return _prototypes()[rng.integers(1, C, size=T)][None].astype(np.float32)


def test_a_repaired_reader_is_delivered_the_same_with_its_outputs_held(monkeypatch):
    """End to end: A8W8 of the reader whose ``MatMul_2`` breaks the strings, repaired; with the floor's
    held forms and with every output whole, the same delivered bytes, verdict and repair."""
    import hashlib
    import json

    from onnxptq.api import quantize
    from onnxptq.config.presets import resolve_config

    import onnxptq.analysis.held_outputs as held_outputs

    made: list[str] = []
    hold = held_outputs.hold_scores
    monkeypatch.setattr(held_outputs, "hold_scores", lambda n, r, g: made.append(type(r).__name__) or hold(n, r, g))
    model, cfg = softmax_reader(outlier=400.0), resolve_config("A8W8").replace(repair_budget=50.0, repair_step_up=False)
    held = quantize(model, cfg, lines(48))
    assert made and set(made) == {"HeldFloat"}  # both sides held, on every candidate's calibration feeds
    # every output whole: the floor's choice empty, for the candidates' runs and for float's outputs as
    # calibration records them (pipeline/calibrate._FloatHolding) alike
    monkeypatch.setattr(held_outputs, "held_form_outputs", lambda *a, **k: frozenset())
    whole = quantize(model, cfg, lines(48))
    digest = lambda r: hashlib.sha256(r.model.SerializeToString()).hexdigest()  # noqa: E731
    assert held.floor.outputs["probs"].seen_feeds or held.repair["evaluations"] > 1
    assert digest(held) == digest(whole) and held.repair["kept_float"] == whole.repair["kept_float"]
    assert json.dumps(held.floor.to_json(), sort_keys=True) == json.dumps(whole.floor.to_json(), sort_keys=True)


def test_float_is_run_again_whole_once_per_quantization(monkeypatch):
    """A reading that needed a held float output whole makes ``judged_float_outputs`` run float again on
    the judged feeds; repair's next candidates reuse those whole outputs rather than running float each time
    (a feed added later is the only one run)."""
    from onnxptq.pipeline import calibrate as calibrate_module

    model = softmax_reader()
    feeds = lines(6)
    names = [o.name for o in model.graph.output]
    whole = _outputs(model, feeds)
    runs: list[int] = []

    def float_outputs_of(prepared, fs, config):
        runs.append(len(fs))
        return _outputs(prepared, fs)

    monkeypatch.setattr(calibrate_module, "float_outputs_of", float_outputs_of)
    held = [{n: hold_float(n, v) for n, v in o.items()} for o in whole]
    calibrated = calibrate_module.Calibrated(source="m", prepared=model, stats={}, kept=feeds, samples=6, timings={},
                                             started=0.0, float_outputs=held)
    calibrated.readings = {"decisions": ()}  # no inner decisions: the float outputs alone (a cached property)
    for count in (4, 4, 5):
        got = calibrated.judged_float_outputs(feeds[:count], whole=True)
        assert len(got) == count
        for g, w in zip(got, whole):
            assert all(np.array_equal(g[n], w[n]) for n in names)
    assert runs == [4, 1], runs
    assert all(is_held(v) for o in calibrated.judged_float_outputs(feeds[:4]) for v in o.values())
