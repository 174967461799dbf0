"""A Softmax sequence's reads advisory says which of its flips are at positions float is unsure of (issue 27).

g2p-id's character BERT (a masked-LM: token ids ``[B, 32]`` → per-position probabilities over its
32-token vocabulary) predicts e or schwa at every position of every row, padding and plain letters
included; the package reads only the masked positions. The floor's reads advisory judges every
position of a row: under A8W8 28 of its 31 flips on 12 batches were at padding and letters float
reads with a probability margin under 0.5, 3 at padding, none at its 166 masked positions. Those flips stay
counted (slovorez's BIES tagger flips only at such positions too, and its tags fall below the
floor), but the warning now says how many of the flips are there, so a user who reads only some
positions can judge it (bench/RESULTS.md, "The reads advisory on a masked-LM's unread positions").
The model here is built as that one is shaped: token and position embeddings, a linear head and a
``Softmax``; one position of the padding is one float is unsure of.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import UNSURE
from onnxptq.analysis.floor import Floor, measure, readings_of
from onnxptq.sessions import open_session

B, T, D, C = 8, 32, 6, 6
PAD, E_LETTERS, MASK, V = 0, (4, 5), 6, 7
SCHWA, E = 0, 1
UNSURE_AT = 29  # the position at which the padding's float probability margin is ~0.1


def _token_logits(mask_shift: float = 0.0) -> np.ndarray:
    """Per token id, its logits over the C classes: the padding and letters 1-3 lean to schwa
    (sure), letters 4-5 to e (sure), the mask to schwa (sure); ``mask_shift`` moves the mask's
    answer to e (a real loss at the positions a caller reads)."""
    lt = np.full((V, C), -3.0)
    lt[:, SCHWA] = 0.0
    lt[PAD, SCHWA], lt[PAD, E] = 2.0, 0.0
    for k in (1, 2, 3):
        lt[k, SCHWA], lt[k, E] = 1.5, 0.0
    for k in E_LETTERS:
        lt[k, SCHWA], lt[k, E] = 0.0, 3.0
    lt[MASK, SCHWA], lt[MASK, E] = 4.0, mask_shift
    return lt


def masked_lm(e_bias: float = 0.0, mask_shift: float = 0.0) -> onnx.ModelProto:
    """``ids [B, T] → Gather(tokens) + positions → MatMul → Add → Softmax → [B, T, C]``.
    ``e_bias``: the head's bias for e raised (a format's rounding of the head: flips only the
    positions whose logit margin is under it)."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((D, C)) + 3.0 * np.eye(D, C)
    w_inv = np.linalg.inv(w)
    lp = np.zeros((T, C))
    lp[UNSURE_AT, SCHWA] = -1.8  # the padding there: logits 0.2 apart, probability margin ~0.1
    bias = np.zeros(C)
    bias[E] = e_bias
    inits = [numpy_helper.from_array((_token_logits(mask_shift) @ w_inv).astype(np.float32), "tok_emb"),
             numpy_helper.from_array((lp @ w_inv).astype(np.float32), "pos_emb"),
             numpy_helper.from_array(w.astype(np.float32), "head_w"),
             numpy_helper.from_array(bias.astype(np.float32), "head_b")]
    nodes = [helper.make_node("Gather", ["tok_emb", "ids"], ["emb"], name="Gather_tok"),
             helper.make_node("Add", ["emb", "pos_emb"], ["hidden"], name="Add_pos"),
             helper.make_node("MatMul", ["hidden", "head_w"], ["mm"], name="MatMul_head"),
             helper.make_node("Add", ["mm", "head_b"], ["logits"], name="Add_head"),
             helper.make_node("Softmax", ["logits"], ["mlm_cls"], name="Softmax_head", axis=-1)]
    graph = helper.make_graph(nodes, "masked_lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T])],
                              [helper.make_tensor_value_info("mlm_cls", TensorProto.FLOAT, [B, T, C])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def words(n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """Batches of B words, 4-12 letters with one or two masks, padded with id 0 to T."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        ids = np.full((B, T), PAD, np.int64)
        for b in range(B):
            length = int(rng.integers(4, 13))
            ids[b, :length] = rng.integers(1, 6, length)
            ids[b, rng.choice(length, int(rng.integers(1, 3)), replace=False)] = MASK
        feeds.append({"ids": ids})
    return feeds


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    session = open_session(model)
    return [{"mlm_cls": session.run(["mlm_cls"], f)[0]} for f in feeds]


def test_the_advisory_says_which_flips_are_where_float_is_unsure():
    feeds = words(6)
    model = masked_lm()
    ref = _run(model, feeds)
    p = np.concatenate([r["mlm_cls"] for r in ref])
    top2 = np.sort(p, -1)[..., -2:]
    margin = top2[..., 1] - top2[..., 0]
    pads = np.concatenate([f["ids"] for f in feeds]) == PAD
    assert (margin[:, UNSURE_AT][pads[:, UNSURE_AT]] < UNSURE).all()  # the planted unsure padding position
    assert (margin[:, :UNSURE_AT] >= UNSURE).all() and (margin[:, UNSURE_AT + 1:] >= UNSURE).all()  # every other is sure
    floor = Floor("8-bit", 0.0, 0.95)
    readings = readings_of(model)
    n = B * len(feeds)

    rounded = _run(masked_lm(e_bias=0.35), feeds)
    tops = [np.argmax(r["mlm_cls"], -1) for r in ref]
    flips = [np.argmax(g["mlm_cls"], -1) != t for g, t in zip(rounded, tops)]
    assert sum(int(f.sum()) for f in flips) == n  # every row flips at its unsure padding position, nowhere else
    assert all((f[:, :UNSURE_AT] == 0).all() and (f[:, UNSURE_AT + 1:] == 0).all() for f in flips)
    verdict = measure(ref, rounded, floor, **readings)
    check = verdict.outputs["mlm_cls"]
    assert verdict.ok and check.advisory is not None  # still warned: the margins cannot say nobody reads there
    assert f"; {n} of the {n} flips at the {n} decision positions float itself reads with a probability margin under 0.5" in check.advisory

    lost = _run(masked_lm(e_bias=0.35, mask_shift=6.0), feeds)  # the masked positions (float sure) read e instead of schwa
    masked = sum(int((f["ids"] == MASK).sum()) for f in feeds)
    verdict = measure(ref, lost, floor, **readings)
    check = verdict.outputs["mlm_cls"]
    assert check.advisory is not None and "reads below the top-1 floor" in check.advisory
    assert f"; {n} of the {n + masked} flips at the {n} decision positions float itself" in check.advisory
