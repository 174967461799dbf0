"""A layer's forward pass in torch, with the node's own attributes (strides, pads, groups, transB...).

The weight and bias arrive already (fake-)quantized, so the same function serves the baseline
rounding, AdaRound's soft rounding and AdaQuant's straight-through weights. The float targets come
from onnxruntime, so torch's float arithmetic only has to agree with it to within float rounding.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from .extract import Layer


def _conv_padding(pads: list[int] | None, spatial: int) -> tuple[list[int] | None, list[int]]:
    """(F.pad spec for asymmetric pads or None, symmetric per-dimension padding)."""
    pads = list(pads or [0] * (2 * spatial))
    begin, end = pads[:spatial], pads[spatial:]
    if begin == end:
        return None, begin
    spec: list[int] = []
    for b, e in zip(reversed(begin), reversed(end)):
        spec += [b, e]
    return spec, [0] * spatial


def make_forward(layer: Layer) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """``f(x, weight, bias)`` computing the layer (and its fused activation) as the ONNX node does."""
    a = layer.attrs
    op = layer.op_type
    if op in ("Conv", "ConvTranspose"):
        def core(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
            spatial = w.dim() - 2
            strides = list(a.get("strides", [1] * spatial))
            dilations = list(a.get("dilations", [1] * spatial))
            group = int(a.get("group", 1))
            pad_spec, padding = _conv_padding(a.get("pads"), spatial)
            if op == "Conv":
                if pad_spec is not None:
                    x = F.pad(x, pad_spec)
                fn = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
                return fn(x, w, b, strides, padding, dilations, group)
            fn = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[spatial - 1]
            out_pad = list(a.get("output_padding", [0] * spatial))
            return fn(x, w, b, strides, padding, out_pad, group, dilations)

    elif op == "Gemm":
        alpha, beta, trans_b = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0)), bool(a.get("transB", 0))

        def core(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
            y = x @ (w.t() if trans_b else w)
            if alpha != 1.0:
                y = alpha * y
            if b is not None:
                y = y + (beta * b if beta != 1.0 else b)
            return y
    elif op == "MatMul":

        def core(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
            return torch.matmul(x, w)
    else:
        raise ValueError(f"finetune: op type {op} has no torch form")

    act = _activation(layer.activation, layer.activation_attrs)
    if act is None:
        return core
    return lambda x, w, b: act(core(x, w, b))


def _activation(op: str | None, a: dict[str, Any]) -> Callable[[torch.Tensor], torch.Tensor] | None:
    if op is None:
        return None
    if op == "Relu":
        return torch.relu
    if op == "LeakyRelu":
        slope = float(a.get("alpha", 0.01))
        return lambda y: F.leaky_relu(y, slope)
    if op == "Clip":
        lo, hi = float(a.get("min", float("-inf"))), float(a.get("max", float("inf")))
        return lambda y: torch.clamp(y, lo, hi)
    if op == "Sigmoid":
        return torch.sigmoid
    if op == "Tanh":
        return torch.tanh
    if op == "HardSigmoid":
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        return lambda y: torch.clamp(alpha * y + beta, 0.0, 1.0)
    if op == "HardSwish":
        return lambda y: y * torch.clamp(y / 6.0 + 0.5, 0.0, 1.0)
    raise ValueError(f"finetune: activation {op} has no torch form")


def channel_dim(layer: Layer) -> int:
    """The output channel axis the reconstruction loss sums over (1 for convolutions, last for matmuls)."""
    return 1 if layer.op_type in ("Conv", "ConvTranspose") else -1
