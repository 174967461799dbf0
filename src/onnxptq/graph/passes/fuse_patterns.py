"""Recognise decomposed layers and fuse them back into the ops they are.

Why this matters for quantization: exporters (Paddle's especially) spell HardSwish as
``Add → Clip → Mul → Div``, LayerNorm as nine elementwise ops, and a learnable per-channel affine
after a convolution as ``Mul → Add``. A quantizer puts a quantizer on every tensor between
quantized ops, so each decomposition multiplies the rounding points: PP-OCRv4's recogniser has
nine int8 roundings between two convolutions instead of two, which alone costs it ~0.1 CER at
A8W8. Hardware executes these as one fused op, so quantizing them as one op is also the honest
simulation. Each fusion is exact in structure and numerically equal to float rounding.

- :class:`FoldAffinePass`: ``Conv|ConvTranspose|Gemm → Mul(c) [→ Add(c)]`` and ``→ Add(c)`` with
  per-output-channel or scalar constants fold into the producer's weights and bias (like BN).
- :class:`FoldScalarAffineIntoConvPass`: ``Mul(c) [→ Add(d)] → Conv`` with scalar constants (the
  "learnable affine" PP-LCNetV3 puts after each activation) folds into the *next* convolution:
  ``c`` always (zero padding stays zero), ``d`` into the bias when the convolution has no
  padding, else it stays as ``Add(d/c)`` before it.
- :class:`FuseHardSwishPass`: ``x·clip(x+3, 0, 6)/6`` → ``HardSwish`` (opset ≥ 14).
- :class:`FuseLayerNormPass`: the mean/variance decomposition → ``LayerNormalization`` (opset ≥ 17).
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
    default_opset,
    is_onnx_domain,
    make_initializer,
    run_passes,
    set_node_constant,
    unique_name,
)
from onnxptq.graph.passes.fold_batchnorm import _fold_conv

log = logging.getLogger(__name__)


def _sole_user(value: ir.Value, op_type: str) -> ir.Node | None:
    """The single consumer of ``value`` when it is an ``op_type`` node and value is no graph output."""
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output():
        return None
    node = uses[0][0] if isinstance(uses[0], tuple) else uses[0].node
    return node if node.op_type == op_type and is_onnx_domain(node.domain) else None


def _const_operand(node: ir.Node, value: ir.Value) -> np.ndarray | None:
    """For a binary node reading ``value``, the constant on its other input (None if not constant)."""
    if len(node.inputs) != 2:
        return None
    other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
    if node.inputs[0] is not value and node.inputs[1] is not value:
        return None
    return constant_array(other)


def _scalar(array: np.ndarray | None) -> float | None:
    if array is None or array.size != 1:
        return None
    return float(array.reshape(-1)[0])


def _replace(graph: ir.Graph, old_out: ir.Value, new_out: ir.Value) -> None:
    """Route every use of ``old_out`` to ``new_out``, which takes over the old tensor name.

    Keeping the name matters: users refer to activations by the exporter's names (tensor-wise
    precision, reports), and the fused op computes the same tensor.
    """
    name = old_out.name
    ir.convenience.replace_all_uses_with(old_out, new_out, replace_graph_outputs=True)
    old_out.name = f"{name}__unfused" if name else None
    if name:
        new_out.name = name


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
        if count:
            log.info("folded %d constant Mul/Add node(s) into their producers", count)
        return ir.passes.PassResult(model, modified=bool(count))

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
    def _per_channel(const: np.ndarray, channels: int, rank: int, gemm: bool) -> np.ndarray | None:
        """The constant as a per-output-channel vector, if it broadcasts only along channels."""
        if const.size == 1:
            return np.full(channels, const.reshape(-1)[0], dtype=np.float64)
        shape = list(const.shape)
        if gemm:
            if shape[-1] == channels and int(np.prod(shape[:-1])) == 1:
                return const.reshape(-1).astype(np.float64)
            return None
        # NCHW output: the channel axis is 1 counted from the left of a rank-`rank` tensor.
        full = [1] * (rank - len(shape)) + shape
        if len(full) != rank or full[1] != channels or int(np.prod(full)) != channels:
            return None
        return const.reshape(-1).astype(np.float64)

    def _fold_next(self, graph: ir.Graph, node: ir.Node, names: set[str]) -> bool:
        out = node.outputs[0]
        user = _sole_user(out, "Mul") or _sole_user(out, "Add")
        if user is None or user.graph is not graph:
            return False
        const = _const_operand(user, out)
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
        vector = self._per_channel(const, channels, rank, node.op_type == "Gemm")
        if vector is None:
            return False
        if user.op_type == "Mul":
            scale, shift = vector, np.zeros(channels)
        else:
            scale, shift = np.ones(channels), vector
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
        _replace(graph, user.outputs[0], out)
        graph.remove(user, safe=True)
        return True


class FuseHardSwishPass(ir.passes.InPlacePass):
    """``Mul(x, Clip(Add(x, 3), 0, 6)) / 6`` (or ``· (1/6)``) → ``HardSwish(x)``."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if default_opset(model) < 14:
            return ir.passes.PassResult(model, modified=False)
        graph = model.graph
        count = 0
        for add in list(graph):
            if add.op_type != "Add" or not is_onnx_domain(add.domain) or add.graph is not graph:
                continue
            fused = self._match(add)
            if fused is None:
                continue
            x, nodes, final = fused
            hs = ir.node("HardSwish", [x], name=f"{final.name or 'HardSwish'}_fused")
            graph.insert_after(final, hs)
            _replace(graph, final.outputs[0], hs.outputs[0])
            hs.outputs[0].type, hs.outputs[0].shape = final.outputs[0].type, final.outputs[0].shape
            for n in reversed(nodes):
                graph.remove(n, safe=True)
            count += 1
        if count:
            log.info("fused %d HardSwish pattern(s)", count)
        return ir.passes.PassResult(model, modified=bool(count))

    @staticmethod
    def _match(add: ir.Node):
        if len(add.inputs) != 2:
            return None
        for x in add.inputs:
            if _scalar(_const_operand(add, x)) != 3.0:
                continue
            clip = _sole_user(add.outputs[0], "Clip")
            if clip is None or len(clip.inputs) < 3:
                continue
            if _scalar(constant_array(clip.inputs[1])) != 0.0 or _scalar(constant_array(clip.inputs[2])) != 6.0:
                continue
            mul = _sole_user(clip.outputs[0], "Mul")
            if mul is None or set(id(v) for v in mul.inputs) != {id(x), id(clip.outputs[0])}:
                continue
            div = _sole_user(mul.outputs[0], "Div")
            if div is not None and div.inputs[0] is mul.outputs[0] and _scalar(constant_array(div.inputs[1])) == 6.0:
                return x, [add, clip, mul, div], div
            scale = _sole_user(mul.outputs[0], "Mul")
            factor = _scalar(_const_operand(scale, mul.outputs[0])) if scale is not None else None
            if factor is not None and abs(factor - 1 / 6) < 1e-7:
                return x, [add, clip, mul, scale], scale
        return None


