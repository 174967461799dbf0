"""Store a large constant of few distinct values (or of narrow values) in a compact standard form
that onnxruntime folds back at load.

Why: some graphs carry big constants that no format stores narrower because they are not weights:
DAT-light x2's two shifted-window attention masks are fp32 ``[1, 16, 1, 256, 256]`` addends beside
the scores (4.2 MB each, the values 0 and -100 only), and its relative-position lookups read two
``[65536]`` int64 indices whose values are 0..944 (bench/RESULTS.md, newmodels26 and foldgrow16:
8.4 MB of the 10.6 MB MXINT8 file, 0.81x the float file where issue 26 asks 0.30x). The tensor the
runtime sees is the same; only the file's encoding of it changes:

* two distinct values, of a type onnxruntime's CPU ``Where`` folds (float, double, int32, int64):
  a ``bool`` mask and ``Where(mask, a, b)`` of two scalars (1 byte an element);
* at most :data:`MAX_CODES` distinct values, of any type: ``uint8`` codes, ``Cast`` to int32 and
  ``Gather`` of a small table (1 byte an element; ``Gather`` takes no uint8 index);
* an integer tensor whose values fit a narrower integer type, or a float32/float64 tensor whose
  every value float16 or bfloat16 holds exactly: the narrow tensor and a ``Cast`` back (exact);
* a float32 sin/cos position table: its frequencies, ``Sin``/``Cos`` in double and the few entries that
  recipe does not give bit for bit (:mod:`.sinusoid_tables`; khmersm's 1.57 MB table: 152 KiB).

The cheapest form is taken when it saves at least :data:`MIN_SAVED` bytes: the decision is by the
tensor's values and size, never its name. Each decode chain reads initializers only, so
onnxruntime's constant folding (on by default, every level above "disable all") turns it back into
the same initializer at session creation, bit for bit (``Where`` and ``Gather`` copy values;
``Cast`` to a wider type of the same kind is exact); measured to fold for each of the element types
used (bench/RESULTS.md, dat17). With graph optimisations disabled the chain runs on every call.
Distinct values are told apart by their bits (``-0.0`` is not ``0.0``; a NaN keeps its payload).

A constant a ``DequantizeLinear`` reads is rewritten too (A16W8 quantizes the masks to int16 codes: 2.1 MB each):
onnxruntime folds the decode in its first optimisation level, before the QDQ selectors of the second look for
initializers, so the optimised graph is the same (DAT-light x2 A16W8: the same 4205 nodes by type at
ORT_ENABLE_EXTENDED, outputs bit-identical; bench/RESULTS.md, dat17). Left alone: initializers that are also
graph inputs (a caller may feed them), held as external data (large models' payload, read lazily); subgraphs'
own initializers.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..external import is_external
from ..opsets import model_opset
from .sinusoid_tables import RuntimeCheck, sinusoid_form

__all__ = ["compact_constants", "compact_form", "ENABLED", "MIN_SAVED", "MAX_CODES"]

log = logging.getLogger(__name__)

#: Off: every constant keeps the encoding it was made with.
ENABLED = True
#: Bytes a rewrite must save (64 KiB: a rewrite adds 2-3 nodes and a table; below this the file's
#: other costs dominate and small shape or bias tensors stay as they are).
MIN_SAVED = 64 * 1024
#: Most distinct values a ``uint8`` code addresses.
MAX_CODES = 256
#: Element types whose ``Where`` onnxruntime's CPU provider folds (float16/bfloat16 have no CPU kernel).
_WHERE_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64})
#: Narrower integer types tried, smallest first.
_NARROW_INTS = ((np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8), (np.int16, TensorProto.INT16),
                (np.uint16, TensorProto.UINT16), (np.int32, TensorProto.INT32), (np.uint32, TensorProto.UINT32))
#: Elements looked at first to rule a tensor of many distinct values out cheaply.
_SAMPLE = 4096


def _bits(values: np.ndarray) -> np.ndarray:
    """The values as unsigned integers of their width: distinct bit patterns are distinct values."""
    return values.reshape(-1).view(np.dtype(f"u{values.dtype.itemsize}"))


def _half_exact(values: np.ndarray) -> tuple[np.dtype, int] | None:
    """float16 or bfloat16 when every value of a float32/float64 tensor is held exactly by it (NaNs
    excepted: their payloads would not survive), else None."""
    import ml_dtypes

    if values.dtype not in (np.float32, np.float64) or np.isnan(values).any():
        return None
    for dtype, code in ((np.float16, TensorProto.FLOAT16), (ml_dtypes.bfloat16, TensorProto.BFLOAT16)):
        with np.errstate(over="ignore"):
            narrow = values.astype(dtype)
        back = narrow.astype(values.dtype)
        if np.array_equal(_bits(back), _bits(values)):
            return np.dtype(dtype), code
    return None


def _narrow_int(values: np.ndarray) -> tuple[np.dtype, int] | None:
    """The smallest integer type holding every value of an integer tensor, when narrower than its own."""
    if values.dtype.kind not in "iu" or values.size == 0:
        return None
    lo, hi = int(values.min()), int(values.max())
    for dtype, code in _NARROW_INTS:
        info = np.iinfo(dtype)
        if np.dtype(dtype).itemsize < values.dtype.itemsize and info.min <= lo and hi <= info.max:
            return np.dtype(dtype), code
    return None


def compact_form(tensor: TensorProto, values: np.ndarray, opset: int | None = None,
                 check: RuntimeCheck | None = None) -> tuple[list[TensorProto], list[onnx.NodeProto]] | None:
    """The compact encoding of ``tensor`` (whose values are ``values``): the initializers it stores and
    the nodes that decode them into ``tensor.name``; None when no form saves :data:`MIN_SAVED` bytes.
    ``opset``: the model's default-domain opset, which the sinusoid form needs (None: not tried);
    ``check``: a runtime's verdict on that form (:data:`sinusoid_tables.RuntimeCheck`)."""
    if values.size == 0 or values.dtype.itemsize < 2:
        return None
    name, n, dtype = tensor.name, values.size, tensor.data_type
    options: list[tuple[int, int, Callable[[], tuple[list[TensorProto], list[onnx.NodeProto]]]]] = []

    narrow = _narrow_int(values) if values.dtype.kind in "iu" else _half_exact(values)
    if narrow is not None:
        np_dtype, code = narrow

        def cast_form() -> tuple[list[TensorProto], list[onnx.NodeProto]]:
            stored = helper.make_tensor(f"{name}__narrow", code, values.shape,
                                        values.astype(np_dtype).tobytes(), raw=True)
            return [stored], [helper.make_node("Cast", [stored.name], [name], to=dtype)]

        options.append((n * np_dtype.itemsize, 1, cast_form))

    bits = _bits(values)
    sample = bits[:_SAMPLE]
    if len(np.unique(sample)) <= MAX_CODES:
        table_bits, codes = np.unique(bits, return_inverse=True)
        if len(table_bits) <= MAX_CODES:
            table = table_bits.view(values.dtype)
            if len(table) == 2 and dtype in _WHERE_TYPES:

                def where_form() -> tuple[list[TensorProto], list[onnx.NodeProto]]:
                    mask = numpy_helper.from_array(codes.reshape(values.shape).astype(bool), f"{name}__mask")
                    hi = numpy_helper.from_array(table[1:2].reshape(()), f"{name}__if_true")
                    lo = numpy_helper.from_array(table[0:1].reshape(()), f"{name}__if_false")
                    return [mask, hi, lo], [helper.make_node("Where", [mask.name, hi.name, lo.name], [name])]

                options.append((n + 2 * values.dtype.itemsize, 0, where_form))
            else:

                def gather_form() -> tuple[list[TensorProto], list[onnx.NodeProto]]:
                    stored = numpy_helper.from_array(codes.reshape(values.shape).astype(np.uint8), f"{name}__codes")
                    tab = helper.make_tensor(f"{name}__table", dtype, [len(table)], table.tobytes(), raw=True)
                    index = f"{name}__index"
                    return [stored, tab], [helper.make_node("Cast", [stored.name], [index], to=TensorProto.INT32),
                                           helper.make_node("Gather", [tab.name, index], [name], axis=0)]

                options.append((n + len(table) * values.dtype.itemsize, 2, gather_form))
    if opset is not None and len(options) == 0 and values.nbytes >= MIN_SAVED:  # many values, none narrow
        sinusoid = sinusoid_form(tensor, values, opset, check)
        if sinusoid is not None:
            options.append((sinusoid[0], 3, sinusoid[1]))
    if not options:
        return None
    cost, _, make = min(options, key=lambda o: (o[0], o[1]))
    if values.nbytes - cost < MIN_SAVED:
        return None
    return make()


