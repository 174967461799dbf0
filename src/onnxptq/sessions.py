"""The one place an onnxruntime ``InferenceSession`` is opened: providers, options, thread counts.

Every stage that runs a model (calibration, the finish check, evaluation, the report, mixed
precision, finetuning, the tools) asks here, each saying what it needs rather than building
``SessionOptions`` itself, so a provider choice, a thread policy or a custom-op library is decided
once. A test (``tests/test_one_home.py``) keeps ``InferenceSession(`` out of every other module.

Models over protobuf's 2 GB limit cannot be passed as bytes: they are written with external data
into a temporary folder that lives as long as the session. On the streaming path
(:mod:`onnxptq.graph.external`) a model's tensors point into the input's data files: the message
is small, passed as bytes, and onnxruntime is told the folder to read them from (it maps the
file; prepacking then copies each MatMul weight once and lets the mapping go, so a session holds
about one copy of the weights either way).

Custom-op libraries: a model with nodes of a custom domain (a user's own op, built as an
onnxruntime custom-op library) can be calibrated only if every session that runs it registers that
library: the calibration runs, the check of the quantized model, the report. A context variable set
once by :func:`onnxptq.api.quantize` (from ``CalibrationOptions.custom_op_libraries``, with
:func:`custom_op_libraries`) reaches every session opened here without threading one more argument
through every signature; it stays correct across threads started inside it only where they copy
the context (ours do not start any that open sessions).

onnxruntime crashes: onnxruntime 1.32 dies (SIGSEGV, nothing to catch) while it opens a default
session on a float16 batch ``Transpose -> MatMul`` with a constant other operand (its
``MatmulTransposeFusion``; :mod:`onnxptq.graph.ort_crash` says which graphs, bench/ort_fp16_crash.py
measured it). Every session opened here on such a graph runs with that one fusion disabled
(:func:`_disabled_for`); on every other graph the options are exactly a user's. What then differs
from a user's default session on the same file: the Transpose and the MatMul run as two kernels
instead of one ``FusedMatMul`` (the same products and sums, in onnxruntime's float32 fallback for
float16 either way), where the user's session would not open at all.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import os
import tempfile
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
import onnx

from .errors import InputNotFoundError, UsageError
from .graph import external
from .graph.io import write_externalized
from .graph.ort_crash import CRASH_FUSION, ORT_VERSION_SEEN, crash_trigger, may_hold_trigger

log = logging.getLogger(__name__)

__all__ = ["CPU", "Optimization", "active_libraries", "check_libraries", "custom_op_libraries", "open_session", "optimization_level",
           "options_signature", "register", "run_feeds", "run_threads", "session_options"]

#: The provider every session uses unless the caller names others.
CPU = ("CPUExecutionProvider",)

Optimization = Literal["all", "extended", "basic", "none"]

#: Serialized size above which a model is handed to onnxruntime as a file with external data.
PROTO_LIMIT = 2**31 - 2**24


_LIBRARIES: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("onnxptq_custom_op_libraries", default=())


def check_libraries(paths: Sequence[str | os.PathLike]) -> tuple[str, ...]:
    """The paths as strings, each an existing file (else an error naming it)."""
    out = []
    for path in paths:
        p = Path(path)
        if not p.exists():
            raise InputNotFoundError(f"custom-op library not found: {p}")
        if not p.is_file():
            raise UsageError(f"custom-op library {p} is not a file")
        out.append(str(p))
    return tuple(out)


@contextlib.contextmanager
def custom_op_libraries(paths: Sequence[str | os.PathLike]) -> Iterator[tuple[str, ...]]:
    """Register ``paths`` (onnxruntime custom-op shared libraries) in every session opened inside."""
    libs = check_libraries(paths)
    token = _LIBRARIES.set(tuple(dict.fromkeys(_LIBRARIES.get() + libs)))
    try:
        yield libs
    finally:
        _LIBRARIES.reset(token)


def active_libraries() -> tuple[str, ...]:
    """The custom-op libraries in force here."""
    return _LIBRARIES.get()


def register(options: Any, extra: Sequence[str | os.PathLike] = ()) -> Any:
    """Register the custom-op libraries in force (and ``extra``) on ``options`` (an onnxruntime
    ``SessionOptions``); returns it. A library onnxruntime cannot load is a :class:`UsageError`
    naming it."""
    for library in dict.fromkeys([*_LIBRARIES.get(), *map(str, extra)]):
        try:
            options.register_custom_ops_library(library)
        except Exception as exc:  # onnxruntime raises its own Fail/RuntimeException types
            raise UsageError(f"onnxruntime cannot load the custom-op library {library}: {' '.join(str(exc).split())}") from exc
    return options


def optimization_level(name: Optimization) -> Any:
    """onnxruntime's ``GraphOptimizationLevel`` for one of our names."""
    import onnxruntime as ort

    levels = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    }
    try:
        return levels[name]
    except KeyError:
        raise ValueError(f"graph optimization must be one of {', '.join(levels)}, not {name!r}") from None


