"""Shared plumbing for the prepare passes: ModelProto <-> onnx-ir conversion and small IR helpers.

Why one place: every public pass is a ``ModelProto -> ModelProto`` function (so callers and tests
never see the IR), while ``prepare`` composes the same work as onnx-ir passes on one in-memory model
(so a large model is converted once, not once per pass). Both paths go through these helpers.
"""

from __future__ import annotations

import logging
import numpy as np
import onnx
import onnx_ir as ir

from onnxptq.graph import external
from onnxptq.graph.io import pin_versions
from onnxptq.graph.opsets import is_onnx_domain

log = logging.getLogger(__name__)


def to_ir(model: onnx.ModelProto) -> ir.Model:
    """Deserialize a copy of ``model`` into onnx-ir, so the caller's proto is never modified.

    The copy is needed: onnx-ir wraps the proto's TensorProtos lazily instead of copying them, and
    some passes rename those tensors in place (the Constant lifter names a tensor after its
    initializer), which would otherwise write through into the caller's model.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    untyped = strip_map_types(copy)
    result = ir.from_proto(copy)
    if untyped:
        result.meta[_MAP_TYPES] = untyped
    folder = external.active_dir()
    if folder is not None:
        # Streaming: external tensors stay lazy, resolved against the input's folder when a pass
        # reads them; to_proto writes them back as the same relative references.
        ir.external_data.set_base_dir(result.graph, folder)
    return result


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """Serialize ``model`` back to a ModelProto with an IR version onnxruntime accepts."""
    proto = pin_versions(ir.to_proto(model))
    untyped = model.meta.get(_MAP_TYPES)
    if untyped:
        restore_map_types(proto, untyped)
    return proto


#: ``ir.Model.meta`` key of the map types :func:`to_ir` took off (onnx-ir cannot hold them).
_MAP_TYPES = "onnxptq.map_types"


def _has_map(t: onnx.TypeProto) -> bool:
    kind = t.WhichOneof("value")
    if kind == "map_type":
        return True
    if kind == "sequence_type":
        return _has_map(t.sequence_type.elem_type)
    if kind == "optional_type":
        return _has_map(t.optional_type.elem_type)
    return False


def strip_map_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Take the types holding a map off ``model``'s inputs, outputs and value_info (in place), and
    return them by value name.

    Why: onnx-ir cannot deserialize map types ("Map types are not supported yet") and fails on the
    whole model. Every scikit-learn classifier converted by skl2onnx/onnxmltools ends in a ZipMap
    whose ``probabilities`` output is ``seq(map(int64|string, float))``; the quantizer never
    touches such a value (nothing to quantize in a map), so it travels untyped through the passes
    and :func:`restore_map_types` puts its type back.
    """
    from onnxptq.graph.walk import all_graphs

    taken: dict[str, onnx.TypeProto] = {}
    for graph in all_graphs(model.graph):
        for field in (graph.input, graph.output, graph.value_info):
            for info in field:
                if info.HasField("type") and _has_map(info.type):
                    saved = onnx.TypeProto()
                    saved.CopyFrom(info.type)
                    taken[info.name] = saved
                    info.ClearField("type")
    return taken


