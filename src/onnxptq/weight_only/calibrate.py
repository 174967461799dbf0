"""Activation statistics for GPTQ/AWQ/mixed precision: Hessians ``XᵀX`` streamed in one pass.

One augmented model exposes the input ``X`` of every planned MatMul (each distinct tensor once:
q/k/v share theirs, gate/up theirs); onnxruntime runs it feed by feed, and each exposed tensor,
flattened to ``[rows, K]``, is folded into a running ``XᵀX`` (float64 ``[K, K]``) and a running
mean of ``|x|`` per input channel. Memory is O(Σ K²) — never O(samples): activations are dropped
as soon as they are added in.

Every layer sees the *float* model's inputs (one pass over the unquantized model), not the
outputs of already-quantized earlier layers. Why: a sequential pass would need a session per
layer (or per block) and the activations of the whole calibration set held between them, which
is what made GPTQ on ONNX take hours; the float-input Hessian is what onnxruntime's and the
reference tool's GPTQ use as well. The consequence is documented in docs/weight_only.md.

The sums are NumPy float32 SGEMMs per feed (accumulated in float64) under a one-thread BLAS limit
(:mod:`.threads`); torch is not used: importing it alone took longer than the whole calibration of
the test Llama, and a one-thread SGEMM of ``[tokens, K]ᵀ·[tokens, K]`` is already the cost floor.

A KV-cache model (``past_key_values.*`` inputs) calibrates on feeds without the past: inputs
whose name starts with ``past`` that a feed lacks are given an empty past (length 0 on their
one dynamic axis), so token-id feeds work for both variants of a model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ..calibration.readers import ModelInputs, as_feed_iterator
from ..sessions import open_session

log = logging.getLogger(__name__)


class CalibrationNeededError(ValueError):
    """A method that needs activations was asked for without data."""


@dataclass
class ActivationStats:
    """Per exposed tensor: ``hessian`` (Σ xᵀx in float64 while collecting; the mean ``XᵀX / rows``
    in float32 once :func:`collect` returns), ``abs_mean`` (mean |x| per channel) and ``rows``."""

    hessian: dict[str, np.ndarray] = field(default_factory=dict)
    abs_mean: dict[str, np.ndarray] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    #: vectors that went into each tensor's Hessian (``rows`` becomes 1 once the means are taken)
    samples: dict[str, int] = field(default_factory=dict)
    feeds: int = 0
    seconds: float = 0.0

    def mean_hessian(self, name: str) -> np.ndarray:
        """``XᵀX / rows``: the scale-free Hessian (used for damping and errors); no copy after collect."""
        rows = max(self.rows.get(name, 1), 1)
        return self.hessian[name] if rows == 1 else self.hessian[name] / rows


def _feeds(data: Any, inputs: ModelInputs) -> Iterator[dict[str, np.ndarray]]:
    """Feeds from ``data`` with an empty past added for KV-cache inputs the feed lacks."""
    past = [i for i in inputs if i.name.startswith("past") and i.shape is not None and None in i.shape]
    if not past:
        yield from as_feed_iterator(data, inputs)
        return
    rest = ModelInputs(tuple(i for i in inputs if i not in past))
    given_past = None
    source = data
    # a reader: pull its dicts; an iterable: iterate; other sources (files) must carry every input
    if callable(getattr(data, "get_next", None)):
        source = iter(lambda: data.get_next(), None)
    if isinstance(data, (list, tuple)) or hasattr(source, "__next__"):
        for feed in source:
            feed = dict(feed)
            if given_past is None:
                given_past = all(p.name in feed for p in past)
            if not given_past:
                batch = next(iter(feed.values())).shape[0]
                for p in past:
                    shape = [batch if i == 0 else (0 if d is None else d) for i, d in enumerate(p.shape)]
                    feed[p.name] = np.zeros(shape, dtype=p.dtype or np.float32)
                checked = next(as_feed_iterator([{k: v for k, v in feed.items() if k in rest.names}], rest))
                feed.update(checked)
                yield feed
            else:
                yield from as_feed_iterator([feed], inputs)
        return
    yield from as_feed_iterator(data, inputs)


def _augmented(model: onnx.ModelProto, tensors: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs ``tensors`` (float, shape left to the runtime)."""
    aug = onnx.ModelProto()
    aug.CopyFrom(model)
    have = {o.name for o in aug.graph.output}
    for name in tensors:
        if name not in have:
            aug.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return aug


def collect(model: onnx.ModelProto, tensors: list[str], data: Any, *, max_feeds: int | None = None,
            progress: bool = True) -> ActivationStats:
    """Stream ``data`` through ``model`` once and return the statistics of ``tensors``."""
    if data is None:
        raise CalibrationNeededError("data is required to collect activation statistics")
    start = time.perf_counter()
    tensors = list(dict.fromkeys(tensors))
    # no spinning: between runs this process does the sums, and spinning pool threads would take its cores
    session = open_session(_augmented(model, tensors), spinning=False)
    inputs = ModelInputs.from_model(model)
    stats = ActivationStats()
    from tqdm.auto import tqdm

    bar = tqdm(desc="weight-only calibration", unit="feed", disable=not progress, total=max_feeds)
    for feed in _feeds(data, inputs):
        values = session.run(tensors, feed)
        for name, x in zip(tensors, values):
            x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
            # float32 products per feed (one SGEMM), accumulated in float64 across feeds
            h = (x2.T @ x2).astype(np.float64)
            if name in stats.hessian:
                stats.hessian[name] += h
                stats.abs_mean[name] += np.abs(x2).sum(axis=0, dtype=np.float64)
            else:
                stats.hessian[name] = h
                stats.abs_mean[name] = np.abs(x2).sum(axis=0, dtype=np.float64)
            stats.rows[name] = stats.rows.get(name, 0) + x2.shape[0]
        stats.feeds += 1
        bar.update(1)
        if max_feeds is not None and stats.feeds >= max_feeds:
            break
    bar.close()
    if stats.feeds == 0:
        raise CalibrationNeededError("the calibration data yielded no feed")
    for name in stats.abs_mean:
        stats.abs_mean[name] /= max(stats.rows[name], 1)
        # the sums needed float64; the mean Hessian the methods read is kept in float32 (half the memory)
        stats.hessian[name] = (stats.hessian[name] / max(stats.rows[name], 1)).astype(np.float32)
        stats.samples[name] = stats.rows[name]
        stats.rows[name] = 1
    stats.seconds = time.perf_counter() - start
    log.info("weight-only calibration: %d feeds, %d tensors, %.1f s", stats.feeds, len(tensors), stats.seconds)
    return stats
