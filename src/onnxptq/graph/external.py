"""Weights that stay in their external-data files: how a model larger than memory budgets flows.

Why: a model over protobuf's 2 GB limit keeps its weights in external data, and every stage that
held its own copy of them (the loaded proto, onnx-ir's model, its proto again, the emitted model,
onnxruntime's session) made peak memory several times the weights. On the *streaming* path the
weights never enter a protobuf message:

* the model is loaded with ``load_external_data=False``; its tensors keep their relative
  ``location`` entries, resolved against the input's folder held in a context variable
  (:func:`streaming`), because onnx and onnxruntime both refuse absolute locations;
* a stage that needs a weight's values reads it with :func:`tensor_values` (a read-only
  ``np.memmap`` of the data file, one tensor at a time);
* onnxruntime sessions get the folder through ``open_session`` (its
  ``model_external_initializers_file_folder_path`` entry), so they read the original file;
* emit hands each new weight to :func:`store`, which writes it straight into the output's
  temporary data file (a :class:`TensorSink`) and returns a TensorProto that only points there;
  :func:`consolidate` then copies the weights that emit left untouched into the same file, chunk
  by chunk, so the saved model needs only its own folder.

:data:`STREAM_THRESHOLD` decides when a path input is streamed (tests lower it to exercise the
path on small models).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import OnnxptqError

log = logging.getLogger(__name__)

__all__ = [
    "STREAM_THRESHOLD",
    "ExternalDataError",
    "TensorSink",
    "active_dir",
    "all_tensors",
    "consolidate",
    "external_bytes",
    "has_external",
    "relocate",
    "should_stream",
    "sink",
    "store",
    "streaming",
    "tensor_values",
]

#: Bytes of external data from which a model given by path is quantized on the streaming path.
#: Below it, loading the weights into memory is cheap and every stage may hold them.
STREAM_THRESHOLD = 2**30
#: Smallest tensor :func:`store` writes to the data file (smaller ones stay in the proto, as
#: ``onnx.save_model``'s ``size_threshold`` does: scales and zero points are read as attributes).
STORE_MIN_BYTES = 1024
#: Offsets in the data file are aligned so onnxruntime may map tensors in place.
ALIGN = 4096
#: Copy size when moving untouched weights into the output's data file.
CHUNK = 64 * 2**20

#: Element types ONNX stores packed below one byte (NumPy/ml_dtypes hold one a byte): values a byte.
_PACKED_PER_BYTE = {getattr(onnx.TensorProto, n): k for n, k in (("INT4", 2), ("UINT4", 2), ("FLOAT4E2M1", 2),
                                                                  ("INT2", 4), ("UINT2", 4)) if hasattr(onnx.TensorProto, n)}
_PACKED = set(_PACKED_PER_BYTE)

_DIR: contextvars.ContextVar[Path | None] = contextvars.ContextVar("onnxptq_external_dir", default=None)
_SINK: contextvars.ContextVar["TensorSink | None"] = contextvars.ContextVar("onnxptq_tensor_sink", default=None)


class ExternalDataError(OnnxptqError, ValueError):
    """An external tensor cannot be read (no folder to resolve it against, or its file is short)."""


def _entries(tensor: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def is_external(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor``'s bytes live in a file rather than in the message."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def all_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto of ``model``: initializers and Constant attributes, subgraphs included."""
    from onnx.external_data_helper import _get_all_tensors

    return _get_all_tensors(model)


def has_external(model: onnx.ModelProto) -> bool:
    """Whether any tensor of ``model`` (subgraphs and Constant attributes included) is external."""
    return any(is_external(t) for t in all_tensors(model))


def external_bytes(path: str | os.PathLike) -> int:
    """The bytes of external data the model file at ``path`` names (0 for an unreadable file:
    the loader reports what is wrong with it)."""
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - the loader names the problem later
        return 0
    total = 0
    for tensor in all_tensors(proto):
        if not is_external(tensor):
            continue
        entries = _entries(tensor)
        try:
            if "length" in entries:
                total += max(int(entries["length"]), 0)
            else:
                file = Path(path).parent / entries.get("location", "")
                total += file.stat().st_size if file.is_file() else 0
        except (ValueError, OSError):  # a damaged entry: the loader and the checker name it
            continue
    return total


