"""``Mul(c) [→ Add(d)] → Conv`` with scalar constants (the "learnable affine" PP-LCNetV3 puts after
each activation) folds into the *next* convolution: ``c`` always (zero padding stays zero), ``d``
into the bias when the convolution has no padding, else it stays as ``Add(d/c)`` before it.

One of the fusions of prepare (why they matter: :mod:`onnxptq.graph.passes`).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxptq.graph.passes._common import (
    collect_names,
    constant_array,
    is_onnx_domain,
    onnx_nodes,
    rewrite_result,
    set_node_constant,
)

class FoldScalarAffineIntoConvPass(ir.passes.InPlacePass):
    """Fold ``Mul(x, c)`` and ``Add(·, d)`` with scalar constants into the Conv that reads them.

    Why: PP-LCNetV3 (PP-OCRv4) follows 28 activations with a learnable ``·c + d``; each adds two
    tensors that a quantizer must round (and, for block formats, two function calls per layer)
    although a convolution absorbs them: ``W * (c·x + d) = (c·W) * x + d·ΣW``. The scale is exact
    for any padding (padded zeros stay zero); the shift only without padding, so with padding
    ``c·x + d`` is rewritten as ``c·(x + d/c)`` and the Add stays (one tensor instead of two).
    Float results change by rounding only.

    Not folded: the ``·½`` that ends a written-out GELU (``Mul(x, 1 + erf(x/√2)) · ½``, as Paddle
    exports it; tanh form likewise). Without it onnxruntime no longer recognises the GELU and runs
    Div, Erf, Add, Mul instead of one ``Gelu`` node, and a bf16/fp16 plan rounds the unfinished
    product (PP-OCRv6 det tiny: 13 GELUs; bench/RESULTS.md "Block formats' latency on models
    outside the zoo").
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = collect_names(model)
        count = 0
        for conv in onnx_nodes(graph, "Conv"):
            while self._fold_one(graph, conv, names):
                count += 1
        return rewrite_result(model, count, "folded %d scalar Mul/Add node(s) into the convolutions that read them")

    @staticmethod
    def _padded(conv: ir.Node) -> bool:
        auto_pad = conv.attributes["auto_pad"].as_string() if "auto_pad" in conv.attributes else "NOTSET"
        if auto_pad not in ("NOTSET", "VALID"):
            return True
        pads = conv.attributes["pads"].as_ints() if "pads" in conv.attributes else []
        return any(int(p) != 0 for p in pads)

    @staticmethod
    def _scalar_input(node: ir.Node | None, op_type: str) -> tuple[ir.Value, ir.Value, np.ndarray] | None:
        """``(variable input, constant input, constant)`` of a binary ``op_type`` with a scalar constant."""
        if node is None or node.op_type != op_type or not is_onnx_domain(node.domain) or len(node.inputs) != 2:
            return None
        for var, const in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            array = constant_array(const)
            if array is not None and array.size == 1 and array.dtype.kind == "f" and constant_array(var) is None:
                return var, const, array
        return None

    @staticmethod
    def _ends_gelu(value: ir.Value) -> bool:
        """Whether ``value`` is ``Mul(x, Add(Erf|Tanh(·), c))``: a GELU before its final scale."""
        node = value.producer()
        if node is None or node.op_type != "Mul" or not is_onnx_domain(node.domain):
            return False
        for operand in node.inputs:
            add = operand.producer() if operand is not None else None
            if add is None or add.op_type != "Add" or not is_onnx_domain(add.domain):
                continue
            if any(i is not None and i.producer() is not None and i.producer().op_type in ("Erf", "Tanh") for i in add.inputs):
                return True
        return False

    def _fold_one(self, graph: ir.Graph, conv: ir.Node, names: set[str]) -> bool:
        x = conv.inputs[0]
        weight = constant_array(conv.inputs[1]) if len(conv.inputs) > 1 else None
        if x is None or weight is None or weight.dtype.kind != "f" or x.is_graph_output() or len(x.uses()) != 1:
            return False
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = constant_array(bias_value) if bias_value is not None else None
        if bias_value is not None and bias is None:
            return False
        producer = x.producer()
        if producer is None or producer.graph is not graph:
            return False
        mul = self._scalar_input(producer, "Mul")
        if mul is not None and self._ends_gelu(mul[0]):
            return False
        if mul is not None and mul[2].dtype == weight.dtype:
            set_node_constant(graph, conv, 1, (weight.astype(np.float64) * float(mul[2].reshape(-1)[0])).astype(weight.dtype),
                              names, "scaled")
            conv.replace_input_with(0, mul[0])
            graph.remove(producer, safe=True)
            return True
        add = self._scalar_input(producer, "Add")
        if add is None or add[2].dtype != weight.dtype:
            return False
        shift = float(add[2].reshape(-1)[0])
        if not self._padded(conv):
            b = np.zeros(weight.shape[0]) if bias is None else bias.astype(np.float64).reshape(-1)
            b = b + shift * weight.astype(np.float64).reshape(weight.shape[0], -1).sum(axis=1)
            set_node_constant(graph, conv, 2, b.astype(weight.dtype), names, "shifted")
            conv.replace_input_with(0, add[0])
            graph.remove(producer, safe=True)
            return True
        # Padded: move the scale across the Add (c·t + d = c·(t + d/c)) when a scalar Mul feeds it.
        t = add[0]
        mul_node = t.producer() if not t.is_graph_output() and len(t.uses()) == 1 else None
        inner = self._scalar_input(mul_node, "Mul")
        if inner is None or mul_node.graph is not graph or inner[2].dtype != weight.dtype:
            return False
        scale = float(inner[2].reshape(-1)[0])
        if scale == 0.0:
            return False
        index = 1 if producer.inputs[1] is add[1] else 0
        set_node_constant(graph, producer, index, np.asarray(shift / scale, dtype=weight.dtype).reshape(add[2].shape),
                          names, "prescaled")
        producer.replace_input_with(1 - index, inner[0])
        set_node_constant(graph, conv, 1, (weight.astype(np.float64) * scale).astype(weight.dtype), names, "scaled")
        graph.remove(mul_node, safe=True)
        return True
