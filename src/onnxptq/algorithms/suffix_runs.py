"""Incremental runs of a switch model: a candidate runs from where it first differs from a set already run.

The automatic mixed-precision search (:mod:`onnxptq.algorithms.mixed_precision`) scores hundreds
of flip sets of one model whose layers are switched between two precisions by boolean inputs.
Most of a candidate's forward pass equals that of a set already run, up to the first layer whose
switch differs; :class:`Suffixes` cuts the model at a few points (spaced by compute,
:func:`node_costs`), keeps the tensors live across each cut for the sets it ran, and runs only the
suffix from the cut before the first difference. Scores equal whole runs (tested).
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper

log = logging.getLogger(__name__)

#: Most cut points of the incremental evaluation (one onnxruntime session each; see :class:`Suffixes`).
MAX_CUTS = 16
#: Memory the incremental evaluation may fill with kept cut tensors.
CACHE_BYTES = 384 * 2**20
#: Op types counted to space the cut points (where the compute is).
_HEAVY = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN", "Attention"})


class NotIncremental(Exception):
    """The switch model cannot be cut (not topologically sorted, subgraphs, ...)."""


@dataclass
class Kept:
    """A flip set already run: its switch inputs and, per run unit, the tensors live across the cuts."""

    flags: dict[str, np.ndarray]
    acts: list[dict[str, np.ndarray]]


@dataclass
class Suffix:
    start: int
    body: list[int]  # indices of the nodes it runs: data nodes from ``start`` on, and the constant nodes they read
    inputs: list[str]  # cut tensors fed from the base set
    graph_inputs: list[str]  # model inputs and switches the suffix reads
    outputs: list[str]  # cut tensors of later cuts it computes
    session: Any = None


class Suffixes:
    """Incremental evaluation: a candidate runs from where it first differs from a set already run.

    *Data nodes* depend on a model input; the others (weight dequantization, bias selection) only
    on initializers and switches, and are cheap. A switch first changes a data value at the first
    data node that reads it, directly or through constant nodes; before the earliest such node of
    the switches two flip sets set differently, the switch model computes the same data values
    for both. The model is cut before up to :data:`MAX_CUTS` such nodes (spaced by compute); the
    suffix model of a cut runs the data nodes after it, and every constant node they read, from
    the data tensors live across the cut: the same nodes on the same values as a whole run. Every
    run also returns the data tensors live across its later cuts, kept for the most recently used
    sets (the all-high set always) within :data:`CACHE_BYTES`. A candidate runs from the latest cut
    before its divergence from the kept set it shares the longest prefix with: a sensitivity run
    starts at the flipped layer, a greedy run at the layer added to the accepted set.
    """

    def __init__(self, model: onnx.ModelProto, output_index: int, units: list[dict[str, np.ndarray]],
                 flag_names: list[str], make_session: Callable[[onnx.ModelProto], Any],
                 pool: concurrent.futures.Executor, *, costs: dict[str, float] | None = None, max_cuts: int | None = None,
                 cache_bytes: int | None = None, min_kept: int = 2) -> None:
        import threading

        graph = model.graph
        nodes = list(graph.node)
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in nodes for a in n.attribute):
            raise NotIncremental("nodes with subgraphs")
        flags = set(flag_names)
        model_inputs = [i.name for i in graph.input]
        known = set(model_inputs) | {t.name for t in graph.initializer} | {""}
        data = {n for n in model_inputs if n not in flags}  # tensors that depend on a model input
        reach: dict[str, frozenset[str]] = {f: frozenset([f]) for f in flags}  # switches a constant tensor depends on
        produced: dict[str, int] = {}
        self.is_data: list[bool] = []
        self.first_use: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for t in node.input:
                if t not in known and t not in produced:
                    raise NotIncremental(f"node {node.name!r} reads {t!r} before it is produced")
            is_data = any(t in data for t in node.input)
            self.is_data.append(is_data)
            switches = frozenset().union(*(reach.get(t, frozenset()) for t in node.input))
            for o in node.output:
                if o:
                    produced[o] = i
                    if is_data:
                        data.add(o)
                    elif switches:
                        reach[o] = switches
            if is_data:
                for f in switches:
                    self.first_use.setdefault(f, i)
        self.output = graph.output[output_index].name
        if self.output not in data or self.output not in produced:
            raise NotIncremental("the output is not computed from the model inputs")
        missing = flags - set(self.first_use)
        if missing:
            raise NotIncremental(f"switches that change no data value: {sorted(missing)[:3]}")
        last_use: dict[str, int] = {}
        for i, node in enumerate(nodes):
            if self.is_data[i]:
                for t in node.input:
                    last_use[t] = i
        for o in graph.output:
            last_use[o.name] = len(nodes)

        # Cut points spaced by compute: multiply-accumulates per node when measured, else heavy nodes.
        weight = np.cumsum([0.0] + [float((costs or {}).get(n.name, 0.0)) for n in nodes])
        if weight[-1] <= 0:
            weight = np.cumsum([0.0] + [float(n.op_type in _HEAVY) for n in nodes])
        if weight[-1] <= 0:
            weight = np.arange(len(nodes) + 1, dtype=np.float64)
        cuts_wanted = float(max_cuts or MAX_CUTS)
        step, node_step = weight[-1] / cuts_wanted, len(nodes) / cuts_wanted
        # Data tensors live across each position: a cut is moved back, within the nodes since the
        # previous switch, to where the fewest are (before a tensor's quantized variants are made).
        span = np.zeros(len(nodes) + 2, np.int64)
        for t in data:
            if t in produced and last_use.get(t, -1) > produced[t]:
                span[produced[t] + 1] += 1
                span[last_use[t] + 1] -= 1
        live_count = np.cumsum(span)
        self.cuts = [0]
        previous = 0
        for pos in sorted(set(self.first_use.values())):
            if 0 < pos <= produced[self.output]:
                window = np.arange(previous + 1, pos + 1)
                c = int(window[np.flatnonzero(live_count[window] == live_count[window].min())[-1]])
                worth = weight[c] - weight[self.cuts[-1]] >= step or c - self.cuts[-1] >= node_step
                if worth and any(self.is_data[self.cuts[-1]:c]):
                    self.cuts.append(c)
            previous = pos
        if len(self.cuts) < 2:
            raise NotIncremental("no cut point")
        live = {c: sorted((t for t in data if t in produced and produced[t] < c and last_use.get(t, -1) >= c), key=produced.get)
                for c in self.cuts[1:]}
        self.cut_tensors = sorted({t for ts in live.values() for t in ts}, key=produced.get)
        self.suffixes: list[Suffix] = []
        for c in self.cuts:
            body = set(i for i in range(c, len(nodes)) if self.is_data[i])
            todo = [t for i in body for t in nodes[i].input]
            while todo:  # the constant nodes the body reads, wherever they sit
                t = todo.pop()
                i = produced.get(t)
                if i is not None and not self.is_data[i] and i not in body:
                    body.add(i)
                    todo.extend(nodes[i].input)
            reads = {t for i in body for t in nodes[i].input}
            self.suffixes.append(Suffix(
                start=c, body=sorted(body), inputs=live.get(c, []), graph_inputs=[n for n in model_inputs if n in reads],
                outputs=[t for t in self.cut_tensors if produced[t] >= c]))
        self.model, self.nodes, self.units = model, nodes, units
        self.make_session, self.pool = make_session, pool
        self.cache_bytes = cache_bytes or CACHE_BYTES
        self.min_kept = min_kept
        self.kept: "collections.OrderedDict[frozenset[str], Kept]" = collections.OrderedDict()
        self.pinned: set[frozenset[str]] = set()
        self.entry_bytes = 0
        self.capacity = 1
        self.lock = threading.Lock()
        self.starts: list[int] = []  # cut index of every run (for the log and tests)
        self.suffixes[0].session = make_session(self._suffix_model(self.suffixes[0], {}))

    def _suffix_model(self, suffix: Suffix, dtypes: dict[str, np.dtype]) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.CopyFrom(self.model)
        graph = model.graph
        body = [self.nodes[i] for i in suffix.body]
        reads = {t for n in body for t in n.input}
        del graph.node[:]
        graph.node.extend(body)
        inputs = [i for i in graph.input if i.name in suffix.graph_inputs]
        inputs += [helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(dtypes[t]), None) for t in suffix.inputs]
        target = next(o for o in graph.output if o.name == self.output)
        outputs = [target] + [onnx.ValueInfoProto(name=t) for t in suffix.outputs]
        del graph.input[:]
        graph.input.extend(inputs)
        del graph.output[:]
        graph.output.extend(outputs)
        io_names = set(suffix.inputs) | set(suffix.outputs)
        info = [v for v in graph.value_info if v.name not in io_names]
        del graph.value_info[:]
        graph.value_info.extend(info)
        inits = [t for t in graph.initializer if t.name in reads]
        del graph.initializer[:]
        graph.initializer.extend(inits)
        return model

    def build_sessions(self) -> None:
        """Sessions of the suffix models (after the first run, which gives the cut tensors' types)."""
        first = next(iter(self.kept.values())).acts[0]
        dtypes = {t: a.dtype for t, a in first.items()}
        todo = self.suffixes[1:]
        for suffix, session in zip(todo, self.pool.map(lambda s: self.make_session(self._suffix_model(s, dtypes)), todo)):
            suffix.session = session

    def _divergence(self, flags: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> int:
        """Index of the first node whose value differs between the two switch settings."""
        return min((self.first_use[f] for f, v in flags.items() if bool(v) != bool(other[f])), default=len(self.nodes))

    def run(self, key: frozenset[str], flags: dict[str, np.ndarray], *, pin: bool = False) -> list[np.ndarray]:
        """The output for ``flags`` per run unit; keeps its cut tensors under ``key``."""
        with self.lock:
            base_key, start = None, 0
            for k, kept in self.kept.items():
                d = self._divergence(flags, kept.flags)
                if d > start or base_key is None:
                    base_key, start = k, d
            base = self.kept[base_key] if base_key is not None else None
            if base_key is not None:
                self.kept.move_to_end(base_key)
        index = 0
        if base is not None:
            index = max(i for i, c in enumerate(self.cuts) if c <= start)
        suffix = self.suffixes[index]
        outs, acts = [], []
        for u, unit in enumerate(self.units):
            feed = {t: unit[t] if t in unit else flags[t] for t in suffix.graph_inputs if t in unit or t in flags}
            if base is not None:
                feed.update({t: base.acts[u][t] for t in suffix.inputs})
            got = suffix.session.run([self.output] + suffix.outputs, feed)
            outs.append(got[0])
            acts.append({**(base.acts[u] if base is not None else {}), **dict(zip(suffix.outputs, got[1:]))})
        with self.lock:
            self.starts.append(index)
            if not self.entry_bytes:
                self.entry_bytes = max(1, sum(a.nbytes for unit in acts for a in unit.values()))
                self.capacity = max(self.min_kept, self.cache_bytes // self.entry_bytes)
            self.kept[key] = Kept(flags, acts)
            if pin:
                self.pinned.add(key)
            while len(self.kept) > self.capacity + len(self.pinned):
                oldest = next(k for k in self.kept if k not in self.pinned)
                del self.kept[oldest]
        return outs


def node_costs(model: onnx.ModelProto, feed: dict[str, np.ndarray],
                make_session: Callable[[onnx.ModelProto], Any]) -> dict[str, float]:
    """Multiply-accumulates of each heavy node per sample, from shapes seen in one run of one sample.

    Used only to space the cut points of :class:`Suffixes`; empty when it cannot be measured."""
    try:
        graph = model.graph
        inits = {t.name: tuple(t.dims) for t in graph.initializer}
        heavy = [n for n in graph.node if n.op_type in _HEAVY and n.output and n.output[0]]
        have = {o.name for o in graph.output} | {i.name for i in graph.input}
        wanted = list(dict.fromkeys(t for n in heavy for t in [n.output[0], *n.input[:2]] if t and t not in inits))
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in wanted if t not in have)
        one = {k: (v[:1] if np.ndim(v) > 0 else v) for k, v in feed.items()}
        session = make_session(probe)
        names = [o.name for o in session.get_outputs()]
        shapes = {n: np.shape(a) for n, a in zip(names, session.run(names, one))}
        shapes.update({k: np.shape(v) for k, v in one.items()})
        shapes.update(inits)
        costs: dict[str, float] = {}
        for n in heavy:
            out, a = shapes.get(n.output[0]), shapes.get(n.input[0])
            b = shapes.get(n.input[1]) if len(n.input) > 1 else None
            if out is None:
                continue
            if n.op_type == "Conv" and b is not None:
                costs[n.name] = float(np.prod(out)) * float(np.prod(b[1:]))
            elif n.op_type == "ConvTranspose" and a is not None and b is not None:
                costs[n.name] = float(np.prod(a)) * float(np.prod(b[1:]))
            elif n.op_type in ("MatMul", "Gemm") and a is not None and len(a) > 0:
                trans = n.op_type == "Gemm" and any(x.name == "transA" and x.i for x in n.attribute)
                costs[n.name] = float(np.prod(out)) * float(a[0] if trans else a[-1])
            else:
                costs[n.name] = float(np.prod(out))
        return costs
    except Exception as exc:  # noqa: BLE001 - only a hint for the cut points
        log.debug("mixed precision: node costs not measured (%s)", exc)
        return {}
