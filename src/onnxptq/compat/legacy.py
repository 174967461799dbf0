"""The reference tool's legacy configuration objects: ``Config`` and ``QuantizationConfig``.

These are plain containers with the reference tool's field names and defaults (spec §1.3); they
mean nothing until :func:`onnxptq.compat.options.to_quant_config` translates them into our typed
:class:`~onnxptq.config.schema.QuantConfig`, which is where every field and option is checked.

One deliberate difference: ``include_cle`` defaults to **None** here (True in the reference
tool): None is our automatic choice, cross-layer equalization exactly where some integer weight is
quantized per tensor (it is what makes per-tensor weights work, and per-channel weights gain
nothing from it, see docs/presets.md). True or False forces it on or off, as in the reference tool.
``include_sq`` (SmoothQuant) likewise defaults to None, our automatic choice: on for integer
activations with per-tensor integer weights on transformer graphs, off elsewhere
(``QuantConfig.smooth_quant``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .enums import CalibrationMethod, QuantFormat, QuantType

__all__ = ["Config", "QuantizationConfig"]


@dataclass
class QuantizationConfig:
    """Legacy global quantization settings (field names, order and defaults of the reference tool)."""

    calibrate_method: Any = CalibrationMethod.MinMax
    quant_format: Any = QuantFormat.QDQ
    activation_type: Any = QuantType.QInt8
    weight_type: Any = QuantType.QInt8
    input_nodes: list[str] = field(default_factory=list)
    output_nodes: list[str] = field(default_factory=list)
    op_types_to_quantize: list[str] = field(default_factory=list)
    nodes_to_quantize: list[str] = field(default_factory=list)
    extra_op_types_to_quantize: list[str] = field(default_factory=list)
    nodes_to_exclude: list[str] = field(default_factory=list)
    subgraphs_to_exclude: list[tuple[list[str], list[str]]] = field(default_factory=list)
    specific_tensor_precision: bool = False
    execution_providers: list[str] = field(default_factory=lambda: ["CPUExecutionProvider"])
    per_channel: bool = False
    reduce_range: bool = False
    optimize_model: bool = True
    use_dynamic_quant: bool = False
    use_external_data_format: bool = False
    convert_fp16_to_fp32: bool = False
    convert_nchw_to_nhwc: bool = False
    #: None (automatic: integer activations, per-tensor weights, transformer graph) here, False in the reference tool.
    include_sq: bool | None = None
    include_rotation: bool = False
    #: None (automatic: where weights are per tensor) here, True in the reference tool (see the module docstring).
    include_cle: bool | None = None
    include_auto_mp: bool = False
    include_fast_ft: bool = False
    enable_npu_cnn: bool = False
    enable_npu_transformer: bool = False
    debug_mode: bool = False
    crypto_mode: bool = False
    print_summary: bool = True
    ignore_warnings: bool = True
    log_severity_level: int | None = None
    extra_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    """The legacy wrapper ``ModelQuantizer`` takes: one global :class:`QuantizationConfig`."""

    global_quant_config: QuantizationConfig = field(default_factory=QuantizationConfig)
