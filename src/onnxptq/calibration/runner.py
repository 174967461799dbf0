"""The streaming calibration pass: one augmented model, one session, one run per feed.

:func:`collect` exposes exactly the requested main-graph tensors as extra graph outputs (typed
when the model knows the type, untyped otherwise - onnxruntime infers it), creates one session with
graph optimisations *disabled* (fusions would otherwise remove or rename the intermediate tensors
we ask for), and folds every fetched array into its tensor's collector before the next run, so
nothing is kept between feeds: memory is O(tensors x bins), not O(samples).

Tensors that are graph inputs are read straight from the feed (no round trip through the session).
With ``minmax_in_graph=True`` (the default) every collector that needs less than the whole tensor
is fed by reductions inside the graph, so the full tensor never crosses into Python: a plain
:class:`MinMaxCollector` gets ``ReduceMin``/``ReduceMax`` scalars, a
:class:`PerChannelMinMaxCollector` the same per channel, a :class:`TailCollector` its extremes,
element count and ``TopK`` largest/smallest values. Only histogram collectors fetch tensors.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..graph.walk import subgraph_nodes
from onnx import helper

from onnxptq.calibration.collectors import Collector, MinMaxCollector, PerChannelMinMaxCollector, TailCollector
from onnxptq.calibration.methods import Method, make_collector

log = logging.getLogger(__name__)

__all__ = ["TensorSpec", "augment_model", "collect", "iterate_feeds"]

#: What :func:`collect` accepts per tensor: a factory (called with no argument), a ready collector
#: (updated in place, e.g. to continue a previous pass), a method name, or a dict of
#: :func:`~onnxptq.calibration.methods.make_collector` arguments (``{"method": "percentile", ...}``).
TensorSpec = Callable[[], Collector] | Collector | str | Method | Mapping[str, Any]

_MIN_SUFFIX = "__onnxptq_calib_min"
_MAX_SUFFIX = "__onnxptq_calib_max"
#: Above this serialized size the augmented model goes to a temporary file with external data.
_PROTO_LIMIT = 1_800_000_000


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


@dataclass
class Reduction:
    """Nodes that reduce one tensor inside the graph, their outputs, and how to fold the results."""

    nodes: list[onnx.NodeProto]
    outputs: list[str]
    fold: Callable[[Sequence[np.ndarray]], None]


def _model_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 21)


def _reduce_node(op: str, x: str, out: str, axes: Sequence[int] | None, opset: int, extra: list[onnx.NodeProto]) -> onnx.NodeProto:
    """``ReduceMin``/``ReduceMax`` with ``keepdims=0`` over ``axes`` (None: all), in the opset's form."""
    if axes is None:
        return helper.make_node(op, [x], [out], keepdims=0, name=out)
    if opset >= 18:
        axes_name = out + "__axes"
        extra.append(helper.make_node("Constant", [], [axes_name], name=axes_name,
                                      value=helper.make_tensor(axes_name, onnx.TensorProto.INT64, [len(axes)], list(axes))))
        return helper.make_node(op, [x, axes_name], [out], keepdims=0, name=out)
    return helper.make_node(op, [x], [out], keepdims=0, axes=list(axes), name=out)


def _minmax_nodes(name: str, src: str, opset: int) -> tuple[list[onnx.NodeProto], list[str]]:
    """``ReduceMin``/``ReduceMax`` of ``src`` to the scalars ``<name>__onnxptq_calib_min|max``."""
    lo, hi = name + _MIN_SUFFIX, name + _MAX_SUFFIX
    return [_reduce_node("ReduceMin", src, lo, None, opset, []), _reduce_node("ReduceMax", src, hi, None, opset, [])], [lo, hi]


def _const(name: str, values: Sequence[int]) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name,
                            value=helper.make_tensor(name, onnx.TensorProto.INT64, [len(values)], list(values)))


def _scalar(name: str, value: int) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], name=name, value=helper.make_tensor(name, onnx.TensorProto.INT64, [], [value]))


