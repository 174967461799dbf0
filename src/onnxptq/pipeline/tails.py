"""Post-processing tails: the decode arithmetic after a model's last weighted layer stays float.

Detectors and recognisers end in arithmetic that only decodes what the last Conv/Gemm/MatMul
computed: a Sigmoid or Softmax, a grid Add and a stride Mul, Concat of boxes and scores, Split,
Slice, Reshape, Transpose, TopK, NonMaxSuppression. Quantizing it buys no speed (there is no
weighted kernel to run in integer) and it is where ranges of different meaning meet (pixels and
probabilities in one tensor), so by default these nodes are left float; ``QuantConfig.
quantize_postprocessing`` (CLI ``--quantize-postprocessing``) quantizes them like any other node.

The rule is structural, never a model's name: a node belongs to the tail when its op type only
decodes, it has a weighted node upstream, no weighted node downstream, and every node between it
and the graph outputs is in the tail too.
"""

from __future__ import annotations

import onnx

from ..graph.walk import dataflow

#: ops that only decode: elementwise arithmetic, activations to probabilities, rearrangement, selection
TAIL_OPS = frozenset(
    """Sigmoid Softmax LogSoftmax Mul Add Sub Div Concat Split Slice Reshape Transpose TopK NonMaxSuppression
    Squeeze Unsqueeze Flatten Gather ArgMax ReduceMax Cast""".split()
)
#: ops that carry learned weights: the tail starts after the last of them
WEIGHTED_OPS = frozenset("Conv ConvTranspose Gemm MatMul".split())

TAIL_REASON = "post-processing tail after the last weighted layer (quantize_postprocessing=True quantizes it)"


def _weighted(node: onnx.NodeProto, initializers: set[str]) -> bool:
    return node.op_type in WEIGHTED_OPS and any(i in initializers for i in node.input[1:] if i)


def postprocessing_tail(model: onnx.ModelProto) -> set[str]:
    """Names of the main-graph nodes that form post-processing tails (see the module docstring)."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    producer, consumers = dataflow(graph.node)

    # Nodes with a weighted node upstream (graph order is topological).
    after_weighted: set[str] = set()
    for node in graph.node:
        ups = [producer[i] for i in node.input if i in producer]
        if any(_weighted(u, initializers) or u.name in after_weighted for u in ups):
            after_weighted.add(node.name)

    # Walk backwards from the outputs: a node is in the tail when it decodes, follows a weighted
    # node, and everything reading it is in the tail too (or it feeds only graph outputs).
    tail: set[str] = set()
    for node in reversed(graph.node):
        if node.op_type not in TAIL_OPS or node.name not in after_weighted or _weighted(node, initializers):
            continue
        readers = [r for out in node.output if out for r in consumers.get(out, [])]
        if all(r.name in tail for r in readers):
            tail.add(node.name)
    return tail
