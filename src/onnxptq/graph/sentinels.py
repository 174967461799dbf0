"""Attention-mask sentinels: which tensors carry "minus infinity" stand-ins, found from the graph.

Transformer exporters build the additive attention mask from a sentinel: ``(1 - mask) *
finfo(float32).min``, ``masked_fill(mask, -inf)`` (a ``Where`` on a boolean mask), or an older
``-10000.0``. The tensors on that path, and the masked attention scores they are added to, hold
values like -3.4e38 that only mean "this position gets zero probability after Softmax". A min/max
range taken over them spans the sentinel, so the scale is astronomically large (or infinite for
-inf, or for finfo.min once the range is widened) and every real score in the same tensor rounds
to zero.

Our decision (documented in ``docs/quantization.md``, "Attention masks"): such tensors **stay
float**. They are never quantized, so they never set a range: the mask path is a handful of cheap
elementwise ops, the masked scores go straight into Softmax, and Softmax's output (probabilities
in [0, 1]) is quantized as usual. Clipping the sentinel into the range instead would make the
masked positions' probability depend on the calibrated range (``exp(lo - max)`` is not zero for a
narrow int8 range), and would still need this detection to know what to clip.

Detection is structural, not statistical, so it holds whether or not the calibration data happens
to contain padding:

- a *sentinel constant* is a float initializer (or ``ConstantOfShape`` value) every element of
  which is either zero or at most :data:`SENTINEL_THRESHOLD`, and at least one of which is;
- so is a float *lookup table* read by ``Gather`` (its data input) holding any value at or below
  the threshold: Graphormer-style graph transformers (chython-rxnmap) keep the attention bias per
  shortest-path distance in an embedding whose padding row is ``-inf``, so the Gather's output is
  an additive mask of mostly real biases and some ``-inf`` (a block format whose kernel turns a
  block holding Inf into NaN, MX9's, would otherwise NaN every such block of the Softmax input);
- a tensor carries a sentinel when it is such a constant, or is the output of a mask-forming or
  value-preserving op (elementwise arithmetic, ``Where``, ``Cast``, ``Expand``, reshapes, slices,
  ``Concat``, ``Min``/``Max``) one of whose inputs carries a sentinel;
- what a sentinel *multiplies* stays float too, back to where it was computed (``(1 - mask)``
  and the ``Cast`` of the integer mask): a quantization error of 5e-4 on a "1" becomes -1.7e35
  once multiplied by finfo.min, which masks a position that should be visible;
- propagation stops at ``Softmax`` (its output is a probability) and at every other op (a
  reduction, a MatMul): there the sentinel has been consumed or the graph is not an attention mask.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import numpy_helper

from .external import tensor_values
from .ops import FLOATING
from .walk import dataflow

log = logging.getLogger(__name__)

__all__ = ["SENTINEL_THRESHOLD", "holds_sentinel", "is_sentinel_constant", "sentinel_tensors"]

#: Values at or below this stand for "masked out". -1e4 is the smallest sentinel exporters have
#: used (BERT's original ``-10000.0``); no weight or bias of a trained network comes near it.
SENTINEL_THRESHOLD = -1.0e4
#: positive values at or above this (half of float32's largest, and +inf) are "never this value" sentinels
HUGE = float(np.finfo(np.float32).max) / 2

#: Ops through which a mask keeps its sentinel values: arithmetic that builds the additive mask
#: and adds it to the scores, the boolean-mask select, and ops that move or broadcast values.
_PROPAGATING = frozenset(
    """Add Sub Mul Div Neg Where Cast CastLike Expand Tile Reshape Unsqueeze Squeeze Flatten Transpose
    Slice Gather Concat Identity Min Max Clip""".split()
)


def is_sentinel_constant(values: np.ndarray) -> bool:
    """True when ``values`` is a mask constant: only zeros and values <= :data:`SENTINEL_THRESHOLD`
    (-inf included), at least one of the latter. NaN never counts."""
    arr = np.asarray(values)
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.floating):
        return False
    # Compared in the tensor's own float type (the threshold is exact in float16 too): a float64
    # copy of every weight was the largest allocation of the sentinel scan. +finfo.max / +inf count
    # too: ``torch.nan_to_num`` exports both ``Where(IsInf(x) & (x > 0), +finfo.max, ·)`` and its
    # -finfo.max twin (pymupdf-layout's graph convs), and no scale quantizes either.
    huge = np.isposinf(arr) if float(np.finfo(arr.dtype).max) < HUGE else arr >= HUGE  # float16: only +inf (no overflowing cast)
    low = (arr <= SENTINEL_THRESHOLD) | huge
    return bool(low.any() and np.all(low | (arr == 0.0)))


def holds_sentinel(values: np.ndarray) -> bool:
    """True when any value of the float array ``values`` is at or below :data:`SENTINEL_THRESHOLD`
    (-inf included): a lookup table with a masked row. NaN never counts."""
    arr = np.asarray(values)
    return arr.size > 0 and np.issubdtype(arr.dtype, np.floating) and bool((arr <= SENTINEL_THRESHOLD).any())


def _constant_sources(graph: onnx.GraphProto) -> set[str]:
    sources: set[str] = set()
    tables = {node.input[0] for node in graph.node if node.op_type == "Gather" and node.input}
    for init in graph.initializer:
        if init.data_type not in FLOATING:
            continue
        values = tensor_values(init)
        if is_sentinel_constant(values) or (init.name in tables and holds_sentinel(values)):
            sources.add(init.name)
    for node in graph.node:
        if node.op_type not in ("Constant", "ConstantOfShape") or not node.output:
            continue
        for attr in node.attribute:
            if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                if attr.t.data_type in FLOATING and is_sentinel_constant(numpy_helper.to_array(attr.t)):
                    sources.add(node.output[0])
    return sources


def sentinel_tensors(model: onnx.ModelProto) -> set[str]:
    """Names of the main-graph tensors that carry attention-mask sentinels (constants included).

    A pure function of the graph: the model is read, never changed. Tensors computed from a
    sentinel constant through :data:`_PROPAGATING` ops are included; propagation stops at Softmax
    and at any other op.
    """
    graph = model.graph
    carrying = _constant_sources(graph)
    if not carrying:
        return set()
    _, consumers = dataflow(graph.node)
    work = list(carrying)
    while work:
        name = work.pop()
        for node in consumers.get(name, []):
            if node.op_type not in _PROPAGATING:
                continue
            if node.op_type == "Where" and name == node.input[0]:
                continue  # a sentinel used as the condition is no mask value
            for out in node.output:
                if out and out not in carrying:
                    carrying.add(out)
                    work.append(out)
    carrying |= _scaled_by_sentinel(graph, carrying)
    log.debug("attention-mask sentinels: %d tensors stay float (%s)", len(carrying), ", ".join(sorted(carrying)[:8]))
    return carrying


def _scaled_by_sentinel(graph: onnx.GraphProto, carrying: set[str]) -> set[str]:
    """Float tensors multiplied or divided by a sentinel, and the mask-forming chain before them.

    Walks back from the other operand of each ``Mul``/``Div`` with a sentinel input through
    :data:`_PROPAGATING` producers (``Sub``, ``Cast``, ``Unsqueeze``, ...), and stops at graph
    inputs, initializers other than the walk's constants, and any other producer: the scores an
    additive mask is *added* to are never reached, since ``Add`` is not walked back from.
    """
    producer = {out: node for node in graph.node for out in node.output if out}
    found: set[str] = set()
    work = [name for node in graph.node if node.op_type in ("Mul", "Div") and any(i in carrying for i in node.input)
            for name in node.input if name and name not in carrying]
    while work:
        name = work.pop()
        if name in found or name in carrying:
            continue
        found.add(name)
        node = producer.get(name)
        if node is None or node.op_type not in _PROPAGATING:
            continue
        positions = (1, 2) if node.op_type == "Where" else range(len(node.input))
        work.extend(node.input[i] for i in positions if i < len(node.input) and node.input[i])
    return found