def plan_reduction(name: str, collector: Collector, opset: int, elem_type: int | None) -> Reduction | None:
    """The in-graph reduction feeding ``collector``, or None when it needs the whole tensor."""
    if type(collector) is MinMaxCollector:
        nodes, outputs = _minmax_nodes(name, name, opset)
        return Reduction(nodes, outputs, lambda out: collector.update_extremes(float(out[0]), float(out[1])))
    if type(collector) is PerChannelMinMaxCollector:
        # [d0 .. d_axis, rest]: reduce every axis but the channel one, whatever the rank.
        axis = collector.axis
        if axis < 0:
            return None
        shaped, shape = name + "__onnxptq_pc", name + "__onnxptq_pc_shape"
        lo, hi = name + _MIN_SUFFIX, name + _MAX_SUFFIX
        nodes = [_const(shape, [0] * (axis + 1) + [-1]), helper.make_node("Reshape", [name, shape], [shaped], name=shaped)]
        axes = [i for i in range(axis + 2) if i != axis]
        extra: list[onnx.NodeProto] = []
        reds = [_reduce_node("ReduceMin", shaped, lo, axes, opset, extra), _reduce_node("ReduceMax", shaped, hi, axes, opset, extra)]
        return Reduction(nodes + extra + reds, [lo, hi], lambda out: collector.update_channel_extremes(out[0], out[1]))
    if type(collector) is TailCollector:
        p = name + "__onnxptq_tail"
        nodes: list[onnx.NodeProto] = []
        src = name
        if elem_type != onnx.TensorProto.FLOAT:  # TopK has no float16/bfloat16 CPU kernel
            src = p + "_f32"
            nodes.append(helper.make_node("Cast", [name], [src], to=onnx.TensorProto.FLOAT, name=src))
        nodes += [
            _const(p + "_flat_shape", [-1]),
            helper.make_node("Reshape", [src, p + "_flat_shape"], [p + "_flat"], name=p + "_flat"),
            helper.make_node("Size", [src], [p + "_n"], name=p + "_n"),
            _const(p + "_div", [collector.batch_divisor]),
            _scalar(p + "_kmin", collector.min_batch_k),
            helper.make_node("Div", [p + "_n", p + "_div"], [p + "_share"], name=p + "_share"),
            # k = min(n, max(kmin, n // div)): Clip sets everything to its max when min > max.
            helper.make_node("Clip", [p + "_share", p + "_kmin", p + "_n"], [p + "_k"], name=p + "_k"),
            helper.make_node("TopK", [p + "_flat", p + "_k"], [p + "_top", p + "_top_i"], largest=1, sorted=0, name=p + "_top"),
            helper.make_node("TopK", [p + "_flat", p + "_k"], [p + "_bot", p + "_bot_i"], largest=0, sorted=0, name=p + "_bot"),
        ]

        def fold(out: Sequence[np.ndarray]) -> None:
            top, bottom, n = out[0], out[1], int(out[2])
            if n == 0:
                return
            # The extremes are the tails' own: no ReduceMin/ReduceMax pass over the tensor.
            collector.update_tails(top, bottom, n, float(bottom.min()), float(top.max()))

        return Reduction(nodes, [p + "_top", p + "_bot", p + "_n"], fold)
    return None


def augment_model(
    model: onnx.ModelProto,
    fetch: Sequence[str],
    reduce: Sequence[str] = (),
    reductions: Mapping[str, Reduction] | None = None,
    keep_outputs: Sequence[str] = (),
) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose outputs are ``fetch``, min/max scalars for ``reduce`` and the
    outputs of ``reductions`` (tensor name -> :class:`Reduction`).

    Returns the model and the output names in order: ``fetch`` first, then ``<t>_min, <t>_max``
    pairs, then each reduction's outputs. Original outputs are dropped (they would be computed and
    transferred for nothing) unless requested in ``fetch`` or kept by ``keep_outputs`` (left
    graph outputs but not in the returned names: fetch them by name when wanted). Types come from the model's value_info/outputs when
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
    opset = _model_opset(model)
    todo: list[tuple[str, list[onnx.NodeProto], list[str]]] = []
    for name in reduce:
        todo.append((name, *_minmax_nodes(name, name, opset)))
    for name, red in (reductions or {}).items():
        todo.append((name, red.nodes, red.outputs))
    for name, nodes, outs in todo:
        if name in producer:
            after.setdefault(graph.node[producer[name]].name + f"#{producer[name]}", []).extend(nodes)
        else:
            first.extend(nodes)
        graph.output.extend([onnx.ValueInfoProto(name=o) for o in outs])
        names += outs
    if todo:
        nodes = list(first)
        for i, node in enumerate(graph.node):
            nodes.append(node)
            nodes.extend(after.get(node.name + f"#{i}", ()))
        del graph.node[:]
        graph.node.extend(nodes)
    return aug, names


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


