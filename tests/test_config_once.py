"""The config is resolved once per quantize, frozen, and its names are checked in one place.

``onnxptq.quantize`` turns a preset name into a :class:`QuantConfig` once; the pipeline stages
after it take that object only (a preset name there is a TypeError naming the fix), so one run
walks ``config/presets.py`` once and every stage reads the same config. The option classes are
frozen: a change is a new object (``dataclasses.replace`` / ``QuantConfig.replace``), checked as
it is built. Every "name not in the model" (node, tensor, op type, regex) is one error class.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import onnxptq
from onnxptq.config import presets
from onnxptq.config.schema import AutoMixedPrecisionOptions, CalibrationOptions, FinetuneOptions, QuantConfig, TensorQuant
from onnxptq.errors import UnknownNameError, UsageError
from onnxptq.pipeline.calibrate import calibrate_once
from onnxptq.pipeline.complete import complete

from conftest import small_cnn_feeds

PIPELINE = Path(onnxptq.__file__).parent / "pipeline"


def test_no_resolution_inside_the_pipeline() -> None:
    hits = [str(p.relative_to(PIPELINE)) for p in PIPELINE.rglob("*.py") if "resolve_config(" in p.read_text(encoding="utf-8")]
    assert not hits, hits


def test_a_quantize_resolves_the_preset_once(small_cnn, monkeypatch) -> None:
    calls: list[str] = []
    real = presets.get_preset

    def counting(name: str) -> QuantConfig:
        calls.append(name)
        return real(name)

    monkeypatch.setattr(presets, "get_preset", counting)
    result = onnxptq.quantize(small_cnn, "A8W8", small_cnn_feeds(3), eval_samples=1)
    assert calls == ["A8W8"] and result.plan.tensors


def test_pipeline_stages_take_the_resolved_config_only(small_cnn) -> None:
    with pytest.raises(TypeError, match=r"calibrate_once takes a QuantConfig, not str; for a preset name use onnxptq.get_preset\('A8W8'\)"):
        calibrate_once(small_cnn, "A8W8", small_cnn_feeds(2))
    calibrated = calibrate_once(small_cnn, onnxptq.get_preset("A8W8"), small_cnn_feeds(2), eval_samples=1)
    with pytest.raises(TypeError, match="complete takes a QuantConfig"):
        complete(calibrated, "A8W8")


@pytest.mark.parametrize("options, field", [
    (onnxptq.get_preset("A8W8"), "bias"),
    (CalibrationOptions(), "data_size"),
    (FinetuneOptions(), "num_iterations"),
    (AutoMixedPrecisionOptions(activation=None, weight=None, l2_target=0.1), "samples"),
])
def test_option_classes_are_frozen(options, field) -> None:
    before = getattr(options, field)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(options, field, before)


def test_replace_checks_the_new_value_and_keeps_the_normalisation() -> None:
    with pytest.raises(UsageError, match="num_iterations"):
        dataclasses.replace(FinetuneOptions(), num_iterations=-1)
    ft = FinetuneOptions(algorithm="AdaQuant", optim_device="CUDA:0", target_op_types=["Conv"], num_iterations=50)
    assert (ft.algorithm, ft.optim_device, ft.target_op_types, ft.log_period) == ("adaquant", "cuda:0", ("Conv",), 5)
    # A finetune preset is the base preset plus the finetune options, built without mutating it.
    assert onnxptq.get_preset("A8W8_ADAROUND").finetune.algorithm == "adaround" and onnxptq.get_preset("A8W8").finetune is None


@pytest.mark.parametrize("changes, message", [
    ({"nodes_to_quantize": ("conv_1",)}, r"nodes_to_quantize names 'conv_1', which is not a node of the model \(did you mean 'conv1'\?\)"),
    ({"node_overrides": {"fc1": (None, None)}}, r"node_overrides names 'fc1', which is not a node of the model \(did you mean 'fc'\?\)"),
    ({"tensor_overrides": {"r11": TensorQuant("int16")}}, r"tensor-wise precision names tensor 'r11', which is not in the model \(did you mean 'r1'\?\)"),
])
def test_every_unknown_name_is_one_error_class(small_cnn, changes, message) -> None:
    with pytest.raises(UnknownNameError, match=message):
        onnxptq.quantize(small_cnn, onnxptq.get_preset("A8W8").replace(**changes), small_cnn_feeds(2))


def test_a_known_tensor_name_passes(small_cnn) -> None:
    result = onnxptq.quantize(small_cnn, onnxptq.get_preset("A8W8").replace(tensor_overrides={"r1": TensorQuant("int16")}),
                              small_cnn_feeds(2), eval_samples=1)
    assert result.plan.tensors["r1"].quant.format == "int16"


def test_a_tensor_override_that_is_no_format_is_refused_by_name() -> None:
    """``tensor_overrides={name: None}`` raised AttributeError deep in the plan (rnnweights' note); now the config names it."""
    with pytest.raises(UsageError, match=r"tensor_overrides\['r1'\] must be a TensorQuant .* not None"):
        onnxptq.get_preset("A8W8").replace(tensor_overrides={"r1": None})
