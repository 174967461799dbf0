"""File-level whole-model conversions: what ``onnxptq convert`` and the BF16 tools call.

fp32 models go straight to :func:`~onnxptq.conversion.bf16.convert_float_to_bf16`; fp16 models are
widened first (exact), converted, and given back their fp16 interface. Every result passes the
checker and loads in onnxruntime before it is written.
"""

from __future__ import annotations

import logging

import onnx

from ..graph.io import check_output_path, exceeds_protobuf_limit, load_model, pin_versions, save_model
from ..sessions import open_session
from .bf16 import FLOAT, FLOAT16, FORMATS, convert_float_to_bf16
from .fp16 import convert_float16_to_float
from .interface import has_type, io_types, set_io_types

log = logging.getLogger(__name__)


def verify_runs(model: onnx.ModelProto, what: str = "converted model") -> None:
    """Run the ONNX checker and open an onnxruntime CPU session: a model we write must load."""
    try:
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as exc:
        raise RuntimeError(f"the {what} fails the ONNX checker (a bug in onnxptq, please report): {exc}") from exc
    if exceeds_protobuf_limit(model):
        log.info("skipping the onnxruntime load check of a >2 GB model in memory")
        return
    try:
        open_session(model)
    except Exception as exc:
        raise RuntimeError(f"onnxruntime refuses the {what} (a bug in onnxptq, please report): {exc}") from exc


def convert_model(
    model: onnx.ModelProto,
    fmt: str = "with_cast",
    *,
    source: str = "fp32",
    keep_io_types: bool = True,
    optimize: bool = True,
    merge_matmuls: bool = True,
    activations: str = "compute_inputs",
) -> onnx.ModelProto:
    """Convert an fp32 (``source="fp32"``) or fp16 (``source="fp16"``) model to BF16 in memory.

    fp16 models are widened to fp32 first (exact), converted, and given back their declared fp16
    inputs/outputs unless ``keep_io_types`` is False (then they are float32).
    """
    if source not in ("fp32", "fp16"):
        raise ValueError(f"source must be 'fp32' or 'fp16', got {source!r}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    declared = io_types(model)
    if source == "fp32":
        if has_type(model, FLOAT16) and not has_type(model, FLOAT):
            raise ValueError("the input model is float16; use convert_fp16_to_bf16 (onnxptq convert --from fp16)")
        converted = convert_float_to_bf16(
            model, fmt, optimize=optimize, merge_matmuls=merge_matmuls, activations=activations
        )
    else:
        if not has_type(model, FLOAT16):
            log.warning("the input model holds no float16 tensors; converting it as a float32 model")
        converted = convert_float_to_bf16(
            convert_float16_to_float(model), fmt, optimize=optimize, merge_matmuls=merge_matmuls,
            activations=activations,
        )
        if keep_io_types:
            set_io_types(converted, {k: v for k, v in declared.items() if v == FLOAT16})
    pin_versions(converted)
    verify_runs(converted)
    return converted


def convert_file(
    input_path: str,
    output_path: str,
    fmt: str = "with_cast",
    *,
    source: str = "fp32",
    save_as_external_data: bool = False,
    keep_io_types: bool = True,
    optimize: bool = True,
    merge_matmuls: bool = True,
    activations: str = "compute_inputs",
) -> str:
    """Load ``input_path``, convert it (see :func:`convert_model`) and write ``output_path`` atomically.

    The output path is checked before any work (never the input, folder must exist), so a long
    conversion cannot fail at the very end for a reason known at the start.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    check_output_path(output_path, (input_path,))
    model = load_model(input_path)
    converted = convert_model(
        model, fmt, source=source, keep_io_types=keep_io_types, optimize=optimize, merge_matmuls=merge_matmuls,
        activations=activations,
    )
    save_model(converted, output_path, external_data=True if save_as_external_data else None)
    return str(output_path)
