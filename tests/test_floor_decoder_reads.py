"""An autoregressive decoder's output is judged as one read per sequence (analysis/decoder_reads.py).

Why: SLANet-plus decodes a table's HTML tokens in a ``Loop`` that feeds each step's ``ArgMax`` to
the next step; the floor judged its Softmax output per row, where a changed first token (and with it
the whole table) is one row among hundreds, and held while 3 of 16 tables changed under BF16
(bench/RESULTS.md, branch slanet). A built decoder here: ``Loop`` over 16 steps, the step's logits
from the features and the previous token's one-hot, its ``ArgMax`` carried to the next step.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.decoder_reads import decoder_outputs, judge_decoder
from onnxptq.analysis.floor import FAMILY_FLOORS, Floor, measure, readings_of, unjudged_text

C, K, T = 6, 8, 16


def _decoder(w: np.ndarray, u: np.ndarray, carried_argmax: bool = True) -> onnx.ModelProto:
    """``x [1, K]`` → Loop (T steps; carried: the previous token's one-hot ``[1, C]``) → step logits
    ``[T, 1, C]`` → Transpose → Softmax ``[1, T, C]``. ``carried_argmax=False``: the body's ArgMax only
    reaches a scan output (the next step reads the previous step's scores, not its decision)."""
    body_nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("MatMul", ["prev_in", "U"], ["pu"]),
        helper.make_node("Add", ["xw", "pu"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["tok"], axis=1, keepdims=0),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]
    if carried_argmax:
        body_nodes += [helper.make_node("OneHot", ["tok", "depth", "onoff"], ["oh"], axis=-1),
                       helper.make_node("Cast", ["oh"], ["prev_out"], to=TensorProto.FLOAT)]
        scan_outs = ["logits"]
    else:
        body_nodes += [helper.make_node("Softmax", ["logits"], ["prev_out"], axis=-1),
                       helper.make_node("Cast", ["tok"], ["tok_f"], to=TensorProto.FLOAT)]
        scan_outs = ["logits", "tok_f"]
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("prev_in", TensorProto.FLOAT, [1, C])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("prev_out", TensorProto.FLOAT, [1, C])]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in scan_outs])
    loop_outs = ["prev_final", "steps"] + (["toks"] if not carried_argmax else [])
    nodes = [helper.make_node("Loop", ["trip", "cond", "prev0"], loop_outs, body=body, name="decoder"),
             helper.make_node("Transpose", ["steps"], ["steps_t"], perm=[1, 0, 2]),
             helper.make_node("Softmax", ["steps_t"], ["probs"], axis=-1)]
    inits = [numpy_helper.from_array(w.astype(np.float32), "W"), numpy_helper.from_array(u.astype(np.float32), "U"),
             numpy_helper.from_array(np.array(T, np.int64), "trip"), numpy_helper.from_array(np.array(True), "cond"),
             numpy_helper.from_array(np.zeros((1, C), np.float32), "prev0"), numpy_helper.from_array(np.array(C, np.int64), "depth"),
             numpy_helper.from_array(np.array([0, 1], np.int64), "onoff")]
    graph = helper.make_graph(nodes, "dec", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, K])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, T, C])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [{"probs": sess.run(["probs"], f)[0]} for f in feeds]


def _weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(0, 1.0, (K, C)), rng.normal(0, 2.0, (C, C))


def test_decoder_found_by_structure_only_where_its_decision_is_carried() -> None:
    w, u = _weights()
    assert decoder_outputs(_decoder(w, u)) == {"probs": "decoder"}
    assert readings_of(_decoder(w, u))["decoders"] == {"probs": "decoder"}
    # the body's ArgMax reaches a scan output only: each step reads the previous scores, no decision fed back
    assert decoder_outputs(_decoder(w, u, carried_argmax=False)) == {}


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, K)).astype(np.float32)} for _ in range(n)]


def _changed(ref: list[dict[str, np.ndarray]], got: list[dict[str, np.ndarray]]) -> int:
    return sum(int(not np.array_equal(r["probs"].argmax(-1), g["probs"].argmax(-1))) for r, g in zip(ref, got))


def test_two_changed_sequences_break_the_floor_where_rows_held() -> None:
    """12 feeds (4 held-out, 8 calibration): a perturbed decoder changes 2 sequences, both among the
    calibration feeds; per row on the held-out feeds (main's judgement) nothing moved and the floor
    held, as reads pooled with the calibration feeds it breaks (two changed reads of 12)."""
    w, u = _weights()
    model = _decoder(w, u)
    noisy = _decoder(w + np.random.default_rng(3).normal(0, 0.02, w.shape), u)
    feeds = _feeds(12, 1)
    ref, got = _run(model, feeds), _run(noisy, feeds)
    changed = _changed(ref, got)
    assert changed == 2, changed  # the premise: two sequences changed
    floor = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
    held, seen = [0, 3, 6, 9], [1, 2, 4, 5, 7, 8, 10, 11]
    # the held-out four changed nothing: the calibration feeds must count
    assert _changed([ref[i] for i in held], [got[i] for i in held]) == 0
    verdict = measure([ref[i] for i in held], [got[i] for i in held], floor, **readings_of(model),
                      seen=([ref[i] for i in seen], [got[i] for i in seen]))
    check = verdict.outputs["probs"]
    assert not verdict.ok, verdict.describe()
    assert check.decoder is not None and check.decoder.changed == changed
    assert check.positions is not None and check.positions.reads == 12


def test_unchanged_sequences_on_few_reads_are_not_judged_and_name_thin_steps() -> None:
    """No sequence changed on 12 reads: the verdict does not say "holds" (34 reads needed), and it names
    the steps float itself decides with a thin probability margin."""
    w, u = _weights()
    model = _decoder(w, u)
    noisy = _decoder(w + np.random.default_rng(5).normal(0, 0.002, w.shape), u)
    feeds = _feeds(12, 1)
    ref, got = _run(model, feeds), _run(noisy, feeds)
    assert _changed(ref, got) == 0
    floor = Floor("16-bit", *FAMILY_FLOORS["16-bit"])
    verdict = measure(ref[:4], got[:4], floor, **readings_of(model), seen=(ref[4:], got[4:]))
    assert verdict.ok and verdict.unjudged == ["probs"], verdict.describe()
    text = unjudged_text(verdict)
    assert "12 reads" in text and "needs 34" in text
    decoder = verdict.outputs["probs"].decoder
    assert decoder is not None and decoder.thin and "probability margin under" in text


def test_judge_decoder_counts_a_changed_length_as_a_changed_read() -> None:
    """A decoder that stopped at another step (SLANet's Loop stops at its end token) changed the read."""
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(C), size=(1, 10)).astype(np.float32)
    b = np.concatenate([a, a[:, :3]], axis=1)
    judged = judge_decoder([a, a], [a, b])
    assert judged is not None and judged.changed == 1 and judged.positions.reads == 2
    assert judged.positions.agreement <= 0.5
