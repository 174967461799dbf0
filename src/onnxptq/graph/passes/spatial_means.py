"""A mean over every spatial axis of a channels-first tensor → ``GlobalAveragePool`` (and ``Flatten``
where the reduced axes are dropped).

Why: torch's default exporter (``dynamo=True``, torch ≥ 2.9) writes ``adaptive_avg_pool2d(x, 1)`` and
``x.mean((2, 3), keepdim=...)`` as ``ReduceMean(axes=[2, 3])`` where TorchScript writes
``GlobalAveragePool``; timm's classifier heads, squeeze-excite blocks and PaddleOCR's exports spell it
the same way. onnxruntime's CPU provider has an integer ``GlobalAveragePool`` (QDQ →
``QLinearGlobalAveragePool``) and none for ``ReduceMean``, so the CPU plan left these pools float and a
dynamo export got fewer integer nodes than its TorchScript twin of the same weights
(bench/RESULTS.md, "torch's default exporter (dynamo=True) against TorchScript"). The two ops compute
the same mean; only the order of the additions may differ (float rounding of the last bits).

What is a spatial mean, decided by dataflow and shapes, never by names:

* the reduced axes are exactly ``2 … rank-1`` of a rank-3/4/5 tensor (negative axes normalised),
  i.e. everything but the batch and channel axes — the axes ``GlobalAveragePool`` averages;
* the tensor is channels-first by construction: walking back through ops that keep their input's
  layout (elementwise arithmetic and activations, Concat, Pad, Resize, Cast, Slice …), it comes
  from an op whose ONNX definition lays out ``N × C × D1 … Dn`` (Conv, ConvTranspose, pooling,
  BatchNormalization, InstanceNormalization, DepthToSpace …), or from such a tensor flattened from
  axis 2 on (``x.flatten(2).mean(-1)``). A ``[batch, tokens, features]`` tensor's last-axis mean
  (a LayerNorm/RMSNorm written out) fails this test and is left alone, so the norm rules that read
  ``ReduceMean`` (graph/structure.py, the LayerNorm fusion) see what they always saw.

``keepdims=1`` becomes ``GlobalAveragePool`` alone; ``keepdims=0`` becomes ``GlobalAveragePool →
Flatten(axis=1)`` (``N × C × 1 … 1`` → ``N × C``, the shape ReduceMean gave). The pool keeps the
ReduceMean's node name and the last op its output name, so overrides and reports that name them
still apply.
"""

from __future__ import annotations

import onnx_ir as ir

from onnxptq.graph.opsets import is_onnx_domain
from onnxptq.graph.passes._common import collect_names, constant_array, onnx_nodes, reduce_axes, replace_output, rewrite_result, unique_name

__all__ = ["SpatialMeanToGlobalPoolPass", "channels_first", "spatial_mean_keepdims"]

#: Ops whose ONNX definition lays their (first) output out as ``N × C × D1 … Dn``.
CHANNELS_FIRST_SOURCES = frozenset(
    """Conv ConvTranspose ConvInteger QLinearConv DeformConv MaxPool AveragePool LpPool GlobalAveragePool
    GlobalMaxPool GlobalLpPool MaxUnpool MaxRoiPool RoiAlign BatchNormalization InstanceNormalization LRN
    DepthToSpace SpaceToDepth""".split()
)
#: Ops whose output has the layout of their full-rank data inputs: elementwise arithmetic (broadcast
#: operands of lower rank do not decide it), activations, and ops that only pad, resize, cut or cast.
LAYOUT_KEEPING = frozenset(
    """Add Sub Mul Div Pow Max Min Sum Mean Where Relu LeakyRelu PRelu Elu Selu Celu ThresholdedRelu Sigmoid
    HardSigmoid HardSwish Swish Mish Gelu Tanh Softplus Softsign Erf Exp Log Abs Neg Sqrt Reciprocal Clip
    Floor Ceil Round Sign Identity Dropout Cast Concat Pad Resize Upsample Slice Split""".split()
)
#: How far back the layout walk looks before it gives up (a long residual chain is still found).
_MAX_STEPS = 256


