"""Issue 18 item 10: every compatible-API key does something, or is refused, or says it does nothing.

Table-driven over :data:`onnxptq.compat.keys.EXTRA_OPTIONS`, so a key added to the table without an
effect fails here. For an *honoured* key, setting the probe value below must change the quantized
model, its parameters, or the ModelQuantizer run options — or raise a clear error for that value.
A *not implemented* key must raise ``NotImplementedError`` naming it for any value that is not
inert. A *no-op* key (documented as having nothing to do here) must say so in a warning. Accepted
and ignored is the one outcome that fails.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.compat import ExtendedCalibrationMethod, ExtendedQuantType, PowerOfTwoMethod
from onnxptq.compat.enums import CalibrationMethod
from onnxptq.compat.keys import EXTRA_OPTIONS
from onnxptq.compat.legacy import QuantizationConfig
from onnxptq.compat.options import parse
from onnxptq.errors import OnnxptqError



def _opset17_model(graph: onnx.GraphProto) -> onnx.ModelProto:
    """``graph`` as a model of default-domain opset 17, IR version 8 (what every builder here makes)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model

def _probe_model() -> onnx.ModelProto:
    """Conv+BN+Relu, Conv+Clip, Concat, Slice, Mul by a constant, GAP, Gemm: every key has something to act on."""
    rng = np.random.default_rng(0)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    inits = [w("W1", 8, 3, 3, 3), w("B1", 8, scale=0.1), w("W2", 8, 8, 3, 3), w("B2", 8, scale=0.1),
             w("WG", 16, 10), w("BG", 10, scale=0.1), w("K", 1, 16, 1, 1, scale=1.0),
             numpy_helper.from_array(np.abs(rng.normal(1, 0.1, 8)).astype(np.float32), "bn_s"),
             w("bn_b", 8, scale=0.1), w("bn_m", 8, scale=0.1),
             numpy_helper.from_array(np.abs(rng.normal(1, 0.1, 8)).astype(np.float32), "bn_v"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"), numpy_helper.from_array(np.array([16], np.int64), "s1"),
             numpy_helper.from_array(np.array([1], np.int64), "ax"),
             numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["b1"], name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["k2"], name="clip2"),
        helper.make_node("Concat", ["r1", "k2"], ["cat"], name="cat", axis=1),
        helper.make_node("Slice", ["cat", "s0", "s1", "ax"], ["sl"], name="slice"),
        helper.make_node("Mul", ["sl", "K"], ["m"], name="mul"),
        helper.make_node("GlobalAveragePool", ["m"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "WG", "BG"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], initializer=inits)
    model = _opset17_model(graph)
    onnx.checker.check_model(model)
    return model


MODEL = _probe_model()


def _mean_model() -> onnx.ModelProto:
    """Conv+Relu, then torch's dynamo pooling: ReduceMean over the spatial axes (keepdims), Flatten, Gemm."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, 10)).astype(np.float32), "WG")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], name="mean", axes=[2, 3], keepdims=1),
             helper.make_node("Flatten", ["m"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "WG"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "mean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], initializer=inits)
    model = _opset17_model(graph)
    onnx.checker.check_model(model)
    return model


MEAN_MODEL = _mean_model()


def _chain_model() -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Relu -> Conv, channels of very unequal range: every CLE key has pairs
    to balance (the probe model's Conv outputs also feed a Concat, which equalization must not scale)."""
    rng = np.random.default_rng(1)
    spread = np.array([0.05, 0.3, 2.0, 6.0], np.float32)

    def w(name, *shape, scale=0.5):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    w1 = numpy_helper.from_array((rng.normal(0, 0.5, (4, 3, 3, 3)) * spread[:, None, None, None]).astype(np.float32), "W1")
    inits = [w1, w("B1", 4, scale=0.2), w("W2", 4, 4, 3, 3), w("B2", 4, scale=0.2), w("W3", 2, 4, 1, 1), w("B3", 2, scale=0.2)]
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "W3", "B3"], ["y"], name="conv3"),
    ]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 8, 8])], initializer=inits)
    model = _opset17_model(graph)
    return model


CHAIN = _chain_model()


