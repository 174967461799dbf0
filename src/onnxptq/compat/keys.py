"""The reference tool's configuration vocabulary: every ``extra_options`` key and what we do with it.

A table, not logic: each key's status (honoured, no-op, not implemented), its meaning here, and
the values of unbuilt features that ask for what we do anyway. :mod:`.options` translates a
config by this table; the docs and ``options_table()`` print it, so neither can drift from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "AMP_AUTOMATIC_KEYS",
    "AMP_DEFAULT_OP_TYPES",
    "AMP_KEYS",
    "AMP_LAYERWISE_KEYS",
    "AMP_SEARCH_ONLY_KEYS",
    "AMP_TARGET_KEYS",
    "AMP_UNBUILT",
    "EXTRA_OPTIONS",
    "FAST_FINETUNE_DEFAULTS",
    "FIELD_KEYS",
    "OptionKey",
    "Status",
    "UNBUILT_FIELDS",
    "options_table",
]

Status = Literal["honoured", "no-op", "not implemented"]


@dataclass(frozen=True)
class OptionKey:
    """One ``extra_options`` key: what we do with it and, for unbuilt features, which values are inert."""

    name: str
    status: Status
    meaning: str
    #: values of a not-implemented key that request our existing behaviour and are therefore accepted
    inert: tuple[Any, ...] = ()


def _h(name: str, meaning: str) -> OptionKey:
    return OptionKey(name, "honoured", meaning)


def _n(name: str, meaning: str) -> OptionKey:
    return OptionKey(name, "no-op", meaning)


def _x(name: str, meaning: str, *inert: Any) -> OptionKey:
    return OptionKey(name, "not implemented", meaning, tuple(inert))


_DPU = "DPU-exact op approximation (NPU simulation)"
_CLE = "cross-layer equalization"

#: Every extra_options key of the reference tool (spec §2), in the spec's order.
EXTRA_OPTIONS: dict[str, OptionKey] = {
    k.name: k
    for k in [
        # §2.1 pre-processing
        _h("SkipPreprocess", "True: no graph optimisation before quantization (QuantConfig.optimize/fold_batchnorm False)"),
        _x("ShapeShifterYaml", "YAML pre/post-processing passes", None),
        _x("PreprocessYAML", "YAML pre/post-processing passes (deprecated alias of ShapeShifterYaml)", None),
        _h("ConvertOpsetVersion", "convert the model to this opset first (QuantConfig.opset)"),
        _h("SimplifyModel", "False: skip graph simplification; our prepare stage is one unit, so optimize=False"),
        _x("SimplifyModelOptions", "onnxslim keyword arguments", None, {}),
        _x("RemoveInputInit", "False: keep initializers that are also graph inputs", True),
        _x("CopySharedInit", "duplicate shared initializers", None),
        _x("CopyBiasInit", "duplicate shared bias initializers", ["Conv", "ConvTranspose", "Gemm"]),
        _h("OptimizeModel", "spelling of the field optimize_model (QuantConfig.optimize)"),
        _h("FoldBatchNorm", "fold BatchNormalization into the neighbouring Conv/Gemm (QuantConfig.fold_batchnorm)"),
        _x("FuseInstanceNorm", "fuse decomposed InstanceNormalization", False),
        _x("FuseL2Norm", "fuse decomposed L2 normalisation", False),
        _x("FuseLayerNorm", "fuse decomposed LayerNormalization", False),
        _x("FuseGelu", "fuse decomposed Gelu", False),
        _x("ConvertBNToConv", "BatchNormalization -> depthwise Conv", False),
        _h("ConvertReduceMeanToGlobalAvgPool", "spatial ReduceMean -> GlobalAveragePool (QuantConfig.pool_spatial_means; "
           "absent: on, where the reference's default is off: onnxruntime runs the pool on integers)"),
        _x("SplitLargeKernelPool", "split large GlobalAveragePool", False),
        _x("ConvertSplitToSlice", "Split -> Slice", False),
        _x("ConvertClipToRelu", "Clip -> Relu", False),
        _x("ReplaceClip6Relu", "Clip(0,6) -> Relu", False),
        _x("FixShapes", "fix input/output shapes", None, ""),
        _h("ConvertFP16ToFP32", "convert an FP16 model to FP32 first (QuantConfig.convert_fp16_to_fp32)"),
        _h("WidenFP16", "onnxptq's own: False quantizes an FP16 model in FP16 as it is; absent: computed in FP32 inside with "
           "its FP16 inputs/outputs kept, except under FP16 formats alone (QuantConfig.widen_fp16)"),
        _x("ConvertNCHWToNHWC", "transpose 4-D inputs to NHWC", False),
        _h("FoldRelu", "absorb Relu/Clip into the following quantizer's range (QuantConfig.fold_relu)"),
        # §2.2 target selection
        _h("OpTypesToQuantize", "spelling of the field op_types_to_quantize (QuantConfig.op_types)"),
        _h("NodesToQuantize", "spelling of the field nodes_to_quantize"),
        _h("ExtraOpTypesToQuantize", "spelling of the field extra_op_types_to_quantize"),
        _x("InputNodes", "start quantization at these nodes", None, []),
        _x("OutputNodes", "stop quantization after these nodes", None, []),
        _h("ExecutionProviders", "spelling of the field execution_providers (calibration providers)"),
        _h("QuantizeAllOpTypes", "quantize every op type present (QuantConfig.quantize_all_op_types)"),
        _h("ForceQuantizeNoInputCheck", "quantize pass-through ops with unquantized input (default False, as in the reference)"),
        _x("MatMulConstBOnly", "skip MatMul whose B is not constant", False),
        _h("WeightsOnly", "True: quantize weights only (QuantConfig.activation=None)"),
        _h("EnableSubgraph", "quantize inside If/Loop/Scan bodies (QuantConfig.quantize_subgraphs; on unless set False, "
           "where the reference defaults to off)"),
        _x("OpTypesToExcludeOutputQuantization", "no Q/DQ on outputs of these op types", [], None),
        _x("NodesToExcludeOutputQuantization", "no Q/DQ on outputs of these nodes", [], None),
        _x("CalibPassthroughOpTypes", "calibration pass-through op types", [], None),
        # §2.3 Q/DQ management
        _h("AddQDQPairToWeight", "True: runtime quantizer on every weight (fold_weights/store_int_weights False)"),
        _x("DedicatedQDQPair", "one Q/DQ pair per consumer of a tensor", False),
        _h("PackWeights", "onnxptq's own key, not the reference tool's: False stores folded weights as plain fp32 "
                          "initializers instead of packed bytes + decode ops (QuantConfig.pack_weights)"),
        _h("TargetRuntime", "onnxptq's own key, not the reference tool's: 'cpu' (absent: onnxruntime CPU placement) "
                            "or 'npu' (Q/DQ on every quantizable op, per-channel depthwise inputs) (QuantConfig.runtime)"),
        _x("QDQOpTypePerChannelSupportToAxis", "per-op-type per-channel axis", {}, None),
        _x("UseQDQContribOps", "Q/DQ in the com.microsoft domain", False),
        _h("RemoveQDQConvRelu", "no Q/DQ between a producer and its Relu (QuantConfig.fuse_activations; the four keys must agree)"),
        _h("RemoveQDQConvClip", "same for Clip (QuantConfig.fuse_activations)"),
        _h("RemoveQDQConvLeakyRelu", "same for LeakyRelu (QuantConfig.fuse_activations)"),
        _h("RemoveQDQConvPRelu", "same for PRelu (QuantConfig.fuse_activations)"),
        _x("RemoveQDQConvGelu", "no Q/DQ between a producer and its Gelu", False),
        _x("RemoveQDQInstanceNorm", "InstanceNormalization as a fusing producer", False),
        _x("RemoveFusedQDQ", "remove BFP/MX nodes between a producer and its activation", False),
        _x("RemoveQDQMulAdd", "drop Q/DQ between Mul and Add", False),
        _x("RemoveQDQBetweenOps", "drop Q/DQ between given op-type pairs", None, []),
        _h("EnableDualQuantNodePairs", "both quantizers on precision-boundary tensors (QuantConfig.dual_quant_nodes)"),
        _x("DedicateDQNode", "one DequantizeLinear per consumer", False),
        # §2.4 calibration
        _h("CalibDataSize", "calibrate on at most this many samples (CalibrationOptions.data_size)"),
        _x("CalibTensorRangeSymmetric", "calibrator-side symmetric ranges"),
        _h("CalibMovingAverage", "average per-batch min/max (CalibrationOptions.moving_average)"),
        _x("CalibMovingAverageConstant", "moving-average constant", 0.01),
        _h("Percentile", "percentile of the Percentile method (TensorQuant.percentile)"),
        _h("NumBins", "histogram bins (CalibrationOptions.num_bins)"),
        _x("NumQuantizedBins", "Entropy quantized bins"),
        _x("Scenario", "Distribution scenario", "same"),
        _x("LWPMetric", "layer-wise percentile metric"),
        _x("PercentileCandidates", "layer-wise percentile candidates"),
        _x("LWPUseHistogram", "layer-wise percentile on histograms"),
        _x("MinMSEModePof2Scale", "power-of-two MinMSE mode"),
        _n("CalibOptimizeMem", "the reference tool caches activations on disk; our calibration streams (O(tensors x bins) memory)"),
        _n("CalibWorkerNum", "worker processes for the reference calibrator; ours is one streaming pass"),
        _x("SaveTensorHistFig", "save histogram figures", False),
        _h("UseRandomData", "calibrate on one random sample when no data is given (ModelQuantizer)"),
        _h("RandomDataReaderInputShape", "shapes of the random sample (ModelQuantizer)"),
        _h("RandomDataReaderInputDataRange", "value ranges of the random sample (ModelQuantizer)"),
        _h("WeightCalibrateMethod", "ExtendedCalibrationMethod.MinMSE: MSE weight ranges (QuantConfig.weight_minmse)"),
        _x("MinMSEModeFloatScale", "float-scale MinMSE candidate mode", None, "Percentile"),
        _h("TensorQuantOverrides", "per-tensor type/symmetry/axis (QuantConfig.tensor_overrides)"),
        _x("SaveAndRestore", "save and reuse calibrated ranges", None),
        _x("TensorsRangeFile", "save and reuse calibrated ranges (deprecated alias)", None),
        _x("QuantizationPreference", "accuracy/speed presets of options", None),
        # §2.5 symmetry, scale, types
        _h("ActivationSymmetric", "symmetric activation ranges (TensorQuant.symmetric)"),
        _h("WeightSymmetric", "symmetric weight ranges (TensorQuant.symmetric)"),
        _h("UsePowerOf2Scale", "False: power-of-two methods keep float scales (TensorQuant.scale_kind)"),
        _h("Int16Scale", "scales of the form M/2^N (TensorQuant.scale_kind='int16', MinMax ranges)"),
        _h("WeightScaled", "FP16/BF16/FP8 weights get a real scale (TensorQuant.scaled)"),
        _h("ActivationScaled", "FP16/BF16/FP8 activations get a real scale (TensorQuant.scaled)"),
        _n("QuantizeFP16", "quantize a pure FP16 model in FP16: fp16 models always are (docs/subgraphs.md)"),
        _x("UseFP32Scale", "FP16 scales -> FP32 + Cast", False),
        _x("UseUnsignedReLU", "QOperator unsigned ReLU", False),
        _x("MinimumRealRange", "onnxruntime minimum real range", None),
        _x("ActivationRestrictedAsymmetric", "onnxruntime restricted asymmetric activations", False),
        _x("QDQKeepRemovableActivations", "onnxruntime: keep removable activations", False),
        _x("QDQDisableWeightAdjustForInt32Bias", "onnxruntime: no weight adjustment for int32 bias", False),
        # §2.6 bias
        _h("QuantizeBias", "False: biases stay float (QuantConfig.bias=None)"),
        _h("Int32Bias", "int32 bias with scale = input x weight scale (QuantConfig.bias='int32'), else like a weight"),
        _x("Int16Bias", "int16 bias", False),
        _x("AdjustBiasScale", "False: keep a misaligned int32 bias scale", True),
        _x("AdjustWeightScaleForInt32Bias", "enlarge weight scales against int32 bias overflow", False),
        # §2.7 block formats
        _h("BFPAttributes", "attributes of BFP / Microexponents (TensorQuant.attrs of format 'bfp')"),
        _h("MXAttributes", "attributes of OCP Microscaling (TensorQuant.attrs of format 'mx')"),
        # §2.8 NPU / alignment
        _h("AlignConcat", "Concat inputs share the output's scale (QuantConfig.align_concat)"),
        _h("AlignSlice", "Slice outputs share the input's scale (QuantConfig.align_slice)"),
        _x("AlignPool", "pool outputs share the input's scale", False),
        _x("AlignPad", "Pad input shares the output's scale", False),
        _x("AlignTranspose", "Transpose input shares the output's scale", False),
        _x("AlignReshape", "Reshape input shares the output's scale", False),
        _h("AlignEltwiseQuantType", "eltwise constant inputs take the activation type (QuantConfig.align_eltwise_quant_type)"),
        _n("SimulateDPU", "only acts together with the Convert*ToDPUVersion keys, which are not implemented"),
        _x("ConvertLeakyReluToDPUVersion", _DPU, False),
        _x("ConvertSigmoidToHardSigmoid", "Sigmoid -> HardSigmoid", False),
        _x("ConvertHardSigmoidToDPUVersion", _DPU, False),
        _x("ConvertAvgPoolToDPUVersion", _DPU, False),
        _x("ConvertReduceMeanToDPUVersion", _DPU, False),
        _x("ConvertSoftmaxToDPUVersion", _DPU, False),
        _x("ConvertInstanceNormToDPUVersion", _DPU, False),
        _x("ConvertClipToDPUVersion", _DPU, False),
        _x("NPULimitationCheck", "False: skip the alignment pass", True),
        _n("MaxLoopNum", "bounds the reference tool's iterative NPU alignment loop; ours does not iterate"),
        _n("AdjustShiftCut", "NPU (enable_npu_cnn) shift adjustment; enable_npu_cnn is not implemented"),
        _n("AdjustShiftBias", "NPU shift adjustment (see AdjustShiftCut)"),
        _n("AdjustShiftRead", "NPU shift adjustment (see AdjustShiftCut)"),
        _n("AdjustShiftWrite", "NPU shift adjustment (see AdjustShiftCut)"),
        _n("AdjustShiftSwish", "NPU shift adjustment (see AdjustShiftCut)"),
        _n("AdjustHardSigmoid", "NPU shift adjustment (see AdjustShiftCut)"),
        _x("EnableNPUCnn", "the NPU-CNN (XINT8) quantizer", False),
        # §2.9 BF16 post-processing
        _h("BF16QDQToCast", "BF16 quantizers as Cast pairs (QuantConfig.bf16_qdq_to_cast; default False as in the reference)"),
        _x("EnableVaimlBF16", "VAIML BF16 layout", False),
        _h("BF16WithClip", "clip BF16 activations to the finite BF16 range (TensorQuant.saturate)"),
        _h("RefineBlockAxis", "BFP/MX block axis follows the reduction axis (QuantConfig.refine_block_axis)"),
        _h("BlockDotOperandsOnly", "onnxptq's own key, not the reference tool's: False quantizes every selected op's "
                                   "tensors under BFP/MX formats, as the reference tool does (QuantConfig."
                                   "int_block_dot_operands_only and fp_block_dot_operands_only; default True: "
                                   "dot-product operands only)"),
        # §2.10 mixed precision
        _h("MixedPrecisionTensor", "{type: [tensor names]} (QuantConfig.tensor_overrides)"),
        _h("SpecificTensorPrecision", "spelling of the field specific_tensor_precision"),
        _n("NodesWithMixedPrecision", "the reference tool's internal bookkeeping; we derive precision boundaries ourselves"),
        _h("AutoMixprecision", "layer-wise TargetOpType + TargetQuantType (QuantConfig.op_type_overrides); automatic keys not implemented"),
        # §2.11 LLM weight-only
        _h("UseMatMulNBits", "weight-only MatMulNBits blocks (onnxptq.quantize_weights, form='matmulnbits')"),
        _h("MatMulNBitsParams", "GroupSize/Symmetric/Bits/AccuracyLevel/Algorithm DEFAULT|GPTQ|HQQ of UseMatMulNBits"),
        _h("UseGPTQ", "weight-only GPTQ (onnxptq.quantize_weights, method='gptq'; GroupSize -1 becomes blocks of 128)"),
        _h("GPTQParams", "Bits/GroupSize/PercDamp/ActOrder/WeightSymmetric of UseGPTQ (MSE not implemented; BlockSize is speed only)"),
        # §2.12 algorithms
        _h("CLESteps", f"{_CLE} rounds, -1 until converged (EqualizationOptions.steps)"),
        _h("CLEBalanceMethod", f"{_CLE} balance: 'max' only, as in the method (EqualizationOptions.balance_method)"),
        _h("CLEWeightThreshold", f"{_CLE}: channels with smaller head+tail range are not scaled (EqualizationOptions.weight_threshold)"),
        _h("CLEScaleAppendBias", f"{_CLE}: the head bias counts in its channel range (EqualizationOptions.scale_append_bias)"),
        _h("CLEScaleUseThreshold", f"{_CLE}: apply CLEWeightThreshold (EqualizationOptions.scale_use_threshold)"),
        _h("CLETotalLayerDiffThreshold", f"{_CLE}: convergence bound of CLESteps -1 (EqualizationOptions.total_layer_diff_threshold)"),
        _h("SmoothAlpha", "SmoothQuant migration strength in [0, 1] (QuantConfig.smooth_alpha; default 0.5)"),
        _x("RMatrixDim", "QuaRot rotation"),
        _x("UseRandomHad", "QuaRot rotation"),
        _x("RConfigPath", "QuaRot rotation"),
        _h("BiasCorrection", "empirical bias correction of integer weights on the kept calibration samples (QuantConfig.bias_correction; absent: automatic, on where weights are per tensor)"),
        _x("FastFinetune", "fast finetuning (AdaRound / AdaQuant)"),
        # §2.13 runtime / debug
        _n("TmpDir", "root of the reference tool's temporary files; calibration runs in memory and outputs are written atomically beside the target"),
        _h("UserCustomOpLibPath", "custom-op libraries registered in every session (CalibrationOptions.custom_op_libraries); ours is dropped"),
        _n("EncryptionAlgorithm", "crypto mode: we keep everything in memory and write no intermediate files to encrypt"),
        _h("CryptoMode", "spelling of the field crypto_mode (ModelProto in, ModelProto out, nothing written)"),
        _h("DebugMode", "spelling of the field debug_mode (DEBUG logging during the call)"),
        _h("PrintSummary", "spelling of the field print_summary (op-type table logged at the end)"),
        _h("IgnoreWarnings", "spelling of the field ignore_warnings (UserWarning/ResourceWarning hidden during the call)"),
        _x("EvalMetrics", "float-vs-quantized metrics after quantization"),
        _x("EvalDataReader", "data for EvalMetrics", None),
        _x("FillAllValueInfo", "record every tensor shape in value_info", False),
        # onnxptq's own: the accuracy floor (algorithms/repair.py, docs/accuracy.md)
        _h("AccuracyFloorRepair", "keep the nodes that break the format family's accuracy floor float (QuantConfig.repair; default True)"),
        _h("AccuracyFloorStrict", "raise AccuracyError when the accuracy floor breaks, instead of repairing (QuantConfig.strict)"),
        _h("AccuracyFloorCosine", "the output-cosine floor, in place of the format family's default (QuantConfig.floor_cosine)"),
    ]
}

#: AutoMixprecision keys: 0.13's (§8.1) and the user documents' pre-0.13 spellings. Layer-wise keys
#: are honoured; automatic (sensitivity-driven) ones raise NotImplementedError.
AMP_LAYERWISE_KEYS = ("TargetOpType", "TargetQuantType", "ActTargetQuantType", "WeightTargetQuantType", "DualQuantNodes")
#: AMP keys without effect unless an automatic target is given (they only steer the sensitivity search).
AMP_SEARCH_ONLY_KEYS = ("OutputIndex", "MetricOutputIndex", "DataSize", "WorkerNum", "MetricDefault")
#: The user documents' automatic targets: with one of them the layers are searched (QuantConfig.auto_mixed_precision).
AMP_TARGET_KEYS = ("L2Target", "Top1AccTarget", "EvaluateFunction")
AMP_AUTOMATIC_KEYS = (
    "NumTarget", "TargetTensors", "TargetIndices", "ExcludeIndices",
    "AutoMixUseFastFT", "TargetLayerConfig", "IncludeLayers", "ExcludeLayers", "SubgraphJson", "MetricDistanceFn",
    "MetricEvaluateFn", "MetricThreshold", "MetricOptimizeObject", "SensitivityCacheFile",
)
#: AMP keys for features of the layer-wise path we have not built, with their inert values.
AMP_UNBUILT: dict[str, tuple[str, tuple[Any, ...]]] = {
    "NoInputQDQShared": ("skipping nodes with shared input Q/DQ", (False, True)),
    "SharedParamMode": ("shared scale handling", ("propagate",)),
    "BiasTargetQuantType": ("a bias type per op type", ()),
}
AMP_KEYS = AMP_LAYERWISE_KEYS + AMP_SEARCH_ONLY_KEYS + AMP_TARGET_KEYS + AMP_AUTOMATIC_KEYS + tuple(AMP_UNBUILT)
#: Op types the layer-wise AMP path targets when TargetOpType is absent.
AMP_DEFAULT_OP_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul")

#: FastFinetune keys (§7.1) with the legacy defaults; LearningRate depends on the algorithm.
FAST_FINETUNE_DEFAULTS: dict[str, Any] = {
    "OptimAlgorithm": "adaround",
    "NumIterations": 1000,
    "LearningRate": None,
    "BatchSize": 1,
    "NumBatches": 1,
    "DataSize": None,
    "FixedSeed": 1705472343,
    "OptimDevice": "cpu",
    "InferDevice": "cpu",
    "EarlyStop": False,
    "UpdateBias": True,
    "LRAdjust": (),
    "RegParam": 0.01,
    "BetaRange": (20, 2),
    "WarmStart": 0.2,
    "DropRatio": 1.0,
    "LogPeriod": None,
    "TargetOpType": ("Conv", "ConvTranspose", "InstanceNormalization", "LayerNormalization", "Gemm", "MatMul"),
    "OutputQDQ": False,
    "SelectiveUpdate": False,
    "OutputIndex": None,
    "RefModelPath": None,
    "MemOptLevel": 1,
    "Parallel": False,
    "DynamicBatch": False,
    "SelectMaxMemLayer": False,
    "NumWorkers": 1,
    "PinMemory": False,
    "UseGDS": False,
    "CacheDir": None,
}


#: (field, extra_options spelling) pairs that name the same setting.
FIELD_KEYS = {
    "optimize_model": "OptimizeModel",
    "execution_providers": "ExecutionProviders",
    "op_types_to_quantize": "OpTypesToQuantize",
    "nodes_to_quantize": "NodesToQuantize",
    "extra_op_types_to_quantize": "ExtraOpTypesToQuantize",
    "input_nodes": "InputNodes",
    "output_nodes": "OutputNodes",
    "specific_tensor_precision": "SpecificTensorPrecision",
    "convert_fp16_to_fp32": "ConvertFP16ToFP32",
    "convert_nchw_to_nhwc": "ConvertNCHWToNHWC",
    "enable_npu_cnn": "EnableNPUCnn",
    "debug_mode": "DebugMode",
    "crypto_mode": "CryptoMode",
    "print_summary": "PrintSummary",
    "ignore_warnings": "IgnoreWarnings",
}

#: Boolean fields that ask for an unbuilt feature when True.
UNBUILT_FIELDS = {
    "use_dynamic_quant": "dynamic quantization",
    "convert_nchw_to_nhwc": "NCHW -> NHWC conversion",
    "include_rotation": "QuaRot rotation",
    "enable_npu_cnn": "the NPU-CNN (XINT8, power-of-two DPU) quantizer",
    "enable_npu_transformer": "the NPU transformer quantizer",
}


def options_table() -> str:
    """The extra_options key table as fixed-width text: key, status, meaning."""
    width = max(len(k) for k in EXTRA_OPTIONS) + 2
    lines = [f"{'Key':<{width}}{'Status':<17}Meaning here / inert values", f"{'-' * (width - 2):<{width}}{'-' * 15:<17}{'-' * 40}"]
    for key in EXTRA_OPTIONS.values():
        note = key.meaning
        if key.status == "not implemented" and key.inert:
            note += f" (accepted: {', '.join(repr(v) for v in key.inert)})"
        lines.append(f"{key.name:<{width}}{key.status:<17}{note}")
    return "\n".join(lines)
