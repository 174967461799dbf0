"""Repair's margins measure reads logits in each read's spread (algorithms/repair_measure.py; issue 27 item 2).

Where the floor cannot decide an output's reads (too few to confirm a share), repair compares candidates by their
margins: each read's loss of float's margin is turned into the chance it flips a read like it, from float's margin
CDF pooled over the judged feeds. Pooled in absolute units, a loss is paired with every read's margin as if loss and
margin were independent; but a rounding error grows with the activations' size, and so does a margin. On
iqc_effnet_b3 (3 classes, one read a feed, loss and margin correlated +0.65) the measure put the graph's first 207
nodes at 16 bits at 0.055 reads lost (fresh: 0.029) and ruled them out, so A8W8 was delivered with 385 of 385 nodes
stepped up (bench/RESULTS.md, repair15 and repair16).

The planted cases: (1) the measure alone, on 3-class logits whose size varies by feed and whose candidate's error
grows with it: the measure must be near the share of reads the candidate really flips (main: about 2× it);
(2) a linear chain of MatMuls with one coarse int8 weight grid (tests/test_repair_prefixes.spread_chain's story)
ending in 5-class logits, fed rows whose size varies by feed, under A16W8: the whole plan with 16-bit weights
holds, the ranked trial breaks, the graph's first 10 of 13 nodes hold; main ruled them out by the measure and
delivered 13 of 13 stepped, the branch delivers 10, and they keep float's class on ≥ 0.97 of fresh rows.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from _structure_graphs import H, _B
from onnxptq.algorithms.repair_measure import measure_outputs
from onnxptq.analysis.floor import Floor
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.sessions import open_session

EIGHT_BIT = Floor("8-bit", 0.98, 0.95)


def _scaled_reads(feeds: int, seed: int, classes: int = 3) -> tuple[list[dict], list[dict], float]:
    """One read of ``classes`` logits a feed, its size drawn per feed (log-normal), and a candidate whose error is
    a share of that size; with the share of reads whose arg-max the candidate flips."""
    rng = np.random.default_rng(seed)
    refs, gots, flips = [], [], 0
    for _ in range(feeds):
        size = np.exp(rng.normal(0.0, 0.8))
        r = size * rng.normal(0.0, 1.0, (1, classes))
        g = r + size * rng.normal(0.0, 0.08, (1, classes))
        flips += int(r.argmax() != g.argmax())
        refs.append({"logits": r.astype(np.float32)})
        gots.append({"logits": g.astype(np.float32)})
    return refs, gots, flips / feeds


def test_logits_whose_error_grows_with_their_size_are_measured_near_the_reads_they_lose():
    refs, gots, flipped = _scaled_reads(1500, seed=4)
    assert 0.01 < flipped < 0.06
    measured = measure_outputs(["logits"], refs, gots, EIGHT_BIT)["logits"]
    assert not measured.cosine and measured.losses.shape == (1500,)
    # main: 2× the reads lost and more (each loss paired with every feed's margin, small feeds' margins too)
    assert measured.mean == pytest.approx(flipped, rel=0.35), (measured.mean, flipped)


def test_probabilities_and_two_classes_keep_their_margins_as_they_are(monkeypatch):
    from onnxptq.algorithms import repair_measure

    refs, gots, _ = _scaled_reads(300, seed=5)

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)).astype(np.float32)

    probs = [{"logits": softmax(r["logits"])} for r in refs], [{"logits": softmax(g["logits"])} for g in gots]
    two = [{"logits": r["logits"][:, :2]} for r in refs], [{"logits": g["logits"][:, :2]} for g in gots]
    found = [measure_outputs(["logits"], *pair, EIGHT_BIT)["logits"].mean for pair in (probs, two, (refs, gots))]
    monkeypatch.setattr(repair_measure, "_logits", lambda pairs: False)  # every output read in absolute units
    absolute = [measure_outputs(["logits"], *pair, EIGHT_BIT)["logits"].mean for pair in (probs, two, (refs, gots))]
    assert found[0] == absolute[0] > 0 and found[1] == absolute[1] > 0  # bounded or two classes: as they were
    assert found[2] < 0.8 * absolute[2]  # the logits alone are read in their spread


C = 5


def scaled_chain() -> onnx.ModelProto:
    """A chain of MatMuls: one coarse layer (a unit that never fires, read by a weight row holding an outlier, so
    its int8 grid rounds every other weight coarsely), ten ordinary layers, 5-class logits. Linear, so every error
    grows with the row's size."""
    rng = np.random.default_rng(5)
    b = _B()
    dead = rng.standard_normal((H, H)) / np.sqrt(H)
    dead[:, 0] = 0.0
    h = b.op("MatMul", "x", b.const(dead))
    hot = rng.standard_normal((H, H)) / np.sqrt(H)
    hot[0] = 5.0
    b.nodes.append(helper.make_node("MatMul", [h, b.const(hot)], ["MatMul_hot0_out"], name="MatMul_hot0"))
    src = "MatMul_hot0_out"
    for _ in range(10):
        src = b.op("MatMul", src, b.const(np.eye(H) + 0.05 * rng.standard_normal((H, H))))
    b.nodes.append(helper.make_node("MatMul", [src, b.const(rng.standard_normal((H, C)) / np.sqrt(H))], ["out"],
                                    name="MatMul_out"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", H])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", C])
    model = helper.make_model(helper.make_graph(b.nodes, "scaled_chain", [x], [out], b.inits),  # IR 8: onnxruntime 1.32
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def sized_rows(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Rows of the chain's input, each feed's size drawn log-normal (a photo's exposure, a clip's loudness)."""
    rng = np.random.default_rng(seed)
    return [{"x": (np.exp(rng.standard_normal()) * rng.standard_normal((1, H))).astype(np.float32)} for _ in range(n)]


def test_a_prefix_the_absolute_margins_ruled_out_is_delivered_and_holds_on_fresh_rows():
    model = scaled_chain()
    result = quantize(model, resolve_config("A16W8"), data=sized_rows(24, 1))
    record = result.repair
    assert record["before"]["ok"] is False and record["candidates"] == 13
    assert record["measured_outputs"] == ["out"]  # 8 held-out rows: the reads cannot decide, the margins do
    # main: [[7, False], [10, False]]: the first 10 held the floor but were ruled out by the measure; 13 of 13
    assert record["order"]["prefixes"] == [[7, False], [10, True]]
    stepped = set(record["stepped_up"])
    assert len(stepped) == 10 and "MatMul_hot0" in stepped and "MatMul_out" not in stepped, stepped
    assert record["evaluations"] <= record["allowance"] == 4
    fresh = np.concatenate([f["x"] for f in sized_rows(1000, 7)])
    want = open_session(model).run(None, {"x": fresh})[0].argmax(-1)
    got = open_session(result.model).run(None, {"x": fresh})[0].argmax(-1)
    assert np.mean(want == got) >= 0.97  # the 16-bit floor's top-1, on rows the floor never saw
