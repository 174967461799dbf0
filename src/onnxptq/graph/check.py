"""Input checks before any rewriting: is this a float ONNX model we can quantize, and do the feeds fit?

Why a separate stage: a model that fails here would otherwise fail deep inside calibration with an
onnxruntime message that names neither the file nor the tensor. Every error names the source (path
or caller-given label) and the tensor at fault.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto

from onnxptq.graph.io import PROTOBUF_LIMIT
from onnxptq.errors import OnnxptqError

log = logging.getLogger(__name__)

#: The float element types quantization starts from.
FLOAT_TYPES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16"}


class ModelCheckError(OnnxptqError, ValueError):
    """The model cannot be quantized as given; the message names the source and the cause."""


def _run_checker(model: onnx.ModelProto, source: str) -> None:
    """``onnx.checker`` on the model; beyond protobuf's 2 GB limit it must be given a path."""
    try:
        if model.ByteSize() > PROTOBUF_LIMIT:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "model.onnx"
                onnx.save_model(model, str(path), save_as_external_data=True, location="model.onnx.data")
                onnx.checker.check_model(str(path))
        else:
            onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise ModelCheckError(f"{source}: the model fails the ONNX checker: {exc}") from exc


def _float_tensors(model: onnx.ModelProto) -> Iterator[tuple[str, str, int]]:
    """(kind, name, elem_type) of every graph input, initializer and Constant tensor (main graph)."""
    init_names = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in init_names:
            continue  # IR < 4 lists initializers as inputs too; count them once, as weights
        yield "input", value.name, value.type.tensor_type.elem_type
    for tensor in model.graph.initializer:
        yield "initializer", tensor.name, tensor.data_type
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    yield "constant", node.output[0], attr.t.data_type
                elif attr.name in ("value_float", "value_floats"):
                    yield "constant", node.output[0], TensorProto.FLOAT


def check_model(model: onnx.ModelProto, source: str) -> None:
    """Raise ModelCheckError unless ``model`` passes the checker, has nodes and float tensors.

    Args:
        model: the loaded model.
        source: where it came from (a path, or a label such as ``"<ModelProto>"``), used in messages.
    """
    if not isinstance(model, onnx.ModelProto):
        raise ModelCheckError(f"{source}: expected an onnx.ModelProto, got {type(model).__name__}")
    if not model.graph.node:
        raise ModelCheckError(f"{source}: the model's graph has no nodes; there is nothing to quantize")
    _run_checker(model, source)
    kinds = {kind for kind, _, elem in _float_tensors(model) if elem in FLOAT_TYPES}
    if not kinds:
        raise ModelCheckError(
            f"{source}: the model has no float32/float16 inputs or weights; quantization starts from a float model"
        )
    if "initializer" not in kinds and "constant" not in kinds:
        log.warning("%s: the model has no float weights (initializers or Constant nodes); only activations can be quantized", source)


def model_float_type(model: onnx.ModelProto) -> Literal["float32", "float16", "mixed"]:
    """Which float type the model computes in, judged by its float inputs, initializers and Constants.

    ``"float16"`` when every such tensor is fp16 (an fp16 model, which needs different handling of
    scales and calibration), ``"float32"`` when all are fp32, ``"mixed"`` otherwise. Other float types
    (bfloat16, float64) are not counted. Raises ModelCheckError when there is no float tensor at all.
    """
    seen = {FLOAT_TYPES[elem] for _, _, elem in _float_tensors(model) if elem in FLOAT_TYPES}
    if not seen:
        raise ModelCheckError("the model has no float32/float16 inputs or weights")
    if len(seen) == 1:
        return seen.pop()  # type: ignore[return-value]
    return "mixed"


def check_feeds(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], source: str) -> None:
    """Raise ModelCheckError unless ``feeds`` name the model's inputs with matching dtype and rank.

    Why here: a data reader that yields the wrong name or an fp64 array fails in onnxruntime with a
    message about the session, not about the reader; this names the input and what was expected.
    """
    init_names = {t.name for t in model.graph.initializer}
    inputs = {v.name: v for v in model.graph.input if v.name not in init_names}
    unknown = sorted(set(feeds) - set(inputs))
    if unknown:
        raise ModelCheckError(f"{source}: feed(s) {unknown} are not model inputs; the model's inputs are {sorted(inputs)}")
    missing = sorted(set(inputs) - set(feeds))
    if missing:
        raise ModelCheckError(f"{source}: no data for model input(s) {missing}")
    for name, array in feeds.items():
        tensor_type = inputs[name].type.tensor_type
        expected = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        array = np.asarray(array)
        if array.dtype != expected:
            raise ModelCheckError(f"{source}: input '{name}' expects {expected}, the data reader gave {array.dtype}")
        if tensor_type.HasField("shape"):
            dims = tensor_type.shape.dim
            if array.ndim != len(dims):
                raise ModelCheckError(f"{source}: input '{name}' expects rank {len(dims)}, the data reader gave shape {array.shape}")
            for axis, (dim, size) in enumerate(zip(dims, array.shape)):
                if dim.HasField("dim_value") and dim.dim_value != size:
                    raise ModelCheckError(
                        f"{source}: input '{name}' expects size {dim.dim_value} on axis {axis}, the data reader gave shape {array.shape}"
                    )
