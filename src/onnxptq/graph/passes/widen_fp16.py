"""Widen a float16 model to float32: every fp16 initializer, Constant value, Cast target and type.

A graph pass (``ModelProto -> ModelProto``, input untouched) that two callers share: the quantizer
runs it before prepare on a float16 source (calibration and the formats work on float32), and the
whole-model BF16 conversion runs it on fp16 inputs (:mod:`onnxptq.conversion`). fp16 -> fp32 is
exact, so nothing is lost.

:func:`widen_inside` is the quantizer's default form: widened inside, the source's float16 graph
inputs/outputs given back with a ``Cast`` each, so the delivered file takes the user's float16 feeds
and returns float16 as the source did. Why widen at all: quantized in fp16, every activation
quantizer needs a Cast each side and an int8 weight reaches its Conv/MatMul through
``DequantizeLinear -> Cast(FLOAT16)``, which onnxruntime cannot fuse into an integer kernel: A8W8 of
round 20's fp16 exports ran 0.8-4.9x the source's CPU time, widened inside 0.3-0.7x
(bench/RESULTS.md, "fp16widen").
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..interface import has_type, io_types, set_io_types
from ..walk import all_graphs

__all__ = ["computes_in_half", "convert_float16_to_float", "half_interface", "unloaded_half_weights", "widen_inside"]

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


def computes_in_half(model: onnx.ModelProto) -> bool:
    """Whether any graph holds a float16 tensor, declared type or ``Cast``/``dtype`` target."""
    if has_type(model, TensorProto.FLOAT16):
        return True
    return any(attr.type == onnx.AttributeProto.INT and attr.name in ("to", "dtype") and attr.i == TensorProto.FLOAT16
               for graph in all_graphs(model.graph) for node in graph.node for attr in node.attribute)


def half_interface(model: onnx.ModelProto) -> dict[str, int]:
    """The main graph's inputs/outputs declared float16 (name -> ``TensorProto.FLOAT16``)."""
    return {name: kind for name, kind in io_types(model).items() if kind == TensorProto.FLOAT16}


def unloaded_half_weights(model: onnx.ModelProto) -> list[str]:
    """float16 initializers whose bytes are still in an external file (a streamed model): widening
    them would read every weight into memory, which the streaming path exists to avoid."""
    return [init.name for graph in all_graphs(model.graph) for init in graph.initializer
            if init.data_type == TensorProto.FLOAT16 and init.data_location == TensorProto.EXTERNAL]


def widen_inside(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """``model`` computing in float32 inside, its float16 inputs/outputs kept float16 (a Cast each);
    None where the model holds no float16 at all (nothing to widen: no copy made).

    The values every node computes are the float32 evaluation of the source's graph on the source's
    float16 inputs (widened exactly); the outputs are rounded to float16 once, at the end, where the
    source rounded after every op."""
    if not computes_in_half(model):
        return None
    interface = half_interface(model)
    wide = convert_float16_to_float(model)
    set_io_types(wide, interface)
    return wide