def should_stream(model: Any, output: Any) -> bool:
    """Whether quantizing ``model`` into ``output`` takes the streaming path: a model given by path
    whose external data reaches :data:`STREAM_THRESHOLD`, and an output file to stream into (the
    quantized weights need a home that is not memory)."""
    if output is None or not isinstance(model, (str, os.PathLike)) or not Path(model).is_file():
        return False
    return external_bytes(model) >= STREAM_THRESHOLD


@contextlib.contextmanager
def streaming(folder: str | os.PathLike) -> Iterator[Path]:
    """Resolve external tensors against ``folder`` (the input model's) inside the block."""
    path = Path(folder).resolve()
    token = _DIR.set(path)
    try:
        yield path
    finally:
        _DIR.reset(token)


def active_dir() -> Path | None:
    """The folder external tensors resolve against here, or None off the streaming path."""
    return _DIR.get()


def _np_dtype(tensor: onnx.TensorProto) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))


def constant_tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """``{name: tensor}`` of a graph's constants: its initializers and its ``Constant`` nodes'
    tensor values. Rules that read a constant operand (a base, an exponent, a clip bound) look it up
    here once instead of each walking both spellings; values stay unread (:func:`tensor_values`)."""
    constants: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                constants[node.output[0]] = attr.t
            elif attr.name in _SCALAR_CONSTANTS:
                array = np.asarray(onnx.helper.get_attribute_value(attr), _SCALAR_CONSTANTS[attr.name])
                constants[node.output[0]] = numpy_helper.from_array(array, node.output[0])
    return constants


#: ``Constant``'s other spellings of a numeric value (opset ≥ 12), and the dtype each one means.
_SCALAR_CONSTANTS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}


def tensor_values(tensor: onnx.TensorProto) -> np.ndarray:
    """The values of ``tensor``: ``numpy_helper.to_array`` for one held in the message; for an
    external one a read-only memory map of its bytes in the data file (resolved against
    :func:`active_dir`), so reading a weight costs its pages, not a copy held by a message."""
    if not is_external(tensor):
        return numpy_helper.to_array(tensor)
    entries = _entries(tensor)
    target = _SINK.get()
    if target is not None and entries.get("location") == target.location:
        # written by the active sink (emit's data file, still open): flushed and read back from it
        # (a pass after emit: graph/passes/unsigned_gemm_weights.py)
        target.flush()
        file = target.path
    else:
        folder = _DIR.get()
        if folder is None:
            raise ExternalDataError(f"tensor {tensor.name!r} is stored in external data, and no folder to read it from is set")
        file = folder / entries.get("location", "")
    try:
        offset = int(entries.get("offset", 0))
        dtype = _np_dtype(tensor)
    except (ValueError, KeyError, TypeError) as exc:
        raise ExternalDataError(f"tensor {tensor.name!r}: unreadable external-data entry ({exc})") from exc
    shape = tuple(int(d) for d in tensor.dims)
    count = int(np.prod(shape, dtype=np.int64))
    if tensor.data_type == onnx.TensorProto.STRING:
        raise ExternalDataError(f"tensor {tensor.name!r}: string tensors in external data are not supported")
    per_byte = _PACKED_PER_BYTE.get(tensor.data_type, 0)
    nbytes = -(-count // per_byte) if per_byte else count * dtype.itemsize
    if not file.is_file():
        raise ExternalDataError(f"tensor {tensor.name!r}: its data file {file} does not exist")
    need = offset + nbytes
    if file.stat().st_size < need:
        raise ExternalDataError(f"tensor {tensor.name!r}: {file} holds {file.stat().st_size} bytes, the tensor needs {need}")
    if count == 0:
        return np.zeros(shape, dtype=dtype)
    if per_byte:
        # Packed below a byte: NumPy cannot map it; decode this one tensor's bytes.
        with open(file, "rb") as data:
            data.seek(offset)
            packed = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=shape, raw_data=data.read(nbytes))
        return numpy_helper.to_array(packed)
    return np.memmap(file, dtype=dtype, mode="r", offset=offset, shape=shape)


