"""bench/newmodels.py round 32 feeds and readings, and bench/round32_export.py's rewrite of MediaPipe's custom transposed
convolution, on made-up inputs (the packages stay out of the tests).

g2p_en's encoding is ``G2p.__call__``'s normalisation then ``G2p.encode`` (letters 3-28, anything else <unk> 1, </s>
2); its reading is the word's phoneme sequence exactly float's; the selfie mask is cut at MediaPipe's example
threshold 0.1; ``TFL_Convolution2DTransposeBias`` (NHWC, OHWI weights, kernel = stride) becomes standard ops that
compute what a transposed convolution written out by hand does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench import newmodels as nm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import round32_decoder_floor  # noqa: E402
import round32_export  # noqa: E402


def test_g2p_encoding_strips_accents_and_lowers_and_ends_with_eos():
    assert nm.g2p_chars("Café").tolist() == [[5, 3, 8, 7, 2]]          # c a f e(accent stripped) </s>
    assert nm.g2p_chars("a-z").tolist() == [[3, 1, 28, 2]]             # '-' is <unk>
    assert nm.g2p_chars("").tolist() == [[2]]


def test_g2p_held_out_words_were_never_calibrated_on(monkeypatch):
    monkeypatch.setattr(nm, "_g2p_words", lambda: [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(100)])
    calib = {tuple(f["chars"][0]) for f in nm.g2p_feeds(40, 1)}
    held = {tuple(f["chars"][0]) for f in nm.g2p_feeds(40, 1000)}
    assert len(calib) == len(held) == 40 and not calib & held


def test_g2p_reading_is_the_whole_sequence():
    seqs = {0: np.array([5, 6, 7]), 1: np.array([5, 6]), 2: np.array([9])}
    ref = lambda f: [seqs[f["k"]]]                                                          # noqa: E731
    # the first word equal, the second one phoneme longer (a missed </s>), the third changed
    test = lambda f: [{0: np.array([5, 6, 7]), 1: np.array([5, 6, 4]), 2: np.array([8])}[f["k"]]]   # noqa: E731
    assert nm.g2p_pronunciations(ref, test, [{"k": 0}, {"k": 1}, {"k": 2}], None) == 1 / 3


def test_selfie_mask_is_cut_at_the_examples_threshold():
    a = np.zeros((1, 4, 4, 1), np.float32)
    a[0, :2, :, 0] = 0.5                                              # 8 person pixels
    b = a.copy()
    b[0, 1, :, 0] = 0.08                                              # 4 of them fall under 0.1
    assert nm.mp_selfie_masks(lambda f: [a], lambda f: [b], [{}], None) == 0.5
    zero = np.zeros_like(a)
    assert nm.mp_selfie_masks(lambda f: [zero], lambda f: [zero], [{}], None) == 1.0


def test_custom_transposed_convolution_is_written_as_standard_ops(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 3, 5, 4)).astype(np.float32)              # NHWC
    w = rng.normal(size=(2, 2, 2, 4)).astype(np.float32)              # OHWI
    bias = np.array([0.5, -1.0], np.float32)
    graph = helper.make_graph(
        [helper.make_node("TFL_Convolution2DTransposeBias", ["x", "w", "b"], ["y"], name="segment")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 10, 2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    path = tmp_path / "t.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert round32_export._transpose_conv_bias(path) == 1
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = np.zeros((1, 6, 10, 2), np.float32)
    for a in range(2):
        for b in range(2):                                            # each input pixel paints a 2 x 2 block
            want[0, a::2, b::2, :] = np.einsum("ijc,oc->ijo", x[0], w[:, a, b, :])
    assert np.allclose(got, want + bias, atol=1e-5)
    assert [n.op_type for n in onnx.load(str(path)).graph.node] == ["Transpose", "ConvTranspose", "Transpose"]
    assert {t.name for t in onnx.load(str(path)).graph.initializer} == {"segment_W", "segment_B"}


def test_hand_built_decoder_outputs_the_arg_max_of_its_logits():
    sess = ort.InferenceSession(round32_decoder_floor.decoder().SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in round32_decoder_floor.feeds(3, 5):
        tokens, logits = sess.run(None, feed)
        assert tokens.dtype == np.int64 and len(tokens) == len(logits) <= round32_decoder_floor.STEPS
        assert tokens.tolist() == logits.argmax(1).tolist()