class FuseLayerNormPass(ir.passes.InPlacePass):
    """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul/Add] over the last axis → LayerNormalization."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if default_opset(model) < 17:
            return ir.passes.PassResult(model, modified=False)
        graph = model.graph
        names = collect_names(model)
        count = 0
        for mean in list(graph):
            if mean.op_type != "ReduceMean" or not is_onnx_domain(mean.domain) or mean.graph is not graph:
                continue
            match = self._match(mean)
            if match is None:
                continue
            x, eps, gamma, beta, nodes, final = match
            width = None
            if x.shape is not None and len(x.shape) and isinstance(x.shape[-1], int):
                width = x.shape[-1]
            if gamma is None:
                if width is None:
                    continue
                gamma = make_initializer(graph, unique_name(names, f"{mean.name}_ln_scale"), np.ones(width, np.float32))
            inputs = [x, gamma] + ([beta] if beta is not None else [])
            ln = ir.node("LayerNormalization", inputs, attributes={"axis": -1, "epsilon": float(eps)},
                         name=f"{final.name or 'LayerNorm'}_fused")
            graph.insert_after(final, ln)
            ln.outputs[0].type, ln.outputs[0].shape = final.outputs[0].type, final.outputs[0].shape
            _replace(graph, final.outputs[0], ln.outputs[0])
            for n in reversed(nodes):
                graph.remove(n, safe=True)
            count += 1
        if count:
            log.info("fused %d LayerNormalization pattern(s)", count)
        return ir.passes.PassResult(model, modified=bool(count))

    @staticmethod
    def _last_axis(node: ir.Node) -> bool:
        axes = None
        if "axes" in node.attributes:
            axes = list(node.attributes["axes"].as_ints())
        elif len(node.inputs) > 1 and node.inputs[1] is not None:
            arr = constant_array(node.inputs[1])
            axes = None if arr is None else [int(a) for a in arr.reshape(-1)]
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
        if pow_ is None or div is None or _scalar(constant_array(pow_.inputs[1])) != 2.0:
            return None
        var = _sole_user(pow_.outputs[0], "ReduceMean")
        if var is None or not self._last_axis(var):
            return None
        add = _sole_user(var.outputs[0], "Add")
        eps = _scalar(_const_operand(add, var.outputs[0])) if add is not None else None
        if eps is None:
            return None
        sqrt = _sole_user(add.outputs[0], "Sqrt")
        if sqrt is None or div.inputs[1] is not sqrt.outputs[0] or len(list(sqrt.outputs[0].uses())) != 1:
            return None
        nodes = [mean, sub, pow_, var, add, sqrt, div]
        final, gamma, beta = div, None, None
        mul = _sole_user(div.outputs[0], "Mul")
        if mul is not None:
            other = mul.inputs[1] if mul.inputs[0] is div.outputs[0] else mul.inputs[0]
            arr = constant_array(other)
            if arr is not None and arr.ndim == 1:
                gamma, final = other, mul
                nodes.append(mul)
                add_b = _sole_user(mul.outputs[0], "Add")
                if add_b is not None:
                    other_b = add_b.inputs[1] if add_b.inputs[0] is mul.outputs[0] else add_b.inputs[0]
                    arr_b = constant_array(other_b)
                    if arr_b is not None and arr_b.ndim == 1:
                        beta, final = other_b, add_b
                        nodes.append(add_b)
        return x, eps, gamma, beta, nodes, final


class FoldScalarAffineIntoConvPass(ir.passes.InPlacePass):
    """Fold ``Mul(x, c)`` and ``Add(·, d)`` with scalar constants into the Conv that reads them.

    Why: PP-LCNetV3 (PP-OCRv4) follows 28 activations with a learnable ``·c + d``; each adds two
    tensors that a quantizer must round (and, for block formats, two function calls per layer)
    although a convolution absorbs them: ``W * (c·x + d) = (c·W) * x + d·ΣW``. The scale is exact
    for any padding (padded zeros stay zero); the shift only without padding, so with padding
    ``c·x + d`` is rewritten as ``c·(x + d/c)`` and the Add stays (one tensor instead of two).
    Float results change by rounding only.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = collect_names(model)
        count = 0
        for conv in list(graph):
            if conv.op_type != "Conv" or not is_onnx_domain(conv.domain) or conv.graph is not graph:
                continue
            while self._fold_one(graph, conv, names):
                count += 1
        if count:
            log.info("folded %d scalar Mul/Add node(s) into the convolutions that read them", count)
        return ir.passes.PassResult(model, modified=bool(count))

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


def fuse_patterns_passes() -> list[ir.passes.PassBase]:
    """The fusions in the order they run (affine folds first: they expose clean HardSwish inputs;
    the scalar affine into the next Conv last, once HardSwish is whole)."""
    return [FoldAffinePass(), FuseHardSwishPass(), FuseLayerNormPass(), FoldScalarAffineIntoConvPass()]


def fuse_patterns(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of ``model`` with affine folds, HardSwish and LayerNorm fusions applied."""
    return run_passes(model, *fuse_patterns_passes(), RemoveUnusedNodesPass())