def compact_constants(model: onnx.ModelProto, check: RuntimeCheck | None = None, *,
                      sinusoids: bool = True) -> Callable[[], None]:
    """Rewrite the main graph's qualifying initializers (module docstring) into their compact form, in
    place: the stored tensors take the original's place in the initializer list (and extra ones are
    appended), the decode nodes go first in the graph. ``check``: a runtime's verdict on a sinusoid
    form (the file step's runs onnxruntime). ``sinusoids=False``: no sinusoid form (its folding costs
    about ten times the table's bytes at session creation: bench/RESULTS.md, packed19). Returns the undo, which puts back exactly what was there
    (the in-memory model after the undo is the model before)."""
    graph = model.graph
    if not ENABLED:
        return lambda: None
    inputs = {i.name for i in graph.input}
    opset = model_opset(model, default=0)
    replaced: list[tuple[int, TensorProto]] = []
    appended: list[TensorProto] = []
    decoders: list[onnx.NodeProto] = []
    saved = 0
    for index, tensor in enumerate(graph.initializer):
        if tensor.name in inputs or is_external(tensor):
            continue
        width = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize if tensor.data_type not in (
            TensorProto.STRING, TensorProto.UNDEFINED) else 0
        if width < 2 or int(np.prod(tensor.dims, dtype=np.int64)) * width < MIN_SAVED:
            continue
        values = numpy_helper.to_array(tensor)
        form = compact_form(tensor, values, opset if sinusoids else None, check)
        if form is None:
            continue
        stored, nodes = form
        old = TensorProto()
        old.CopyFrom(tensor)
        replaced.append((index, old))
        tensor.CopyFrom(stored[0])
        appended.extend(stored[1:])
        decoders.extend(nodes)
        new_bytes = sum(len(t.raw_data) or t.ByteSize() for t in stored)
        saved += values.nbytes - new_bytes
        log.debug("constant %s %s stored as %s (%d -> %d bytes)", old.name, list(values.shape),
                  "+".join(n.op_type for n in nodes), values.nbytes, new_bytes)
    if not replaced:
        return lambda: None
    graph.initializer.extend(appended)
    for node in reversed(decoders):
        graph.node.insert(0, node)
    log.info("%d constants stored compactly (%.1f KiB saved)", len(replaced), saved / 1024)
    count, extra = len(decoders), len(appended)

    def undo() -> None:
        del graph.node[:count]
        if extra:
            del graph.initializer[len(graph.initializer) - extra:]
        for position, old in replaced:
            graph.initializer[position].CopyFrom(old)

    return undo
