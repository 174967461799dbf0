"""``x·clip(x+3, 0, 6)/6`` (Paddle spells HardSwish ``Add → Clip → Mul → Div``) → ``HardSwish`` (opset ≥ 14).

One of the fusions of prepare (why they matter: :mod:`onnxptq.graph.passes`).
"""

from __future__ import annotations

import onnx_ir as ir

from onnxptq.graph.opsets import model_opset
from onnxptq.graph.passes._common import (
    const_operand,
    constant_array,
    onnx_nodes,
    replace_output,
    rewrite_result,
    scalar_value,
    sole_user,
)

class FuseHardSwishPass(ir.passes.InPlacePass):
    """``Mul(x, Clip(Add(x, 3), 0, 6)) / 6`` (or ``· (1/6)``) → ``HardSwish(x)``."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if model_opset(model) < 14:
            return ir.passes.PassResult(model, modified=False)
        graph = model.graph
        count = 0
        for add in onnx_nodes(graph, "Add"):
            fused = self._match(add)
            if fused is None:
                continue
            x, nodes, final = fused
            hs = ir.node("HardSwish", [x], name=f"{final.name or 'HardSwish'}_fused")
            graph.insert_after(final, hs)
            replace_output(graph, final.outputs[0], hs.outputs[0])
            hs.outputs[0].type, hs.outputs[0].shape = final.outputs[0].type, final.outputs[0].shape
            for n in reversed(nodes):
                graph.remove(n, safe=True)
            count += 1
        return rewrite_result(model, count, "fused %d HardSwish pattern(s)")

    @staticmethod
    def _match(add: ir.Node):
        if len(add.inputs) != 2:
            return None
        for x in add.inputs:
            if scalar_value(const_operand(add, x)) != 3.0:
                continue
            clip = sole_user(add.outputs[0], "Clip")
            if clip is None or len(clip.inputs) < 3:
                continue
            if scalar_value(constant_array(clip.inputs[1])) != 0.0 or scalar_value(constant_array(clip.inputs[2])) != 6.0:
                continue
            mul = sole_user(clip.outputs[0], "Mul")
            if mul is None or set(id(v) for v in mul.inputs) != {id(x), id(clip.outputs[0])}:
                continue
            div = sole_user(mul.outputs[0], "Div")
            if div is not None and div.inputs[0] is mul.outputs[0] and scalar_value(constant_array(div.inputs[1])) == 6.0:
                return x, [add, clip, mul, div], div
            scale = sole_user(mul.outputs[0], "Mul")
            factor = scalar_value(const_operand(scale, mul.outputs[0])) if scale is not None else None
            if factor is not None and abs(factor - 1 / 6) < 1e-7:
                return x, [add, clip, mul, scale], scale
        return None
