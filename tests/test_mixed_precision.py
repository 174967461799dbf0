"""Mixed precision: the user document's layer-wise, tensor-wise and automatic examples on PP-OCR cls
(precision of each layer read back from the graph), and the automatic search's guarantees: the
final metric meets the target, and no single further layer can be flipped without breaking it
(checked by building each such model independently of the search's switch model)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from _graph_precision import GraphIndex
from conftest import make_small_cnn, small_cnn_feeds
from onnxptq import (CalibrationMethod, Config, ExtendedQuantFormat, ExtendedQuantType, ModelQuantizer,
                     QuantizationConfig, QuantType, get_preset)
from onnxptq.algorithms.mixed_precision import L2Target, Top1Target, auto_mixed_precision
from onnxptq.pipeline.build import build_model
from onnxptq.pipeline.calibrate import calibrate_once
from testkit.models import model_path

LAYER_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _l2(reference_model, model, feeds, index=0) -> float:
    """Mean over samples of ||float - quantized||_2, computed here, independently of the search."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ref = ort.InferenceSession(reference_model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    norms = []
    for feed in feeds:
        r, q = ref.run(None, feed)[index], got.run(None, feed)[index]
        norms.extend(float(np.linalg.norm((a.astype(np.float64) - b).ravel())) for a, b in zip(r, q))
    return float(np.mean(norms))


def _check_greedy(model, high, low_pair, feeds, result, target):
    """Final L2 within the target; every layer left high breaks it when flipped alone on top."""
    if high.bias_correction is None:
        high = high.replace(bias_correction=False)  # as the search builds (see auto_mixed_precision)
    cal = calibrate_once(model, high, feeds, eval_samples=len(feeds))
    flipped = set(result.report.flipped)

    def build(names):
        return build_model(cal, high.replace(node_overrides={n: low_pair for n in names}))[2]

    final = _l2(cal.prepared, build(flipped), feeds)
    assert final <= target
    assert final == pytest.approx(result.report.final_metric, rel=1e-5, abs=1e-9)
    for layer in result.report.layers:
        if layer.precision == "high":
            assert _l2(cal.prepared, build(flipped | {layer.name}), feeds) > target, layer.name
    return final


def test_small_cnn_a16w8_to_a8w8_greedy_property(tmp_path):
    high = get_preset("A16W8")
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    low = get_preset("A8W8")
    feeds = small_cnn_feeds(8)
    probe = auto_mixed_precision(make_small_cnn(), high, low, feeds, L2Target(1.0), workers=2)
    all_high, all_low = probe.report.baseline, probe.report.all_low
    assert probe.report.flipped and len(probe.report.flipped) == 3, "a loose target flips everything"
    target = all_high + 0.5 * (all_low - all_high)
    out = tmp_path / "amp.onnx"
    result = auto_mixed_precision(make_small_cnn(), high, low, feeds, L2Target(target), out, workers=2)
    assert 0 < len(result.report.flipped) < 3
    _check_greedy(make_small_cnn(), high, (low.activation, low.weight), feeds, result, target)
    saved = json.loads((tmp_path / "amp.onnx.amp.json").read_text())
    assert saved["flipped"] == result.report.flipped and saved["metric"] == "l2"
    assert {layer["name"] for layer in saved["layers"]} == {"conv1", "conv2", "fc"}
    g = GraphIndex(result.model)
    for layer in result.report.layers:
        # 8-bit activations are uint8 on the default (onnxruntime CPU) target, int8 on an NPU one.
        assert g.input_chain(layer.name, 0)[-1] in (("int8", "uint8") if layer.precision == "low" else ("int16",))


