"""Fold inference ``BatchNormalization`` into the preceding Conv / ConvTranspose / Gemm.

Why: a BatchNorm after a convolution is an affine map per output channel; folded into the
weights, the quantizer sees the weights the hardware will actually multiply with (quantizing the
unfolded weights and then scaling them by gamma/sigma would misplace the quantization grid), and
one node fewer runs. The arithmetic is done in float64 and cast once to the weight dtype, so the
folded model differs from the original only by one rounding of each weight.

Folded only when exact in structure: the producer's output feeds this BatchNorm alone and is no
graph output, the producer's weights (and bias) and every BatchNorm parameter are true
initializers, and the BatchNorm is in inference mode. New initializers are always created (a
weight shared with another node is never changed under it); the old ones go with unused removal.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir

from onnx_ir.passes.common import RemoveUnusedNodesPass

from onnxptq.graph.passes._common import (
    collect_names,
    constant_array,
    is_onnx_domain,
    run_passes,
    set_node_constant,
)

log = logging.getLogger(__name__)

FOLDABLE_PRODUCERS = frozenset({"Conv", "ConvTranspose", "Gemm"})


def _bn_params(bn: ir.Node) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (scale, shift) of an inference BatchNorm in float64, or None when not foldable."""
    if len(bn.inputs) < 5:
        return None
    training = bn.attributes.get("training_mode")
    if training is not None and training.as_int() != 0:
        return None
    # Extra outputs (running mean/var, saved stats) only exist in training graphs.
    if any(out.uses() or out.is_graph_output() for out in bn.outputs[1:]):
        return None
    arrays = [constant_array(v) for v in bn.inputs[1:5]]
    if any(a is None for a in arrays):
        return None
    gamma, beta, mean, var = (a.astype(np.float64).reshape(-1) for a in arrays)  # type: ignore[union-attr]
    epsilon_attr = bn.attributes.get("epsilon")
    epsilon = epsilon_attr.as_float() if epsilon_attr is not None else 1e-5
    # The epsilon attribute is a float32 in the proto; onnxruntime adds it in float32 too.
    scale = gamma / np.sqrt(var + np.float64(np.float32(epsilon)))
    shift = beta - mean * scale
    return scale, shift


def _fold_conv(weight: np.ndarray, bias: np.ndarray | None, scale: np.ndarray, shift: np.ndarray, transpose: bool, group: int):
    """Scaled weight and new bias for Conv (out channels on axis 0) or ConvTranspose (axis 1, per group)."""
    w = weight.astype(np.float64)
    if transpose:
        c_in, c_out_g = w.shape[0], w.shape[1]
        w = w.reshape(group, c_in // group, c_out_g, *w.shape[2:])
        w = w * scale.reshape(group, 1, c_out_g, *([1] * (weight.ndim - 2)))
        w = w.reshape(weight.shape)
    else:
        w = w * scale.reshape(-1, *([1] * (weight.ndim - 1)))
    b = np.zeros_like(scale) if bias is None else bias.astype(np.float64).reshape(-1)
    return w.astype(weight.dtype), (b * scale + shift).astype(weight.dtype)


class FoldBatchNormPass(ir.passes.InPlacePass):
    """Fold BatchNormalization into Conv, ConvTranspose and Gemm producers in the main graph."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = collect_names(model)
        count = 0
        for bn in list(graph):
            if bn.op_type != "BatchNormalization" or not is_onnx_domain(bn.domain):
                continue
            x = bn.inputs[0]
            producer = x.producer() if x is not None else None
            if producer is None or producer.op_type not in FOLDABLE_PRODUCERS or not is_onnx_domain(producer.domain):
                continue
            if producer.graph is not graph or len(x.uses()) != 1 or x.is_graph_output():
                continue
            params = _bn_params(bn)
            if params is None:
                log.debug("BatchNorm %s not folded: training mode or non-constant parameters", bn.name)
                continue
            if self._fold_into(graph, producer, bn, *params, names):
                count += 1
        if count:
            log.info("folded %d BatchNormalization node(s)", count)
        return ir.passes.PassResult(model, modified=bool(count))

    @staticmethod
    def _fold_into(graph: ir.Graph, producer: ir.Node, bn: ir.Node, scale: np.ndarray, shift: np.ndarray, names: set[str]) -> bool:
        weight = constant_array(producer.inputs[1]) if len(producer.inputs) > 1 else None
        bias_value = producer.inputs[2] if len(producer.inputs) > 2 else None
        bias = constant_array(bias_value) if bias_value is not None else None
        if weight is None or (bias_value is not None and bias is None) or weight.dtype.kind != "f":
            log.debug("BatchNorm %s not folded: %s %s has non-constant weights", bn.name, producer.op_type, producer.name)
            return False
        if producer.op_type in ("Conv", "ConvTranspose"):
            transpose = producer.op_type == "ConvTranspose"
            group_attr = producer.attributes.get("group")
            group = group_attr.as_int() if group_attr is not None else 1
            channels = weight.shape[1] * group if transpose else weight.shape[0]
            if scale.size != channels:
                return False
            new_w, new_b = _fold_conv(weight, bias, scale, shift, transpose, group)
        else:  # Gemm: Y = alpha * A' B' + beta * C with output channels on axis 1
            attrs = producer.attributes
            trans_b = attrs["transB"].as_int() if "transB" in attrs else 0
            beta = attrs["beta"].as_float() if "beta" in attrs else 1.0
            n = weight.shape[0] if trans_b else weight.shape[1]
            if scale.size != n:  # Gemm's output is 2-D by definition: channels are its last axis
                return False
            w = weight.astype(np.float64)
            w = w * (scale.reshape(-1, 1) if trans_b else scale.reshape(1, -1))
            c = np.zeros(n) if bias is None else np.broadcast_to(bias.astype(np.float64), np.broadcast_shapes(bias.shape, (n,)))
            new_w = w.astype(weight.dtype)
            new_b = ((np.float64(np.float32(beta)) * c) * scale + shift).astype(weight.dtype)
            producer.attributes["beta"] = ir.AttrFloat32("beta", 1.0)
        set_node_constant(graph, producer, 1, new_w, names, "bnfold")
        set_node_constant(graph, producer, 2, new_b, names, "bnfold")
        y, x = bn.outputs[0], producer.outputs[0]
        y_name, y_was_output = y.name, y.is_graph_output()
        ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
        graph.remove(bn, safe=True)
        if y_was_output:
            x.name = y_name
        x.shape, x.type = x.shape or y.shape, x.type or y.type
        log.debug("folded BatchNorm %s into %s %s", bn.name, producer.op_type, producer.name)
        return True


def fold_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with foldable BatchNormalization nodes folded into their producer."""
    return run_passes(model, FoldBatchNormPass(), RemoveUnusedNodesPass())
