"""The quantizer on the real silero VAD models: compute inside If branches, LSTMs, an fp16 model.

silero-vad 6.2.3's three ONNX files (fetched with ``pip download`` like the PP-OCR ones):
``silero_vad.onnx`` holds all its work in the two branches of one If (8 vs 16 kHz) with an LSTM
in nested Ifs; ``silero_vad_op18_ifless.onnx`` the same with the LSTM cell decomposed into
Gemm/Sigmoid/Tanh; ``silero_vad_half.onnx`` computes in fp16 with its LSTMs in If branches.

Data: speech-like audio made here (:mod:`testkit.audio`: espeak-ng speech, noise bursts,
silence). Calibration streams a 1.5 s clip (seed 1) through the float model; evaluation streams an
5 s clip (seed 2) through each model with its own recurrent state, as a VAD runs. Bounds (issue
13): cosine of the speech probabilities >= 0.99 and speech decisions (0.5) agreeing on >= 97 % of
windows for A16W8, BF16, BFP16, MX9; A8W8 and MXINT8 are reported (looser sanity bounds here).
"""

from __future__ import annotations

import dataclasses
import logging

import onnx
import onnxruntime as ort
import pytest

from onnxptq import get_preset, quantize
from testkit import audio
from testkit.models import SILERO, SILERO_HALF, SILERO_IFLESS, model_path

from test_quantize_subgraphs import quantizers_in_bodies

pytestmark = pytest.mark.slow
log = logging.getLogger(__name__)

MODELS = (SILERO, SILERO_IFLESS, SILERO_HALF)
PRESETS = ("A8W8", "A16W8", "BF16", "BFP16", "MX9", "MXINT8")
#: (least cosine, least share of agreeing decisions): the issue's bound for A16W8/BF16/BFP16/MX9;
#: for A8W8 and MXINT8, whose figures are reported, guards well below what they reach (A8W8:
#: 0.94/0.84-0.97/0.92, limited by the STFT magnitude in 8 bits; MXINT8: 0.999/0.99-1.0).
BOUNDS = {"A16W8": (0.99, 0.97), "BF16": (0.99, 0.97), "BFP16": (0.99, 0.97), "MX9": (0.99, 0.97),
          "A8W8": (0.85, 0.75), "MXINT8": (0.99, 0.95)}
CALIB_SECONDS = 1.5
EVAL_SECONDS = 5.0


@pytest.fixture(scope="module")
def clips():
    calib, _ = audio.speech_mix(seed=1, seconds=CALIB_SECONDS)
    evaluation, _ = audio.speech_mix(seed=2, seconds=EVAL_SECONDS)
    return calib, evaluation


@pytest.fixture(scope="module")
def floats(clips):
    """Per model: (path, calibration feeds, float probabilities on the evaluation clip)."""
    calib, evaluation = clips
    out = {}
    for name in MODELS:
        path = model_path(name)
        out[name] = (path, audio.vad_feeds(str(path), calib), audio.run_vad(str(path), evaluation)[0])
    return out