def test_incremental_evaluation_matches_whole_runs():
    """Candidates run from a cut (suffix models fed the kept tensors of a set already run) score
    exactly what whole runs of the switch model score, on every flip set of the small CNN."""
    from itertools import combinations

    from onnxptq.algorithms.mixed_precision import _Evaluator

    high = get_preset("A16W8")
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    low = get_preset("A8W8")
    pair = (low.activation, low.weight)
    feeds = small_cnn_feeds(8)
    cal = calibrate_once(make_small_cnn(), high, feeds, eval_samples=8,
                         also_for=[high.replace(op_type_overrides={op: pair for op in LAYER_OPS})])
    layers = ["conv1", "conv2", "fc"]

    def config_for(flipped):
        return high.replace(node_overrides={n: pair for n in flipped})

    sets = [frozenset(c) for k in range(4) for c in combinations(layers, k)]
    sets = sets[1:] + sets[::-1]  # every set, then again in another order (other kept bases)
    incremental = _Evaluator(cal, config_for, layers, L2Target(1.0), 2, incremental=True)
    whole = _Evaluator(cal, config_for, layers, L2Target(1.0), 2, incremental=False)
    try:
        assert incremental.suffixes is not None and len(incremental.suffixes.cuts) > 1
        got = [incremental._evaluate(s) for s in sets]
        assert got == [whole._evaluate(s) for s in sets]
        assert max(incremental.suffixes.starts) > 0, "some runs started past the first cut"
    finally:
        incremental.close()
        whole.close()


def test_top1_target_uses_the_evaluation_function():
    feeds = small_cnn_feeds(8)
    high = get_preset("A16W8")
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    calls = []

    def accuracy(outputs):
        calls.append(len(outputs))
        return float(np.mean([np.argmax(o, axis=-1).mean() for o in outputs]))

    result = auto_mixed_precision(make_small_cnn(), high, "A8W8", feeds, Top1Target(1e9, accuracy), workers=1)
    assert calls and all(n == 8 for n in calls)
    assert len(result.report.flipped) == 3 and result.report.metric == "top1_drop"


# --- the user document on PP-OCR cls --------------------------------------------------------------

CLS = model_path("cls")


def _cls_feeds(n=4):
    from testkit import ocr

    images, _ = ocr.render_cls(n, seed=1)
    return [{"x": images[i : i + 1]} for i in range(n)]


class _Reader:
    def __init__(self, feeds):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def _doc_quantize(tmp_path, **fields):
    """The document's example through the Quark-style API, the file read back. The checks read tensors
    by their float names and folded weights by their names' format suffix, so the file keeps its long
    names here (the delivered default shortens them: pipeline/lean_file.short_value_names, covered by
    tests/test_block_file_size_names.py); placement and packing are the default's."""
    from unittest import mock

    from onnxptq.pipeline import lean_file

    with mock.patch.object(lean_file, "LEAN_NAMES", False):
        return _doc_quantize_named(tmp_path, **fields)


def _doc_quantize_named(tmp_path, **fields):
    out = tmp_path / "q.onnx"
    cfg = QuantizationConfig(calibrate_method=CalibrationMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ, **fields)
    ModelQuantizer(Config(global_quant_config=cfg)).quantize_model(str(CLS), str(out), _Reader(_cls_feeds()))
    import onnx

    model = onnx.load(out)
    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    return model


def _layers(model):
    return [n for n in model.graph.node if n.op_type in LAYER_OPS]


@pytest.mark.slow
@pytest.mark.parametrize("target, label, dual", [(ExtendedQuantType.QBFP, "bfp", False), (ExtendedQuantType.QBFP, "bfp", True),
                                                 (ExtendedQuantType.QMX, "mx", False)])
