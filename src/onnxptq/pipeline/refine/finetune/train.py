"""What AdaRound and AdaQuant share: one layer's problem, batch drawing, early stop, progress logs."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ....config.schema import FinetuneOptions
from . import torch_formats as tf
from .extract import Layer

log = logging.getLogger(__name__)


@dataclass
class Quantizer:
    """A tensor's format and the (torch) keyword arguments of its fake quantization."""

    format: str
    attrs: dict[str, Any]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return tf.fake_quantize(x, self.format, **self.attrs)

    def ste(self, x: torch.Tensor) -> torch.Tensor:
        return tf.fake_quantize_ste(x, self.format, **self.attrs)


@dataclass
class Problem:
    """One layer to optimise: data on the optimisation device, its weights and their quantizers."""

    layer: Layer
    forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]
    channel_dim: int
    x: torch.Tensor  # quantized-model inputs, training rows
    y: torch.Tensor  # float-model targets, training rows
    x_float: torch.Tensor | None  # float-model inputs (only when drop_ratio < 1)
    weight: torch.Tensor  # float weight (as in the prepared model)
    bias: torch.Tensor | None  # float bias
    weight_q: Quantizer
    bias_q: Quantizer | None  # None: the bias stays float

    def bias_value(self) -> torch.Tensor | None:
        """The bias as the quantized model uses it (fake-quantized when it has a quantizer)."""
        if self.bias is None:
            return None
        return self.bias_q(self.bias) if self.bias_q is not None else self.bias


def draw(problem: Problem, batch_size: int, drop_ratio: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random training rows (inputs, targets); with ``drop_ratio`` < 1 each input
    element is the quantized model's with that probability and the float model's otherwise."""
    n = problem.x.shape[0]
    idx = torch.randperm(n, generator=gen)[: min(batch_size, n)].to(problem.x.device)
    x = problem.x.index_select(0, idx)
    if problem.x_float is not None and drop_ratio < 1.0:
        keep = torch.rand(x.shape, generator=gen).to(x.device) < drop_ratio
        x = torch.where(keep, x, problem.x_float.index_select(0, idx))
    y = problem.y.index_select(0, idx)
    if x.dim() == 4 and problem.x.is_contiguous(memory_format=torch.channels_last):
        # index_select drops the layout; channels-last makes depthwise convolutions 2x faster
        x, y = x.contiguous(memory_format=torch.channels_last), y.contiguous(memory_format=torch.channels_last)
    return x, y


class Batches:
    """The training batches of one layer, drawn as :func:`draw` draws them, at a fraction of the cost.

    Each step takes ``batch_size`` rows chosen by ``torch.randperm`` (the same random stream as
    :func:`draw`). Channels-last 4-D data is gathered in its physical NHWC order and handed back as
    a channels-last view, so a batch costs one contiguous row copy instead of a layout conversion.
    When the batch covers every training row, the rows are used as they are (the loss is a mean
    over rows, so their order does not matter). ``prepare`` maps the gathered input to what the
    step reads (e.g. asymmetric convolution pads applied once, up front).
    """

    def __init__(self, problem: Problem, batch_size: int, drop_ratio: float, gen: torch.Generator,
                 prepare: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> None:
        self.gen = gen
        self.n = problem.x.shape[0]
        self.size = min(int(batch_size), self.n)
        self.mix = problem.x_float is not None and drop_ratio < 1.0
        self.drop_ratio = drop_ratio
        self.device = problem.x.device
        self.prepare = prepare
        self.nhwc = problem.x.dim() == 4 and problem.x.is_contiguous(memory_format=torch.channels_last) and not self.mix
        if self.mix:  # element-wise mixing happens per batch, before preparing
            self.x, self.xf, self.y = problem.x, problem.x_float, problem.y
        elif self.nhwc:
            self.x = prepare(problem.x).permute(0, 2, 3, 1)
            self.y = problem.y.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)
        else:
            self.x, self.y = prepare(problem.x), problem.y
        self.whole = self.size >= self.n and not self.mix

    def all(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every training row (prepared input, target)."""
        if self.mix:
            return self.prepare(self.x), self.y
        if self.nhwc:
            return self.x.permute(0, 3, 1, 2), self.y.permute(0, 3, 1, 2)
        return self.x, self.y

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.whole:
            return self.all()
        idx = torch.randperm(self.n, generator=self.gen)[: self.size].to(self.device)
        if self.mix:
            x = self.x.index_select(0, idx)
            keep = torch.rand(x.shape, generator=self.gen).to(x.device) < self.drop_ratio
            x = torch.where(keep, x, self.xf.index_select(0, idx))
            y = self.y.index_select(0, idx)
            if x.dim() == 4 and self.x.is_contiguous(memory_format=torch.channels_last):
                x, y = x.contiguous(memory_format=torch.channels_last), y.contiguous(memory_format=torch.channels_last)
            return self.prepare(x), y
        x, y = self.x.index_select(0, idx), self.y.index_select(0, idx)
        if self.nhwc:
            return x.permute(0, 3, 1, 2), y.permute(0, 3, 1, 2)
        return x, y


class EarlyStop:
    """Spec §7.3: after the warm start, compare each window's mean loss with the best window so far;
    the first window that does not improve stops training (no patience)."""

    def __init__(self, options: FinetuneOptions) -> None:
        n = int(options.num_iterations)
        self.enabled = bool(options.early_stop)
        self.start = int(options.warm_start * n)
        self.window = int(options.num_batches) if int(options.num_batches) > 1 else max(1, n // 10)
        self.best = math.inf
        self.acc: list[float] = []

    def __call__(self, it: int, loss: float) -> bool:
        """True when training should stop after iteration ``it``."""
        if not self.enabled or it < self.start:
            return False
        self.acc.append(loss)
        if len(self.acc) < self.window:
            return False
        mean = sum(self.acc) / len(self.acc)
        self.acc.clear()
        if mean < self.best:
            self.best = mean
            return False
        return True


def learning_rate(options: FinetuneOptions, initial_loss: float) -> float:
    """The learning rate, LRAdjust ``(threshold, lr)`` applied when the initial loss is above threshold."""
    lr = options.lr
    if options.lr_adjust and initial_loss > float(options.lr_adjust[0]):
        lr = float(options.lr_adjust[1])
    return lr


def log_period(options: FinetuneOptions) -> int:
    return int(options.log_period) if options.log_period else max(1, int(options.num_iterations) // 10)
