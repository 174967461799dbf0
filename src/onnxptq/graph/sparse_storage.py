"""Sparse float initializers: read them as dense tensors, and write mostly-zero float ones sparse.

Why: exporters build mostly-zero constants at run time from a few values (swift-f0's mel filter
banks are ``ConstantOfShape → ScatterElements → Reshape`` over 2,036 stored weights). Constant
folding (graph/passes/fold_constants.py) must turn them into initializers, or the quantizer would
see a weight as an activation; but a folded filter bank of 1025×128 float32 is 0.5 MB where the
exporter stored 24 kB, and where the plan keeps it float (it feeds a Log) the quantized file grew to
8× the float one. ONNX's ``sparse_initializer`` (COO: the non-zero values and their flat indices)
stores such a tensor in what it holds, and onnxruntime makes it dense at session creation: the same
values, bit for bit, at no run-time cost.

Reading: onnx-ir (which the passes use) drops ``sparse_initializer`` entries, leaving their
readers dangling, so :func:`densify` turns every sparse initializer of every graph into a dense
initializer on load, and the pipeline never sees one.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .walk import all_graphs

__all__ = ["densify", "sparsify_floats", "MIN_ELEMENTS", "MAX_DENSITY"]

#: Tensors below this many elements stay dense (the saving would be a few kB at most).
MIN_ELEMENTS = 4096
#: A COO entry costs an int64 index besides its value: at most one non-zero in 8 keeps the sparse
#: form under 40 % of a float32 tensor's bytes (under 70 % of a float16 one's).
MAX_DENSITY = 0.125
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)


def _dense(sparse: onnx.SparseTensorProto) -> onnx.TensorProto:
    """The dense tensor a SparseTensorProto stands for (flat ``[nnz]`` or coordinate ``[nnz, rank]`` indices)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    shape = tuple(int(d) for d in sparse.dims)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), shape) if indices.size else indices.reshape(-1)
    dense = np.zeros(math.prod(shape), dtype=values.dtype)
    dense[indices] = values.reshape(-1)
    return numpy_helper.from_array(dense.reshape(shape), sparse.values.name)


def densify(model: onnx.ModelProto) -> onnx.ModelProto:
    """Move every ``sparse_initializer`` of ``model`` (main graph and bodies) into ``initializer``, dense. In place."""
    for graph in all_graphs(model.graph):
        if graph.sparse_initializer:
            graph.initializer.extend(_dense(s) for s in graph.sparse_initializer)
            del graph.sparse_initializer[:]
    return model


def _sparse(tensor: onnx.TensorProto, min_elements: int, max_density: float) -> onnx.SparseTensorProto | None:
    if tensor.data_type not in _FLOAT_TYPES or tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None
    size = math.prod(tensor.dims)
    if size < min_elements:
        return None
    flat = numpy_helper.to_array(tensor).reshape(-1)
    nonzero = np.flatnonzero(flat != 0)  # -0.0 == 0: a signed zero reads back as +0.0, which no op tells apart here
    if len(nonzero) > max_density * size or np.signbit(flat[flat == 0]).any():
        return None
    values = numpy_helper.from_array(flat[nonzero], tensor.name)
    return helper.make_sparse_tensor(values, numpy_helper.from_array(nonzero.astype(np.int64), f"{tensor.name}_indices"),
                                     list(tensor.dims))


def sparsify_floats(model: onnx.ModelProto, *, min_elements: int = MIN_ELEMENTS,
                    max_density: float = MAX_DENSITY) -> onnx.ModelProto:
    """``model`` with its mostly-zero float initializers (main graph; ≥ ``min_elements``, at most
    ``max_density`` non-zero, no -0.0) stored as ``sparse_initializer``. A new ModelProto when any
    qualifies (the caller's model is left as it was), else ``model`` itself. Initializers that are
    also graph inputs (overridable defaults) stay dense."""
    inputs = {i.name for i in model.graph.input}
    found = {i: s for i, t in enumerate(model.graph.initializer) if t.name not in inputs
             for s in [_sparse(t, min_elements, max_density)] if s is not None}
    if not found:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [t for i, t in enumerate(out.graph.initializer) if i not in found]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    out.graph.sparse_initializer.extend(found.values())
    return out