def _plain_session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _assert_every_initializer_read(model: onnx.ModelProto) -> None:
    """No graph keeps an initializer that nothing in it (or in a body under it) reads: a replaced
    weight left behind in a body doubled silero's size and made onnxruntime warn once per tensor."""
    from onnxptq.graph.walk import all_graphs

    for graph in all_graphs(model.graph):
        read = {i for g in all_graphs(graph) for n in g.node for i in n.input} | {o.name for o in graph.output}
        unread = [t.name for t in graph.initializer if t.name not in read]
        assert not unread, f"{graph.name}: unread initializers {unread[:5]}"


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name", MODELS)
def test_silero_quantized(name, preset, floats, clips):
    path, calib_feeds, reference = floats[name]
    config = get_preset(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    result = quantize(path, config, calib_feeds, eval_samples=4)
    onnx.checker.check_model(result.model)
    _assert_every_initializer_read(result.model)
    inside = quantizers_in_bodies(result.model)
    if preset in ("BFP16", "MX9", "MXINT8") and name == "silero_vad_half.onnx":
        # Block formats encode dot-product operands only (docs/formats.md): inside this file's If
        # bodies the only dot product is the LSTM, whose input has no rank for shape inference there
        # (kept float, the plan says so) and whose W/R are stored in the format offline, so no
        # quantizer node runs inside; the weights must be planned in the format.
        body_weights = [t for t in result.plan.tensors.values()
                        if t.role == "weight" and any(c.endswith("/LSTM") for c in t.consumers) and t.quant.format in ("bfp", "mx")]
        # W and R of both branches' LSTMs: since prepare stores a weight both branches fold alike
        # once (graph/passes/share_body_constants.py), two tensors each read by the two LSTMs.
        reads = [(t.name, c) for t in body_weights for c in t.consumers if c.endswith("/LSTM")]
        assert len(reads) >= 4, f"{name} {preset}: the LSTMs' W/R inside the bodies are not in the block format"
    else:
        assert inside > 0, f"{name} {preset}: no quantizer inside the If/LSTM bodies"
    probs, _ = audio.run_vad(_plain_session(result.model), clips[1])
    figures = audio.compare_probs(reference, probs)
    log.warning("silero %s %s: cosine %.5f, agreement %.4f, max |dp| %.4f, %d quantizers in bodies, %d planned tensors",
                name, preset, figures["cosine"], figures["agreement"], figures["max_abs"], inside, len(result.plan.tensors))
    least_cosine, least_agreement = BOUNDS[preset]
    assert figures["cosine"] >= least_cosine, (name, preset, figures)
    assert figures["agreement"] >= least_agreement, (name, preset, figures)


def test_silero_8k_branch_left_float_with_warning(floats, caplog):
    """16 kHz calibration never runs the 8 kHz branch: integer activations there get no range."""
    path, calib_feeds, _ = floats[SILERO]
    config = get_preset("A16W8")
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    with caplog.at_level(logging.WARNING, logger="onnxptq"):
        quantize(path, config, calib_feeds[:8], eval_samples=1)
    messages = [r.getMessage() for r in caplog.records if "not run by the calibration data" in r.getMessage()]
    assert any("If_0" in m for m in messages), [r.getMessage() for r in caplog.records]


def test_silero_half_convert_fp16_to_fp32(floats, clips):
    """ConvertFP16ToFP32 widens the fp16 model first: the result holds no fp16 tensor and agrees."""
    path, calib_feeds, reference = floats[SILERO_HALF]
    config = get_preset("A16W8").replace(convert_fp16_to_fp32=True)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    result = quantize(path, config, calib_feeds, eval_samples=1)
    from onnxptq.graph.walk import walk_scopes

    fp16 = [t.name for s in walk_scopes(result.model.graph) for t in s.graph.initializer
            if t.data_type == onnx.TensorProto.FLOAT16]
    assert not fp16, fp16[:5]
    probs, _ = audio.run_vad(_plain_session(result.model), clips[1])
    assert audio.compare_probs(reference, probs)["agreement"] >= 0.97


def _reference_a8w8(path, feeds, tmp_path, preset: str):
    """The reference tool's A8W8 / A16W8 through the compatible API: MinMax, symmetric
    activations, per-tensor int8 weights (spec §1.5), CLE automatic as a user gets it."""
    from testkit.reference import quantize_reference

    out = tmp_path / f"ref_{preset}.onnx"
    quantize_reference(path, out, feeds, preset)
    return onnx.load(out)


#: issue 27.6: per-tensor weights kept 0.59-0.64 of the decisions (0.26 on this clip before: the
#: layers live in If bodies, where equalization never looked); per-channel keeps 0.97-1.0.
#: Measured on a 30 s clip (937 windows; the 5 s clip's 156 move 0.0064 per window), the floor a
#: little under each figure (bench/RESULTS.md "Per-tensor integer presets, second round"): with
#: bias correction inside the If bodies, our A16W8 with per-tensor weights 0.980 / 0.981 (if /
#: ifless; before 0.930 / 0.967), the reference tool's A8W8 0.958 / 0.935 (before 0.919 / 0.918).
PER_TENSOR_FLOOR = {("preset", SILERO): 0.97, ("preset", SILERO_IFLESS): 0.97,
                    ("reference", SILERO): 0.95, ("reference", SILERO_IFLESS): 0.93}
PER_TENSOR_EVAL_SECONDS = 30.0


@pytest.fixture(scope="module")
def long_clip(floats):
    """A 30 s evaluation clip (seed 2) and each model's float probabilities on it."""
    clip, _ = audio.speech_mix(seed=2, seconds=PER_TENSOR_EVAL_SECONDS)
    return clip, {name: audio.run_vad(str(floats[name][0]), clip)[0] for name in (SILERO, SILERO_IFLESS)}


@pytest.mark.parametrize("route", ["preset", "reference"])
@pytest.mark.parametrize("name", (SILERO, SILERO_IFLESS))
def test_silero_per_tensor_weights(name, route, floats, long_clip, tmp_path):
    """Per-tensor int8 weights (our A16W8 with per_channel off, and the reference tool's A8W8 via
    ModelQuantizer) keep the speech decisions: equalization and outlier splitting reach the
    encoder convolutions inside the If bodies and through the time-step Gather to the LSTM cell.
    The accuracy floor's repair is off: this measures the integer model, not what repair keeps
    float (with repair on, silero_vad.onnx comes back float-exact)."""
    path, calib_feeds, _ = floats[name]
    clip, references = long_clip
    if route == "preset":
        config = get_preset("A16W8")
        config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False),
                                weight=dataclasses.replace(config.weight, per_channel=False), repair=False)
        model = quantize(path, config, calib_feeds, eval_samples=1).model
    else:
        model = _reference_a8w8(path, calib_feeds, tmp_path, "A8W8")
    probs, _ = audio.run_vad(_plain_session(model), clip)
    figures = audio.compare_probs(references[name], probs)
    log.warning("silero per-tensor %s %s: %s", name, route, figures)
    assert figures["agreement"] >= PER_TENSOR_FLOOR[route, name], (name, route, figures)
