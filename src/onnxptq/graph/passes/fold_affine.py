"""``Conv|ConvTranspose|Gemm → Mul(c) [→ Add(c)]`` and ``→ Add(c)`` / ``→ Sub(c)``, with per-output-channel or scalar
constants, fold into the producer's weights and bias (like BatchNorm).

A Conv's affine is also folded across one Transpose between them (``Conv → Transpose → Add →
Sub → Mul → Add``, a BatchNorm as graphs converted from TensorFlow/Caffe write it in NHWC:
open_nsfw has 53), with the constant per channel on the axis the Transpose moved the channels to:
unfolded, every one of those elementwise ops gets a quantizer of its own, and onnxruntime fuses
none of them into the Conv (BF16 open_nsfw, bench/RESULTS.md "Block formats' latency on models
outside the zoo").

One of the fusions of prepare (why they matter: :mod:`onnxptq.graph.passes`).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnxptq.graph.passes._common import (
    collect_names,
    const_operand,
    constant_array,
    is_onnx_domain,
    replace_output,
    rewrite_result,
    set_node_constant,
    sole_user,
)
from onnxptq.graph.passes.fold_batchnorm import _fold_conv

class FoldAffinePass(ir.passes.InPlacePass):
    """Fold constant per-channel Mul/Add after Conv, ConvTranspose or Gemm into its weights."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = collect_names(model)
        count = 0
        changed = True
        while changed:
            changed = False
            for node in list(graph):
                if node.op_type not in ("Conv", "ConvTranspose", "Gemm") or not is_onnx_domain(node.domain):
                    continue
                if self._fold_next(graph, node, names):
                    count += 1
                    changed = True
        return rewrite_result(model, count, "folded %d constant Mul/Add node(s) into their producers")

    @staticmethod
    def _channels(node: ir.Node, weight: np.ndarray) -> int:
        if node.op_type == "Conv":
            return weight.shape[0]
        if node.op_type == "ConvTranspose":
            group = node.attributes["group"].as_int() if "group" in node.attributes else 1
            return weight.shape[1] * group
        trans_b = node.attributes["transB"].as_int() if "transB" in node.attributes else 0
        return weight.shape[0] if trans_b else weight.shape[1]

    @staticmethod
    def _per_channel(const: np.ndarray, channels: int, rank: int, gemm: bool, axis: int = 1) -> np.ndarray | None:
        """The constant as a per-output-channel vector, if it broadcasts only along channels
        (on ``axis`` of a rank-``rank`` tensor: 1 for NCHW, where a Transpose put them otherwise)."""
        if const.size == 1:
            return np.full(channels, const.reshape(-1)[0], dtype=np.float64)
        shape = list(const.shape)
        if gemm:
            if shape[-1] == channels and int(np.prod(shape[:-1])) == 1:
                return const.reshape(-1).astype(np.float64)
            return None
        # NCHW output: the channel axis is 1 counted from the left of a rank-`rank` tensor.
        full = [1] * (rank - len(shape)) + shape
        if len(full) != rank or full[axis] != channels or int(np.prod(full)) != channels:
            return None
        return const.reshape(-1).astype(np.float64)

    def _fold_next(self, graph: ir.Graph, node: ir.Node, names: set[str]) -> bool:
        out = node.outputs[0]
        axis = 1
        through = out  # what the affine reads: the producer's output, or the Transpose's of it
        transpose = sole_user(out, "Transpose") if node.op_type in ("Conv", "ConvTranspose") else None
        if transpose is not None and transpose.graph is graph:
            rank = len(node.inputs[1].shape) if node.inputs[1] is not None and node.inputs[1].shape is not None else 0
            perm_attr = transpose.attributes.get("perm")
            perm = list(perm_attr.as_ints()) if perm_attr is not None else list(range(rank))[::-1]
            if rank < 3 or sorted(perm) != list(range(rank)):
                return False
            axis, through = perm.index(1), transpose.outputs[0]
        user = sole_user(through, "Mul") or sole_user(through, "Add") or sole_user(through, "Sub")
        if user is None or user.graph is not graph:
            return False
        if user.op_type == "Sub" and user.inputs[0] is not through:
            return False  # c - x negates x: not an affine of the producer's weights' sign
        const = const_operand(user, through)
        weight = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
        if const is None or weight is None or weight.dtype.kind != "f" or const.dtype != weight.dtype:
            return False
        bias_value = node.inputs[2] if len(node.inputs) > 2 else None
        bias = constant_array(bias_value) if bias_value is not None else None
        if bias_value is not None and bias is None:
            return False
        if node.op_type == "Gemm":
            beta = node.attributes["beta"].as_float() if "beta" in node.attributes else 1.0
            if beta != 1.0 or (bias is not None and bias.size not in (1, self._channels(node, weight))):
                return False
        channels = self._channels(node, weight)
        rank = weight.ndim if node.op_type != "Gemm" else 2
        vector = self._per_channel(const, channels, rank, node.op_type == "Gemm", axis)
        if vector is None:
            return False
        if user.op_type == "Mul":
            scale, shift = vector, np.zeros(channels)
        else:
            scale, shift = np.ones(channels), (-vector if user.op_type == "Sub" else vector)
        if node.op_type == "Gemm":
            trans_b = node.attributes["transB"].as_int() if "transB" in node.attributes else 0
            w = weight.astype(np.float64) * (scale.reshape(-1, 1) if trans_b else scale.reshape(1, -1))
            b = np.zeros(channels) if bias is None else np.broadcast_to(bias.astype(np.float64).reshape(-1), (channels,))
            new_w, new_b = w.astype(weight.dtype), (b * scale + shift).astype(weight.dtype)
        else:
            group = node.attributes["group"].as_int() if "group" in node.attributes else 1
            new_w, new_b = _fold_conv(weight, bias, scale, shift, node.op_type == "ConvTranspose", group)
        set_node_constant(graph, node, 1, new_w, names, "affine")
        set_node_constant(graph, node, 2, new_b, names, "affine")
        replace_output(graph, user.outputs[0], through)
        graph.remove(user, safe=True)
        return True