class TensorSink:
    """One data file that new tensors are appended to, each at an aligned offset.

    ``location`` is the name the tensors record (relative to the file's folder, where the model
    file that names them must live).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.location = self.path.name
        self._file: BinaryIO = open(self.path, "wb")
        self.bytes = 0
        self.tensors = 0

    def _reserve(self) -> int:
        pad = -self._file.tell() % ALIGN
        if pad:
            self._file.write(b"\0" * pad)
        return self._file.tell()

    def _point(self, tensor: onnx.TensorProto, offset: int, length: int) -> onnx.TensorProto:
        tensor.ClearField("raw_data")
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        self.bytes += length
        self.tensors += 1
        return tensor

    def add(self, array: np.ndarray, name: str) -> onnx.TensorProto:
        """Write ``array`` and return a TensorProto named ``name`` pointing at it (no bytes held)."""
        array = np.ascontiguousarray(array)
        data_type = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
        tensor = onnx.TensorProto(name=name, data_type=data_type, dims=list(array.shape))
        offset = self._reserve()
        if data_type in _PACKED:
            # Sub-byte types are stored packed (two 4-bit values a byte), not as NumPy holds them
            # (a byte each): numpy_helper packs them; one tensor's bytes, in a message dropped here.
            raw = numpy_helper.from_array(array, name).raw_data
            self._file.write(raw)
            return self._point(tensor, offset, len(raw))
        self._file.write(memoryview(array.reshape(-1).view(np.uint8)))
        return self._point(tensor, offset, array.nbytes)

    def copy_from(self, tensor: onnx.TensorProto, source: Path) -> None:
        """Copy the external ``tensor``'s bytes from ``source`` (its data file) in chunks and point
        ``tensor`` at the copy."""
        entries = _entries(tensor)
        offset, length = int(entries.get("offset", 0)), int(entries.get("length", source.stat().st_size))
        start = self._reserve()
        with open(source, "rb") as src:
            src.seek(offset)
            left = length
            while left:
                chunk = src.read(min(CHUNK, left))
                if not chunk:
                    raise ExternalDataError(f"tensor {tensor.name!r}: {source} ends before its {length} bytes")
                self._file.write(chunk)
                left -= len(chunk)
        self._point(tensor, start, length)

    def flush(self) -> None:
        """Write what is buffered, so the tensors written so far can be read back from :attr:`path`."""
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@contextlib.contextmanager
def sink(path: str | os.PathLike) -> Iterator[TensorSink]:
    """Inside the block, :func:`store` writes large tensors into the data file ``path``."""
    target = TensorSink(path)
    token = _SINK.set(target)
    try:
        yield target
    finally:
        _SINK.reset(token)
        target.close()


def store(array: np.ndarray, name: str) -> onnx.TensorProto:
    """A TensorProto of ``array`` named ``name``: written to the active sink when there is one and
    the tensor is large (the message then only points at it), else held in the message."""
    target = _SINK.get()
    array = np.asarray(array)
    if target is None or array.nbytes < STORE_MIN_BYTES or array.dtype.kind in "OUS" or array.dtype == np.bool_:
        return numpy_helper.from_array(array, name)
    return target.add(array, name)


def consolidate(model: onnx.ModelProto, target: TensorSink) -> int:
    """Copy every external tensor of ``model`` that lives outside ``target`` (the input's weights
    that emit left as they were) into ``target`` and point it there, so the model's data is one
    file beside it. Returns the number of tensors copied."""
    folder = _DIR.get()
    copied = 0
    for tensor in all_tensors(model):
        if not is_external(tensor) or _entries(tensor).get("location") == target.location:
            continue
        if folder is None:
            raise ExternalDataError(f"tensor {tensor.name!r} is stored in external data, and no folder to read it from is set")
        target.copy_from(tensor, folder / _entries(tensor).get("location", ""))
        copied += 1
    return copied


def relocate(model: onnx.ModelProto, old: str, new: str) -> None:
    """Rename the data file ``old`` to ``new`` in every external tensor of ``model`` (in place)."""
    for tensor in all_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value == old:
                entry.value = new
