"""The Quark-compatible API: import paths, enums, presets, extra_options mapping, get_library_path.

Fast: the only quantizations run on the small synthetic CNN of conftest.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnxruntime.quantization import CalibrationDataReader as OrtReader
from onnxruntime.quantization import CalibrationMethod as OrtMethod
from onnxruntime.quantization import QuantFormat as OrtFormat
from onnxruntime.quantization import QuantType as OrtType

import onnxptq
from conftest import make_small_cnn, small_cnn_feeds
from onnxptq.compat import options as opts
from onnxptq.compat import (
    Config,
    ExtendedCalibrationMethod,
    ExtendedQuantFormat,
    ExtendedQuantType,
    Int16Method,
    LayerWiseMethod,
    ModelQuantizer,
    PowerOfTwoMethod,
    QuantizationConfig,
    RandomDataReader,
    VitisQuantFormat,
    VitisQuantType,
    get_default_config,
    get_library_path,
    to_quant_config,
)
from onnxptq.compat.defaults import ADAQUANT_PARAMS, ADAROUND_PARAMS
from onnxptq.config import presets
from onnxptq.config.schema import ConfigError, TensorQuant

#: The user documents live in ../shared beside the checkout (as on CI).
USER_DOCS = Path(__file__).resolve().parents[2] / "shared" / "spec" / "user-docs"
if not USER_DOCS.is_dir():  # the repository's own copy, when the shared folder is absent
    USER_DOCS = Path(__file__).resolve().parents[1] / "spec" / "user-docs"


def qc(**kw) -> QuantizationConfig:
    return QuantizationConfig(**kw)


def mapped(**kw):
    return to_quant_config(QuantizationConfig(**kw))


# ------------------------------------------------------------------------------------------------
# import paths


def _doc_import_lines() -> list[str]:
    """Every `from quark.onnx... import ...` statement of the user docs, joined across lines."""
    lines: list[str] = []
    for doc in sorted(USER_DOCS.glob("*.rst")):
        text = doc.read_text(encoding="utf-8", errors="replace")
        for match in re.finditer(r"^\s*(from quark\.onnx[\w.]* import [^\n]+|import quark\.onnx[\w.]*)", text, re.M):
            lines.append(match.group(1).strip())
    return lines


@pytest.mark.skipif(not USER_DOCS.is_dir(), reason="user documents not available")
def test_every_user_doc_import_works_with_onnxptq():
    lines = _doc_import_lines()
    assert len(lines) >= 10, "the user documents import from quark.onnx in many places"
    for line in set(lines):
        code = line.replace("quark.onnx", "onnxptq")
        namespace: dict = {}
        exec(code, namespace)  # noqa: S102 - fixed import statements from our spec documents
        assert all(v is not None for k, v in namespace.items() if k != "__builtins__"), code


def test_import_points_are_the_same_objects():
    from onnxptq.quantization.api import ModelQuantizer as MQ
    from onnxptq.quantization.config import Config as C1
    from onnxptq.quantization.config import QuantizationConfig as Q1
    from onnxptq.quantization.config import get_default_config as g
    from onnxptq.quantization.config.config import Config as C2
    from onnxptq.quantization.config.config import QuantizationConfig as Q2

    assert C1 is C2 is Config is onnxptq.Config
    assert Q1 is Q2 is QuantizationConfig is onnxptq.QuantizationConfig
    assert MQ is ModelQuantizer is onnxptq.ModelQuantizer
    assert g is get_default_config
    # Re-exported from onnxruntime, not copies: user code mixes both import paths.
    assert onnxptq.CalibrationMethod is OrtMethod
    assert onnxptq.QuantType is OrtType
    assert onnxptq.QuantFormat is OrtFormat
    assert onnxptq.CalibrationDataReader is OrtReader
    assert onnxptq.get_library_path is get_library_path


# ------------------------------------------------------------------------------------------------
# enums


def test_extended_quant_type_members_values_and_tensor_types():
    expected = {"QInt8": 1, "QUInt8": 2, "QInt16": 3, "QUInt16": 4, "QInt32": 5, "QUInt32": 6, "QFloat16": 7,
                "QBFloat16": 8, "QBFP": 9, "QMX": 10}
    assert {m.name: m.value for m in ExtendedQuantType} == expected
    tp = onnx.TensorProto
    assert ExtendedQuantType.QInt16.tensor_type == tp.INT16
    assert ExtendedQuantType.QBFloat16.tensor_type == tp.BFLOAT16
    assert ExtendedQuantType.QBFP.tensor_type == tp.UNDEFINED and ExtendedQuantType.QMX.tensor_type == tp.UNDEFINED
    assert ExtendedQuantType.from_string("QUInt16") is ExtendedQuantType.QUInt16
    with pytest.raises(ValueError, match="QBFloat16"):
        ExtendedQuantType.from_string("QBFlaot16")


def test_qbloat16_is_an_alias_not_a_new_member():
    assert ExtendedQuantType.QBloat16 is ExtendedQuantType.QBFloat16
    assert len(list(ExtendedQuantType)) == 10
    assert ExtendedQuantType.from_string("QBloat16") is ExtendedQuantType.QBFloat16


def test_other_enums():
    assert ExtendedQuantFormat.QDQ.value == 1 and ExtendedQuantFormat.QDQ is not OrtFormat.QDQ
    assert {m.name: m.value for m in VitisQuantFormat} == {"QDQ": 2, "FixNeuron": 3, "BFPFixNeuron": 4, "MXFixNeuron": 5}
    assert [m.name for m in VitisQuantType] == [m.name for m in ExtendedQuantType]
    assert PowerOfTwoMethod.NonOverflow.value == 0 and PowerOfTwoMethod.MinMSE.value == 1
    assert Int16Method.MinMax.value == 0 and LayerWiseMethod.LayerWisePercentile.value == 0
    assert ExtendedCalibrationMethod.MinMSE.value == 0


@pytest.mark.parametrize(
    "value, fmt",
    [
        (OrtType.QInt8, "int8"), (ExtendedQuantType.QInt8, "int8"), (OrtType.QUInt16, "uint16"),
        (ExtendedQuantType.QInt32, "int32"), (OrtType.QInt4, "int4"), (OrtType.QFLOAT8E4M3FN, "fp8_e4m3"),
        (ExtendedQuantType.QFloat16, "fp16"), (ExtendedQuantType.QBloat16, "bf16"), (ExtendedQuantType.QBFP, "bfp"),
        (ExtendedQuantType.QMX, "mx"), (VitisQuantType.QInt16, "int16"), ("QInt16", "int16"), ("qbfloat16", "bf16"),
        ("bf16", "bf16"), ("fp8_e5m2", "fp8_e5m2"),
    ],
)
def test_types_in_every_spelling(value, fmt):
    got = mapped(activation_type=value, weight_type=ExtendedQuantType.QInt8,
                 extra_options={"ActivationSymmetric": True}).activation
    assert got.format == fmt


def test_unknown_type_string_suggests():
    with pytest.raises(ValueError, match="QBFloat16"):
        mapped(activation_type="QBFloat61")


def test_vitis_formats_force_block_types():
    cfg = mapped(quant_format=VitisQuantFormat.BFPFixNeuron)
    assert cfg.activation.format == "bfp" and cfg.weight.format == "bfp"
    assert mapped(quant_format=VitisQuantFormat.MXFixNeuron).weight.format == "mx"


# ------------------------------------------------------------------------------------------------
# presets


@pytest.mark.parametrize("name", presets.preset_names())
def test_every_preset_agrees_with_our_presets(name):
    cfg = get_default_config(name)
    assert isinstance(cfg, QuantizationConfig)
    base, finetune = presets.split_finetune(name)
    if finetune is None:
        assert to_quant_config(cfg) == presets.get_preset(name)
    else:
        assert cfg.include_fast_ft
        assert cfg.extra_options["FastFinetune"] == (ADAROUND_PARAMS if finetune == "adaround" else ADAQUANT_PARAMS)
        mapped_cfg = to_quant_config(cfg)
        assert mapped_cfg == presets.get_preset(name)
        assert mapped_cfg.finetune is not None and mapped_cfg.finetune.algorithm == finetune
        cfg.include_fast_ft = False
        del cfg.extra_options["FastFinetune"]
        assert to_quant_config(cfg) == presets.get_preset(base)


def test_issue_preset_list_is_covered():
    required = ["A8W8", "A16W8", "U8S8", "S8S8", "BF16", "BFP16", "MX9", "MXINT8", "MXFP8_E4M3", "MXFP8_E5M2",
                "MXFP6_E3M2", "MXFP6_E2M3", "MXFP4", "BF16_MIXED_BFP16", "A8W8_ADAROUND", "A8W8_ADAQUANT",
                "A16W8_ADAROUND", "A16W8_ADAQUANT", "BF16_ADAQUANT", "MXFP8E4M3", "MXFP4E2M1", "BF16_MIXED_MXINT8",
                "BF16_MXINT8"]
    for name in required:
        get_default_config(name)
    assert to_quant_config(get_default_config("MXFP4E2M1")) == to_quant_config(get_default_config("MXFP4"))


def test_a8w8_describes_our_preset_not_the_reference_one():
    cfg = get_default_config("A8W8")
    assert cfg.per_channel is True
    assert cfg.calibrate_method is OrtMethod.Percentile
    # Asymmetric int8 activations: symmetric ones lose PP-OCR cls (0.88 vs float 0.96).
    assert cfg.extra_options["ActivationSymmetric"] is False
    mapped_cfg = to_quant_config(cfg)
    assert mapped_cfg.weight.per_channel and mapped_cfg.activation.calibration == "percentile"
    # A mismatch anywhere is caught by the equality test: prove it can fail.
    cfg.per_channel = False
    assert to_quant_config(cfg) != presets.get_preset("A8W8")


def test_get_default_config_returns_independent_copies():
    a = get_default_config("BF16_MIXED_BFP16")
    a.extra_options["AutoMixprecision"]["TargetOpType"].append("Add")
    a.extra_options["BFPAttributes"]["block_size"] = 32
    b = get_default_config("BF16_MIXED_BFP16")
    assert b.extra_options["AutoMixprecision"]["TargetOpType"] == ["Conv", "ConvTranspose", "Gemm", "MatMul"]
    assert b.extra_options["BFPAttributes"]["block_size"] == 8


def test_unknown_preset_suggests_and_reference_only_preset_is_not_implemented():
    with pytest.raises(ValueError, match="A8W8"):
        get_default_config("A8W9")
    with pytest.raises(NotImplementedError, match="XINT8"):
        get_default_config("XINT8")
    with pytest.raises(NotImplementedError, match="MATMUL_NBITS"):
        get_default_config("MATMUL_NBITS")


# ------------------------------------------------------------------------------------------------
# QuantizationConfig fields


def test_quantization_config_defaults():
    cfg = QuantizationConfig()
    assert cfg.calibrate_method is OrtMethod.MinMax and cfg.quant_format is OrtFormat.QDQ
    assert cfg.activation_type is OrtType.QInt8 and cfg.weight_type is OrtType.QInt8
    assert cfg.execution_providers == ["CPUExecutionProvider"] and cfg.extra_options == {}
    assert cfg.include_cle is None, "ours is automatic (CLE where weights are per tensor), not the reference's always-on"
    assert QuantizationConfig().extra_options is not cfg.extra_options


def test_default_config_maps_like_onnxruntime_defaults():
    got = to_quant_config(QuantizationConfig())
    assert got.activation == TensorQuant("int8", symmetric=False, calibration="minmax")
    assert got.weight == TensorQuant("int8", symmetric=True)
    assert got.bias == "int32" and got.force_quantize_no_input_check is False
    assert got.op_types is None and got.calibration.providers == ("CPUExecutionProvider",)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("include_rotation", True, "include_rotation"),
        ("use_dynamic_quant", True, "use_dynamic_quant"),
        ("enable_npu_cnn", True, "enable_npu_cnn"),
        ("enable_npu_transformer", True, "enable_npu_transformer"),
        ("convert_nchw_to_nhwc", True, "convert_nchw_to_nhwc"),
        ("input_nodes", ["conv1"], "input_nodes"),
        ("subgraphs_to_exclude", [(["a"], ["b"])], "subgraphs_to_exclude"),
        ("quant_format", OrtFormat.QOperator, "QOperator"),
    ],
)
def test_unbuilt_fields_raise_not_implemented(field, value, match):
    with pytest.raises(NotImplementedError, match=match):
        mapped(**{field: value})


def test_calibration_methods_and_scale_kinds():
    assert mapped(calibrate_method=OrtMethod.Entropy).activation.calibration == "entropy"
    pow2 = mapped(calibrate_method=PowerOfTwoMethod.MinMSE)
    assert pow2.activation.scale_kind == "pow2" and pow2.weight.scale_kind == "pow2" and pow2.weight_minmse
    nov = mapped(calibrate_method=PowerOfTwoMethod.NonOverflow, extra_options={"UsePowerOf2Scale": False})
    assert nov.activation.calibration == "nonoverflow" and nov.activation.scale_kind == "float"
    i16 = mapped(calibrate_method=OrtMethod.Percentile, extra_options={"Int16Scale": True})
    assert (i16.activation.calibration, i16.activation.scale_kind) == ("minmax", "int16")
    assert mapped(extra_options={"WeightCalibrateMethod": ExtendedCalibrationMethod.MinMSE}).weight_minmse
    with pytest.raises(ValueError, match="WeightCalibrateMethod"):
        mapped(calibrate_method=ExtendedCalibrationMethod.MinMSE)
    assert mapped(calibrate_method="percentile").activation.calibration == "percentile"


def test_field_and_key_spellings_must_agree():
    assert mapped(extra_options={"OpTypesToQuantize": ["Conv"]}).op_types == ("Conv",)
    assert mapped(op_types_to_quantize=["Conv"], extra_options={"OpTypesToQuantize": ["Conv"]}).op_types == ("Conv",)
    with pytest.raises(ValueError, match="OpTypesToQuantize"):
        mapped(op_types_to_quantize=["Conv"], extra_options={"OpTypesToQuantize": ["Gemm"]})
    assert mapped(extra_options={"OptimizeModel": False}).optimize is False


# ------------------------------------------------------------------------------------------------
# extra_options


def test_every_key_is_classified_and_listed_in_the_docstring():
    for key, spec in opts.EXTRA_OPTIONS.items():
        assert spec.status in ("honoured", "no-op", "not implemented")
        assert re.search(rf"^{key}\s+{spec.status}", opts.__doc__, re.M), key


def test_unknown_key_suggests_the_nearest():
    with pytest.raises(ValueError, match="ActivationSymmetric"):
        mapped(extra_options={"ActivationSymetric": True})
    with pytest.raises(ValueError, match="BF16QDQToCast"):
        mapped(extra_options={"BF16QdqToCast": True})


#: FastFinetune has its own test: its dict is checked (ValueError) before the feature is refused.
_NOT_BUILT = [k for k, s in opts.EXTRA_OPTIONS.items() if s.status == "not implemented" and k != "FastFinetune"]


@pytest.mark.parametrize("key", _NOT_BUILT)
def test_unbuilt_keys_raise_naming_the_key_unless_inert(key):
    with pytest.raises(NotImplementedError, match=re.escape(repr(key))):
        mapped(extra_options={key: "some value"})
    for value in opts.EXTRA_OPTIONS[key].inert:
        mapped(extra_options={key: value})


def test_smooth_quant_keys_map_to_the_config():
    assert mapped().smooth_quant is None  # automatic, like include_cle
    got = mapped(include_sq=True, extra_options={"SmoothAlpha": 0.8})
    assert got.smooth_quant is True and got.smooth_alpha == 0.8
    assert mapped(include_sq=False).smooth_quant is False
    with pytest.raises(ConfigError, match="SmoothAlpha"):
        mapped(include_sq=True, extra_options={"SmoothAlpha": 1.5})


@pytest.mark.parametrize("key", [k for k, s in opts.EXTRA_OPTIONS.items() if s.status == "no-op"])
def test_no_op_keys_are_accepted(key):
    assert mapped(extra_options={key: 3}) == mapped()


def test_own_library_is_dropped_and_others_are_registered(tmp_path):
    assert mapped(extra_options={"UserCustomOpLibPath": get_library_path("CPU")}).calibration.custom_op_libraries == ()
    other = str(tmp_path / "libother.so")
    assert mapped(extra_options={"UserCustomOpLibPath": other}).calibration.custom_op_libraries == (other,)


def test_bool_keys_reject_other_types():
    with pytest.raises(ValueError, match="AlignConcat"):
        mapped(extra_options={"AlignConcat": "yes"})


def test_honoured_keys_map_onto_quant_config():
    got = mapped(
        per_channel=True,
        extra_options={
            "ActivationSymmetric": True, "WeightSymmetric": False, "AlignConcat": True, "AlignSlice": True,
            "AlignEltwiseQuantType": True, "FoldRelu": True, "QuantizeAllOpTypes": True,
            "ForceQuantizeNoInputCheck": True, "CalibDataSize": 5, "NumBins": 512,
            "CalibMovingAverage": True, "Percentile": 99.9, "ConvertOpsetVersion": 17, "RefineBlockAxis": False,
            "ExecutionProviders": ["CPUExecutionProvider"],
        },
        calibrate_method=OrtMethod.Percentile,
    )
    assert got.activation == TensorQuant("int8", symmetric=True, calibration="percentile", percentile=99.9)
    assert got.weight == TensorQuant("int8", symmetric=False, per_channel=True)
    assert got.align_concat and got.align_slice and got.align_eltwise_quant_type and got.fold_relu
    assert got.quantize_all_op_types and got.force_quantize_no_input_check
    with pytest.raises(NotImplementedError, match="DedicatedQDQPair"):  # accepted and never read before issue 18
        mapped(extra_options={"DedicatedQDQPair": True})
    assert (got.calibration.data_size, got.calibration.num_bins, got.calibration.moving_average) == (5, 512, True)
    assert got.opset == 17 and got.refine_block_axis is False


def test_bias_options():
    assert mapped().bias == "int32"
    assert mapped(extra_options={"Int32Bias": False}).bias == "weight"
    assert mapped(extra_options={"QuantizeBias": False}).bias is None
    assert mapped(activation_type=ExtendedQuantType.QBFloat16, weight_type=ExtendedQuantType.QBFloat16).bias == "weight"
    # int32 bias needs integer activations: forced off for BFP activations, as the reference tool does.
    assert mapped(activation_type=ExtendedQuantType.QBFP, extra_options={"Int32Bias": True}).bias == "weight"


def test_weights_only_and_preprocess_keys():
    assert mapped(extra_options={"WeightsOnly": True}).activation is None
    assert mapped(extra_options={"SkipPreprocess": True}).optimize is False
    assert mapped(extra_options={"SimplifyModel": False}).optimize is False
    assert mapped(optimize_model=False).fold_batchnorm is False
    assert mapped(optimize_model=False, extra_options={"FoldBatchNorm": True}).fold_batchnorm is True


def test_fusion_keys_drive_one_switch():
    assert mapped().fuse_activations is True
    off = {k: False for k in ("RemoveQDQConvRelu", "RemoveQDQConvClip", "RemoveQDQConvLeakyRelu", "RemoveQDQConvPRelu")}
    assert mapped(extra_options=off).fuse_activations is False
    with pytest.raises(NotImplementedError, match="RemoveQDQConvClip"):
        mapped(extra_options={"RemoveQDQConvClip": False})


def test_weight_storage_key():
    default = mapped()
    assert default.fold_weights and default.store_int_weights
    runtime = mapped(extra_options={"AddQDQPairToWeight": True})
    assert not runtime.fold_weights and not runtime.store_int_weights


def test_bf16_options_follow_the_reference_defaults():
    bf16 = {"activation_type": ExtendedQuantType.QBFloat16, "weight_type": ExtendedQuantType.QBFloat16}
    assert mapped(**bf16).bf16_qdq_to_cast is False, "absent BF16QDQToCast means Q/DQ form, as in the reference tool"
    assert mapped(**bf16, extra_options={"BF16QDQToCast": True}).bf16_qdq_to_cast is True
    scaled = mapped(**bf16, extra_options={"WeightScaled": True, "ActivationScaled": True, "BF16WithClip": True})
    assert scaled.activation == TensorQuant("bf16", scaled=True, saturate=True)
    assert scaled.weight == TensorQuant("bf16", scaled=True)


def test_options_without_effect_are_reported(caplog):
    with caplog.at_level(logging.WARNING, logger="onnxptq.compat"):
        mapped(extra_options={"BFPAttributes": {"block_size": 16}})
    assert "BFPAttributes has no effect" in caplog.text


def test_block_attributes():
    mx9 = mapped(activation_type=ExtendedQuantType.QBFP, weight_type=ExtendedQuantType.QBFP,
                 extra_options={"BFPAttributes": {"bfp_method": "to_bfp_prime", "bit_width": 16, "block_size": 16}})
    assert mx9.activation.attr_dict["bfp_method"] == "to_bfp_prime" and mx9.weight.attr_dict["block_size"] == 16
    assert mx9.activation.attr_dict["rounding_mode"] == 0, "BFPAttributes without rounding_mode: the op default 0"
    mx = mapped(activation_type=ExtendedQuantType.QMX, weight_type=ExtendedQuantType.QMX,
                extra_options={"MXAttributes": {"element_dtype": "fp8_e4m3"}})
    assert mx.weight.attr_dict["element_dtype"] == "fp8_e4m3"
    with pytest.raises(ValueError, match="block_size"):
        mapped(activation_type=ExtendedQuantType.QBFP, extra_options={"BFPAttributes": {"block_sise": 8}})
    with pytest.raises(ValueError, match="element_dtype"):
        mapped(activation_type=ExtendedQuantType.QMX, extra_options={"MXAttributes": {"element_dtype": "int9"}})


# mixed precision (the mixed-precision user document's configurations)


def _doc_layerwise(target, **amp):
    return mapped(
        calibrate_method=OrtMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ,
        activation_type=ExtendedQuantType.QBloat16, weight_type=ExtendedQuantType.QBloat16, include_auto_mp=True,
        extra_options={"AutoMixprecision": {"TargetOpType": ["Conv", "ConvTranspose", "Gemm", "MatMul"],
                                            "TargetQuantType": target, **amp}},
    )


def test_layer_wise_mixed_precision_maps_to_op_type_overrides():
    got = _doc_layerwise(ExtendedQuantType.QBFP)
    assert set(got.op_type_overrides) == {"Conv", "ConvTranspose", "Gemm", "MatMul"}
    act, weight = got.op_type_overrides["Conv"]
    assert act.format == "bfp" and weight.format == "bfp"
    assert got.activation.format == "bf16"
    assert _doc_layerwise(ExtendedQuantType.QMX).op_type_overrides["Gemm"][1].format == "mx"
    assert _doc_layerwise(ExtendedQuantType.QBFP, DualQuantNodes=True).dual_quant_nodes is True


def test_layer_wise_role_specific_types():
    got = mapped(activation_type=ExtendedQuantType.QInt16, include_auto_mp=True,
                 extra_options={"AutoMixprecision": {"TargetOpType": {"Conv"}, "WeightTargetQuantType": "QInt16"}})
    act, weight = got.op_type_overrides["Conv"]
    assert act.format == "int16" and weight.format == "int16"


def test_automatic_mixed_precision_maps_to_search_options():
    got = mapped(activation_type=ExtendedQuantType.QInt16, include_auto_mp=True,
                 extra_options={"AutoMixprecision": {"TargetOpType": ["Conv"], "ActTargetQuantType": OrtType.QInt8,
                                                     "WeightTargetQuantType": OrtType.QInt8, "OutputIndex": 0,
                                                     "L2Target": 0.1}})
    amp = got.auto_mixed_precision
    assert got.op_type_overrides == {} and amp.l2_target == 0.1 and amp.op_types == ("Conv",)
    assert amp.activation.format == "int8" and amp.weight.format == "int8" and got.activation.format == "int16"
    with pytest.raises(ValueError, match="evaluation function"):
        mapped(include_auto_mp=True, extra_options={"AutoMixprecision": {"TargetQuantType": OrtType.QInt8,
                                                                         "Top1AccTarget": 0.01}})
    top1 = mapped(include_auto_mp=True, extra_options={"AutoMixprecision": {"TargetQuantType": OrtType.QInt8,
                                                                            "Top1AccTarget": 0.01, "EvaluateFunction": len}})
    assert top1.auto_mixed_precision.top1_target == 0.01


def test_mixed_precision_errors():
    with pytest.raises(ValueError, match="TargetOpType"):
        mapped(include_auto_mp=True, extra_options={"AutoMixprecision": {"TargetOpTypes": ["Conv"]}})
    with pytest.raises(ValueError, match="TargetQuantType"):
        mapped(include_auto_mp=True, extra_options={"AutoMixprecision": {"TargetOpType": ["Conv"]}})
    with pytest.raises(ValueError, match="AutoMixprecision"):
        mapped(include_auto_mp=True)


def test_tensor_wise_mixed_precision_maps_to_tensor_overrides():
    got = mapped(
        activation_type=ExtendedQuantType.QBFP, weight_type=ExtendedQuantType.QBFP, specific_tensor_precision=True,
        extra_options={"MixedPrecisionTensor": {ExtendedQuantType.QBFloat16: ["w1", "a1"],
                                                ExtendedQuantType.QInt16: ["w2", "a2"]}},
    )
    assert {k: v.format for k, v in got.tensor_overrides.items()} == {"w1": "bf16", "a1": "bf16", "w2": "int16", "a2": "int16"}
    assert got.tensor_overrides["a2"].symmetric, "ActivationSymmetric defaults True under a BFP activation type"
    with pytest.raises(ValueError, match="twice"):
        mapped(specific_tensor_precision=True, extra_options={"MixedPrecisionTensor": {"QInt16": ["t", "t"]}})


def test_tensor_quant_overrides():
    got = mapped(extra_options={"TensorQuantOverrides": {"W1": [{"quant_type": OrtType.QInt16, "axis": 0, "symmetric": True}]}})
    assert got.tensor_overrides["W1"] == TensorQuant("int16", symmetric=True, per_channel=True, axis=0)
    with pytest.raises(NotImplementedError, match="scale"):
        mapped(extra_options={"TensorQuantOverrides": {"W1": [{"quant_type": OrtType.QInt8, "scale": 0.1}]}})
    with pytest.raises(ValueError, match="reduce_range"):
        mapped(extra_options={"TensorQuantOverrides": {"W1": [{"quant_type": OrtType.QInt8, "reduce_rang": True}]}})
    with pytest.raises(ValueError, match="integer"):
        mapped(extra_options={"TensorQuantOverrides": {"W1": [{"quant_type": ExtendedQuantType.QBFloat16, "axis": 0}]}})


def test_fast_finetune_is_checked_then_refused():
    with pytest.raises(ValueError, match="NumIterations"):
        mapped(include_fast_ft=True, extra_options={"FastFinetune": {"NumIteration": 10}})
    with pytest.raises(ValueError, match="OptimAlgorithm"):
        mapped(include_fast_ft=True, extra_options={"FastFinetune": {"OptimAlgorithm": "adamax"}})
    assert mapped(include_fast_ft=True, extra_options={"FastFinetune": {"OptimAlgorithm": "AdaQuant"}}).finetune.algorithm == "adaquant"
    # The BF16 document's example gives FastFinetune without include_fast_ft: its intent is finetuning.
    assert mapped(extra_options={"FastFinetune": {"NumIterations": 1000}}).finetune.num_iterations == 1000
    settings = opts.fast_finetune_settings({"OptimAlgorithm": "adaquant"})
    assert settings["LearningRate"] == 1e-5 and settings["NumIterations"] == 1000


# ------------------------------------------------------------------------------------------------
# get_library_path


def test_get_library_path_runs_the_documents_inference_snippet(tmp_path):
    model = make_small_cnn()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    feed = small_cnn_feeds(1)[0]
    plain = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    for device in ("CPU", "cpu", "CUDA", "ROCM"):
        sess_options = onnxruntime.SessionOptions()
        sess_options.register_custom_ops_library(get_library_path(device))
        session = onnxruntime.InferenceSession(str(path), sess_options, providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(session.run(None, feed)[0], plain)
    assert get_library_path() == get_library_path("CPU")
    with pytest.raises(ValueError, match="device"):
        get_library_path("TPU")


# ------------------------------------------------------------------------------------------------
# ModelQuantizer


def _reader(n: int = 4):
    class Reader(OrtReader):
        def __init__(self):
            self.it = iter(small_cnn_feeds(n))

        def get_next(self):
            return next(self.it, None)

    return Reader()


def test_model_quantizer_argument_errors(tmp_path, small_cnn_path):
    with pytest.raises(ValueError, match="Config"):
        ModelQuantizer(QuantizationConfig())
    quantizer = ModelQuantizer(Config(global_quant_config=get_default_config("A8W8")))
    with pytest.raises(FileNotFoundError, match="missing.onnx"):
        quantizer.quantize_model(str(tmp_path / "missing.onnx"), None, _reader())
    with pytest.raises(ValueError, match="calibration_data_reader"):
        quantizer.quantize_model(small_cnn_path)
    with pytest.raises(FileNotFoundError, match="calibration_data_path"):
        quantizer.quantize_model(small_cnn_path, calibration_data_path=tmp_path / "nodata")
    with pytest.raises(NotImplementedError, match="algorithms"):
        quantizer.quantize_model(small_cnn_path, None, _reader(), algorithms=[object()])
    with pytest.raises(ValueError, match="unknown extra_options key"):
        ModelQuantizer(Config(global_quant_config=QuantizationConfig(extra_options={"AlignConcatt": True})))
    crypto = ModelQuantizer(Config(global_quant_config=QuantizationConfig(crypto_mode=True)))
    with pytest.raises(ValueError, match="crypto_mode"):
        crypto.quantize_model(small_cnn_path, None, _reader())
    assert not list(tmp_path.glob("*.onnx.*")), "nothing written on failure"


def test_finetune_preset_runs_through_the_compatible_api(small_cnn_path):
    pytest.importorskip("torch", reason="finetuning needs torch (pip install onnxptq[finetune])")
    cfg = get_default_config("A8W8_ADAROUND")
    cfg.extra_options["FastFinetune"]["NumIterations"] = 5
    model = ModelQuantizer(Config(global_quant_config=cfg)).quantize_model(small_cnn_path, None, _reader())
    assert isinstance(model, onnx.ModelProto)
    onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_model_quantizer_returns_or_saves(tmp_path, small_cnn_path):
    quantizer = ModelQuantizer(Config(global_quant_config=get_default_config("A8W8")))
    model = quantizer.quantize_model(small_cnn_path, None, _reader())
    assert isinstance(model, onnx.ModelProto)
    out = tmp_path / "q.onnx"
    assert quantizer.quantize_model(str(small_cnn_path), str(out), _reader()) is None
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.run(None, small_cnn_feeds(1)[0])[0].shape == (1, 10)


def test_model_quantizer_random_data_and_external_data(tmp_path, small_cnn, monkeypatch):
    from onnxptq.graph import io

    calls = []
    save = io.save_model
    monkeypatch.setattr(io, "save_model", lambda model, path, **kw: calls.append(kw) or save(model, path, **kw))
    cfg = QuantizationConfig(
        use_external_data_format=True,
        extra_options={"UseRandomData": True, "RandomDataReaderInputShape": {"x": [2, 3, 16, 16]}},
    )
    out = tmp_path / "q.onnx"
    assert ModelQuantizer(Config(cfg)).quantize_model(small_cnn, out) is None
    assert calls == [{"external_data": True}]
    onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])


def test_random_data_reader_recipe(small_cnn):
    reader = RandomDataReader(small_cnn)
    feed = reader.get_next()
    assert feed["x"].shape == (1, 3, 16, 16) and feed["x"].dtype == np.float32
    assert 0.0 <= feed["x"].min() and feed["x"].max() < 1.0
    assert reader.get_next() is None
    reader.rewind()
    np.testing.assert_array_equal(reader.get_next()["x"], feed["x"])
    ranged = RandomDataReader(small_cnn, input_data_range={"x": [5, 6]}).get_next()["x"]
    assert 5.0 <= ranged.min() and ranged.max() <= 6.0
    with pytest.raises(ValueError, match="no input 'X'"):
        RandomDataReader(small_cnn, input_shape={"X": [1, 3, 16, 16]})


# ------------------------------------------------------------------------------------------------
# cross-layer equalization and bias correction (issue 15)


def test_cle_keys_map_onto_equalization_options():
    from onnxptq.config.schema import EqualizationOptions

    got = mapped(include_cle=True, extra_options={"CLESteps": -1, "CLEBalanceMethod": "max", "CLEWeightThreshold": 0.1,
                                                  "CLEScaleAppendBias": False, "CLEScaleUseThreshold": False,
                                                  "CLETotalLayerDiffThreshold": 1e-6, "BiasCorrection": True})
    assert got.equalize is True and got.bias_correction is True
    assert got.equalization == EqualizationOptions(steps=-1, weight_threshold=0.1, scale_append_bias=False,
                                                   scale_use_threshold=False, total_layer_diff_threshold=1e-6)
    # absent keys: the reference tool's defaults, except include_cle and BiasCorrection: automatic
    plain = mapped()
    assert plain.equalize is None and plain.equalization == EqualizationOptions() and plain.bias_correction is None
    assert mapped(per_channel=False).bias_correction_active() and not mapped(per_channel=True).bias_correction_active()
    assert mapped(per_channel=False, extra_options={"BiasCorrection": False}).bias_correction_active() is False
    assert mapped(include_cle=False).equalize is False


def test_cle_automatic_default_follows_weight_granularity():
    assert mapped(per_channel=False).equalization_active()
    assert not mapped(per_channel=True).equalization_active()
    assert not mapped(per_channel=False, include_cle=False).equalization_active()
    assert mapped(per_channel=True, include_cle=True).equalization_active()
    assert not to_quant_config(get_default_config("BF16")).equalization_active(), "float weights: nothing to equalize"


@pytest.mark.parametrize("extra, match", [
    ({"CLEBalanceMethod": "mean"}, "balance method"),
    ({"CLESteps": 0}, "steps"),
    ({"CLESteps": 1.5}, "CLESteps"),
    ({"CLEScaleAppendBias": "yes"}, "bool"),
    ({"BiasCorrection": 1}, "BiasCorrection"),
])
def test_bad_cle_values_raise(extra, match):
    with pytest.raises(ValueError, match=match):
        mapped(extra_options=extra)
