"""float16 <-> float32 model conversion.

``convert_float16_to_float`` widens an fp16 model so the float32 BF16 flow can run on it (fp16 ->
fp32 is exact, so nothing is lost). ``convert_float_to_float16`` makes a real fp16 model, with float
islands where onnxruntime's CPU provider has no fp16 kernel (the same probing as the ``bf16`` format);
tests and benchmarks use it to build fp16 versions of the PP-OCR models.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..graph.walk import all_graphs
from .bf16 import convert_float_to_bf16
from .interface import set_io_types

log = logging.getLogger(__name__)


def _widen_tensor(tensor: onnx.TensorProto) -> None:
    if tensor.data_type == TensorProto.FLOAT16:
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name))


def _widen_type(type_proto: onnx.TypeProto) -> None:
    """fp16 -> float in a (possibly nested sequence/optional/map) type."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type" and type_proto.tensor_type.elem_type == TensorProto.FLOAT16:
        type_proto.tensor_type.elem_type = TensorProto.FLOAT
    elif which == "sequence_type":
        _widen_type(type_proto.sequence_type.elem_type)
    elif which == "optional_type":
        _widen_type(type_proto.optional_type.elem_type)


def convert_float16_to_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with every float16 tensor, type and Cast target widened to float32.

    Covers initializers, Constant/ConstantOfShape values, ``Cast``/``CastLike`` targets and
    type-carrying attributes (``dtype``), graph inputs/outputs and value_info, in every subgraph.
    """
    work = onnx.ModelProto()
    work.CopyFrom(model)
    changed = 0
    for graph in all_graphs(work.graph):
        for init in graph.initializer:
            if init.data_type == TensorProto.FLOAT16:
                _widen_tensor(init)
                changed += 1
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            _widen_type(vi.type)
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    _widen_tensor(attr.t)
                elif attr.type == onnx.AttributeProto.INT and attr.name in ("to", "dtype") and attr.i == TensorProto.FLOAT16:
                    attr.i = TensorProto.FLOAT
                    changed += 1
    log.info("fp16 -> fp32: %d tensors/casts widened", changed)
    return work


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