def _if_model() -> onnx.ModelProto:
    """Conv, then an If (constant condition) whose then branch holds another Conv: EnableSubgraph acts there."""
    rng = np.random.default_rng(2)
    then_g = helper.make_graph([helper.make_node("Conv", ["c", "WT"], ["t"], name="then_conv", pads=[1, 1, 1, 1])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["N", 4, 8, 8])],
                               initializer=[numpy_helper.from_array(rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32), "WT")])
    else_g = helper.make_graph([helper.make_node("Relu", ["c"], ["e"], name="else_relu")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 4, 8, 8])])
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Constant", [], ["cond"], name="cond", value=numpy_helper.from_array(np.array(True), "cond_value")),
        helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(nodes, "if_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              initializer=[numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "W1")])
    model = _opset17_model(graph)
    return model


def _fp16_model() -> onnx.ModelProto:
    """float32 in and out, fp16 inside (a Conv on fp16 weights), as silero_vad_half.onnx is built."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], name="to_fp16", to=TensorProto.FLOAT16),
        helper.make_node("Conv", ["x16", "W16"], ["c16"], name="conv16", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["c16"], ["y"], name="to_fp32", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "fp16_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              initializer=[numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float16), "W16")])
    model = _opset17_model(graph)
    return model


def _sequence_model() -> onnx.ModelProto:
    """[N, 4, 8] activations through MatMul -> Slice (part of the hidden axis) -> MatMul, as in a
    transformer: the block axis of a MatMul input is its last (contracted) axis, which
    RefineBlockAxis chooses over the channel axis 1; a Slice that keeps a part of its input has a
    narrower range than the input, so AlignSlice changes its scale."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (8, 6)).astype(np.float32), "WA"),
             numpy_helper.from_array(rng.normal(0, 0.5, (3, 5)).astype(np.float32), "WB"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"), numpy_helper.from_array(np.array([3], np.int64), "s1"),
             numpy_helper.from_array(np.array([2], np.int64), "ax")]
    nodes = [
        helper.make_node("MatMul", ["x", "WA"], ["h"], name="mm_a"),
        helper.make_node("Slice", ["h", "s0", "s1", "ax"], ["part"], name="slice"),
        helper.make_node("MatMul", ["part", "WB"], ["y"], name="mm_b"),
    ]
    graph = helper.make_graph(nodes, "sequence", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 5])], initializer=inits)
    model = _opset17_model(graph)
    onnx.checker.check_model(model)
    return model


IF_MODEL = _if_model()
SEQUENCE_MODEL = _sequence_model()
FP16_MODEL = _fp16_model()
_rng = np.random.default_rng(1)
FEEDS = [{"x": (_rng.normal(0, 1, (1, 3, 8, 8)) * (1 + 2 * i)).astype(np.float32)} for i in range(4)]
SEQUENCE_FEEDS = [{"x": (_rng.normal(0, 1, (1, 4, 8)) * (1 + 2 * i)).astype(np.float32)} for i in range(4)]

BF16 = {"activation_type": ExtendedQuantType.QBFloat16, "weight_type": ExtendedQuantType.QBFloat16}
BFP = {"activation_type": ExtendedQuantType.QBFP, "weight_type": ExtendedQuantType.QBFP}
MX = {"activation_type": ExtendedQuantType.QMX, "weight_type": ExtendedQuantType.QMX}
POW2 = {"calibrate_method": PowerOfTwoMethod.MinMSE}
PERCENTILE = {"calibrate_method": CalibrationMethod.Percentile}