def open_session(model: onnx.ModelProto | bytes | str | os.PathLike, *, providers: Sequence[Any] | None = None,
                 **options: Any) -> Any:
    """An ``InferenceSession`` on ``model`` (a ``ModelProto``, its serialized bytes, or a path).

    Args:
        providers: execution providers, as onnxruntime takes them; the CPU provider by default.
        options: how the session runs, :func:`session_options`'s arguments (which it documents).
    """
    import onnxruntime as ort

    options = session_options(**options)
    folder = external.active_dir()
    if folder is not None and isinstance(model, onnx.ModelProto) and external.has_external(model):
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    chosen = list(providers) if providers else list(CPU)
    levels = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    disabled = _disabled_for(model) if options.graph_optimization_level in levels else []
    if isinstance(model, bytes):  # a serialized model (finish: the bytes the checker read)
        return _without_model_bytes(ort.InferenceSession(model, options, providers=chosen, disabled_optimizers=disabled), chosen)
    if not isinstance(model, onnx.ModelProto):
        return ort.InferenceSession(str(model), options, providers=chosen, disabled_optimizers=disabled)
    data = serialized(model)
    if data is not None:
        return _without_model_bytes(ort.InferenceSession(data, options, providers=chosen, disabled_optimizers=disabled), chosen)
    # Past the limit (upb raises past 2 GB: serialized() says None), onnx.save with
    # external data would strip the caller's tensors: write_externalized leaves them in place.
    folder = tempfile.TemporaryDirectory(prefix="onnxptq-session-")
    path = write_externalized(model, folder.name)
    session = ort.InferenceSession(str(path), options, providers=chosen, disabled_optimizers=disabled)
    weakref.finalize(session, folder.cleanup)
    return session