def test_doc_layer_wise_on_cls(tmp_path, target, label, dual):
    amp = {"TargetOpType": list(LAYER_OPS), "TargetQuantType": target, **({"DualQuantNodes": True} if dual else {})}
    model = _doc_quantize(tmp_path, activation_type=ExtendedQuantType.QBFloat16, weight_type=ExtendedQuantType.QBFloat16,
                          include_auto_mp=True, extra_options={"AutoMixprecision": amp})
    g = GraphIndex(model)
    for node in _layers(model):
        chain = g.input_chain(node.name, 0)
        assert chain[-1] == label, (node.name, chain)
        if node.op_type == "Conv":
            assert g.input_chain(node.name, 1) == [label], node.name
    # Decode arithmetic after the last weighted layer stays float (pipeline/tails.py): it reads
    # whatever the layer before it wrote, so it is no BF16 reader.
    from onnxptq.pipeline.prepare import prepare_for_quantization
    from onnxptq.pipeline.tails import postprocessing_tail

    tail = postprocessing_tail(prepare_for_quantization(onnx.load(CLS)))
    others = [n for n in model.graph.node if n.op_type in ("HardSwish", "Add", "Mul", "GlobalAveragePool") and n.name not in tail]
    chains = [c for c in (g.input_chain(n.name, 0) for n in others) if c]  # fused activations read no quantizer
    ends = [c[-1] for c in chains]
    assert ends.count("bf16") > len(ends) // 2
    if dual:
        assert set(ends) == {"bf16"}, "with dual quant nodes every BF16 reader sees BF16 last"
    boundary = [n for n in _layers(model) if g.input_chain(n.name, 0) == ["bf16", label]]
    assert bool(boundary) == dual, "dual quant nodes put BF16 then the target type on boundary tensors"


@pytest.mark.slow
def test_doc_tensor_wise_on_cls(tmp_path):
    model = _doc_quantize(tmp_path, activation_type=ExtendedQuantType.QBFP, weight_type=ExtendedQuantType.QBFP,
                          specific_tensor_precision=True,
                          extra_options={"MixedPrecisionTensor": {ExtendedQuantType.QBFloat16: ["conv2_se_1_weights", "hardswish_0.tmp_0"],
                                                                  ExtendedQuantType.QInt16: ["conv2_se_2_weights", "relu_0.tmp_0"]}})
    g = GraphIndex(model)
    expect = {"hardswish_0.tmp_0": "bf16", "conv2_se_1_weights": "bf16", "conv2_se_2_weights": "int16", "relu_0.tmp_0": "int16"}
    for tensor, label in expect.items():
        reads = [g.chain(i) for n in model.graph.node if n.domain != "onnxptq" and n.op_type not in ("Cast", "QuantizeLinear", "DequantizeLinear")
                 for i in n.input if i.startswith(tensor)]
        assert reads and all(chain == [label] for chain in reads), (tensor, reads)
    with pytest.raises(ValueError, match="no_such_tensor"):
        _doc_quantize(tmp_path, activation_type=ExtendedQuantType.QBFP, weight_type=ExtendedQuantType.QBFP,
                      specific_tensor_precision=True,
                      extra_options={"MixedPrecisionTensor": {ExtendedQuantType.QBFloat16: ["no_such_tensor"]}})


