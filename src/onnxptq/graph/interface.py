"""A model's interface: the element types of its graph inputs and outputs.

Shared by the whole-model conversions (:mod:`onnxptq.conversion`: an fp16 model is widened,
converted, then given back its declared fp16 inputs/outputs by :func:`set_io_types`) and by the
quantizer, which computes an fp16 source in fp32 inside and keeps its fp16 interface
(:func:`onnxptq.graph.passes.widen_fp16.widen_inside`). In ``graph`` because both layers use it.
"""

from __future__ import annotations

import onnx
from onnx import helper

from .walk import FreshNames, all_graphs, rename_uses


def set_io_types(model: onnx.ModelProto, wanted: dict[str, int]) -> onnx.ModelProto:
    """Give graph inputs/outputs the element types in ``wanted`` (name -> TensorProto type), in place.

    Inserts a Cast after a retyped input (or retargets the Casts that already read it) and before a
    retyped output (or retargets the Cast that produces it). Used to give an fp16 model back its
    declared fp16 interface after conversion.
    """
    graph = model.graph
    names = FreshNames(model)
    new_head: list[onnx.NodeProto] = []
    for inp in graph.input:
        want = wanted.get(inp.name)
        have = inp.type.tensor_type.elem_type
        if want is None or want == have:
            continue
        inp.type.tensor_type.elem_type = want
        consumers = [n for n in graph.node if inp.name in n.input]
        if consumers and all(n.op_type == "Cast" and not n.domain for n in consumers) and all(
            len([i for i in n.input if i]) == 1 for n in consumers
        ):
            _retype_value_info(graph, inp.name, want)
            continue  # a Cast reads any numeric type: nothing to insert
        wide = names(f"{inp.name}_cast")
        rename_uses(graph, inp.name, wide)
        _rename_value_info(graph, inp.name, wide)
        new_head.append(helper.make_node("Cast", [inp.name], [wide], name=wide, to=have))
    tail: list[onnx.NodeProto] = []
    for out in graph.output:
        want = wanted.get(out.name)
        have = out.type.tensor_type.elem_type
        if want is None or want == have:
            continue
        out.type.tensor_type.elem_type = want
        producer = next((n for n in graph.node if out.name in n.output), None)
        other_uses = any(out.name in n.input for g in all_graphs(graph) for n in g.node)
        if producer is not None and producer.op_type == "Cast" and not producer.domain and not other_uses:
            next(a for a in producer.attribute if a.name == "to").i = want
            _retype_value_info(graph, out.name, want)
            continue
        inner = names(f"{out.name}_{onnx.helper.tensor_dtype_to_np_dtype(have).name}")
        if producer is not None:
            producer.output[list(producer.output).index(out.name)] = inner
        rename_uses(graph, out.name, inner)
        _rename_value_info(graph, out.name, inner)
        tail.append(helper.make_node("Cast", [inner], [out.name], name=names(f"{out.name}_cast"), to=want))
    nodes = new_head + list(graph.node) + tail
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _retype_value_info(graph: onnx.GraphProto, name: str, elem_type: int) -> None:
    """A value_info entry of a retyped graph input/output says its new type (a stale one fails the session's type check)."""
    for vi in graph.value_info:
        if vi.name == name and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.elem_type = elem_type


def _rename_value_info(graph: onnx.GraphProto, old: str, new: str) -> None:
    """A value_info entry follows its tensor to the inner name the inserted Cast reads or writes (its type is that tensor's)."""
    for vi in graph.value_info:
        if vi.name == old:
            vi.name = new


def io_types(model: onnx.ModelProto) -> dict[str, int]:
    """Declared element types of the graph's inputs and outputs."""
    return {vi.name: vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}


def has_type(model: onnx.ModelProto, elem_type: int) -> bool:
    """Whether any tensor, declared type or tensor attribute of any graph has ``elem_type``."""
    for graph in all_graphs(model.graph):
        if any(i.data_type == elem_type for i in graph.initializer):
            return True
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            if vi.type.tensor_type.elem_type == elem_type:
                return True
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == elem_type:
                    return True
    return False
