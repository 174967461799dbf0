"""Run ``onnx.version_converter`` on a model whose float weights travel as references.

Why: the converter serializes the model, parses it in C++, builds its own graph with a copy of
every tensor, writes it back to a ModelProto, serializes that and parses it again in Python: about
eight copies of the weights at once. On PP-OCRv4 rec (opset 12 -> 21, 10.9 MB of weights held in
``Constant`` nodes) it took the quantizing process from 96 to 141 MiB resident with a high-water
mark of 180 MiB, the highest point of the whole preparation (bench/RESULTS.md, packed21 and peak22).

What the converter does to a weight is carry it: its adapters read only the small constant inputs
that become attributes or the reverse (shapes, axes, pads, split sizes: int64; Resize/Upsample
scales and Clip bounds: a few floats). So every float tensor of at least :data:`LEAN_BYTES` bytes
that is stored in the model (initializers and node attribute tensors such as ``Constant`` values,
in every graph) goes through the converter as an external-data reference with a key of its own
(dims and type kept, so shape inference sees the same tensor), and is put back afterwards from the
caller's model wherever the key came out. The result is the converter's own, byte for byte: the
converter keeps a tensor's dims, type, name, segment, storage field and data and drops its
``doc_string`` and ``metadata_props``, and the put-back tensor does the same (a test compares both
paths on a model with each storage form). Tensors already stored externally are left as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import onnx
import onnx.version_converter

from onnxptq.graph.walk import all_graphs

log = logging.getLogger(__name__)

__all__ = ["LEAN_BYTES", "convert_version_lean"]

#: A float tensor of at least this many bytes crosses the converter as a reference (smaller ones, and
#: every tensor the adapters may read, are copied as before: they cost nothing).
LEAN_BYTES = 1024

_FLOATS = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
           onnx.TensorProto.DOUBLE: 8}
#: what the converter does not carry over from a tensor (onnx 1.23's IR round trip)
_DROPPED = ("doc_string", "metadata_props")
_KEY = "onnxptq-lean-convert-"


def _tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in the model's graphs: initializers, then each node's tensor attributes."""
    for graph in all_graphs(model.graph):
        yield from graph.initializer
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t
                elif attr.type == onnx.AttributeProto.TENSORS:
                    yield from attr.tensors


def _large_float(tensor: onnx.TensorProto) -> bool:
    if tensor.data_type not in _FLOATS or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return False
    count = 1
    for d in tensor.dims:
        count *= d
    return count * _FLOATS[tensor.data_type] >= LEAN_BYTES


def _key(tensor: onnx.TensorProto) -> str | None:
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    for entry in tensor.external_data:
        if entry.key == "location" and entry.value.startswith(_KEY):
            return entry.value
    return None


def convert_version_lean(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """``onnx.version_converter.convert_version(model, target)``, the same bytes, with the large float
    tensors kept out of the converter (``model`` is not modified)."""
    lean = onnx.ModelProto()
    lean.CopyFrom(model)
    originals: dict[str, onnx.TensorProto] = {}
    for copy, original in zip(_tensors(lean), _tensors(model)):
        if not _large_float(original):
            continue
        key = f"{_KEY}{len(originals)}"
        originals[key] = original
        stub = onnx.TensorProto(name=copy.name, data_type=copy.data_type, dims=copy.dims)
        if copy.HasField("segment"):
            stub.segment.CopyFrom(copy.segment)
        stub.data_location = onnx.TensorProto.EXTERNAL
        stub.external_data.add(key="location", value=key)
        copy.CopyFrom(stub)
    if not originals:
        del lean
        return onnx.version_converter.convert_version(model, target)
    data = lean.SerializeToString()
    del lean  # its copy of the weights goes before the converter's work
    converted = onnx.version_converter.convert_version(onnx.load_from_string(data), target)
    del data
    put_back = 0
    for tensor in _tensors(converted):
        key = _key(tensor)
        if key is not None and key in originals:
            tensor.CopyFrom(originals[key])
            for field in _DROPPED:
                tensor.ClearField(field)
            put_back += 1
    log.debug("version converter: %d float tensor(s) carried as references, %d put back", len(originals), put_back)
    return converted
