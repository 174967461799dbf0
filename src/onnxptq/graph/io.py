"""Loading and saving models: path or ModelProto in, atomic writes out, never over the input.

Why atomic: a quantization that fails half way must leave no half-written model where a user (or
a deployment script) would pick it up. We write to a temporary file in the destination folder and
``os.replace`` it, which is atomic on POSIX and Windows.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import BinaryIO, Callable, Union

import numpy as np
import onnx
from onnx import numpy_helper

from .. import outputs
from . import external, sparse_storage
from .programs import as_model
from .walk import all_graphs
from ..errors import InputNotFoundError, OnnxptqError, SaveError

log = logging.getLogger(__name__)

#: The highest IR version we write. onnxruntime 1.20 reads IR ≤ 10 and opset ≤ 21; onnx ≥ 1.23
#: writes IR 12+ by default, which older runtimes refuse, so every model we emit is pinned here.
ORT_MAX_IR_VERSION = 10
#: The default-domain opset we raise models to when a format needs it (int16/int4/blocked Q/DQ).
TARGET_OPSET = 21
#: Protobuf's hard limit: larger models must keep tensors as external data.
PROTOBUF_LIMIT = 2**31 - 1


def exceeds_protobuf_limit(model: onnx.ModelProto, limit: int = PROTOBUF_LIMIT) -> bool:
    """Whether ``model`` is too large to serialize as one protobuf.

    ``ByteSize()`` itself raises ``EncodeError`` past 2 GB with the upb protobuf runtime (it
    serializes to measure), so the question must be asked this way, not as ``ByteSize() > limit``.
    """
    try:
        return model.ByteSize() > limit
    except Exception:  # google.protobuf.message.EncodeError: "Failed to serialize proto"
        return True


ModelLike = Union[str, os.PathLike, onnx.ModelProto]


class ModelLoadError(OnnxptqError, ValueError):
    """The input model file is missing or is not an ONNX model."""


def load_model(model: ModelLike, *, load_external_data: bool | None = None) -> onnx.ModelProto:
    """Load ``model`` (a path or a ModelProto, which is copied so the caller's object is untouched;
    an exporter's program object gives its ``model_proto``: :mod:`onnxptq.graph.programs`).

    ``load_external_data``: read external tensors into the message; by default yes, except on the
    streaming path (:func:`onnxptq.graph.external.streaming`), where weights stay in their file.
    """
    if load_external_data is None:
        load_external_data = external.active_dir() is None
    model = as_model(model)
    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return sparse_storage.densify(copy)
    path = Path(model)
    if not path.exists():
        raise InputNotFoundError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(f"model path is a folder, not an ONNX file: {path}")
    try:
        proto = onnx.load(str(path), load_external_data=load_external_data)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeWarning, ... depending on version
        raise ModelLoadError(f"{path} is not a readable ONNX model: {exc}") from exc
    if not proto.graph.node and not proto.graph.output:
        raise ModelLoadError(f"{path} is not an ONNX model (it holds no graph)")
    return sparse_storage.densify(proto)


def check_output_path(output: str | os.PathLike, inputs: tuple[ModelLike, ...] = (), *,
                      data: object = None, label: str = "output") -> Path:
    """Validate an output path before any work is done, so a long run cannot fail at the end.

    The output may replace none of ``inputs`` (models: the file and its external-data files) nor
    the calibration files of ``data``; see :func:`onnxptq.outputs.check_outputs`.
    """
    models = {("the input model" if i == 0 else f"input model #{i + 1}"): m for i, m in enumerate(inputs)}
    return outputs.check_io({label: output}, models=models, data={"the calibration data": data} if data is not None else {})[label]


def save_model(model: onnx.ModelProto, output: str | os.PathLike, *, external_data: bool | None = None) -> Path:
    """Write ``model`` to ``output`` atomically; tensors go to ``<name>.data`` past the 2 GB limit.

    A failure leaves nothing behind and raises :class:`onnxptq.errors.SaveError` (path and cause in
    one line); the file gets the mode ``open()`` would give it (see :mod:`onnxptq.outputs`).
    """
    out = outputs.resolve_output(output, "output")
    if external_data is None:
        external_data = exceeds_protobuf_limit(model)
    data_name = f"{out.name}.data"
    with outputs.atomic_files("model", output) as files:
        tmp = files.temp(out)
        if external_data:
            tmp_data = files.temp(out.parent / data_name)
            tmp_data.unlink()  # written whole by the writer below: start from none
            # Not onnx.save_model(save_as_external_data=True): it strips the caller's tensors.
            _save_external(model, tmp, tmp_data.name)
            # The model refers to its data file by name: rewrite the location to the final name.
            final = onnx.load(str(tmp), load_external_data=False)
            external.relocate(final, tmp_data.name, data_name)
            onnx.save_model(final, str(tmp))
            if not tmp_data.exists() or tmp_data.stat().st_size == 0:  # every tensor under the threshold
                tmp_data.unlink(missing_ok=True)
                files.pending = [(t, f) for t, f in files.pending if t != tmp_data]
        else:
            if exceeds_protobuf_limit(model):
                raise SaveError(f"cannot write model {output}: it is past protobuf's 2 GB limit and external_data=False "
                                "(a single file cannot hold it; save with external data)")
            onnx.save_model(model, str(tmp))
    log.info("saved %s", out)
    return out


def save_serialized(write: Callable[[BinaryIO], None], output: str | os.PathLike) -> Path:
    """Write a model already serialized to ``output``, atomically as :func:`save_model` does: ``write(fh)``
    writes its bytes (those :func:`save_model` would write for it) into the open file. Why: finish serializes
    the delivered file once for its checker and its session (pipeline/finish.py ``finish_file``); the save
    writes those bytes rather than serializing the model a second time."""
    out = outputs.resolve_output(output, "output")
    with outputs.atomic_files("model", output) as files:
        with open(files.temp(out), "wb") as fh:
            write(fh)
    log.info("saved %s", out)
    return out


def write_externalized(model: onnx.ModelProto, folder: str | os.PathLike, *, threshold: int = 1024) -> Path:
    """Write ``model`` to ``folder``/model.onnx with its large tensors in model.onnx.data, return the
    path, and leave ``model`` as it was.

    For a model past protobuf's 2 GB limit held in memory (given as a ModelProto) that must be
    checked or loaded by path. onnx-ir wraps the message's tensors without copying them and
    writes them one at a time (one worker, so one tensor's bytes in flight) into the data file,
    serializing a new message that only points there. The earlier way, moving each tensor's bytes
    out of the caller's message and back, allocated the tensors' size again (upb's arenas never
    give a cleared field's memory back) and ended in a segfault under bench/large_model.py's
    address-space cap. Models given by path never come here: see :mod:`onnxptq.graph.external`.
    """
    path = Path(folder) / "model.onnx"
    _save_external(model, path, "model.onnx.data", threshold)
    return path


def _save_external(model: onnx.ModelProto, path: Path, data_name: str, threshold: int = 1024) -> None:
    """Write ``model`` to ``path`` with its tensors of ``threshold`` bytes or more in ``data_name``
    beside it, one tensor at a time, leaving ``model`` untouched (see :func:`write_externalized`)."""
    import onnx_ir as ir

    # onnx-ir moves tensors of *more than* size_threshold_bytes; onnx (and this docstring) count
    # tensors of threshold bytes or more, so a 1 KiB weight still goes to the data file
    converted = ir.from_proto(model)
    # onnx-ir holds one value per name and takes each graph output's (empty) type onto it: a graph input that is
    # also an untyped output (calibration fetches one so) lost its type, and onnxruntime refuses an untyped input
    for info, value in zip(model.graph.input, converted.graph.inputs):
        if value.type is None and info.type.HasField("tensor_type"):
            ir.serde.deserialize_value_info_proto(info, value)
    ir.save(converted, path, external_data=data_name, size_threshold_bytes=max(threshold - 1, 0),
            max_workers=1, max_in_flight_bytes=1)


def pin_versions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Pin the IR version to one that onnxruntime 1.20+ accepts (in place; returns the model)."""
    if model.ir_version > ORT_MAX_IR_VERSION or model.ir_version < 7:
        model.ir_version = ORT_MAX_IR_VERSION
    return model


def with_initializers(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers named in ``values`` hold those values (dtype kept);
    ``model`` itself when there is nothing to change. How refinements (bias correction, AdaRound,
    AdaQuant) hand their new weights to emit."""
    if not values:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    # Every graph: bias correction also corrects layers inside If bodies, whose biases are
    # initializers of their body (graph names are unique across a model's graphs).
    for graph in all_graphs(out.graph):
        for init in graph.initializer:
            if init.name in values:
                dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)  # not read: a streamed weight stays in its file
                init.CopyFrom(numpy_helper.from_array(np.asarray(values[init.name], dtype=dtype), init.name))
    return out
