"""float16 <-> float32 model conversion.

``convert_float16_to_float`` widens an fp16 model so the float32 BF16 flow can run on it (fp16 ->
fp32 is exact, so nothing is lost; a graph pass, :mod:`onnxptq.graph.passes.widen_fp16`, that the
quantizer runs too). ``convert_float_to_float16`` makes a real fp16 model, with float
islands where onnxruntime's CPU provider has no fp16 kernel (the same probing as the ``bf16`` format);
tests and benchmarks use it to build fp16 versions of the PP-OCR models.
"""

from __future__ import annotations

import logging

import onnx
from onnx import TensorProto

from ..graph.passes.widen_fp16 import convert_float16_to_float
from .bf16 import convert_float_to_bf16
from .interface import set_io_types

__all__ = ["convert_float16_to_float", "convert_float_to_float16"]

log = logging.getLogger(__name__)


def convert_float_to_float16(model: onnx.ModelProto, *, keep_io_types: bool = False, optimize: bool = True) -> onnx.ModelProto:
    """Return a real float16 version of a float32 ``model`` that onnxruntime CPU runs.

    Ops without an fp16 CPU kernel stay in float32 behind Casts. With ``keep_io_types`` the graph
    inputs/outputs stay float32; otherwise float32 inputs/outputs become float16.
    """
    half = convert_float_to_bf16(model, "bf16", optimize=optimize, target=TensorProto.FLOAT16)
    if not keep_io_types:
        wanted = {
            vi.name: TensorProto.FLOAT16
            for vi in list(half.graph.input) + list(half.graph.output)
            if vi.type.tensor_type.elem_type == TensorProto.FLOAT
        }
        set_io_types(half, wanted)
    return half