#: key -> (value to set, the QuantizationConfig fields it is set against)
PROBES: dict[str, tuple] = {
    "SkipPreprocess": (True, {}),
    "ConvertOpsetVersion": (22, {}),
    "SimplifyModel": (False, {}),
    "OptimizeModel": (False, {}),
    "FoldBatchNorm": (False, {}),
    # A spatial mean stays a ReduceMean (float on the CPU placement) where the key says False.
    "ConvertReduceMeanToGlobalAvgPool": (False, {"model": MEAN_MODEL}),
    "FoldRelu": (True, {}),
    "OpTypesToQuantize": (["Conv"], {}),
    "NodesToQuantize": (["conv1"], {}),
    "ExtraOpTypesToQuantize": (["Sigmoid", "Clip"], {"extra": {"OpTypesToQuantize": ["Conv"]}}),
    "ExecutionProviders": (["NoSuchExecutionProvider"], {}),
    "QuantizeAllOpTypes": (True, {"extra": {"OpTypesToQuantize": ["Conv"]}}),
    # Slice and Mul have no weight of their own: without the key their input stays float.
    "ForceQuantizeNoInputCheck": (True, {"extra": {"OpTypesToQuantize": ["Slice", "Mul", "Gemm"]}}),
    "WeightsOnly": (True, {}),
    "AddQDQPairToWeight": (True, {}),
    "RemoveQDQConvRelu": (False, {}),
    "RemoveQDQConvClip": (False, {}),
    "RemoveQDQConvLeakyRelu": (False, {}),
    "RemoveQDQConvPRelu": (False, {}),
    # A precision boundary: the Conv layers in BF16, the rest int8 (layer-wise mixed precision).
    "EnableDualQuantNodePairs": (True, {"extra": {"AutoMixprecision": {"TargetOpType": ["Conv"],
                                                                       "TargetQuantType": ExtendedQuantType.QBFloat16}}}),
    "EnableSubgraph": (False, {"model": IF_MODEL}),
    # Its one Conv reads three channels: an image stem, which the CPU placement leaves float.
    # Against the fp16 form (WidenFP16 False): by default an fp16 model is widened inside already, and
    # this probe's model has a float32 interface, so the key's one further change (the interface) is none here.
    "ConvertFP16ToFP32": (True, {"model": FP16_MODEL, "extra": {"TargetRuntime": "npu", "WidenFP16": False}}),
    # fp16 inside: computed in fp32 by default, in fp16 where the key says False.
    "WidenFP16": (False, {"model": FP16_MODEL, "extra": {"TargetRuntime": "npu"}}),
    "CalibDataSize": (1, {}),
    "CalibMovingAverage": (True, {}),
    "TargetRuntime": ("npu", {}),
    # BF16 weights are stored packed (16-bit + Cast) unless the key says False.
    "PackWeights": (False, BF16),
    "BiasCorrection": (False, {}),
    "SmoothAlpha": (0.9, {"include_sq": True}),
    "UseMatMulNBits": (True, {}),
    "MatMulNBitsParams": ({"Bits": 8}, {"extra": {"UseMatMulNBits": True}}),
    "UseGPTQ": (True, {}),
    "GPTQParams": ({"ActOrder": False}, {"extra": {"UseGPTQ": True}}),
    "CLESteps": (-1, {"model": CHAIN}),
    "CLEBalanceMethod": ("min", {"model": CHAIN}),
    "CLEWeightThreshold": (100.0, {"model": CHAIN}),
    "CLEScaleAppendBias": (False, {"model": CHAIN}),
    "CLEScaleUseThreshold": (False, {"model": CHAIN, "extra": {"CLEWeightThreshold": 100.0}}),
    "CLETotalLayerDiffThreshold": (10.0, {"model": CHAIN, "extra": {"CLESteps": -1}}),
    "Percentile": (90.0, PERCENTILE),
    "NumBins": (16, PERCENTILE),
    "UseRandomData": (True, {}),
    "RandomDataReaderInputShape": ({"x": [1, 3, 8, 8]}, {}),
    "RandomDataReaderInputDataRange": ({"x": [-1.0, 1.0]}, {}),
    "WeightCalibrateMethod": (ExtendedCalibrationMethod.MinMSE, {}),
    "TensorQuantOverrides": ({"r1": [{"quant_type": ExtendedQuantType.QInt16}]}, {}),
    "ActivationSymmetric": (True, {}),
    "WeightSymmetric": (False, {}),
    "UsePowerOf2Scale": (False, POW2),
    "Int16Scale": (True, {}),
    "WeightScaled": (True, BF16),
    "ActivationScaled": (True, BF16),
    "QuantizeBias": (False, {}),
    "Int32Bias": (False, {}),
    "BFPAttributes": ({"block_size": 16}, BFP),
    "MXAttributes": ({"element_dtype": "fp8_e4m3"}, MX),
    "AlignConcat": (True, {}),
    # On the CPU target data movement always shares its input's parameters: the key acts on the NPU placement.
    "AlignSlice": (True, {"model": SEQUENCE_MODEL, "extra": {"TargetRuntime": "npu"}}),
    # On the CPU target elementwise constants already take the activation type: the key acts on the NPU placement.
    "AlignEltwiseQuantType": (True, {"activation_type": ExtendedQuantType.QUInt8, "weight_type": ExtendedQuantType.QInt8,
                                     "extra": {"TargetRuntime": "npu"}}),
    "BF16QDQToCast": (True, BF16),
    "BF16WithClip": (True, BF16),
    "RefineBlockAxis": (False, {**MX, "model": SEQUENCE_MODEL}),
    # BFP16 on the probe model: its Concat/Slice/Mul/pool tensors are no dot product's operands.
    "BlockDotOperandsOnly": (False, BFP),
    "MixedPrecisionTensor": ({ExtendedQuantType.QInt16: ["r1"]}, {"extra": {"SpecificTensorPrecision": True}}),
    "SpecificTensorPrecision": (True, {"extra": {"MixedPrecisionTensor": {ExtendedQuantType.QInt16: ["r1"]}}}),
    "AutoMixprecision": ({"TargetOpType": ["Gemm"], "TargetQuantType": ExtendedQuantType.QBFloat16}, {}),
    "UserCustomOpLibPath": ("/nonexistent/libcustom.so", {}),
    "CryptoMode": (True, {}),
    "DebugMode": (True, {}),
    "PrintSummary": (False, {}),
    "IgnoreWarnings": (False, {}),
    # A floor no int8 model holds: repair keeps nodes float (the model changes); strict raises; repair off keeps the plain model.
    "AccuracyFloorCosine": (0.99999, {}),
    "AccuracyFloorStrict": (True, {"extra": {"AccuracyFloorCosine": 0.99999}}),
    "AccuracyFloorRepair": (False, {"extra": {"AccuracyFloorCosine": 0.99999}}),
}