@pytest.mark.slow
def test_doc_automatic_on_cls_greedy_property(tmp_path):
    """The document's automatic example as written (A16W8 -> A8W8, L2Target 0.1 on output 0),
    then a tighter target where the search has to choose, with the greedy property checked."""
    model = _doc_quantize(tmp_path, activation_type=ExtendedQuantType.QInt16, weight_type=QuantType.QInt8, include_auto_mp=True,
                          extra_options={"AutoMixprecision": {"TargetOpType": list(LAYER_OPS), "ActTargetQuantType": QuantType.QInt8,
                                                              "WeightTargetQuantType": QuantType.QInt8, "OutputIndex": 0,
                                                              "L2Target": 0.1}})
    report = json.loads((tmp_path / "q.onnx.amp.json").read_text())
    assert report["final_metric"] <= 0.1
    g = GraphIndex(model)
    low = set(report["flipped"])
    for node in _layers(model):
        assert g.input_chain(node.name, 0)[-1] in (("int8", "uint8") if node.name in low else ("int16",)), node.name

    from onnxptq.compat.options import to_quant_config
    from testkit import ocr

    # The same configuration through our API, with a target between all-A16 and all-A8.
    doc_cfg = to_quant_config(QuantizationConfig(
        calibrate_method=CalibrationMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ, activation_type=ExtendedQuantType.QInt16,
        weight_type=QuantType.QInt8, include_auto_mp=True,
        extra_options={"AutoMixprecision": {"ActTargetQuantType": QuantType.QInt8, "L2Target": 0.1}}))
    options = doc_cfg.auto_mixed_precision
    # Without equalization: with it (automatic for these per-tensor weights) all-int8 scores below
    # all-int16 on cls (L2 0.028 vs 0.051, both far below 0.125 / 0.096 without), so no target
    # lies between them and the greedy property has nothing to order.
    high = doc_cfg.replace(auto_mixed_precision=None, equalize=False)
    baseline = auto_mixed_precision(str(CLS), high, (options.activation, options.weight), _cls_feeds(), L2Target(1e9), workers=2).report
    target = baseline.baseline + 0.4 * (baseline.all_low - baseline.baseline)
    feeds = _cls_feeds()
    result = auto_mixed_precision(str(CLS), high, (options.activation, options.weight), feeds, L2Target(target), workers=2)
    assert 0 < len(result.report.flipped) < len(result.report.layers)
    _check_greedy(str(CLS), high, (options.activation, options.weight), feeds, result, target)
    images, labels = ocr.render_cls(100, seed=3)
    session = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    acc, float_acc = ocr.cls_accuracy(session, images, labels), ocr.cls_accuracy(str(CLS), images, labels)
    print(f"cls A16W8->A8W8 L2 target {target:.4g}: final {result.report.final_metric:.4g}, "
          f"{len(result.report.flipped)}/{len(result.report.layers)} layers int8, accuracy {acc:.3f} (float {float_acc:.3f})")
    assert acc >= float_acc - 0.05


def test_search_refuses_explicit_bias_correction_and_turns_automatic_off(small_cnn):
    """Candidates are scored on a switch model of solved parameters, which cannot follow per-candidate
    bias corrections: asking for both is refused, and automatic correction is off in the search."""
    from onnxptq.config.schema import ConfigError

    high = get_preset("A16W8").replace(bias_correction=True)
    with pytest.raises(ConfigError, match="bias_correction=False"):
        auto_mixed_precision(small_cnn, high, get_preset("A8W8"), small_cnn_feeds(4), L2Target(1.0))
    per_tensor = get_preset("A16W8")
    per_tensor = per_tensor.replace(weight=per_tensor.weight.with_(per_channel=False))
    assert per_tensor.bias_correction_active()
    result = auto_mixed_precision(small_cnn, per_tensor, get_preset("A8W8"), small_cnn_feeds(4), L2Target(1e9))
    assert result.result.config.bias_correction is False


def test_search_keeps_the_planner_quiet(caplog):
    """Hundreds of candidate plans would each log an INFO line: the search lowers the planner's own
    logger to WARNING while it runs (a fixed logger name broke when the planner moved modules)."""
    import logging

    from onnxptq.pipeline.plan import make_plan

    high = get_preset("A16W8")
    high = high.replace(calibration=dataclasses.replace(high.calibration, progress=False))
    with caplog.at_level(logging.INFO):
        result = auto_mixed_precision(make_small_cnn(), high, get_preset("A8W8"), small_cnn_feeds(4), L2Target(1e9))
    plan_lines = [r for r in caplog.records if r.name == make_plan.__module__ and r.getMessage().startswith("plan:")]
    # Only the plans made outside the search are logged (calibration for the high and low configs,
    # the final build): 4 here, where a logger left at INFO logs every candidate's too (9).
    assert result.report.evaluations > 3
    assert len(plan_lines) <= 4, f"{len(plan_lines)} plan lines logged: the search's candidates were not kept quiet"