def spatial_mean_keepdims(node: ir.Node) -> int | None:
    """``node``'s ``keepdims`` (0 or 1) when it is a ReduceMean over exactly the axes ``2 … rank-1``
    of a rank-3/4/5 tensor of known rank, else None."""
    if node.op_type != "ReduceMean" or not is_onnx_domain(node.domain) or not node.inputs or node.inputs[0] is None:
        return None
    shape = node.inputs[0].shape
    axes = reduce_axes(node)
    if shape is None or axes is None or not 3 <= len(shape) <= 5:
        return None
    rank = len(shape)
    if any(not -rank <= a < rank for a in axes) or sorted(a % rank for a in axes) != list(range(2, rank)):
        return None
    keep = node.attributes["keepdims"].as_int() if "keepdims" in node.attributes else 1
    return keep if keep in (0, 1) else None


def _flattens_spatial(node: ir.Node) -> bool:
    """Whether ``node`` keeps axes 0 and 1 of its input and merges the rest (``x.flatten(2)``): a
    Reshape to rank 3 whose first two target sizes copy the input's (``0``, or the same static size).
    Flatten does not qualify: it always yields rank 2."""
    if node.op_type != "Reshape" or len(node.inputs) < 2:
        return False
    if "allowzero" in node.attributes and node.attributes["allowzero"].as_int():
        return False  # a 0 is then a literal empty axis, not "copy the input's size"
    x, out = node.inputs[0], node.outputs[0]
    if x is None or x.shape is None or out.shape is None or len(x.shape) < 3 or len(out.shape) != 3:
        return False
    target = constant_array(node.inputs[1])
    if target is None or target.size != 3:
        return False
    lead = [int(t) for t in target.reshape(-1)[:2]]
    # 0 copies the input's dim (allowzero off); an equal static size keeps it too.
    return all(t == 0 or (isinstance(x.shape[i], int) and t == x.shape[i]) for i, t in enumerate(lead))


def channels_first(value: ir.Value) -> bool:
    """Whether ``value`` is laid out ``N × C × D1 … Dn`` by construction (see the module docstring)."""
    stack, seen, steps = [value], set(), 0
    while stack and steps < _MAX_STEPS:
        v = stack.pop()
        steps += 1
        if id(v) in seen:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None or not is_onnx_domain(node.domain):
            continue
        if node.op_type in CHANNELS_FIRST_SOURCES and v is node.outputs[0]:
            return True
        if _flattens_spatial(node):
            stack.append(node.inputs[0])
        elif node.op_type in LAYOUT_KEEPING and v.shape is not None:
            for x in node.inputs:
                # Only inputs of the output's rank carry its layout (a broadcast [C,1,1] scale does not);
                # the rank is this value's own (a flatten(2) above changed it from the mean's input's).
                if x is not None and x.shape is not None and len(x.shape) == len(v.shape):
                    stack.append(x)
    return False


class SpatialMeanToGlobalPoolPass(ir.passes.InPlacePass):
    """``ReduceMean`` over every spatial axis of a channels-first tensor → ``GlobalAveragePool``
    (``keepdims=0``: followed by ``Flatten(axis=1)``)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = collect_names(model)
        count = 0
        for mean in onnx_nodes(graph, "ReduceMean"):
            keep = spatial_mean_keepdims(mean)
            if keep is None or not channels_first(mean.inputs[0]):
                continue
            x, out = mean.inputs[0], mean.outputs[0]
            pool = ir.node("GlobalAveragePool", [x], name=mean.name)
            graph.insert_after(mean, pool)
            pooled = pool.outputs[0]
            pooled.type = out.type
            pooled.shape = ir.Shape([*x.shape[:2], *([1] * (len(x.shape) - 2))])
            last = pool
            if keep == 0:
                pooled.name = unique_name(names, f"{out.name or mean.name or 'mean'}_pooled")
                last = ir.node("Flatten", [pooled], attributes={"axis": 1},
                               name=unique_name(names, f"{mean.name or 'mean'}_flatten"))
                graph.insert_after(pool, last)
            last.outputs[0].type, last.outputs[0].shape = out.type, out.shape
            replace_output(graph, out, last.outputs[0])
            graph.remove(mean, safe=True)
            count += 1
        return rewrite_result(model, count, "rewrote %d spatial ReduceMean(s) as GlobalAveragePool")
