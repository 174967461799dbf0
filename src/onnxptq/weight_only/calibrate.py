"""Activation statistics for GPTQ/AWQ/mixed precision: Hessians ``XᵀX`` streamed in one pass.

One augmented model exposes the input ``X`` of every planned MatMul (each distinct tensor once:
q/k/v share theirs, gate/up theirs); onnxruntime runs it feed by feed, and each exposed tensor,
flattened to ``[rows, K]``, is folded into a running ``XᵀX`` (float64 ``[K, K]``) and a running
mean of ``|x|`` per input channel. Memory is O(Σ K²) — never O(samples): activations are dropped
as soon as they are added in.

With many or wide layers the Hessians of every layer at once outgrow the weights (O(Σ K²)):
:func:`chunk_inputs` then splits the inputs into chunks that fit a memory budget, and the solve
runs one pass per chunk (:func:`onnxptq.weight_only.solve.solve_in_chunks`), each pass on a copy
of the model cut to the nodes its tensors need (:func:`_augmented`), so an early chunk neither
runs nor loads the later layers.

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
    """A copy of ``model`` whose outputs are ``tensors`` (float, shape left to the runtime), cut to
    the nodes they depend on, with only the initializers those nodes read.

    Why cut: a calibration pass for the first layers' inputs then neither runs nor loads the later
    layers (a chunked calibration of a large model holds only the weights up to its chunk). The
    copy is built from the kept parts only: copying the whole model first would copy every weight
    of a model held in memory once per pass."""
    graph = model.graph
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    keep: set[int] = set()
    stack = [producer[t] for t in tensors if t in producer]
    while stack:
        i = stack.pop()
        if i not in keep:
            keep.add(i)
            stack += [producer[t] for t in _reads(graph.node[i]) if t in producer]
    nodes = [graph.node[i] for i in sorted(keep)]
    used = {t for n in nodes for t in _reads(n)}
    aug = _shell(model, "graph")
    aug.graph.CopyFrom(_shell(graph, "node", "initializer", "output"))
    aug.graph.node.extend(nodes)
    aug.graph.initializer.extend(t for t in graph.initializer if t.name in used)
    for name in tensors:
        aug.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return aug


def _shell(message: Any, *skip: str) -> Any:
    """A copy of the protobuf ``message`` without its fields named in ``skip``."""
    out = type(message)()
    for field, value in message.ListFields():
        if field.name in skip:
            continue
        if hasattr(value, "extend"):  # a repeated field (upb's descriptors carry no label)
            getattr(out, field.name).extend(value)
        elif field.message_type is not None:
            getattr(out, field.name).CopyFrom(value)
        else:
            setattr(out, field.name, value)
    return out


def _reads(node: onnx.NodeProto) -> list[str]:
    """The tensors ``node`` reads, those its subgraphs (If/Loop bodies) read by outer name included."""
    reads = list(node.input)
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            reads += [t for n in _all_nodes(sub) for t in n.input]
    return reads


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
                yield from _all_nodes(sub)


def accumulator_bytes(k: int) -> int:
    """Bytes one input of width ``k`` holds while collecting: ``XᵀX`` in float64 plus its float32
    mean at the end, and two ``[K]`` vectors."""
    return k * k * (8 + 4) + 16 * k


def chunk_inputs(widths: dict[str, int], budget: int) -> list[list[str]]:
    """Consecutive groups of the inputs ``widths`` (name → K, in graph order) whose accumulators
    fit ``budget`` bytes; an input larger than the budget gets a chunk of its own."""
    chunks: list[list[str]] = []
    used = budget + 1
    for name, k in widths.items():
        cost = accumulator_bytes(k)
        if chunks and used + cost <= budget:
            chunks[-1].append(name)
            used += cost
        else:
            chunks.append([name])
            used = cost
    return chunks


def replayable(data: Any, model: onnx.ModelProto, max_feeds: int | None = None) -> list[dict[str, np.ndarray]]:
    """The feeds of ``data`` as a list, to be read once per chunk. Token-id feeds are small (a few
    KB each); a source that cannot be iterated twice (a reader, a generator) is read here once."""
    out = []
    for feed in _feeds(data, ModelInputs.from_model(model)):
        out.append(feed)
        if max_feeds is not None and len(out) >= max_feeds:
            break
    if not out:
        raise CalibrationNeededError("the calibration data yielded no feed")
    return out


def collect(model: onnx.ModelProto, tensors: list[str], data: Any, *, max_feeds: int | None = None,
            progress: bool = True) -> ActivationStats:
    """Stream ``data`` through ``model`` once and return the statistics of ``tensors``."""
    if data is None:
        raise CalibrationNeededError("data is required to collect activation statistics")
    start = time.perf_counter()
    tensors = list(dict.fromkeys(tensors))
    # no spinning: between runs this process does the sums, and spinning pool threads would take its cores
    # prepacking off: onnxruntime would keep a packed copy of every MatMul weight beside the
    # original (twice the weights in memory) to speed up a pass that runs a handful of feeds
    session = open_session(_augmented(model, tensors), spinning=False, config={"session.disable_prepacking": "1"})
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
    del session  # its weights and arena go before the Hessians are converted
    if stats.feeds == 0:
        raise CalibrationNeededError("the calibration data yielded no feed")
    for name in stats.abs_mean:
        stats.abs_mean[name] /= max(stats.rows[name], 1)
        # the sums needed float64; the mean Hessian the methods read is kept in float32 (half the
        # memory); divided in place so that no second float64 copy exists
        stats.hessian[name] /= max(stats.rows[name], 1)
        stats.hessian[name] = stats.hessian[name].astype(np.float32)
        stats.samples[name] = stats.rows[name]
        stats.rows[name] = 1
    stats.seconds = time.perf_counter() - start
    log.info("weight-only calibration: %d feeds, %d tensors, %.1f s", stats.feeds, len(tensors), stats.seconds)
    return stats
