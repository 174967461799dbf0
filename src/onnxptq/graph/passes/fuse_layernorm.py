"""The mean/variance decomposition exporters write for LayerNorm (nine elementwise ops) →
``LayerNormalization`` (opset ≥ 17). PP-OCRv4's recogniser had nine int8 roundings between two
convolutions instead of two, which alone cost it ~0.1 CER at A8W8.

One of the fusions of prepare (why they matter: :mod:`onnxptq.graph.passes`).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxptq.graph.opsets import model_opset
from onnxptq.graph.passes._common import (
    collect_names,
    const_operand,
    constant_array,
    make_initializer,
    onnx_nodes,
    reduce_axes,
    replace_output,
    rewrite_result,
    scalar_value,
    sole_user,
    unique_name,
)

class FuseLayerNormPass(ir.passes.InPlacePass):
    """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul/Add] over the last axis → LayerNormalization."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model_opset(model) < 17:
            return ir.passes.PassResult(model, modified=False)
        names = collect_names(model)
        count = 0
        # every graph: an exporter that wraps the network in an If writes the same spelling in its branch
        # (openWakeWord's classifiers), and onnxruntime's own LayerNormFusion, finding it there after a float16
        # or bfloat16 quantizer's Cast, bound the Cast's 16-bit input to the fused op beside a float scale
        # (its session then refused the model): fused here, the branch holds the one op as the main graph does
        for graph in (model.graph, *model.graph.subgraphs()):
            count += self._fuse(model, graph, names)
        return rewrite_result(model, count, "fused %d LayerNormalization pattern(s)")

    def _fuse(self, model: ir.Model, graph: ir.Graph, names: set[str]) -> int:
        """The spellings of ``graph`` itself fused; how many. A scale made for a spelling without one is a main-graph
        initializer (a subgraph reads it from the outer scope)."""
        count = 0
        for mean in onnx_nodes(graph, "ReduceMean"):
            match = self._match(mean)
            if match is None:
                continue
            x, eps, gamma, beta, nodes, final = match
            width = None
            if x.shape is not None and len(x.shape) and isinstance(x.shape[-1], int):
                width = x.shape[-1]
            if gamma is None:
                if width is None or x.dtype is None:
                    continue
                # the scale in the normalized tensor's own type: LayerNormalization binds X and Scale to one
                # type, and a float16 graph kept in float16 (FP16 on an fp16 model) refused a float32 one
                gamma = make_initializer(model.graph, unique_name(names, f"{mean.name}_ln_scale"), np.ones(width, x.dtype.numpy()))
            inputs = [x, gamma] + ([beta] if beta is not None else [])
            ln = ir.node("LayerNormalization", inputs, attributes={"axis": -1, "epsilon": float(eps)},
                         name=f"{final.name or 'LayerNorm'}_fused")
            graph.insert_after(final, ln)
            ln.outputs[0].type, ln.outputs[0].shape = final.outputs[0].type, final.outputs[0].shape
            replace_output(graph, final.outputs[0], ln.outputs[0])
            for n in reversed(nodes):
                graph.remove(n, safe=True)
            count += 1
        return count

    @staticmethod
    def _last_axis(node: ir.Node) -> bool:
        axes = reduce_axes(node)
        keep = node.attributes["keepdims"].as_int() if "keepdims" in node.attributes else 1
        if axes != [-1] or keep != 1:
            return False
        return True

    def _match(self, mean: ir.Node):
        if not self._last_axis(mean):
            return None
        x = mean.inputs[0]
        users = [u[0] if isinstance(u, tuple) else u.node for u in mean.outputs[0].uses()]
        if len(users) != 1 or users[0].op_type != "Sub" or users[0].inputs[0] is not x or users[0].inputs[1] is not mean.outputs[0]:
            return None
        sub = users[0]
        d = sub.outputs[0]
        d_users = [u[0] if isinstance(u, tuple) else u.node for u in d.uses()]
        if len(d_users) != 2 or d.is_graph_output():
            return None
        pow_ = next((u for u in d_users if u.op_type == "Pow" and u.inputs[0] is d), None)
        div = next((u for u in d_users if u.op_type == "Div" and u.inputs[0] is d), None)
        if pow_ is None or div is None or scalar_value(constant_array(pow_.inputs[1])) != 2.0:
            return None
        var = sole_user(pow_.outputs[0], "ReduceMean")
        if var is None or not self._last_axis(var):
            return None
        add = sole_user(var.outputs[0], "Add")
        eps = scalar_value(const_operand(add, var.outputs[0])) if add is not None else None
        if eps is None:
            return None
        sqrt = sole_user(add.outputs[0], "Sqrt")
        if sqrt is None or div.inputs[1] is not sqrt.outputs[0] or len(list(sqrt.outputs[0].uses())) != 1:
            return None
        nodes = [mean, sub, pow_, var, add, sqrt, div]
        final, gamma, beta = div, None, None
        mul = sole_user(div.outputs[0], "Mul")
        if mul is not None:
            other = mul.inputs[1] if mul.inputs[0] is div.outputs[0] else mul.inputs[0]
            arr = constant_array(other)
            if arr is not None and arr.ndim == 1:
                gamma, final = other, mul
                nodes.append(mul)
                add_b = sole_user(mul.outputs[0], "Add")
                if add_b is not None:
                    other_b = add_b.inputs[1] if add_b.inputs[0] is mul.outputs[0] else add_b.inputs[0]
                    arr_b = constant_array(other_b)
                    if arr_b is not None and arr_b.ndim == 1:
                        beta, final = other_b, add_b
                        nodes.append(add_b)
        return x, eps, gamma, beta, nodes, final