def session_options(
    *,
    threads: int | None = None,
    inter_op_threads: int | None = None,
    optimization: Optimization = "all",
    spinning: bool = True,
    memory_arena: bool = True,
    memory_pattern: bool = True,
    priority_order: bool = False,
    log_severity: int = 3,
    custom_op_libraries: Sequence[str | os.PathLike] = (),
    optimized_model_path: str | os.PathLike | None = None,
    config: Mapping[str, str] | None = None,
    inline_functions_first: bool = True,
) -> Any:
    """The ``SessionOptions`` :func:`open_session` opens a session with: apart so that what a
    session would be can be told without opening it (:func:`options_signature`; finish's,
    pipeline/finish.py).

    Args:
        threads: intra-op threads (onnxruntime's default, one per core, when None).
        inter_op_threads: inter-op threads (default: onnxruntime's).
        optimization: graph optimization level; ``"all"`` is what a user's session does by default.
        spinning: let idle pool threads spin; off where onnxruntime alternates with other work
            (calibration reductions, torch steps) and spinning threads would take its cores.
        memory_arena: the CPU memory arena; off where many sessions live at once.
        memory_pattern: onnxruntime's memory pattern (one planned block for a run's intermediate
            tensors per input shape); off where that block outweighs its saving (calibration).
        priority_order: priority-based execution order (frees intermediate tensors sooner).
        log_severity: onnxruntime's log level (3 = errors only: our own log says what matters).
        custom_op_libraries: onnxruntime custom-op libraries to register besides those in force
            (:func:`custom_op_libraries`): models with nodes of a custom domain can then be run;
            what we emit never needs one.
        optimized_model_path: where onnxruntime writes the graph it actually runs (the runtime view).
        config: session configuration entries (``add_session_config_entry``), e.g.
            ``{"session.qdq_matmulnbits_accuracy_level": "1"}``.
        inline_functions_first: onnxruntime's default, inlining every model-local function before
            the basic (level-1) optimisers run, which then rewrite every inlined body. False
            (``session.disable_aot_function_inlining``): the functions are inlined when the graph
            is partitioned, after level 1, so only the outer graph is constant-folded (packed
            weights included) and the extended/all levels still see the bodies. For internal
            sessions on block-format models (function calls of ~40 nodes each): creating the
            session on PP-OCRv4 rec MX9 took 2.4 s of CPU instead of 3.6 at "all", layout MX9 2.2
            instead of 4.0, with bit-identical outputs on rec, cls and layout MX9 (bench/RESULTS.md).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = log_severity
    options.graph_optimization_level = optimization_level(optimization)
    if threads:
        options.intra_op_num_threads = threads
    if inter_op_threads:
        options.inter_op_num_threads = inter_op_threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not memory_arena:
        options.enable_cpu_mem_arena = False
    if not memory_pattern:
        options.enable_mem_pattern = False
    if priority_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    register(options, custom_op_libraries)
    for key, value in (config or {}).items():
        options.add_session_config_entry(str(key), str(value))
    if not inline_functions_first:
        options.add_session_config_entry("session.disable_aot_function_inlining", "1")
    if optimized_model_path is not None:
        options.optimized_model_filepath = str(optimized_model_path)
    return options


def options_signature(options: Any, providers: Sequence[str]) -> tuple:
    """What of a session's ``options`` and ``providers`` decides its outputs: providers, thread
    counts, graph level, execution mode and the function-inlining entry (log levels and spinning
    decide none). ``session.get_session_options()`` and ``session.get_providers()`` of an open
    session give the signature it was opened with (pipeline/verify.session_signature)."""
    try:
        inlining = options.get_session_config_entry("session.disable_aot_function_inlining")
    except RuntimeError:  # onnxruntime raises for an entry never set: its default
        inlining = ""
    return (tuple(providers), options.intra_op_num_threads, options.inter_op_num_threads, str(options.graph_optimization_level),
            str(options.execution_mode), inlining)


def _disabled_for(model: onnx.ModelProto | bytes | str | os.PathLike) -> list[str]:
    """``[CRASH_FUSION]`` where ``model`` holds the graph onnxruntime crashes on (else none).

    Cheap where it cannot be there: serialized bytes (or a file) are parsed only where they hold a
    MatMul and a batch Transpose's perm (:func:`~onnxptq.graph.ort_crash.may_hold_trigger`, read in
    place); a ``ModelProto`` is walked once (no serialization)."""
    if not isinstance(model, onnx.ModelProto):
        try:
            data = model if isinstance(model, bytes) else Path(model).read_bytes()
        except OSError:
            return []  # onnxruntime names the unreadable file itself
        if not may_hold_trigger(data):
            return []
        try:
            model = onnx.load_from_string(data)
        except Exception:  # noqa: BLE001 - not parseable here: onnxruntime reports it
            return []
    nodes = crash_trigger(model)
    if not nodes:
        return []
    log.info("onnxruntime %s crashes opening this graph (float16 batch Transpose -> MatMul at %s): session opened "
             "with %s disabled", ORT_VERSION_SEEN, ", ".join(nodes[:5]) + (" ..." if len(nodes) > 5 else ""), CRASH_FUSION)
    return [CRASH_FUSION]


def _without_model_bytes(session: Any, providers: Sequence[Any]) -> Any:
    """``session`` without the serialized model its Python wrapper keeps for its whole life.

    Why: onnxruntime's ``InferenceSession`` made from bytes holds them (``_model_bytes``, with its
    own "TODO: This is bad as we're holding the memory indefinitely") only to create the session
    again when a provider fails and it falls back to another; its C++ session never reads them
    again. A session on the CPU provider alone has nothing to fall back to, so the bytes were a
    dead copy of the model for as long as the session lived: the calibration session's augmented
    PP-OCRv4 rec (10.6 MiB) through all its runs, the peak of a quantization (bench/RESULTS.md,
    branch recmemory). Kept where another provider is asked for, so its fallback still works."""
    names = [p[0] if isinstance(p, tuple) else p for p in providers]
    if all(name == CPU[0] for name in names) and getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None
    return session


#: Runs of one session :func:`run_feeds` keeps in flight at once.
RUNS_IN_FLIGHT = 2


def run_threads() -> int:
    """Intra-op threads for a session whose runs go through :func:`run_feeds`: this process's
    cores shared among the :data:`RUNS_IN_FLIGHT` runs (one on a 2-core machine, 8 on 16).

    Why not onnxruntime's default pool (one thread per core): two runs in flight, each handing the
    slices of every op to a pool as large as the machine, ask for twice the cores there are; each
    parallel op then waits for its slowest slice and the pool's hand-offs cost CPU of their own,
    most on a block-format model's thousands of small inlined nodes. The verification runs of
    PP-OCRv4 det, 8 feeds two in flight on 2 cores: MXFP8_E4M3 6.1-6.5 CPU s with the default pool,
    4.8-5.3 with one thread a run; MX9 4.4 -> 3.8; BF16 3.3 -> 2.9 at load ~1.5, 3-15 % less at
    load 3-5, the outputs the same bit for bit (bench/RESULTS.md, branch blockquant5). A pool of
    the cores a run has keeps a large machine's wall time: each of the two runs gets half of it."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // RUNS_IN_FLIGHT)


