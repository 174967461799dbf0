"""BF16 conversion of the real PP-OCR models: valid models, task metric and output cosine.

FP32 -> BF16 on rec and cls, and FP16 -> BF16 on fp16 versions of them made with our own
converter. Targets (issue 4): the model loads and runs in onnxruntime, the task metric stays within
0.5 point of the float model it came from (CER on rendered text lines for rec, accuracy for cls),
and the output cosine similarity is at least 0.999.

One exception, measured and kept visible: rec's output is a softmax over 6625 classes, and on real
rendered lines its cosine to float is 0.996 (fp32 source) / 0.990 (fp16 source, against the fp16
model) — with weights-only rounding (``simulate_bf16``) already 0.9958, so no BF16 model of this
network reaches 0.999 there; the CER is unchanged within 0.1 point. On random inputs (flatter
probabilities) rec reaches 0.9999, which is asserted too.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnxptq.analysis.metrics import cosine_similarity
from onnxptq.conversion.convert import convert_model
from onnxptq.conversion.fp16 import convert_float_to_float16
from testkit.models import model_path
from testkit.ocr import cer, ctc_greedy_decode, load_characters, normalize_text, render_cls, render_lines

pytestmark = pytest.mark.slow
REC_LINES = 96
CLS_LINES = 128


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _outputs(sess: ort.InferenceSession, x: np.ndarray) -> np.ndarray:
    return np.concatenate([sess.run(None, {"x": x[i : i + 32]})[0] for i in range(0, len(x), 32)])


def _cer(out: np.ndarray, texts, chars) -> float:
    """rec_cer's figure (greedy CTC decode of the same batches, normalized text) from outputs in hand."""
    preds = [normalize_text(p) for p in ctc_greedy_decode(out, chars)]
    return cer(preds, [normalize_text(t) for t in texts])


def _accuracy(out: np.ndarray, labels) -> float:
    """cls_accuracy's figure (top-1 of the [N, 2] output) from outputs in hand."""
    return float(np.mean(out.argmax(axis=1) == np.asarray(labels)))


@pytest.fixture(scope="module")
def rec():
    model = onnx.load(str(model_path("rec")))
    images, texts = render_lines(REC_LINES, seed=1, characters=load_characters(model))
    return model, images, texts


@pytest.fixture(scope="module")
def cls():
    model = onnx.load(str(model_path("cls")))
    images, labels = render_cls(CLS_LINES, seed=0)
    return model, images, labels


@pytest.mark.parametrize("source", ["fp32", "fp16"])
def test_rec_bf16(rec, source):
    model, images, texts = rec
    if source == "fp16":
        model, images = convert_float_to_float16(model), images.astype(np.float16)
    float_sess = _session(model)
    converted = convert_model(model, "with_cast", source=source)
    bf16_sess = _session(converted)
    assert bf16_sess.get_inputs()[0].type == float_sess.get_inputs()[0].type
    chars = load_characters(model)
    # One pass per model over the lines, for both the CER and the cosine: rec_cer ran the same
    # batches of 32 a second time for the same outputs.
    float_out, bf16_out = _outputs(float_sess, images), _outputs(bf16_sess, images)
    base_cer, bf16_cer = _cer(float_out, texts, chars), _cer(bf16_out, texts, chars)
    assert abs(bf16_cer - base_cer) <= 0.005, (base_cer, bf16_cer)
    floor = 0.995 if source == "fp32" else 0.988  # see the module docstring
    assert cosine_similarity(float_out, bf16_out) >= floor
    noise = np.random.default_rng(0).uniform(-1, 1, (4, 3, 48, 320)).astype(images.dtype)
    # fp16 sources compare fp16 outputs, whose own rounding costs about 1e-3 of cosine here.
    assert cosine_similarity(_outputs(float_sess, noise), _outputs(bf16_sess, noise)) >= (0.999 if source == "fp32" else 0.998)


@pytest.mark.parametrize("source", ["fp32", "fp16"])
def test_cls_bf16(cls, source):
    model, images, labels = cls
    if source == "fp16":
        model, images = convert_float_to_float16(model), images.astype(np.float16)
    float_sess = _session(model)
    bf16_sess = _session(convert_model(model, "with_cast", source=source))
    # One pass per model: the accuracy is the argmax of the outputs the cosine compares
    # (ocr.cls_accuracy would run both models over the lines again).
    float_out, bf16_out = _outputs(float_sess, images), _outputs(bf16_sess, images)
    base_acc = _accuracy(float_out, labels)
    assert abs(_accuracy(bf16_out, labels) - base_acc) <= 0.005
    assert cosine_similarity(float_out, bf16_out) >= 0.999


@pytest.mark.parametrize("fmt", ["customqdq", "simulate_bf16", "bf16"])
def test_other_formats_on_cls(cls, fmt):
    model, images, _ = cls
    float_out = _outputs(_session(model), images[:32])
    out = _outputs(_session(convert_model(model, fmt)), images[:32])
    assert cosine_similarity(float_out, out) >= 0.999
