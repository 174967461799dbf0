"""Remove ``Identity``, inference-mode ``Dropout`` and same-type ``Cast`` nodes, keeping graph output names intact.

Why: both are no-ops at inference, but they split a producer from its consumer, which hides
patterns (Conv→BatchNorm, MatMul→Add) from the later passes and adds a tensor the planner would
otherwise consider for quantization. onnx-ir's ``IdentityEliminationPass`` does the rewiring; we
turn eligible Dropouts into Identities first, and guard two cases where that pass would rename a
value the model's interface depends on.

A ``Cast`` whose input already has the target type (``float → float``, as converters from
TensorFlow and Caffe emit around most ops: open_nsfw has 309) is the identity too. onnxruntime
drops it from the float model, but the planner treats its output as a new tensor and gives it a
quantizer of its own: under BF16 open_nsfw ran three Cast pairs on ``Add → Cast → Cast → Relu``,
1.9× float's latency (bench/RESULTS.md "Block formats' latency on models outside the zoo"). It
becomes an Identity once its input's type is known (after shape inference), and goes with them.
"""

from __future__ import annotations

import logging
from typing import Callable

import onnx
import onnx_ir as ir
from onnx_ir.passes.common import IdentityEliminationPass

from onnxptq.graph.passes._common import constant_array, is_onnx_domain, run_passes

log = logging.getLogger(__name__)


def _dropout_is_inference(node: ir.Node) -> bool:
    """True when ``node`` is a Dropout that is statically the identity on its first output.

    Dropout is the identity unless ``training_mode`` (opset 12+) is given and not a constant
    ``False``; before opset 7 the ``is_test`` attribute decides. A used ``mask`` output has no
    identity replacement, so such a Dropout stays.
    """
    if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
        return False
    is_test = node.attributes.get("is_test")
    if is_test is not None and is_test.type == ir.AttributeType.INT and is_test.as_int() == 0:
        return False
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        mode = constant_array(node.inputs[2])
        if mode is None or bool(mode.reshape(-1)[0]):
            return False
    return True



def _replace_by_identity(graph: "ir.Graph | ir.Function", node: ir.Node) -> None:
    """Put an Identity of ``node``'s first input in its place, keeping its output's name, shape and
    type (a graph output keeps its name)."""
    identity = ir.node("Identity", inputs=[node.inputs[0]], name=node.name)
    graph.insert_before(node, identity)
    old = node.outputs[0]
    name = old.name
    ir.convenience.replace_all_uses_with(old, identity.outputs[0], replace_graph_outputs=True)
    graph.remove(node, safe=True)
    identity.outputs[0].name = name
    identity.outputs[0].shape = old.shape
    identity.outputs[0].type = old.type


def _replace_matching(model: ir.Model, replace: Callable[[ir.Node], bool], what: str) -> ir.passes.PassResult:
    """Replace every node for which ``replace`` says so by an Identity, in the main graph, its
    subgraphs and the model's functions (the Dropout and same-type-Cast passes differ only in that
    rule)."""
    count = 0
    graphs: list[ir.Graph | ir.Function] = [*model.graphs(), *model.functions.values()]
    for graph in graphs:
        for node in list(graph):
            if replace(node):
                _replace_by_identity(graph, node)
                count += 1
    if count:
        log.info("replaced %d %s node(s) by Identity", count, what)
    return ir.passes.PassResult(model, modified=bool(count))


class DropoutToIdentityPass(ir.passes.InPlacePass):
    """Replace inference-mode Dropout nodes by Identity (main graph, subgraphs and functions)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        def replace(node: ir.Node) -> bool:
            if node.op_type != "Dropout" or not is_onnx_domain(node.domain):
                return False
            if not _dropout_is_inference(node):
                log.debug("Dropout %s kept: training mode or mask is used", node.name)
                return False
            return True

        return _replace_matching(model, replace, "inference Dropout")


class NoOpCastToIdentityPass(ir.passes.InPlacePass):
    """Replace every ``Cast`` whose input's element type is known and equal to ``to`` by Identity
    (main graph, subgraphs and functions): a same-type Cast copies its input bit for bit."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        def replace(node: ir.Node) -> bool:
            if node.op_type != "Cast" or not is_onnx_domain(node.domain) or not node.inputs or node.inputs[0] is None:
                return False
            to = node.attributes.get("to")
            source = node.inputs[0].dtype
            return to is not None and source is not None and int(to.as_int()) == int(source.value)

        return _replace_matching(model, replace, "same-type Cast")


class SafeIdentityEliminationPass(IdentityEliminationPass):
    """onnx-ir's IdentityEliminationPass, minus two renames that would break the interface.

    When ``y = Identity(x)`` and ``y`` is a graph output, the base pass renames ``x`` to ``y``.
    That is wrong when ``x`` is itself a graph output (its own output name would vanish) or when
    ``x`` lives in an outer scope (a subgraph would rename a main-graph tensor). Those Identities
    stay; every other one goes.
    """

    def _try_eliminate_identity_node(self, node: ir.Node) -> bool:  # noqa: D401 - override
        if node.op_type == "Identity" and node.domain == "" and len(node.inputs) == 1 and node.outputs:
            x, y = node.inputs[0], node.outputs[0]
            if x is not None and y.is_graph_output():
                if x.is_graph_output() or x.graph is not node.graph:
                    return False
        return super()._try_eliminate_identity_node(node)


def eliminate_identity_passes() -> list[ir.passes.PassBase]:
    """The onnx-ir passes removing Dropout (as Identity) and Identity nodes, in order."""
    return [DropoutToIdentityPass(), SafeIdentityEliminationPass()]


def no_op_cast_passes() -> list[ir.passes.PassBase]:
    """Same-type Casts to Identity, then the Identities out (run where element types are known)."""
    return [NoOpCastToIdentityPass(), SafeIdentityEliminationPass()]


def eliminate_identity(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` without Identity and inference-mode Dropout nodes."""
    return run_passes(model, *eliminate_identity_passes())