def restore_map_types(model: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> onnx.ModelProto:
    """Put back on ``model``'s untyped values the map types :func:`strip_map_types` took off (in place)."""
    from onnxptq.graph.walk import all_graphs

    for graph in all_graphs(model.graph):
        for field in (graph.input, graph.output, graph.value_info):
            for info in field:
                if info.name in types and not info.type.WhichOneof("value"):
                    info.type.CopyFrom(types[info.name])
    return model


def run_passes(model: onnx.ModelProto, *passes: ir.passes.PassBase) -> onnx.ModelProto:
    """Run onnx-ir ``passes`` in order on a copy of ``model`` and return a new ModelProto."""
    ir_model = to_ir(model)
    for p in passes:
        ir_model = p(ir_model).model
    return to_proto(ir_model)


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The NumPy value of ``value`` when it is a true constant (an initializer that no feed overrides).

    An initializer that is also a graph input (IR < 4 style) can be replaced by the caller at run
    time, so it is not constant and folding it would change the model's meaning.
    """
    if value is None or not value.is_initializer() or value.is_graph_input():
        return None
    tensor = value.const_value
    if tensor is None:
        return None
    return tensor.numpy()


def reduce_axes(node: ir.Node) -> list[int] | None:
    """The ``axes`` of a Reduce* node: the attribute before opset 18, the constant second input from
    18 (an initializer, or a ``Constant`` node not lifted yet when a pass runs on its own); None when
    they are not known constants or absent (then every axis is reduced)."""
    if "axes" in node.attributes:
        return [int(a) for a in node.attributes["axes"].as_ints()]
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        axes = node.inputs[1]
        arr = constant_array(axes)
        source = axes.producer()
        if arr is None and source is not None and source.op_type == "Constant" and "value" in source.attributes:
            arr = source.attributes["value"].as_tensor().numpy()
        return None if arr is None else [int(a) for a in arr.reshape(-1)]
    return None


def has_subgraph(node: ir.Node) -> bool:
    """True when ``node`` carries a graph attribute (If/Loop/Scan bodies)."""
    return any(
        attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()
    )


def unique_name(model_names: set[str], base: str) -> str:
    """A name not in ``model_names`` derived from ``base``; the name is reserved on return."""
    name = base
    i = 1
    while name in model_names:
        name = f"{base}_{i}"
        i += 1
    model_names.add(name)
    return name


def collect_names(model: ir.Model) -> set[str]:
    """Every value name and node name in the model, subgraphs included (for collision-free naming)."""
    names: set[str] = set()
    for graph in model.graphs():
        for v in list(graph.inputs) + list(graph.outputs) + list(graph.initializers.values()):
            if v.name:
                names.add(v.name)
        for node in graph:
            if node.name:
                names.add(node.name)
            for out in node.outputs:
                if out.name:
                    names.add(out.name)
    return names


def make_initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    """Register ``array`` as a new initializer ``name`` of ``graph`` and return its value."""
    tensor = ir.tensor(array, name=name)
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
    graph.register_initializer(value)
    return value


def set_node_constant(graph: ir.Graph, node: ir.Node, index: int, array: np.ndarray, names: set[str], suffix: str) -> ir.Value:
    """Give input ``index`` of ``node`` the constant ``array``, keeping the tensor's name when possible.

    Why keep the name: users name weights in tensor-wise precision settings and reports by the
    names their exporter gave; a fold that renames every weight it touches would break those.
    The existing initializer is rewritten in place when this node is its only reader; otherwise
    (shared or absent) a new initializer ``<base>_<suffix>`` is created.
    """
    value = node.inputs[index] if index < len(node.inputs) else None
    if (value is not None and value.is_initializer() and not value.is_graph_input() and len(value.uses()) == 1
            and value.name):
        value.const_value = ir.tensor(array, name=value.name)
        value.shape = ir.Shape(array.shape)
        value.type = ir.TensorType(value.const_value.dtype)
        return value
    base = (value.name if value is not None and value.name else node.name) or "folded"
    new = make_initializer(graph, unique_name(names, f"{base}_{suffix}"), array)
    if index >= len(node.inputs):
        node.resize_inputs(index + 1)
    node.replace_input_with(index, new)
    return new


def sole_user(value: ir.Value, op_type: str) -> ir.Node | None:
    """The single consumer of ``value`` when it is an ``op_type`` node and value is no graph output."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    node = uses[0][0] if isinstance(uses[0], tuple) else uses[0].node
    return node if node.op_type == op_type and is_onnx_domain(node.domain) else None


def const_operand(node: ir.Node, value: ir.Value) -> np.ndarray | None:
    """For a binary node reading ``value``, the constant on its other input (None if not constant)."""
    if len(node.inputs) != 2:
        return None
    other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
    if node.inputs[0] is not value and node.inputs[1] is not value:
        return None
    return constant_array(other)


def scalar_value(array: np.ndarray | None) -> float | None:
    """The value of a one-element array, else None."""
    if array is None or array.size != 1:
        return None
    return float(array.reshape(-1)[0])


def replace_output(graph: ir.Graph, old_out: ir.Value, new_out: ir.Value) -> None:
    """Route every use of ``old_out`` to ``new_out``, which takes over the old tensor name.

    Keeping the name matters: users refer to activations by the exporter's names (tensor-wise
    precision, reports), and the fused op computes the same tensor.
    """
    name = old_out.name
    ir.convenience.replace_all_uses_with(old_out, new_out, replace_graph_outputs=True)
    old_out.name = f"{name}__unfused" if name else None
    if name:
        new_out.name = name


def onnx_nodes(graph: ir.Graph, *op_types: str) -> list[ir.Node]:
    """The default-domain nodes of ``graph`` itself (not of its subgraphs) with one of ``op_types``,
    as a list taken now, so a pass may rewrite the graph while it walks them."""
    return [n for n in graph if n.op_type in op_types and is_onnx_domain(n.domain) and n.graph is graph]


def rewrite_result(model: ir.Model, count: int, what: str) -> ir.passes.PassResult:
    """A pass's result after ``count`` rewrites, logged as ``what`` (with ``%d`` for the count)."""
    if count:
        log.info(what, count)
    return ir.passes.PassResult(model, modified=bool(count))
