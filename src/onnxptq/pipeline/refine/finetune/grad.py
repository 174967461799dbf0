"""One layer's reconstruction loss and its gradient, computed by hand (no autograd graph).

The per-layer problems of fast finetuning are small (a batch of 2 rows through one convolution),
so on a CPU each optimisation step costs far more in per-operator overhead than in arithmetic:
autograd records ~30 nodes per step and replays them backwards, Adam's Python wrapper adds as
many again. :class:`LayerGrad` does the same mathematics in a handful of aten calls — the layer's
forward, the activation's backward, one ``convolution_backward`` (or one matmul) for the weight
gradient — and :class:`Adam` is one fused update. The result is the same gradient autograd gives
(tests/test_finetune.py checks it for every layer form and activation), several times faster.

Layers or activations without a hand-written backward use autograd (:meth:`LayerGrad.generic`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .extract import Layer
from .layer import _conv_padding, make_forward

#: Activations whose backward is written out below.
_MANUAL_ACTIVATIONS = (None, "Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")


class LayerGrad:
    """``loss_and_grad(x, w, b, y)``: the reconstruction loss (a 0-d tensor) and its gradients.

    The loss is spec §7.3's ``mean(‖f(x; w, b) − y‖² over the channel axis)``; the gradients are
    with respect to ``w`` and (when ``want_bias``) ``b``. :meth:`prepare` turns a whole input
    array into the form the step reads (asymmetric convolution pads applied once, not per step).
    """

    def __init__(self, layer: Layer, want_bias: bool = False) -> None:
        self.layer = layer
        self.want_bias = want_bias
        a = layer.attrs
        op = layer.op_type
        self.op = op
        self.pre_pad: list[int] | None = None
        self.manual = layer.activation in _MANUAL_ACTIVATIONS and op in ("Conv", "ConvTranspose", "Gemm", "MatMul")
        self.channel_dim = 1 if op in ("Conv", "ConvTranspose") else -1
        self._forward_ref = make_forward(layer)
        self._act = layer.activation
        self._act_attrs = layer.activation_attrs
        if op in ("Conv", "ConvTranspose"):
            self._conv_args: dict[str, Any] = {}
            self._a = a
        elif op == "Gemm":
            self.alpha = float(a.get("alpha", 1.0))
            self.beta = float(a.get("beta", 1.0))
            self.trans_b = bool(a.get("transB", 0))

    # ------------------------------------------------------------------ preparation

    def prepare(self, x: torch.Tensor, weight_shape: torch.Size) -> torch.Tensor:
        """``x`` as the step reads it: asymmetric Conv pads applied once (the step then pads nothing)."""
        if self.manual and self.op in ("Conv", "ConvTranspose"):
            spatial = len(weight_shape) - 2
            a = self._a
            pad_spec, padding = _conv_padding(a.get("pads"), spatial)
            transposed = self.op == "ConvTranspose"
            self._conv_args = dict(
                stride=list(a.get("strides", [1] * spatial)),
                padding=padding,
                dilation=list(a.get("dilations", [1] * spatial)),
                transposed=transposed,
                output_padding=list(a.get("output_padding", [0] * spatial)) if transposed else [0] * spatial,
                groups=int(a.get("group", 1)),
            )
            if pad_spec is not None and not transposed:
                memory_format = torch.channels_last if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) else None
                x = F.pad(x, pad_spec)
                if memory_format is not None:
                    x = x.contiguous(memory_format=memory_format)
        return x

    # ------------------------------------------------------------------ forward

    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """The layer on a prepared ``x`` (no autograd needed)."""
        pre = self._core(x, w, b)
        return self._activation(pre)

    def _core(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        if self.op in ("Conv", "ConvTranspose"):
            c = self._conv_args
            return torch.ops.aten.convolution(x, w, b, c["stride"], c["padding"], c["dilation"], c["transposed"],
                                              c["output_padding"], c["groups"])
        if self.op == "Gemm":
            y = x @ (w.t() if self.trans_b else w)
            if self.alpha != 1.0:
                y = y * self.alpha
            if b is not None:
                y = y + (b * self.beta if self.beta != 1.0 else b)
            return y
        return torch.matmul(x, w)

    def _activation(self, z: torch.Tensor) -> torch.Tensor:
        op, a = self._act, self._act_attrs
        if op is None:
            return z
        if op == "Relu":
            return torch.relu(z)
        if op == "LeakyRelu":
            return F.leaky_relu(z, float(a.get("alpha", 0.01)))
        if op == "Clip":
            return torch.clamp(z, float(a.get("min", float("-inf"))), float(a.get("max", float("inf"))))
        if op == "Sigmoid":
            return torch.sigmoid(z)
        if op == "Tanh":
            return torch.tanh(z)
        if op == "HardSigmoid":
            return torch.clamp(z * float(a.get("alpha", 0.2)) + float(a.get("beta", 0.5)), 0.0, 1.0)
        if op == "HardSwish":
            return F.hardswish(z)
        raise ValueError(f"finetune: activation {op} has no torch form")

    def _activation_backward(self, g: torch.Tensor, z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        op, a = self._act, self._act_attrs
        if op is None:
            return g
        if op == "Relu":
            return torch.ops.aten.threshold_backward(g, out, 0.0)
        if op == "LeakyRelu":
            return torch.ops.aten.leaky_relu_backward(g, z, float(a.get("alpha", 0.01)), False)
        if op == "Clip":
            lo, hi = float(a.get("min", float("-inf"))), float(a.get("max", float("inf")))
            return g * ((z >= lo) & (z <= hi))
        if op == "Sigmoid":
            return torch.ops.aten.sigmoid_backward(g, out)
        if op == "Tanh":
            return torch.ops.aten.tanh_backward(g, out)
        if op == "HardSigmoid":
            alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
            u = z * alpha + beta
            return g * ((u >= 0.0) & (u <= 1.0)) * alpha
        if op == "HardSwish":
            return torch.ops.aten.hardswish_backward(g, z)
        raise ValueError(f"finetune: activation {op} has no torch form")

    # ------------------------------------------------------------------ loss and gradient

    def loss_and_grad(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                      y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(loss, d loss / d w, d loss / d b or None) on a prepared batch ``x`` with targets ``y``."""
        if not self.manual:
            return self.generic(x, w, b, y)
        z = self._core(x, w, b)
        out = self._activation(z)
        r = out - y
        per_row = r.numel() // r.shape[self.channel_dim]
        loss = r.pow(2).sum() / per_row
        g = r * (2.0 / per_row)
        g = self._activation_backward(g, z, out)
        gb = None
        if self.op in ("Conv", "ConvTranspose"):
            c = self._conv_args
            _, gw, gb = torch.ops.aten.convolution_backward(
                g, x, w, [w.shape[1] * c["groups"] if c["transposed"] else w.shape[0]] if (self.want_bias and b is not None) else None,
                c["stride"], c["padding"], c["dilation"], c["transposed"], c["output_padding"], c["groups"],
                [False, True, bool(self.want_bias and b is not None)])
            # the weight gradient follows the input's memory format (channels-last): hand it back in the weight's
            return loss, gw.contiguous(), gb if (self.want_bias and b is not None) else None
        g2 = g.reshape(-1, g.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        if self.op == "Gemm":
            if self.want_bias and b is not None and b.dim() == 2 and b.shape[0] != 1:
                return self.generic(x, w, b, y)  # a full C matrix, not a bias row
            if self.alpha != 1.0:
                gw_core = (g2.t() @ x2) if self.trans_b else (x2.t() @ g2)
                gw = gw_core * self.alpha
            else:
                gw = (g2.t() @ x2) if self.trans_b else (x2.t() @ g2)
            if self.want_bias and b is not None:
                gb = self._reduce_to(g2.sum(0) * self.beta, b.shape)
            return loss, gw, gb
        gw = x2.t() @ g2  # MatMul with a 2-D constant weight
        return loss, gw, None

    @staticmethod
    def _reduce_to(g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """Sum a broadcast gradient back to ``shape`` (Gemm's C may be a scalar or a row)."""
        if tuple(g.shape) == tuple(shape):
            return g
        return g.sum().reshape(shape) if len(shape) == 0 or int(torch.Size(shape).numel()) == 1 else g.reshape(shape)

    def generic(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None,
                y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The same through autograd (any layer :func:`.layer.make_forward` knows)."""
        with torch.enable_grad():
            wl = w.detach().requires_grad_(True)
            bl = b.detach().requires_grad_(True) if (b is not None and self.want_bias) else b
            pred = self._forward_ref(x, wl, bl)
            loss = (pred - y).pow(2).sum(dim=self.channel_dim).mean()
            wanted = [wl] + ([bl] if (b is not None and self.want_bias) else [])
            grads = torch.autograd.grad(loss, wanted)
        return loss.detach(), grads[0], grads[1] if len(grads) > 1 else None


class Adam:
    """Adam on one tensor in a single fused call per step (torch.optim.Adam's arithmetic)."""

    def __init__(self, param: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.param = param
        self.lr = float(lr)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.m = torch.zeros_like(param, memory_format=torch.preserve_format)
        self.v = torch.zeros_like(param, memory_format=torch.preserve_format)
        self.step_count = torch.zeros((), dtype=torch.float32, device=param.device)
        self._fused = hasattr(torch, "_fused_adam_") and param.device.type in ("cpu", "cuda")

    def step(self, grad: torch.Tensor) -> None:
        if grad.stride() != self.param.stride():  # the fused kernel walks both tensors' memory in the same order
            grad = torch.empty_like(self.param).copy_(grad)
        self.step_count += 1
        if self._fused:
            torch._fused_adam_([self.param], [grad], [self.m], [self.v], [], [self.step_count], lr=self.lr,
                               beta1=self.beta1, beta2=self.beta2, weight_decay=0.0, eps=self.eps,
                               amsgrad=False, maximize=False)
            return
        t = float(self.step_count)
        self.m.mul_(self.beta1).add_(grad, alpha=1.0 - self.beta1)
        self.v.mul_(self.beta2).addcmul_(grad, grad, value=1.0 - self.beta2)
        bc1 = 1.0 - self.beta1 ** t
        bc2 = 1.0 - self.beta2 ** t
        denom = (self.v.sqrt() / (bc2 ** 0.5)).add_(self.eps)
        self.param.addcdiv_(self.m, denom, value=-self.lr / bc1)
