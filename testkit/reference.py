"""The reference tool's A8W8 / A16W8 as a user of the compatible API writes it (spec §1.5): MinMax,
symmetric activations, int8 weights (per tensor unless asked), its documented extra_options.
One home for the test and the bench that measure our quantizer against that recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from onnxptq.compat import Config, ModelQuantizer, QuantizationConfig
from onnxptq.compat.enums import CalibrationMethod, ExtendedQuantFormat, ExtendedQuantType, QuantType


def reference_config(preset: str, *, per_channel: bool = False, repair: bool = False) -> QuantizationConfig:
    """``preset`` "A8W8" or "A16W8" in the reference tool's spelling; ``repair`` our accuracy floor's."""
    extra = {"ActivationSymmetric": True, "ForceQuantizeNoInputCheck": True, "AlignSlice": False, "FoldRelu": True,
             "AlignConcat": True, "AccuracyFloorRepair": repair}
    if preset == "A16W8":
        extra["AlignEltwiseQuantType"] = True
    return QuantizationConfig(calibrate_method=CalibrationMethod.MinMax, quant_format=ExtendedQuantFormat.QDQ,
                              activation_type=QuantType.QInt8 if preset == "A8W8" else ExtendedQuantType.QInt16,
                              weight_type=QuantType.QInt8, per_channel=per_channel, extra_options=extra)


def quantize_reference(model: str | Path, output: str | Path, feeds: Iterable[dict], preset: str, **options) -> None:
    """Quantize ``model`` to ``output`` with :func:`reference_config` through ``ModelQuantizer``,
    reading ``feeds`` through a ``get_next()`` reader as a user's script would."""
    it = iter(feeds)

    class Reader:
        def get_next(self):
            return next(it, None)

    ModelQuantizer(Config(global_quant_config=reference_config(preset, **options))).quantize_model(str(model), str(output), Reader())