def _config(base: dict, extra: dict) -> QuantizationConfig:
    fields = {k: v for k, v in base.items() if k not in ("extra", "model")}
    return QuantizationConfig(**fields, extra_options={**base.get("extra", {}), **extra})


def _fingerprint(cfg, model: onnx.ModelProto = MODEL) -> tuple:
    result = quantize(model, cfg, SEQUENCE_FEEDS if model is SEQUENCE_MODEL else FEEDS, eval_samples=0)
    params = tuple(sorted((k, np.asarray(p.scale).tobytes(), np.asarray(p.zero_point).tobytes()) for k, p in result.params.items()))
    return result.model.SerializeToString(), params, result.calibration_samples


_BASELINES: dict[str, tuple] = {}


def _baseline(base: dict):
    key = repr(sorted((k, repr(v)) for k, v in base.items()))
    if key not in _BASELINES:
        cfg, run = parse(_config(base, {}))
        _BASELINES[key] = (run, _fingerprint(cfg, base.get("model", MODEL)))
    return _BASELINES[key]


def test_every_honoured_key_has_a_probe():
    honoured = sorted(k for k, spec in EXTRA_OPTIONS.items() if spec.status == "honoured")
    assert sorted(PROBES) == honoured


@pytest.mark.parametrize("key", sorted(PROBES))
def test_honoured_key_changes_the_result_or_raises(key):
    value, base = PROBES[key]
    base_run, base_print = _baseline(base)
    try:
        cfg, run = parse(_config(base, {key: value}))
        if run != base_run:
            return  # a ModelQuantizer run option: read by the quantizer, not the pipeline
        changed = _fingerprint(cfg, base.get("model", MODEL)) != base_print
    except (NotImplementedError, OnnxptqError, ValueError):
        return  # refused for this value, with a message
    assert changed, f"extra_options[{key!r}]={value!r} was accepted and changed nothing"


@pytest.mark.parametrize("key", sorted(k for k, s in EXTRA_OPTIONS.items() if s.status == "not implemented"))
def test_not_implemented_key_is_refused_by_name(key):
    with pytest.raises((NotImplementedError, ValueError), match=key):
        parse(QuantizationConfig(extra_options={key: {"some": "value"}}))


@pytest.mark.parametrize("key", sorted(k for k, s in EXTRA_OPTIONS.items() if s.status == "no-op"))
def test_no_op_key_says_it_does_nothing(key, caplog):
    with caplog.at_level(logging.WARNING, logger="onnxptq.compat.options"):
        parse(QuantizationConfig(extra_options={key: 1}))
    assert any(key in r.getMessage() and "no effect" in r.getMessage() for r in caplog.records)
