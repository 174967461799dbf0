"""A graph input's first convolutions stay float under FP-element MX formats (issue 27 item 5,
pipeline/plan/signal_inputs.py): AECMOS's shape — a log spectrogram computed before the model, fed
as its input — where plan/log_readers.py (a ``Log`` inside the graph) cannot see the log domain."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

from _log_spectrogram import _clips, _log_spectrogram_mos
from test_floor_scores import _feeds, _mos_head

_AFTER_SPEC = ("conv1", "conv2", "dense")  # the nodes of the DNSMOS-shaped model from its log spectrogram on


def _spectrogram_input_mos() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(the scorer fed a log spectrogram ``spec [1, 1, 65, 124]`` as its input, the full model that
    computes it from a waveform): _log_spectrogram_mos cut at its ``spec`` tensor."""
    full = _log_spectrogram_mos()
    start = next(i for i, n in enumerate(full.graph.node) if n.name == _AFTER_SPEC[0])
    nodes = list(full.graph.node)[start:]
    used = {x for n in nodes for x in n.input}
    inits = [t for t in full.graph.initializer if t.name in used]
    spec = helper.make_tensor_value_info("spec", onnx.TensorProto.FLOAT, [1, 1, 65, 124])
    graph = helper.make_graph(nodes, "spectrogram_input_mos", [spec], list(full.graph.output), inits)
    model = helper.make_model(graph, opset_imports=list(full.opset_import))
    model.ir_version = full.ir_version
    onnx.checker.check_model(model)
    full.graph.output.append(onnx.ValueInfoProto(name="spec"))
    return model, full


def _spec_feeds(full: onnx.ModelProto, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    run = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    return [{"spec": run.run(["spec"], clip)[0]} for clip in _clips(n, seed)]


def test_the_first_conv_of_a_spectrogram_input_stays_float_under_mxfp8():
    """The log spectrogram is the graph input (as AECMOS takes its log-mel features): the first Conv's
    cancelling taps and the spectrogram's level rounded by E4M3. Before the rule no operand stayed
    float and 0.28 of 32 clips were within 0.05 of float's spread; with the first Conv's operands
    float, 0.53 (the rest is E4M3 in the body). MXINT8 (integer elements) gets no such rule and keeps 1.0."""
    model, full = _spectrogram_input_mos()
    calibration, held = _spec_feeds(full, 12, 1), _spec_feeds(full, 32, 1000)
    run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = np.concatenate([run.run(None, x)[0] for x in held])
    spread = ref.max(axis=0) - ref.min(axis=0)
    shares = {}
    for preset in ("MXFP8_E4M3", "MXINT8"):
        result = quantize(model, resolve_config(preset).replace(repair=False), calibration)
        kept = sorted(k for k, v in result.plan.float_tensors.items() if "signal_inputs" in v)
        assert kept == (["k1", "spec"] if preset == "MXFP8_E4M3" else []), (preset, kept)
        q = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
        rel = np.abs(np.concatenate([q.run(None, x)[0] for x in held]) - ref) / spread
        shares[preset] = (float((rel <= 0.05).all(axis=1).mean()), float(rel.max()))
    assert shares["MXFP8_E4M3"][0] >= 0.45, shares
    assert shares["MXINT8"][0] == 1.0, shares


def test_a_dense_first_reader_of_an_input_is_no_signal_detector():
    """A feature vector read first by a Gemm (the PLCMOS-shaped MOS head) keeps its MXFP8 operands:
    the rule is for convolutions slid over a sampled signal, not for dense layers."""
    result = quantize(_mos_head(), resolve_config("MXFP8_E4M3").replace(repair=False), _feeds(12, 1))
    assert not [k for k, v in result.plan.float_tensors.items() if "signal_inputs" in v]
    assert any(t.quant.format == "mx" for t in result.plan.tensors.values())
