"""Widen a float16 model to float32: every fp16 initializer, Constant value, Cast target and type.

A graph pass (``ModelProto -> ModelProto``, input untouched) that two callers share: the quantizer
runs it before prepare when ``convert_fp16_to_fp32`` is set (calibration and the formats work on
float32), and the whole-model BF16 conversion runs it on fp16 inputs (:mod:`onnxptq.conversion`).
fp16 -> fp32 is exact, so nothing is lost.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..walk import all_graphs

__all__ = ["convert_float16_to_float"]

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
