"""Read the precision a node sees on an input straight from a quantized graph (for tests).

Independent of the plan: it walks back from a node's input through the quantizer nodes the emitter
writes (Q/DQ pairs, Cast pairs, our-domain functions, folded weight initializers) and names each
format it passes, source first. Tests use it to check which precision each layer really got.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, numpy_helper

_INT_NAMES = {
    TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.INT16: "int16", TensorProto.UINT16: "uint16",
    TensorProto.INT32: "int32", TensorProto.UINT32: "uint32", TensorProto.INT4: "int4", TensorProto.UINT4: "uint4",
}
_FLOAT_NAMES = {TensorProto.BFLOAT16: "bf16", TensorProto.FLOAT16: "fp16", TensorProto.FLOAT8E4M3FN: "fp8_e4m3",
                TensorProto.FLOAT8E5M2: "fp8_e5m2"}
#: folded float weights are stored as '<name>_<format>' initializers
_FOLDED = ("bfp", "mx", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2")


class GraphIndex:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.producer = {o: n for n in model.graph.node for o in n.output if o}
        self.inits = {t.name: t for t in model.graph.initializer}
        self.nodes = {n.name: n for n in model.graph.node}

    def _attr(self, node: onnx.NodeProto, name: str):
        from onnxptq.graph.call_attributes import call_attribute

        return call_attribute(self.model, node, name)  # on the call, or its function's default (a delivered file)

    def chain(self, tensor: str) -> list[str]:
        """Formats the value of ``tensor`` passed through, source first (empty: unquantized)."""
        labels: list[str] = []
        name = tensor
        while True:
            node = self.producer.get(name)
            if node is None:
                if name in self.inits:
                    suffix = next((f for f in _FOLDED if name.endswith("_" + f) or f"_{f}_" in name), None)
                    if suffix:
                        labels.append(suffix)
                return labels[::-1]
            if node.domain == "onnxptq":
                if node.op_type.startswith("BFPQuantizeDequantize"):
                    method = self._attr(node, "bfp_method")
                    labels.append("mx(prime)" if method in (b"to_bfp_prime", "to_bfp_prime") else "bfp")
                elif node.op_type.startswith("MXQuantizeDequantize"):
                    labels.append("mx")
                else:
                    labels.append(_FLOAT_NAMES.get(self._attr(node, "to"), node.op_type))
                name = node.input[0]
            elif node.op_type == "DequantizeLinear":
                zp = self.inits.get(node.input[2]) if len(node.input) > 2 else None
                q = self.inits.get(node.input[0])
                dtype = (zp or q).data_type if (zp or q) is not None else None
                labels.append(_INT_NAMES.get(dtype) or _FLOAT_NAMES.get(dtype, "dq?"))
                src = self.producer.get(node.input[0])
                if src is not None and src.op_type == "QuantizeLinear":
                    name = src.input[0]
                else:
                    return labels[::-1]
            elif self.constant(name) and any(name.endswith("_" + f) for f in _FOLDED):
                # a packed weight (onnx_ops/packed.py): a decode chain on initializers only,
                # ending in the tensor named like the folded initializer it replaces
                labels.append(next(f for f in _FOLDED if name.endswith("_" + f)))
                return labels[::-1]
            elif node.op_type == "Cast" and self._attr(node, "to") == TensorProto.FLOAT:
                src = self.producer.get(node.input[0])
                if src is not None and src.op_type == "Cast" and self._attr(src, "to") in _FLOAT_NAMES:
                    labels.append(_FLOAT_NAMES[self._attr(src, "to")])
                    name = src.input[0]
                else:
                    return labels[::-1]
            else:
                return labels[::-1]

    def constant(self, tensor: str) -> bool:
        """Whether ``tensor`` is computed from initializers only (no graph input upstream)."""
        seen, todo = set(), [tensor]
        while todo:
            name = todo.pop()
            if name in seen or not name:
                continue
            seen.add(name)
            node = self.producer.get(name)
            if node is None:
                if name not in self.inits:
                    return False
                continue
            todo.extend(node.input)
        return True

    def constant_value(self, tensor: str):
        """The value of a tensor computed from initializers only, evaluated by onnxruntime."""
        import onnxruntime as ort

        nodes, seen, todo = [], set(), [tensor]
        while todo:
            name = todo.pop()
            node = self.producer.get(name)
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            nodes.append(node)
            todo.extend(node.input)
        order = [n for n in self.model.graph.node if id(n) in seen]
        used = {i for n in order for i in n.input}
        graph = onnx.helper.make_graph(order, "constant", [], [onnx.helper.make_empty_tensor_value_info(tensor)],
                                       initializer=[t for n, t in self.inits.items() if n in used])
        model = onnx.helper.make_model(graph, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]

    def input_chain(self, node_name: str, index: int) -> list[str]:
        return self.chain(self.nodes[node_name].input[index])

    def weight_values(self, node_name: str, index: int = 1):
        """The dequantized-or-folded weight array a node reads (None when it is computed at run time)."""
        name = self.nodes[node_name].input[index]
        node = self.producer.get(name)
        if node is None:
            return numpy_helper.to_array(self.inits[name]) if name in self.inits else None
        if self.constant(name) and self.chain(name):  # a packed weight: decode it
            return self.constant_value(name)
        return None


def mx_scale_search(model: onnx.ModelProto) -> dict[str, int]:
    """The ``scale_search`` attribute of each MX quantizer node, by the tensor it reads (which
    exponent rule each MX activation got: OCP's, or the unsaturated one)."""
    from onnxptq.graph.call_attributes import call_attribute

    return {n.input[0]: call_attribute(model, n, "scale_search")  # on the call, or its function's default
            for n in model.graph.node if n.op_type.startswith("MXQuantizeDequantize")}
