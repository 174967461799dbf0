"""DualQuantNodes (spec §4.5): a precision-boundary tensor passes through the producer's quantizer,
then the consumer's; each consumer reads its own format. Read back from the emitted graph."""

from __future__ import annotations

import dataclasses
import numpy as np
import onnxruntime as ort
import pytest

from _graph_precision import GraphIndex
from conftest import make_small_cnn, small_cnn_feeds
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset


def _mixed(base: str, target: str, **changes):
    """``base`` everywhere, Conv layers in ``target`` (activation and weight), placed for an
    NPU-style target as the reference tool's DualQuantNodes are (signed int8 kept as the preset says)."""
    cfg, low = get_preset(base), get_preset(target)
    cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
    changes.setdefault("runtime", "npu")
    # the reference tool's every-op placement, where the BFP16 Conv's output meets BF16 readers
    # (the BFP16 default encodes dot-product operands only: pipeline/plan/fp_blocks.py)
    changes.setdefault("int_block_dot_operands_only", False)
    return cfg.replace(op_type_overrides={"Conv": (low.activation, low.weight)}, **changes)


def _session_output(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def test_bf16_bfp16_boundaries_get_both_quantizers():
    model = make_small_cnn()
    result = quantize(model, _mixed("BF16", "BFP16", dual_quant_nodes=True), small_cnn_feeds())
    g = GraphIndex(result.model)
    # relu1 (BF16) -> conv2 (BFP16): BF16 first, then BFP; add1 (BF16) reads r1 after BF16 only.
    assert g.input_chain("conv2", 0) == ["bf16", "bfp"]
    assert g.input_chain("add1", 1) == ["bf16"]
    # conv2 (BFP16 producer) -> add1 (BF16 consumer): BFP, then BF16.
    assert g.input_chain("add1", 0) == ["bfp", "bf16"]
    # A graph input has no producer format: one quantizer.
    assert g.input_chain("conv1", 0) == ["bfp"]
    assert g.input_chain("conv2", 1) == ["bfp"] and g.input_chain("fc", 1) == ["bf16"]
    plan = result.plan.tensors["r1"]
    assert plan.producer_quant.format == "bf16" and plan.quant.format == "bfp" and plan.producer_consumers == ["add1"]
    out = _session_output(result.model, small_cnn_feeds(1)[0])
    assert np.isfinite(out).all()


def test_without_dual_one_quantizer_per_tensor():
    result = quantize(make_small_cnn(), _mixed("BF16", "BFP16"), small_cnn_feeds())
    g = GraphIndex(result.model)
    assert g.input_chain("conv2", 0) == ["bfp"]
    assert g.input_chain("add1", 1) == ["bfp"], "the first consumer's format serves every reader"
    assert all(t.producer_quant is None for t in result.plan.tensors.values())


def test_integer_dual_nodes_each_with_its_own_scale():
    result = quantize(make_small_cnn(), _mixed("A16W8", "A8W8", dual_quant_nodes=True), small_cnn_feeds())
    g = GraphIndex(result.model)
    assert g.input_chain("conv2", 0) == ["int16", "int8"]
    assert g.input_chain("add1", 1) == ["int16"]
    assert g.input_chain("add1", 0) == ["int8", "int16"]
    from onnxptq.pipeline.solve import producer_params_key

    first, second = result.params[producer_params_key("r1")], result.params["r1"]
    # Same calibrated range [0, amax] (r1 is a Relu output): int16 symmetric steps amax/32767,
    # A8W8's asymmetric int8 steps amax/255.
    np.testing.assert_allclose(second.scale / first.scale, 32767 / 255, rtol=1e-3)
    ref = _session_output(make_small_cnn(), small_cnn_feeds(1)[0])
    out = _session_output(result.model, small_cnn_feeds(1)[0])
    assert np.corrcoef(ref.ravel(), out.ravel())[0, 1] > 0.99


def test_dual_without_boundaries_changes_nothing():
    plain = quantize(make_small_cnn(), "BF16", small_cnn_feeds())
    dual = quantize(make_small_cnn(), get_preset("BF16").replace(dual_quant_nodes=True), small_cnn_feeds())
    assert [n.op_type for n in plain.model.graph.node] == [n.op_type for n in dual.model.graph.node]


def test_compat_dual_quant_nodes_key():
    from onnxptq import ExtendedQuantType, QuantizationConfig
    from onnxptq.compat.options import to_quant_config

    def cfg(**amp):
        return QuantizationConfig(activation_type=ExtendedQuantType.QBFloat16, weight_type=ExtendedQuantType.QBFloat16,
                                  include_auto_mp=True,
                                  extra_options={"AutoMixprecision": {"TargetOpType": ["Conv"],
                                                                      "TargetQuantType": ExtendedQuantType.QBFP, **amp}})

    assert to_quant_config(cfg(DualQuantNodes=True)).dual_quant_nodes is True
    assert to_quant_config(cfg()).dual_quant_nodes is False
    pairs = QuantizationConfig(activation_type=ExtendedQuantType.QBFloat16, weight_type=ExtendedQuantType.QBFloat16,
                               extra_options={"EnableDualQuantNodePairs": True})
    assert to_quant_config(pairs).dual_quant_nodes is True
