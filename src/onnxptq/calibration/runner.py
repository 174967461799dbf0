"""The streaming calibration pass: one augmented model, one session, runs over groups of feeds.

:func:`collect` exposes exactly the requested main-graph tensors to reductions added to the graph
(or, for collectors that need whole tensors, as extra graph outputs, typed when the model knows
the type, untyped otherwise - onnxruntime infers it), creates one session with full graph
optimisation (a tensor the statistics read has a consumer, so no fusion removes it), and folds
every run's results into the collectors before the next run, so nothing is kept between feeds:
memory is O(tensors x bins), not O(samples).

Tensors that are graph inputs are read straight from the feed (no round trip through the session).
With ``minmax_in_graph=True`` (the default) every collector that needs less than the whole tensor
is fed by reductions inside the graph, so the full tensor never crosses into Python: a plain
:class:`MinMaxCollector` gets ``ReduceMin``/``ReduceMax``, a :class:`PerChannelMinMaxCollector` the
same per channel, a :class:`TailCollector` its element count and sorted ``TopK`` largest/smallest
values. Only histogram collectors fetch tensors. Every reduction works per feed (one row per feed),
so consecutive feeds of equal shapes run together (:class:`_Runs`) with unchanged statistics.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnx import helper

from . import bodies

from onnxptq.calibration.collectors import Collector, MinMaxCollector, TailCollector
from onnxptq.calibration.methods import Method, make_collector
from onnxptq.sessions import open_session
from onnxptq.calibration.reductions import ROWS_INPUT, Reduction, SharedConstants, minmax_nodes, plan_reduction, reducible
from onnxptq.graph.io import TARGET_OPSET
from onnxptq.graph.opsets import model_opset

from onnxptq.errors import ModelRuntimeError, NonFiniteStatisticsError, UsageError

log = logging.getLogger(__name__)

__all__ = ["SideFetch", "TensorSpec", "augment_model", "collect", "iterate_feeds"]

#: What :func:`collect` accepts per tensor: a factory (called with no argument), a ready collector
#: (updated in place, e.g. to continue a previous pass), a method name, or a dict of
#: :func:`~onnxptq.calibration.methods.make_collector` arguments (``{"method": "percentile", ...}``).
TensorSpec = Callable[[], Collector] | Collector | str | Method | Mapping[str, Any]

SHAPE_SUFFIX = "__onnxptq_shape"


class SideFetch:
    """Tensors a later stage reads on the first feeds of the calibration pass, fetched by the
    calibration's own runs instead of a float session of that stage's own (the range guard's
    thinned activations: pipeline/guard.py ``CalibrationCapture``).

    ``nodes``: per main-graph tensor, nodes placed right after its producer (``initializers``
    hold their constants); ``outputs``: the tensors fetched; ``feeds``: on how many first feeds
    (those run one at a time, so each feed's values are its own); ``take`` receives each of those
    feeds' ``{output: array}`` right after its run, so nothing but what it keeps outlives the run.
    The subclass defines what it keeps, and keeps it in memory of its own: the arrays are
    onnxruntime's, which hold the session's output buffers (copied whole for it, the range guard's
    69 thinned tensors of PP-OCRv4 rec, 21.5 MiB a feed, were copied to keep 3.2 MiB: calibration's
    peak RSS; bench/RESULTS.md, quantcpu3)."""

    nodes: Mapping[str, Sequence[onnx.NodeProto]] = {}
    initializers: Sequence[onnx.TensorProto] = ()
    outputs: Sequence[str] = ()
    feeds: int = 0

    def take(self, values: Mapping[str, np.ndarray]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

def _make(name: str, spec: TensorSpec) -> Collector:
    """Turn one ``TensorSpec`` into a collector, naming the tensor on errors."""
    if isinstance(spec, MinMaxCollector):
        return spec
    if isinstance(spec, (str, Method)):
        return make_collector(spec, name=name)
    if isinstance(spec, Mapping):
        opts = dict(spec)
        if "method" not in opts:
            raise ValueError(f"collector spec for {name!r} is a dict without 'method': {opts}")
        return make_collector(opts.pop("method"), name=name, **opts)
    if callable(spec):
        made = spec()
        if not isinstance(made, MinMaxCollector):
            raise TypeError(f"collector factory for {name!r} returned {type(made).__name__}, not a collector")
        if getattr(made, "name", "tensor") == "tensor":
            made.name = name
        return made
    raise TypeError(f"unsupported collector spec for {name!r}: {type(spec).__name__}")


def _main_graph_names(graph: onnx.GraphProto) -> tuple[set[str], set[str]]:
    """(graph input names that are not initializers, every other tensor name of the main graph)."""
    inits = {t.name for t in graph.initializer}
    inputs = {i.name for i in graph.input} - inits
    produced = {o for n in graph.node for o in n.output if o}
    return inputs, produced | inits


def augment_model(
    model: onnx.ModelProto,
    fetch: Sequence[str],
    reduce: Sequence[str] = (),
    reductions: Mapping[str, Reduction] | None = None,
    keep_outputs: Sequence[str] = (),
    shapes: Sequence[str] = (),
    side: "SideFetch | None" = None,
) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose outputs are ``fetch``, min/max scalars for ``reduce`` and the
    outputs of ``reductions`` (tensor name -> :class:`Reduction`).

    Returns the model and the output names in order: ``fetch`` first, then ``<t>_min, <t>_max``
    pairs, then each reduction's outputs. Original outputs are dropped (they would be computed and
    transferred for nothing) unless requested in ``fetch`` or kept by ``keep_outputs`` (left
    graph outputs but not in the returned names: fetch them by name when wanted). Each tensor in
    ``shapes`` gets a ``Shape`` output ``<t>__onnxptq_shape`` (also not in the names). ``side``'s
    nodes go right after their tensor's producer and its outputs become graph outputs (not in the
    names either: :class:`SideFetch`). Types come from the model's value_info/outputs when
    known; other outputs are left untyped, which onnxruntime accepts (it infers them), so no
    shape-inference pass over a possibly large model is needed.
    """
    aug = onnx.ModelProto()
    aug.CopyFrom(model)
    graph = aug.graph
    known = {vi.name: vi for vi in list(graph.value_info) + list(graph.output) + list(graph.input)}
    kept = [vi for vi in graph.output if vi.name in set(keep_outputs) and vi.name not in set(fetch)]
    del graph.output[:]
    graph.output.extend(kept)
    names: list[str] = []
    for name in fetch:
        vi = onnx.ValueInfoProto()
        if name in known:
            vi.CopyFrom(known[name])
        else:
            vi.name = name
        graph.output.append(vi)
        names.append(name)
    # Each ReduceMin/ReduceMax pair goes right after the node producing its tensor: onnxruntime
    # largely follows the node order, and reductions appended at the end kept every reduced tensor
    # alive to the end of the run (peak RSS 3.3 GiB instead of 2.2 GiB on PP-OCRv4 rec, batch 8).
    after: dict[str, list[onnx.NodeProto]] = {}
    first: list[onnx.NodeProto] = []
    producer = {o: i for i, n in enumerate(graph.node) for o in n.output}
    opset = model_opset(model, default=TARGET_OPSET)
    todo: list[tuple[str, list[onnx.NodeProto], list[str]]] = []
    for name in reduce:
        todo.append((name, *minmax_nodes(name, name, opset)))
    shared = SharedConstants()  # one initializer per distinct constant of the reductions
    for name, red in (reductions or {}).items():
        todo.append((name, shared.lift(red.nodes), red.outputs))
    graph.initializer.extend(shared.initializers)
    for name in shapes:
        out = name + SHAPE_SUFFIX
        todo.append((name, [helper.make_node("Shape", [name], [out], name=out)], []))
        graph.output.append(onnx.ValueInfoProto(name=out))
    if side is not None:
        graph.initializer.extend(side.initializers)
        for name, nodes in side.nodes.items():
            todo.append((name, list(nodes), []))
        have = {o.name for o in graph.output}
        graph.output.extend([onnx.ValueInfoProto(name=o) for o in dict.fromkeys(side.outputs) if o not in have])
    for name, nodes, outs in todo:
        if name in producer:
            after.setdefault(graph.node[producer[name]].name + f"#{producer[name]}", []).extend(nodes)
        else:
            first.extend(nodes)
        graph.output.extend([onnx.ValueInfoProto(name=o) for o in outs])
        names += outs
    if any(ROWS_INPUT in n.input for _, nodes_, _ in todo for n in nodes_):
        graph.input.append(helper.make_tensor_value_info(ROWS_INPUT, onnx.TensorProto.INT64, [2]))
    if todo:
        nodes = list(first)
        for i, node in enumerate(graph.node):
            nodes.append(node)
            nodes.extend(after.get(node.name + f"#{i}", ()))
        del graph.node[:]
        graph.node.extend(nodes)
    return aug, names


#: Most feeds one calibration run carries (see :func:`collect`), and the most input bytes.
MAX_GROUP = 8
#: Input bytes a group carries at most. A CNN's activations are ~100x its input (PP-OCRv4 rec,
#: 184 KiB a line: peak RSS of calibration 297 MiB one or two lines a run, 332 at four, 414 at
#: eight, with no CPU saved on a loaded machine; bench/RESULTS.md, issue 26), so groups stay
#: small for image models and reach MAX_GROUP only for small inputs. 256 KiB: rec runs one line
#: at a time (calibrate_once's peak 226-235 MiB instead of 268-271 at two lines, the same CPU
#: seconds on a quiet machine; issue 26 item 4, branch recmem), PP-OCR cls (110 KiB) two.
_GROUP_BYTES = 256 * 2**10


class _Runs:
    """The calibration session and its runs: one feed or a group of feeds each, folded per feed.

    Before the session is built, :func:`sample_axes` finds on which axis each calibrated tensor
    holds the samples (a Transpose may move them off axis 0: PP-OCRv4 rec's attention has them on
    axis 1), so those tensors get a reduction that transposes them first. Feeds then run one at a
    time until two have; a run of those two together must give each its own statistics again
    before any group runs. A model that mixes samples (a Reshape with a fixed batch, a reduction
    over the batch) fails one of the two checks and runs one feed at a time.
    """

    def __init__(self, model: onnx.ModelProto, fetch: list[str], collectors: Mapping[str, Collector],
                 reduced: list[str], final: list[str], record: bool, providers: Sequence[Any],
                 threads: int | None, max_group: int, first: Sequence[dict[str, np.ndarray]],
                 stacked: Mapping[str, int] | None = None, side: SideFetch | None = None) -> None:
        self.fetch, self.collectors = list(fetch), collectors
        #: fetched body tensors (see bodies.expose): leading iteration axes to fold into the samples
        self.stacked = dict(stacked or {})
        self.max_group = max(1, int(max_group))
        if first:
            # A group carries at most _GROUP_BYTES of input: where one feed fills that, feeds run
            # one at a time and the grouping checks are skipped (their run of two feeds together
            # alone sized the memory arena for two: PP-OCRv4 rec, calibration's peak ~270 MiB
            # instead of ~235; bench/RESULTS.md, issue 26 item 4).
            self.max_group = self.group_size(first[0])
        graph = model.graph
        opset = model_opset(model, default=TARGET_OPSET)
        elem_types = {vi.name: vi.type.tensor_type.elem_type for vi in list(graph.value_info) + list(graph.output)
                      + list(graph.input) if vi.type.HasField("tensor_type")}
        elem_types.update({t.name: t.data_type for t in graph.initializer})
        self.session: Any = None
        self.names: list[str] = []
        #: tensor -> (axis, rank) where the samples are not on axis 0
        self.batch_axes: dict[str, tuple[int, int]] = {}
        #: None until decided; then whether feeds run in groups
        self.grouping: bool | None = None if self.max_group > 1 else False
        why = "feeds run one at a time (max_group=1, or one feed fills a group's input bytes)"
        if self.grouping is None and (fetch or reduced):
            if len(first) < 2 or not self.same_shapes(first[0], first[1]):
                self.grouping, why = False, "feeds run one at a time (fewer than two feeds, or the first two differ in shape)"
            else:
                axes, why = sample_axes(model, fetch + reduced, first[0], providers, threads)
                if axes is None:
                    self.grouping = False
                else:
                    self.batch_axes = axes
        self.reductions: dict[str, Reduction] = {}
        shapes = {vi.name: vi.type.tensor_type.shape for vi in list(graph.value_info) + list(graph.output)
                  + list(graph.input) if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
        unsized = [n for n in reduced if type(collectors[n]) is TailCollector
                   and None in ((_declared_dims(shapes.get(n)) or [None, None])[1:] or [None])]
        hints = _first_feed_sizes(model, first[0], unsized) if unsized and first else {}
        for n in reduced:
            axis, rank = self.batch_axes.get(n, (0, None))
            red = plan_reduction(n, collectors[n], opset, elem_types.get(n), axis, rank, _declared_dims(shapes.get(n)),
                                 size_hint=hints.get(n))
            assert red is not None  # the caller chose ``reduced`` by reducible()
            self.reductions[n] = red
        if self.grouping is None and not all(r.groupable for r in self.reductions.values()):
            self.grouping, why = False, "feeds run one at a time (a per-channel statistic cannot be told apart per feed)"
        if self.grouping is False:
            log.debug("calibration: %s", why)
        self._probe: list[tuple[dict[str, np.ndarray], list[np.ndarray]]] = []
        self.rows_input = False
        self._model, self._final, self._record, self._side = model, final, record, side
        self._providers, self._threads = providers, threads
        #: skipped batches each reduced tensor's collector held before this pass (a collector may
        #: continue an earlier one): more after a run means that run's reduction was not finite
        self._skips = {n: getattr(collectors[n], "skipped_batches", 0) for n in self.reductions}
        #: reduced tensors moved to the fetched path after a non-finite batch (:meth:`_recover`)
        self.moved: list[str] = []
        if fetch or self.reductions or record or side is not None:
            self._build()

    def _build(self) -> None:
        """(Re)build the augmented model and its session from ``fetch`` and ``reductions``."""
        aug, self.names = augment_model(self._model, self.fetch, reductions=self.reductions,
                                        keep_outputs=self._final if self._record else (), side=self._side)
        # Only reductions that view their tensor as rows read the row-count input: a model whose
        # reductions are all per channel has no such input, and onnxruntime refuses an unknown feed.
        self.rows_input = any(i.name == ROWS_INPUT for i in aug.graph.input)
        t0 = time.perf_counter()
        self.session = None  # the old session's memory goes before the new one's comes
        self.session = _session(aug, self._providers, self._threads)
        log.debug("calibration session ready in %.2fs (%d outputs)", time.perf_counter() - t0, len(self.names))

    def _recover(self, feed: dict[str, np.ndarray], groups: int) -> bool:
        """Move every reduced tensor whose reduction just came back non-finite to the fetched path,
        and give it the finite values of the run that showed it; True when the session was rebuilt.

        Why: ``ReduceMin``/``ReduceMax`` propagate NaN (and an Inf is its own extreme), so a
        reduction cannot drop single values; a tensor that holds NaN in every feed by design (a
        per-residue output padded with NaN: caustic-nmr) had no statistics at all, though most of
        its values are finite. Fetched whole, the collector counts and drops NaN/Inf itself
        (``update``). The check costs one comparison per reduced tensor and run; NaN-free models
        never rebuild, so their statistics and session are the same as before.

        The run that showed the NaN is run once more (``feed``: the ``groups`` feeds joined) for
        the moved tensors alone, and each feed whose tensor held a non-finite value, which is
        exactly each feed the reduction skipped, is folded whole and no longer counted skipped;
        the statistics are then those of ``minmax_in_graph=False``. A per-channel collector keeps
        its skipped batch (it already folded the finite channels of that feed): only the next
        feeds reach it whole."""
        hit = [n for n in self.reductions if self.collectors[n].skipped_batches > self._skips.get(n, 0)]
        if not hit:
            return False
        for n in hit:
            del self.reductions[n]
            self.fetch.append(n)
        self.moved += hit
        log.info("calibration: %d tensor(s) held NaN/Inf (%s); fetched whole from now on, their NaN/Inf dropped one "
                 "by one", len(hit), ", ".join(repr(n) for n in hit[:5]) + (" ..." if len(hit) > 5 else ""))
        self._build()
        self._probe.clear()  # outputs of the old session: the grouping check starts again
        redo = [n for n in hit if type(self.collectors[n]) in (MinMaxCollector, TailCollector)]
        if redo:
            for n, value in zip(redo, self._fetch(redo, feed, groups)):
                c = self.collectors[n]
                axis = self.batch_axes.get(n, (0, 0))[0]
                for part in [value] if groups == 1 else np.split(value, groups, axis=axis):
                    # The feeds the reduction skipped: the run's only one, or of a group those whose
                    # values (or float32 sum, the check's) are not finite.
                    if groups == 1 or not np.isfinite(part).all() or not np.isfinite(np.sum(part, dtype=np.float32)):
                        c.skipped_batches -= 1
                        c.update(part)
        return True

    def _run(self, feed: dict[str, np.ndarray], groups: int, extra: Sequence[str] = ()) -> list[np.ndarray]:
        return self._fetch(self.names + list(extra), feed, groups)

    def outputs(self, feed: dict[str, np.ndarray], names: Sequence[str]) -> list[np.ndarray]:
        """``names`` (model outputs) of one feed's run, nothing else fetched and nothing folded."""
        return self._fetch(list(names), feed, 1)

    def _fetch(self, fetches: list[str], feed: dict[str, np.ndarray], groups: int) -> list[np.ndarray]:
        """``fetches`` of one run on ``feed`` (``groups`` feeds joined: the reductions' row count)."""
        rows = {ROWS_INPUT: np.array([groups, -1], dtype=np.int64)} if self.rows_input else {}
        try:
            return self.session.run(fetches, {**feed, **rows})
        except Exception as exc:  # the data fits the inputs' declared shapes, but not the model's nodes
            raise ModelRuntimeError(f"onnxruntime failed running the model on the calibration data: {_one_line(exc)}") from exc

    def _fold(self, outputs: Sequence[np.ndarray], groups: int) -> None:
        for name, value in zip(self.fetch, outputs):
            if name in self.stacked:
                # A body tensor: empty when its If branch did not run (no statistics, never
                # invented ones); Loop/Scan iterations stacked in front fold into the samples.
                if np.size(value) == 0:
                    continue
                k = self.stacked[name]
                if k and np.ndim(value) > k:
                    value = np.reshape(value, (-1, *np.shape(value)[k + 1 :]))
            if groups == 1:
                self.collectors[name].update(value)
                continue
            axis = self.batch_axes.get(name, (0, 0))[0]
            for part in np.split(value, groups, axis=axis):
                self.collectors[name].update(part)
        at = len(self.fetch)
        for red in self.reductions.values():
            red.fold(outputs[at : at + len(red.outputs)], groups)
            at += len(red.outputs)

    def run(self, group: list[dict[str, np.ndarray]]) -> None:
        """Run ``group`` (feeds of identical shapes) in one session run and fold it feed by feed."""
        joined = group[0] if len(group) == 1 else {k: np.concatenate([f[k] for f in group], axis=0) for k in group[0]}
        self._fold(self._run(joined, len(group)), len(group))
        self._recover(joined, len(group))

    def run_single(self, feed: dict[str, np.ndarray], final: Sequence[str] = (),
                   lent: Sequence[str] = ()) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run one feed alone, fold it, keep it for the probe; return ``(copies of the model outputs
        final, onnxruntime's own arrays of the outputs lent)``: a caller keeps only copies of what it
        keeps of the lent ones (:class:`SideFetch`)."""
        extra = list(dict.fromkeys(o for o in [*final, *lent] if o not in self.names))
        outputs = self._run(feed, 1, extra)
        mine = outputs[: len(self.names)]
        got = dict(zip(self.names + extra, outputs))
        self._fold(mine, 1)
        if self._recover(feed, 1):
            pass  # the probe restarts on the rebuilt session's outputs
        elif self.grouping is None:
            self._probe.append((feed, mine))
            if len(self._probe) == 2:
                self.grouping, why = self._probe_grouping()
                self._probe.clear()
                log.debug("calibration: %s", why)
        # Copies: an array onnxruntime returns does not own its data, it holds the session's
        # output buffer, and with it the session's whole memory arena, alive after the session is
        # gone (PP-OCRv4 rec: 8 recorded outputs of 1 MiB kept the calibration's ~55 MiB arena
        # through every later stage; bench/RESULTS.md, issue 26 item 4).
        return {o: np.array(got[o], copy=True) for o in final}, {o: got[o] for o in lent}

    def _probe_grouping(self) -> tuple[bool, str]:
        """Whether two feeds run together give each feed's statistics as their own runs did."""
        (f0, out0), (f1, out1) = self._probe
        if not self.same_shapes(f0, f1):
            return False, "feeds run one at a time (the first two feeds differ in shape)"
        try:
            together = self._run({k: np.concatenate([f0[k], f1[k]], axis=0) for k in f0}, 2)
        except Exception as exc:  # onnxruntime rejects the doubled batch: the model fixes it
            return False, f"feeds run one at a time (the model does not take two feeds on axis 0: {exc})"
        fetched = len(self.fetch)
        for i, (name, a, b0, b1) in enumerate(zip(self.names, together, out0, out1)):
            axis = self.batch_axes.get(name, (0, 0))[0] if i < fetched else 0
            expected = b0 if np.ndim(b0) == 0 else np.concatenate([np.asarray(b0), np.asarray(b1)], axis=axis)
            a = np.asarray(a)
            if a.shape != np.shape(expected):
                return False, f"feeds run one at a time ({name!r}: {a.shape} for two feeds, {np.shape(expected)} expected)"
            finite = np.isfinite(expected) if a.size else np.zeros(0, bool)
            scale = float(np.max(np.abs(np.asarray(expected)[finite]))) if finite.any() else 0.0
            if a.size and not np.allclose(a, expected, rtol=1e-4, atol=1e-5 * scale, equal_nan=True):
                return False, f"feeds run one at a time ({name!r} differs when two feeds run together)"
        moved = f"; samples on another axis than 0 in {len(self.batch_axes)} tensor(s)" if self.batch_axes else ""
        return True, f"feeds run up to {self.max_group} at a time{moved}"

    @staticmethod
    def same_shapes(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
        return a.keys() == b.keys() and all(
            np.ndim(a[k]) >= 1 and np.shape(a[k]) == np.shape(b[k]) and np.asarray(a[k]).dtype == np.asarray(b[k]).dtype for k in a
        )

    def group_size(self, feed: Mapping[str, np.ndarray]) -> int:
        size = sum(np.asarray(v).nbytes for v in feed.values())
        return max(1, min(self.max_group, _GROUP_BYTES // max(size, 1)))


def sample_axes(model: onnx.ModelProto, tensors: Sequence[str], feed: dict[str, np.ndarray], providers: Sequence[Any],
                threads: int | None) -> tuple[dict[str, tuple[int, int]] | None, str]:
    """On which axis each of ``tensors`` holds the samples: ``({tensor: (axis, rank)} for those
    not on axis 0, why)``, or ``(None, why)`` when some tensor has no such axis.

    One run of ``feed`` and one of ``feed`` twice over, in a session that computes only the
    ``Shape`` of every tensor (no optimisation, so it is quick to build): the samples are on the
    one axis that doubled.
    """
    aug, _ = augment_model(model, [], shapes=tensors)  # its outputs: the shapes only
    session = _session(aug, providers, threads, optimize=False)
    names = [n + SHAPE_SUFFIX for n in tensors]
    try:
        one = session.run(names, feed)
        two = session.run(names, {k: np.concatenate([v, v], axis=0) for k, v in feed.items()})
    except Exception as exc:  # onnxruntime rejects the doubled batch: the model fixes it
        return None, f"feeds run one at a time (the model does not take two feeds on axis 0: {exc})"
    axes: dict[str, tuple[int, int]] = {}
    for name, a, b in zip(tensors, one, two):
        a, b = [int(d) for d in a], [int(d) for d in b]
        moved = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if len(a) != len(b) or len(moved) != 1 or b[moved[0]] != 2 * a[moved[0]]:
            return None, f"feeds run one at a time ({name!r} is {a} for one feed, {b} for two)"
        if moved[0]:
            axes[name] = (moved[0], len(a))
    return axes, f"samples on another axis than 0 in {len(axes)} tensor(s)"


def iterate_feeds(feeds: Any) -> Iterator[dict[str, np.ndarray]]:
    """Yield feed dicts from an iterable or from a reader with ``get_next()`` (onnxruntime style)."""
    if hasattr(feeds, "get_next") and not isinstance(feeds, Mapping):
        while True:
            item = feeds.get_next()
            if item is None:
                return
            yield item
        return
    if isinstance(feeds, Mapping):
        raise TypeError("feeds must be an iterable of dicts (got a single dict; wrap it in a list)")
    yield from feeds


def _declared_dims(shape: Any) -> list[int | None] | None:
    """The axes a ``TensorShapeProto`` declares (None for a symbolic one), None without a shape: they
    pick the form of a tail reduction (:func:`~onnxptq.calibration.reductions.plan_reduction`)."""
    if shape is None:
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else None for d in shape.dim]


def _first_feed_sizes(model: onnx.ModelProto, feed: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, int]:
    """Values per feed of ``names`` on ``feed``, by ONNX shape inference with the inputs' shapes set
    to the feed's ({} where it fails): for tensors whose declared shape leaves axes symbolic, it says
    whether a tail reduction is worth chunking (a PP-OCR classifier's small maps with symbolic batch,
    height and width: chunking them made its calibration runs 1.5x dearer; bench/RESULTS.md). A
    hint only: the reduction stays exact for any size of later feeds."""
    try:
        inferred = infer_at_shapes(shape_probe(model), {k: np.shape(v) for k, v in feed.items()})
    except Exception as exc:  # noqa: BLE001 - a hint only
        log.debug("calibration: no concrete shapes for the tail reductions (%s)", _one_line(exc))
        return {}
    wanted = set(names)
    out: dict[str, int] = {}
    for vi in inferred:
        if vi.name in wanted and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = _declared_dims(vi.type.tensor_type.shape)
            if dims and all(d is not None for d in dims[1:]):
                out[vi.name] = int(np.prod(dims[1:], dtype=np.int64))
    return out


def infer_at_shapes(probe: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> list[onnx.ValueInfoProto]:
    """The value infos and outputs ONNX shape inference gives a copy of ``probe`` (a
    :func:`shape_probe`) whose inputs named in ``shapes`` are set to those concrete shapes; raises
    where inference fails. The one way the size hints read a feed's sizes without running the
    model: calibration's tail reductions (:func:`_first_feed_sizes`) and the block bodies
    (``pipeline/observed_sizes.py``)."""
    model = onnx.ModelProto()
    model.CopyFrom(probe)
    for vi in model.graph.input:
        if vi.name in shapes and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[vi.name]:
                dims.add().dim_value = int(d)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    return list(inferred.graph.value_info) + list(inferred.graph.output)


def shape_probe(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for shape inference that holds no large weight: each initializer of more
    than :data:`_PROBE_MAX_VALUES` values becomes a graph input of its type and shape, which is all
    inference reads of it, so the probe costs the graph's size, not the weights' (a copy of an LLM's
    weights would double calibration's memory for a hint). Small initializers stay: shape
    inference's data propagation reads a ``Reshape``'s target shape from them."""
    g = model.graph
    probe = onnx.ModelProto()
    probe.ir_version = model.ir_version
    probe.opset_import.extend(model.opset_import)
    probe.functions.extend(model.functions)
    pg = probe.graph
    pg.name = g.name
    pg.node.extend(g.node)
    pg.input.extend(g.input)
    pg.output.extend(g.output)
    declared = {vi.name for vi in g.input}
    for init in g.initializer:
        if int(np.prod(init.dims, dtype=np.int64)) <= _PROBE_MAX_VALUES:
            pg.initializer.append(init)
        elif init.name not in declared:
            pg.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return probe


#: initializers up to this many values are copied into the shape probe (shape constants, scalars)
_PROBE_MAX_VALUES = 4096


def _session(model: onnx.ModelProto, providers: Sequence[Any], threads: int | None, optimize: bool = True) -> Any:
    """The calibration session. Full optimisation, as the float model would run: fusions cannot
    remove a tensor the statistics read (it has a consumer), and the NCHWc convolutions cost what
    they save in reorders (PP-OCRv4 rec, 2 threads: 50 -> 41 ms per line; bare float model 20 ->
    13 ms). Priority-based execution order: the default kept every in-graph-reduced tensor alive to
    the end of the run (PP-OCRv4 rec, batch 8: peak RSS 3.3 GiB -> 221 MiB at the same speed). No
    spinning: the augmented graph is mostly small single-threaded reductions, and idle pool threads
    spinning between them doubled the CPU time and, on a busy machine, the wall time (PP-OCRv4 rec,
    96 lines, 2 cores under load: 18-21 s -> 9-11 s wall, 13 s -> 7 s CPU). No memory pattern: with
    it onnxruntime plans one block for a run's intermediate tensors per input shape, beside the arena
    chunks of the first runs, and the augmented graph's many fetched and reduced tensors make that
    block large; the runs compute the same values without it (the same kernels, buffers placed
    elsewhere). PP-OCRv4 rec A8W8, 64 lines: the calibration's peak RSS 282-295 -> 276 MiB, the
    quantization's CPU unchanged (bench/RESULTS.md, quanttime7)."""
    try:
        return open_session(model, providers=providers, threads=threads, inter_op_threads=1 if threads else None,
                            optimization="all" if optimize else "none", spinning=False, priority_order=True,
                            memory_pattern=False)
    except UsageError:
        raise  # a custom-op library that does not load: named by the factory
    except Exception as exc:  # onnxruntime's Fail / InvalidGraph / ... derive from Exception only
        raise ModelRuntimeError(f"onnxruntime cannot load the model for calibration: {_one_line(exc)}") from exc


def _check_some_finite(name: str, c: Collector, feeds: int) -> None:
    """Raise when a tensor's statistics saw NaN/Inf and no finite value at all: its range would be
    a made-up default and the quantized model would compute garbage (or fail in onnxruntime).

    The message says what was seen (how many NaN and Inf values, on how many feeds), not why: a
    float model that overflows and one whose output is padded with NaN by design look alike here
    until every value of the tensor is non-finite."""
    skipped = getattr(c, "skipped_batches", 0)
    troubled = c.nan_count or c.inf_count or skipped
    lo, hi = getattr(c, "min", None), getattr(c, "max", None)
    if not troubled or lo is None or hi is None:
        return
    if not (np.isfinite(np.asarray(lo, np.float64)).any() or np.isfinite(np.asarray(hi, np.float64)).any()):
        seen = []
        if c.nan_count or c.inf_count:
            seen.append(f"{c.nan_count} NaN and {c.inf_count} Inf values")
        if skipped:
            seen.append(f"{skipped} feed(s) whose in-graph min/max was NaN/Inf")
        raise NonFiniteStatisticsError(
            f"tensor {name!r} held no finite value in any of the {feeds} calibration feed(s): "
            f"{' and '.join(seen)}, nothing else; no quantization range can be computed for it (the float model "
            "computes only NaN/Inf there on this data: check the model and the calibration data)"
        )


def _one_line(exc: BaseException) -> str:
    """onnxruntime's message without its source-file prefix noise, on one line."""
    return " ".join(str(exc).split())


def collect(
    model: onnx.ModelProto,
    tensors: Mapping[str, TensorSpec],
    feeds: Iterable[dict[str, np.ndarray]] | Any,
    *,
    providers: Sequence[Any] = ("CPUExecutionProvider",),
    progress: bool = False,
    log_every: int = 50,
    minmax_in_graph: bool = True,
    max_batches: int | None = None,
    intra_op_num_threads: int | None = None,
    model_outputs: list[dict[str, np.ndarray]] | None = None,
    model_output_batches: int = 0,
    max_group: int = MAX_GROUP,
    side: SideFetch | None = None,
    also_run: Sequence[dict[str, np.ndarray]] = (),
    also_outputs: list[dict[str, np.ndarray]] | None = None,
    hold_outputs: Callable[[list[dict[str, np.ndarray]]], Callable[[dict[str, np.ndarray]], dict[str, Any]] | None]
    | None = None,
) -> dict[str, Collector]:
    """Run ``model`` on every feed once and return one filled collector per requested tensor.

    ``tensors`` maps main-graph tensor names (graph inputs, node outputs, initializers) to a
    :data:`TensorSpec`. ``feeds`` is an iterable of ``{input name: array}`` or a reader with
    ``get_next()``. ``progress=True`` shows a tqdm bar (with a total when ``len(feeds)`` is known);
    otherwise a log line every ``log_every`` batches. ``minmax_in_graph=True`` (default) feeds
    every collector that needs less than the whole tensor from reductions inside the graph
    (:func:`plan_reduction`: min/max, per-channel min/max, top-k tails): the same statistics. Measured on PP-OCRv4 rec (403 float tensors, one ORT thread, shared
    machine so medians): batch 1: 66 ms/batch instead of 240 ms; batch 8: about the same time
    (1.0-1.3 s) but peak RSS 208 MiB instead of 2.2 GiB, because fetched outputs all stay alive
    until the run ends. A reduction propagates NaN, so the first run whose reduction of a tensor is
    not finite moves that tensor to the fetched path (rebuilding the session once) and that run's
    feeds are read again for it: its NaN/Inf are then dropped one by one, as without
    ``minmax_in_graph`` (``_Runs._recover``; a per-channel statistic keeps that one feed skipped,
    ``skipped_batches``, warned about). A min/max reduction leaves ``count`` at 0. ``max_batches`` stops early (the
    reference's ``CalibDataSize``). ``intra_op_num_threads`` caps onnxruntime's threads (None:
    its default, all cores). ``model_outputs``, when given, receives the model's own outputs
    (``{name: array}``) of the first ``model_output_batches`` feeds: the float reference of the
    quantization report, computed in the same runs instead of by a second session.

    Consecutive feeds of identical shapes run up to ``max_group`` at a time, concatenated on axis
    0, once two checks showed that the model keeps its samples apart (:func:`sample_axes` finds
    each tensor's sample axis; the grouped run of the first two feeds gives each feed's statistics
    as its own run did, see :class:`_Runs`); each reduction still
    reports per feed, so the statistics are the ones ``max_group=1`` gives. PP-OCRv4 rec, 2
    threads, 256 lines: 36-40 -> 26-33 ms per line (the convolutions and the row-wise TopK use both
    cores better, and per-node and per-run overheads are paid once per group).

    Tensors inside If/Loop/Scan bodies are read through extra outputs (:mod:`.bodies`): fetched
    whole, one feed per run; a branch that never runs leaves its tensors' collectors empty, and a
    tensor that cannot be passed out (an If inside a Loop body) is warned about and stays empty.

    ``side`` (:class:`SideFetch`): tensors another stage reads on the first ``side.feeds`` feeds,
    fetched by those feeds' runs (run one at a time) and handed to ``side.take``.

    ``also_run``: feeds run before all the others, one at a time, whose model outputs go to
    ``also_outputs`` and which add nothing to the statistics (the accuracy floor's held-out feeds:
    their float outputs from this session instead of a second one on the same model).
    ``hold_outputs(also_outputs)``, called once those ran: what each output dict recorded into
    ``model_outputs`` becomes as it is recorded (None: kept as it is). Why first, and why then: the
    floor holds the recorded outputs in the form it reads them in (``Calibrated.hold_float_outputs``),
    a choice it makes from the held-out feeds' outputs; recorded whole until the pass ended, 32
    softmax outputs of PP-OCRv4 rec A8W8 (1 MiB each) were the top of the quantization's peak RSS.
    The held-out runs compute the same outputs in either order (the same session, one feed a run).

    Raises ``KeyError`` naming tensors that are nowhere in the model, ``ValueError`` when no feed was given or a feed's names do not match the model's inputs.
    """
    graph = model.graph
    inputs, others = _main_graph_names(graph)
    inner = [n for n in tensors if n not in inputs and n not in others]
    collectors: dict[str, Collector] = {name: _make(name, spec) for name, spec in tensors.items()}
    final = [o.name for o in graph.output]
    stacked: dict[str, int] = {}
    outer: dict[str, str] = {}
    if inner:
        # Body tensors leave their bodies as extra outputs (raises KeyError for unknown names).
        exposed = bodies.expose(model, inner)
        for name, why in exposed.unreachable.items():
            log.warning("tensor %r cannot be calibrated: %s", name, why)
        model, graph, outer = exposed.model, exposed.model.graph, exposed.outer
        stacked = {outer[n]: exposed.stacked[n] for n in outer}
        # Whole tensors are fetched (an untaken branch gives an empty one, which a reduction
        # cannot tell from data), and feeds run one at a time (iterations stack on axis 0).
        max_group = 1
    from_feed = [n for n in collectors if n in inputs]
    graph_tensors = [n for n in collectors if n not in inputs and n not in inner]
    reduced = [n for n in graph_tensors if minmax_in_graph and reducible(collectors[n])]
    fetch = [n for n in graph_tensors if n not in reduced] + list(outer.values())
    run_collectors = {**collectors, **{o: collectors[n] for n, o in outer.items()}}
    record = model_outputs is not None and model_output_batches > 0

    needed = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    stream = iterate_feeds(feeds)
    first = list(itertools.islice(stream, 2 if max_batches is None else min(2, max_batches)))
    usable = [{k: v for k, v in f.items() if k in needed} for f in first if needed <= set(f)]
    runs = _Runs(model, fetch, run_collectors, reduced, final, record, providers, intra_op_num_threads, max_group,
                 usable if len(usable) == len(first) else [], stacked, side)
    side_outputs = list(dict.fromkeys(side.outputs)) if side is not None else []

    total = None
    try:
        total = len(feeds)  # type: ignore[arg-type]
    except TypeError:
        pass
    if max_batches is not None and total is not None:
        total = min(total, max_batches)
    bar = None
    if progress and total is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="Calibrating", unit="batch")

    batches = 0
    pending: list[dict[str, np.ndarray]] = []
    t_start = time.perf_counter()
    keep: Callable[[dict[str, np.ndarray]], dict[str, Any]] | None = None

    def flush() -> None:
        if pending:
            runs.run(pending)
            if bar is not None:
                bar.update(len(pending))
            pending.clear()

    try:
        if also_run and also_outputs is not None and runs.session is not None and record:
            for feed in also_run:
                # The model's outputs alone: onnxruntime runs the same graph (the same values), but
                # the statistics' fetched tensors and reductions, which these feeds do not add to, are
                # not handed over (PP-OCRv4 rec A8W8: the calibration's peak, +16 MiB over 8 feeds).
                got = runs.outputs({k: v for k, v in feed.items() if k in needed}, final)
                also_outputs.append({o: np.array(g, copy=True) for o, g in zip(final, got)})
            keep = hold_outputs(also_outputs) if hold_outputs is not None else None
        for feed in itertools.chain(first, stream):
            if max_batches is not None and batches >= max_batches:
                break
            absent = needed - set(feed)
            if absent:
                raise ValueError(f"feed #{batches} lacks model input(s) {sorted(absent)}; it has {sorted(feed)}")
            for name in from_feed:
                collectors[name].update(feed[name])
            if runs.session is not None:
                run_feed = {k: v for k, v in feed.items() if k in needed}
                sided = side is not None and batches < side.feeds
                if (record and batches < model_output_batches) or runs.grouping is None or sided:
                    flush()
                    recorded = final if record and batches < model_output_batches else []
                    got, lent = runs.run_single(run_feed, recorded, side_outputs if sided else [])
                    if sided:
                        side.take(lent)  # type: ignore[union-attr]
                    del lent
                    if recorded:
                        model_outputs.append(keep(got) if keep is not None else got)  # type: ignore[union-attr]
                    if bar is not None:
                        bar.update(1)
                elif runs.grouping:
                    if pending and not runs.same_shapes(pending[0], run_feed):
                        flush()
                    pending.append(run_feed)
                    if len(pending) >= runs.group_size(run_feed):
                        flush()
                else:
                    runs.run([run_feed])
                    if bar is not None:
                        bar.update(1)
            elif bar is not None:
                bar.update(1)
            batches += 1
            if bar is None and log_every and batches % log_every == 0:
                log.info("calibration: %d batches in %.1fs", batches, time.perf_counter() - t_start)
        flush()
    finally:
        if bar is not None:
            bar.close()
    if batches == 0:
        raise ValueError("calibration got no feed: the data iterable/reader was empty")
    log.info("calibration: %d batches, %d tensors, %.1fs", batches, len(collectors), time.perf_counter() - t_start)
    for name, c in collectors.items():
        _check_some_finite(name, c, batches)
        if c.nan_count or c.inf_count:
            log.warning("tensor %r: ignored %d NaN and %d Inf values during calibration", name, c.nan_count, c.inf_count)
        if c.skipped_batches:
            log.warning(
                "tensor %r: %d batches held NaN/Inf and were left out of its statistics (a per-channel reduction "
                "keeps the feed that showed them out: its other channels were already folded; pass "
                "minmax_in_graph=False to keep their finite values)",
                name,
                c.skipped_batches,
            )
    return collectors
