"""The accuracy floor on per-position class scores and held-out feeds from small data (issue 27).

ddddocr's CTC captcha reader (``Gemm → Reshape [T, 1, 8210]``, no Softmax) kept output cosine
≥ 0.997 while its strings changed on up to 16 % of captchas; the floor looked at the cosine only.
A small CTC-shaped reader is built here the way a trained one looks (a matched-filter head over
a two-layer feature extractor, a blank class that wins where no glyph responds) with one planted
sensitive node: ``MatMul_2``, whose input row for hidden unit 0 is 400 times the others while the
unit responds 400 times weaker (float unchanged: a Relu is positively homogeneous), so each output
column's int8 weight grid leaves the other rows few codes. The logits' cosine stays
above the 8-bit floor (0.98) while characters flip: only the per-position judgement sees it
(analysis/class_scores.py).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import TIE_TOLERANCE, Scores, class_like_outputs, decides, judge_positions
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

T, F, HID, C = 32, 24, 48, 12
A8W8 = resolve_config("A8W8")


def _prototypes() -> np.ndarray:
    return np.random.default_rng(11).standard_normal((C, F))


class _G:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, value, name: str, dtype=np.float32) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op: str, inputs: list[str], out: str, name: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def model(self, name: str, x_shape: list, out: str, out_shape: list) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def ctc_reader(outlier: float = 400.0, blur: float = 0.0) -> onnx.ModelProto:
    """``x [1, T, F] → MatMul → Relu → MatMul_2 (the planted node) → Relu → Transpose → Reshape → Gemm → Reshape [T, 1, C]``.
    ``blur``: the glyph columns that share of the way to their mean (and the blank's bias scaled alike): the
    same reads, margins ``1 − blur`` as wide (test_repair_judge)."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((F, HID)) / np.sqrt(F)
    w2 = rng.standard_normal((HID, HID)) / np.sqrt(HID)
    response = np.maximum(np.maximum(3.0 * _prototypes() @ w1, 0) @ w2, 0)  # each glyph's hidden response
    w3 = (response / np.linalg.norm(response, axis=1, keepdims=True)).T
    w3[:, 0] = 0.0
    if blur:
        w3[:, 1:] = (1 - blur) * w3[:, 1:] + blur * w3[:, 1:].mean(1, keepdims=True)
    b3 = np.zeros(C)
    b3[0] = 2.0 * (1 - blur)  # the blank
    w1[:, 0] /= outlier  # hidden unit 0 responds ``outlier`` times weaker and its next weights are
    w2[0] *= outlier  # ``outlier`` times larger: float is unchanged (a Relu is positively homogeneous)
    g = _G()
    h = g.node("Relu", [g.node("MatMul", ["x", g.const(w1, "w1")], "h1", "MatMul_1")], "r1", "Relu_1")
    h = g.node("Relu", [g.node("MatMul", [h, g.const(w2, "w2")], "h2", "MatMul_2")], "r2", "Relu_2")
    h = g.node("Transpose", [h], "tnh", "Transpose_tnh", perm=[1, 0, 2])
    h = g.node("Reshape", [h, g.const([-1, HID], "flat", np.int64)], "flat_in", "Reshape_flat")
    h = g.node("Gemm", [h, g.const(w3, "w3"), g.const(b3, "b3")], "logits2d", "Gemm_head")
    g.node("Reshape", [h, g.const([T, -1, C], "tnc", np.int64)], "logits", "Reshape_tnc")
    return g.model("ctc_reader", [1, T, F], "logits", [T, 1, C])


def glyph_feeds(n: int, seed: int = 3) -> list[dict[str, np.ndarray]]:
    """Quiet frames with 6 glyphs each (a prototype plus noise) at random steps."""
    rng = np.random.default_rng(seed)
    protos = _prototypes()
    feeds = []
    for _ in range(n):
        x = 0.3 * rng.standard_normal((1, T, F))
        for t in rng.choice(T, 6, replace=False):
            x[0, t] += 3.0 * protos[rng.integers(1, C)] + 0.5 * rng.standard_normal(F)
        feeds.append({"x": x.astype(np.float32)})
    return feeds


def mel_projection() -> onnx.ModelProto:
    """A regression read from a linear layer: ``x [1, T, F] → MatMul → Relu → MatMul + bias → [1, T, 40]``,
    mel-like frames (smooth over the bins: the output weights are Gaussian bumps), as a TTS decoder's
    mel projection or a feature predictor writes them."""
    rng = np.random.default_rng(4)
    bins = np.arange(40)
    centres = rng.uniform(0, 40, HID)
    w2 = np.exp(-0.5 * ((bins[None, :] - centres[:, None]) / 6.0) ** 2) / np.sqrt(HID)
    g = _G()
    h = g.node("Relu", [g.node("MatMul", ["x", g.const(rng.standard_normal((F, HID)) / np.sqrt(F), "w1")], "h1", "MatMul_1")],
               "r1", "Relu_1")
    h = g.node("MatMul", [h, g.const(w2, "w2")], "m", "MatMul_mel")
    g.node("Add", [h, g.const(np.full(40, -1.0), "b2")], "mel", "Add_mel")
    return g.model("mel_projection", [1, T, F], "mel", [1, T, 40])


def test_ctc_logits_break_the_floor_by_arg_max_while_cosine_holds_and_repair_names_the_node(caplog):
    model = ctc_reader()
    assert class_like_outputs(model) == {"logits": Scores(C, "linear")}  # Gemm head through Reshapes: C fixed by its weight
    off = quantize(model, A8W8.replace(repair=False), glyph_feeds(32))
    check = off.floor.outputs["logits"]
    assert check.cosine >= off.floor.floor.cosine  # the cosine alone would have passed it
    assert not off.floor.ok and check.positions is not None and check.positions.flipped >= 1
    assert check.positions.background == 0 and check.positions.agreement < 0.95
    assert "reads" in off.summary() and "NOT within the floor" in off.summary()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        # The default config but for the 16-bit step (the float repair keeps exactly the planted node; the
        # step: tests/test_repair_step_up.py); the time budget is widened, so a loaded machine cannot stop the search early.
        fixed = quantize(model, A8W8.replace(repair_budget=50.0, repair_step_up=False), glyph_feeds(32))
    assert fixed.floor.ok and list(fixed.repair["kept_float"]) == ["MatMul_2"]
    assert fixed.floor.outputs["logits"].positions.agreement >= 0.95
    warning = next(r.getMessage() for r in caplog.records if r.name.endswith("repair"))
    assert "MatMul_2" in warning and "reads" in warning
    # 8 held-out + the 24 calibration reads of 32 feeds (calibrate.reads_feeds keeps up to the 32 that confirm
    # the 8-bit floor, Floor.reads_wanted): the repaired reads are judged, and hold
    assert not fixed.floor.unjudged and "32 reads" in warning and "on the held-out and 24 calibration samples" in warning
    # Without the planted node the same reader holds the floor: the arg-max judgement is not what breaks it.
    plain = quantize(ctc_reader(outlier=1.0), A8W8.replace(repair=False), glyph_feeds(32))
    assert plain.floor.ok and plain.floor.outputs["logits"].positions is not None


def test_a_regression_output_is_not_judged_by_arg_max():
    model = mel_projection()
    assert class_like_outputs(model) == {"mel": Scores(40, "linear")}  # by structure a linear head ...
    result = quantize(model, A8W8.replace(repair=False), glyph_feeds(16))
    check = result.floor.outputs["mel"]
    assert check.positions is None and check.top1 is None  # ... but float does not decide: cosine only
    assert "reads" not in result.summary()
    # and the judgement itself: the same frames are no decision, the reader's logits are
    frames = [np.asarray(f["x"]) for f in glyph_feeds(2)]
    import onnxruntime as ort

    mel = ort.InferenceSession(model.SerializeToString())
    reader = ort.InferenceSession(ctc_reader(1.0).SerializeToString())
    assert not decides([mel.run(None, {"x": x})[0].reshape(-1, 40) for x in frames])
    assert decides([reader.run(None, {"x": x})[0].reshape(-1, C) for x in frames])


def test_structure_rules_and_their_spellings():
    g = _G()
    w = g.const(np.ones((8, 5)), "w")
    a = g.node("MatMul", ["x", w], "a", "MatMul_a")
    g.node("Identity", [g.node("Add", [a, g.const(np.zeros(5), "b")], "e", "Add_e")], "emissions", "Identity_e")  # LAC
    lac = g.model("lac", [1, 4, 8], "emissions", [1, 4, 5])
    assert class_like_outputs(lac) == {"emissions": Scores(5, "linear")}
    g = _G()
    g.node("Sigmoid", [g.node("MatMul", ["x", g.const(np.ones((8, 5)), "w")], "a", "MatMul_a")], "heat", "Sigmoid_h")
    assert class_like_outputs(g.model("heat", [1, 4, 8], "heat", [1, 4, 5])) == {}  # a heatmap
    g = _G()
    g.node("Reshape", [g.node("MatMul", ["x", g.const(np.ones((8, 1)), "w")], "a", "MatMul_a"), g.const([-1], "s", np.int64)],
           "boundary", "Reshape_b")
    assert class_like_outputs(g.model("attacut", [4, 8], "boundary", [4])) == {}  # one logit per position
    g = _G()
    g.node("Conv", ["x", g.const(np.ones((6, 8, 1, 1)), "w")], "maps", "Conv_head")
    assert class_like_outputs(g.model("det", [1, 8, 4, 4], "maps", [1, 6, 4, 4])) == {}  # detector maps
    g = _G()
    h = g.node("Tanh", ["x"], "scores", "Tanh_s")
    g.nodes.append(helper.make_node("ArgMax", [h], ["ids"], name="ArgMax_ids", axis=-1))
    assert class_like_outputs(g.model("argmax", [1, 4, 8], "scores", [1, 4, 8])) == {"scores": Scores(None, "argmax")}  # the graph decides
    g = _G()
    g.node("Softmax", ["x"], "p", "Softmax_p", axis=-1)
    assert class_like_outputs(g.model("softmax", [1, 4, 8], "p", [1, 4, 8])) == {"p": Scores(None, "softmax")}


def test_float_near_ties_are_not_failed_but_a_real_flip_is():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((40, 1, 6)) * 0.5
    ref[:, 0, 0] += 8.0  # a blank that wins most steps
    ref[:8, 0, 1] = ref[:8, 0, 0] + 3.0  # 8 symbols, clear margins
    ref[8, 0, 2] = ref[8, 0, 0] * (1 + 2.0 ** -12)  # a float near-tie (below fp16's resolution) between blank and class 2 ...
    got = ref.copy()
    got[8, 0, 0], got[8, 0, 2] = ref[8, 0, 2], ref[8, 0, 0]  # ... that the quantized model flips
    tie = judge_positions([ref], [got])
    assert 2.0 ** -12 < TIE_TOLERANCE and tie.ties == 1 and tie.flipped == 0
    got[0, 0, 2] = got[0, 0, 1] + 0.5  # a flip at a symbol with a clear margin
    flip = judge_positions([ref], [got])
    assert flip.flipped == 1 and flip.observed < 1.0 and flip.agreement < tie.agreement


def test_few_decision_positions_are_judged_only_on_two_real_flips():
    from onnxptq.analysis.floor import Floor, measure

    rng = np.random.default_rng(1)
    feeds = []
    for _ in range(2):
        ref = rng.standard_normal((16, 1, 6)) * 0.3
        ref[:, 0, 0] += 6.0  # blank
        ref[:5, 0, 3] = ref[:5, 0, 0] + 2.0  # 5 symbols per read: 10 decision positions in all
        feeds.append(ref)
    floor = Floor("16-bit", 0.0, 0.97)  # 10 < 34 positions: too few for a 0.97 floor
    one = [f.copy() for f in feeds]
    one[0][0, 0, 4] = one[0][0, 0, 3] + 1.0
    verdict = measure([{"y": f} for f in feeds], [{"y": f} for f in one], floor, {"y": Scores(6, "linear")})
    assert verdict.ok and verdict.outputs["y"].top1_unjudged and verdict.outputs["y"].positions.flipped == 1
    two = [f.copy() for f in one]
    two[1][2, 0, 5] = two[1][2, 0, 3] + 1.0
    verdict = measure([{"y": f} for f in feeds], [{"y": f} for f in two], floor, {"y": Scores(6, "linear")})
    assert not verdict.ok and not verdict.outputs["y"].top1_unjudged and verdict.outputs["y"].positions.flipped == 2


def test_softmax_sequences_keep_their_per_row_judgement():
    """A Softmax CTC head (PP-OCR rec's spelling) is judged as before, over all its positions' rows."""
    from onnxptq.analysis.floor import Floor, measure

    rng = np.random.default_rng(2)
    ref = rng.standard_normal((40, 1, 6))
    ref[:, 0, 0] += 6.0
    ref[:5, 0, 3] = ref[:5, 0, 0] + 2.0
    got = ref.copy()
    got[0, 0, 4] = got[0, 0, 3] + 1.0  # one symbol flipped: 39 of 40 rows agree
    floor = Floor("8-bit", 0.0, 0.95)
    soft = measure([{"p": ref}], [{"p": got}], floor, {"p": Scores(None, "softmax")}).outputs["p"]
    head = measure([{"p": ref}], [{"p": got}], floor, {"p": Scores(6, "linear")}).outputs["p"]
    assert soft.positions is None and soft.top1 == 39 / 40 and soft.ok
    assert head.positions is not None and head.positions.flipped == 1 and head.top1 < soft.top1


def _margins_lost(rng: np.random.Generator, n: int, share: float) -> tuple[np.ndarray, np.ndarray]:
    """``[1, n, 3]`` scores (float, quantized) of a regression head read as 3 classes: float's arg-max
    cycles over the classes with margins uniform in [1, 2] over the runner-up (0), the third at −5;
    the quantized scores lose ``share`` of each position's own margin and keep every arg-max."""
    top = np.arange(n) % 3
    margin = rng.uniform(1.0, 2.0, n)
    ref = np.zeros((n, 3))
    ref[np.arange(n), (top + 2) % 3] = -5.0
    ref[np.arange(n), top] = margin
    got = ref.copy()
    got[np.arange(n), top] -= share * margin
    return ref.reshape(1, n, 3), got.reshape(1, n, 3)


def test_the_margin_estimate_gives_way_to_thousands_of_positions_that_did_not_flip():
    """A regression head read as classes (three per-segment values from a linear layer: brainmaze's
    EEG spindle detector) has margins of every size, and each position loses most of its own
    margin without flipping. Pooled against all margins, the loss said 40 % of positions flip; none
    of 600 did, which refutes it (Poisson tail ≪ 1 %): the per-position agreement is what was seen.
    On 4 positions the same losses keep the estimate (no flip in 4 is what a 35 % rate gives a quarter
    of the time: nothing refuted)."""
    rng = np.random.default_rng(0)

    def pair(n: int):
        ref, got = _margins_lost(rng, n, 0.9)  # loses 90 % of its own margin, keeps its arg-max
        return [ref], [got]

    many = judge_positions(*pair(600))
    assert many.flipped == 0 and many.estimated < 0.7 and many.per_position == 1.0
    few = judge_positions(*pair(4))
    assert few.flipped == 0 and few.per_position == few.estimated < 0.8


def test_held_out_feeds_beside_a_pooled_judgement_break_by_their_flips_only():
    """Reads judged on 20 held-out positions and, pooled, on 600 calibration positions: each
    position loses 60 % of its own margin and none flips. The held-out estimate alone (about 3 %
    of positions flipping, not refuted by 0 flips in 20) used to break the 8-bit floor by itself;
    the pooled 620 refute it, and beside them the held-out feeds count the flips they show."""
    from onnxptq.analysis.floor import Floor, measure

    rng = np.random.default_rng(1)

    def pair(n: int):
        ref, got = _margins_lost(rng, n, 0.6)
        return {"y": ref}, {"y": got}

    held = [pair(20) for _ in range(1)]
    seen = [pair(600)]
    floor = Floor("8-bit", 0.5, 0.95)
    kinds = {"y": Scores(3, "linear")}
    alone = measure([r for r, _ in held], [g for _, g in held], floor, kinds)
    assert alone.outputs["y"].positions.flipped == 0 and not alone.ok  # the estimate alone breaks it
    both = measure([r for r, _ in held], [g for _, g in held], floor, kinds,
                   seen=([r for r, _ in seen], [g for _, g in seen]))
    assert both.ok and both.outputs["y"].positions.flipped == 0


def test_a_softmax_ctc_head_is_judged_by_its_strings_on_calibration_feeds_where_the_held_out_lines_flip_nothing():
    """tinyocr's PP-OCRv6 rec at MX9: no character flipped on its 4 held-out lines while 2 of 32
    other lines changed; 2 positions of its 8 calibration lines flipped. A Softmax CTC head (an
    alphabet, a blank separating the characters) is judged by its collapsed strings on the
    held-out and calibration feeds together, and two strings changed break the floor (repair
    acts; it was a warning while the judgement counted positions). A few per-step labels
    (eeg_seizure's 4 classes over a long record) are no read: advised on per row, as before."""
    from onnxptq.analysis.floor import Floor, measure

    def lines(classes: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        rng = np.random.default_rng(seed)

        def line() -> np.ndarray:
            ref = rng.standard_normal((1, 40, classes))
            ref[0, :, 0] += 6.0  # blank
            for t in rng.choice(40, 8, replace=False):
                ref[0, t, rng.integers(1, classes)] = ref[0, t, 0] + rng.uniform(0.5, 2.0)  # 8 characters
            return ref

        held, seen = [line() for _ in range(4)], [line() for _ in range(8)]
        flipped = [s.copy() for s in seen]
        for s in flipped[:2]:
            t = int(np.argmax(s[0].max(-1) - s[0, :, 0] > 0))  # a character position
            s[0, t, 0] = s[0, t].max() + 1.0  # read as blank
        return held, seen, flipped

    floor = Floor("16-bit", 0.0, 0.97)
    kinds = {"p": Scores(None, "softmax")}

    def judged(classes: int):
        held, seen, flipped = lines(classes, 3)
        alone = measure([{"p": h} for h in held], [{"p": h} for h in held], floor, kinds).outputs["p"]
        both = measure([{"p": h} for h in held], [{"p": h} for h in held], floor, kinds,
                       seen=([{"p": s} for s in seen], [{"p": f} for f in flipped])).outputs["p"]
        return alone, both

    alone, both = judged(40)
    assert alone.positions is not None and alone.positions.strings and alone.ok and alone.top1_unjudged  # 4 reads
    assert alone.advisory is None and both.advisory is None
    assert not both.ok and both.positions.changed == 2 and both.seen_feeds == 8 and both.positions.reads == 12
    alone, both = judged(6)
    assert not alone.softmax_reads and both.advisory is None