def run_feeds(session: Any, names: Sequence[str], feeds: Sequence[Mapping[str, Any]],
              reduce: Callable[[int, list[Any]], list[Any]] | None = None) -> list[list[Any]]:
    """``[session.run(names, feed) for feed in feeds]``, with up to :data:`RUNS_IN_FLIGHT` runs in
    flight at once (onnxruntime's ``run`` is thread-safe and releases the GIL), the outputs in
    arrays of our own (:class:`_Bound`).

    Why in flight: a batch-1 run of a small model, and above all of a block-format model (thousands
    of small nodes once its functions are inlined), leaves the second core mostly idle or spinning;
    two runs at once fill it. The outputs are those of one run at a time, bit for bit: the same
    kernels with the same thread pool (its size, hence every kernel's partition of its work, is the
    session's), only interleaved (PP-OCR cls MX9, 16 feeds: the same sha256 of every output). The
    price is a second run's activations alive at once.

    ``reduce(i, outputs)``: what is kept of feed ``i``'s outputs, applied as each run ends, so the
    whole outputs of a run are let go before the runs after it (the floor's judged outputs held in
    the form their readings need, analysis/held_outputs.py: PP-OCRv4 rec's 32 calibration feeds'
    ``[1, 40, 6625]`` softmax, 1 MiB each per candidate)."""
    feeds = list(feeds)
    keep = (lambda i, outputs: outputs) if reduce is None else reduce
    if len(feeds) < 2:
        return [keep(i, _owned(session.run(list(names), feed))) for i, feed in enumerate(feeds)]
    first = feeds[:RUNS_IN_FLIGHT]
    with concurrent.futures.ThreadPoolExecutor(max_workers=RUNS_IN_FLIGHT, thread_name_prefix="onnxptq-run") as pool:
        head = list(pool.map(lambda feed: _owned(session.run(list(names), feed)), first))
        bound = _Bound(session, names, first[0], head[0])
        head = [keep(i, outputs) for i, outputs in enumerate(head)]
        rest = pool.map(lambda i: keep(i, bound(feeds[i])), range(len(first), len(feeds)))
        return head + list(rest)


def _owned(outputs: list[Any]) -> list[Any]:
    """``outputs`` (a run's) in memory of their own: an array onnxruntime returns holds its
    session's output buffer, and with it the session's whole arena, alive after the session is
    gone (bench/RESULTS.md, issue 26 item 4)."""
    return [np.array(o) if isinstance(o, np.ndarray) else o for o in outputs]