def _session(model: onnx.ModelProto, providers: Sequence[Any], tmpdir: str, threads: int | None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    # Full optimisation, as the float model would run: fusions cannot remove a tensor the
    # statistics read (it has a consumer), and the NCHWc convolutions cost what they save in
    # reorders. PP-OCRv4 rec, 2 threads: 50 -> 41 ms per line (bare float model 20 -> 13 ms).
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # The default execution order kept every in-graph-reduced tensor alive to the end of the run
    # (PP-OCRv4 rec, batch 8: peak RSS 3.3 GiB); priority-based order frees them as it goes (221 MiB)
    # at the same speed.
    options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    # The augmented graph is mostly small single-threaded reductions; idle pool threads spinning
    # between them doubled the CPU time and, on a busy machine, the wall time (PP-OCRv4 rec, 96
    # lines, 2 cores under load: 18-21 s -> 9-11 s wall, 13 s -> 7 s CPU).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if model.ByteSize() > _PROTO_LIMIT:
        path = os.path.join(tmpdir, "augmented.onnx")
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="augmented.data")
        return ort.InferenceSession(path, options, providers=list(providers))
    return ort.InferenceSession(model.SerializeToString(), options, providers=list(providers))


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
    until the run ends. The price: a batch whose tensor holds NaN/Inf is left out whole for that
    tensor (``skipped_batches``, warned about), and ``count`` stays 0. ``max_batches`` stops early (the
    reference's ``CalibDataSize``). ``intra_op_num_threads`` caps onnxruntime's threads (None:
    its default, all cores). ``model_outputs``, when given, receives the model's own outputs
    (``{name: array}``) of the first ``model_output_batches`` feeds: the float reference of the
    quantization report, computed in the same runs instead of by a second session.

    Raises ``KeyError`` naming tensors that are not in the main graph (If/Loop bodies included),
    ``ValueError`` when no feed was given or a feed's names do not match the model's inputs.
    """
    graph = model.graph
    inputs, others = _main_graph_names(graph)
    missing = [n for n in tensors if n not in inputs and n not in others]
    if missing:
        inner = {o for n in subgraph_nodes(graph) for o in n.output if o}
        where = [f"{n!r} (inside an If/Loop/Scan body; only main-graph tensors can be calibrated)" if n in inner
                 else repr(n) for n in missing]
        raise KeyError(f"tensors not found in the main graph: {', '.join(where)}")

    collectors: dict[str, Collector] = {name: _make(name, spec) for name, spec in tensors.items()}
    from_feed = [n for n in collectors if n in inputs]
    graph_tensors = [n for n in collectors if n not in inputs]
    opset = _model_opset(model)
    elem_types = {vi.name: vi.type.tensor_type.elem_type
                  for vi in list(graph.value_info) + list(graph.output) + list(graph.input) if vi.type.HasField("tensor_type")}
    elem_types.update({t.name: t.data_type for t in graph.initializer})
    reductions: dict[str, Reduction] = {}
    if minmax_in_graph:
        for n in graph_tensors:
            red = plan_reduction(n, collectors[n], opset, elem_types.get(n))
            if red is not None:
                reductions[n] = red
    fetch = [n for n in graph_tensors if n not in reductions]
    final = [o.name for o in graph.output]
    record = model_outputs is not None and model_output_batches > 0

    session = None
    out_names: list[str] = []
    with tempfile.TemporaryDirectory(prefix="onnxptq-calib-") as tmpdir:
        if fetch or reductions or record:
            aug, out_names = augment_model(model, fetch, reductions=reductions, keep_outputs=final if record else ())
            t0 = time.perf_counter()
            session = _session(aug, providers, tmpdir, intra_op_num_threads)
            del aug
            log.debug("calibration session ready in %.2fs (%d outputs)", time.perf_counter() - t0, len(out_names))
        needed = {i.name for i in graph.input} - {t.name for t in graph.initializer}

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
        t_start = time.perf_counter()
        try:
            for feed in iterate_feeds(feeds):
                if max_batches is not None and batches >= max_batches:
                    break
                absent = needed - set(feed)
                if absent:
                    raise ValueError(f"feed #{batches} lacks model input(s) {sorted(absent)}; it has {sorted(feed)}")
                for name in from_feed:
                    collectors[name].update(feed[name])
                if session is not None:
                    run_feed = {k: v for k, v in feed.items() if k in needed}
                    wanted_final = record and batches < model_output_batches
                    extra = [o for o in final if o not in out_names] if wanted_final else []
                    outputs = session.run(out_names + extra, run_feed)
                    if wanted_final:
                        got = dict(zip(out_names + extra, outputs))
                        model_outputs.append({o: got[o] for o in final})  # type: ignore[union-attr]
                    for name, value in zip(fetch, outputs):
                        collectors[name].update(value)
                    at = len(fetch)
                    for red in reductions.values():
                        red.fold(outputs[at : at + len(red.outputs)])
                        at += len(red.outputs)
                    del outputs
                batches += 1
                if bar is not None:
                    bar.update(1)
                elif log_every and batches % log_every == 0:
                    log.info("calibration: %d batches in %.1fs", batches, time.perf_counter() - t_start)
        finally:
            if bar is not None:
                bar.close()
    if batches == 0:
        raise ValueError("calibration got no feed: the data iterable/reader was empty")
    log.info("calibration: %d batches, %d tensors, %.1fs", batches, len(collectors), time.perf_counter() - t_start)
    for name, c in collectors.items():
        if c.nan_count or c.inf_count:
            log.warning("tensor %r: ignored %d NaN and %d Inf values during calibration", name, c.nan_count, c.inf_count)
        if c.skipped_batches:
            log.warning(
                "tensor %r: %d batches held NaN/Inf and were left out of its min/max (in-graph reduction cannot "
                "drop single values; pass minmax_in_graph=False to keep their finite values)",
                name,
                c.skipped_batches,
            )
    return collectors