class _Bound:
    """One run of ``session`` whose outputs onnxruntime writes into arrays allocated here, shaped
    as the ``template`` run's (IOBinding), where a feed's inputs have the template feed's shapes
    and types; any other feed, a model whose outputs are not plain numeric tensors, or one whose
    output shape turned out to depend on the values (onnxruntime refuses the bound buffer) runs as
    ``session.run`` does, its outputs copied.

    Why: the outputs of the runs a quantization judges (repair's candidates, the verification)
    stay alive through the judgement; returned by ``run`` they sit in the session's arena, so the
    arena grows by every output kept (their chunks interleaved with the next runs' activations) and
    outlives the session until the judgement ends. Bound, the arena holds the activations alone
    and is handed back when the session closes. PP-OCRv4 rec A8W8 (28 outputs of 1 MiB per
    candidate): peak 302-303 -> 295 MiB (bench/RESULTS.md, quanttime8). Same kernels, same
    buffers' contents: the outputs are bit for bit those of ``run``."""

    def __init__(self, session: Any, names: Sequence[str], feed: Mapping[str, Any], template: list[Any]) -> None:
        self.session, self.names = session, list(names)
        self.key = _feed_key(feed)
        plain = all(isinstance(o, np.ndarray) and o.dtype.isbuiltin == 1 and o.dtype.kind in "biuf" and o.size
                    for o in template)
        # A graph input that is also an output: onnxruntime hands the input back and leaves a bound
        # buffer unwritten (np.empty's garbage judged as the output: fuzz16, bench/RESULTS.md)
        plain = plain and not set(self.names) & {i.name for i in session.get_inputs()}
        self.template = [(o.dtype, o.shape) for o in template] if plain and self.key is not None else None

    def __call__(self, feed: Mapping[str, Any]) -> list[Any]:
        template = self.template
        if template is None or _feed_key(feed) != self.key:
            return _owned(self.session.run(self.names, feed))
        outputs = [np.empty(shape, dtype) for dtype, shape in template]
        try:
            binding = self.session.io_binding()
            for name, value in feed.items():
                binding.bind_cpu_input(name, value)
            for name, out in zip(self.names, outputs):
                binding.bind_output(name, "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
            self.session.run_with_iobinding(binding, _quiet_run())
        except Exception:  # noqa: BLE001 - an output shaped by values, not shapes: run() says what else is wrong
            log.debug("outputs not bound from here on: run as given")
            self.template = None
            return _owned(self.session.run(self.names, feed))
        return outputs


def _quiet_run() -> Any:
    """Run options whose log says nothing below FATAL, for the bound try of :class:`_Bound`, which may fail by
    design (an output shaped by the values, the bound buffer refused) and then runs as given.

    Why: onnxruntime logs the refused buffer as an ERROR on stderr before it raises ("Non-zero status code
    returned while running Gather node ... has shape {1,16} but the computed output shape for this run is
    {3,16}"), once a judged batch, though nothing failed: retinaface 1.1.1's TF2 RetinaFace, whose NMS inside
    the graph returns a face a row, printed 8 such lines per preset under every quantize (bench/RESULTS.md,
    newmodels30). A real error still shows: the plain run after it raises it with its own message."""
    import onnxruntime as ort

    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


def _feed_key(feed: Mapping[str, Any]) -> tuple | None:
    """The names, types and shapes of a feed's C-contiguous arrays (None where any value is
    another kind of object: it is run as given)."""
    key = []
    for name, value in feed.items():
        if not isinstance(value, np.ndarray) or not value.flags.c_contiguous:
            return None
        key.append((name, value.dtype.str, value.shape))
    return tuple(key)


def serialized(model: onnx.ModelProto, limit: int | None = None) -> bytes | None:
    """``model``'s bytes, or None past ``limit`` (default :data:`PROTO_LIMIT`, read at the call;
    upb raises past 2 GB). One serialization: asking ``graph.io.exceeds_protobuf_limit`` first
    serialized the model twice (``ByteSize`` serializes to measure), 25 ms a time on lac's 32 MB
    model, for each of a quantize's 3-4 sessions (and the checker's, in finish)."""
    try:
        data = model.SerializeToString()
    except Exception:  # google.protobuf.message.EncodeError: "Failed to serialize proto"
        return None
    return data if len(data) <= (PROTO_LIMIT if limit is None else limit) else None


@functools.lru_cache(maxsize=None)
def highest_qdq_opset(upto: int, floor: int = 13) -> int:
    """The highest default-domain opset ``<= upto`` at which this onnxruntime runs
    QuantizeLinear/DequantizeLinear (``floor`` when none above it does).

    onnx defines opsets before onnxruntime implements them: a model stamped with an opset newer
    than the installed onnxruntime still runs its float ops (each resolves to the newest version
    onnxruntime has), but the quantizers we add would be resolved at that opset and fail to load.
    Probed once per opset by opening a two-node model; cached for the process.
    """
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    for opset in range(upto, floor, -1):
        graph = helper.make_graph(
            [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
            "qdq_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
            initializer=[numpy_helper.from_array(np.array(1.0, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        try:
            open_session(model)
        except Exception:  # noqa: BLE001 - any refusal means "not at this opset"
            log.debug("onnxruntime does not run QuantizeLinear at opset %d", opset)
            continue
        return opset
    return floor
