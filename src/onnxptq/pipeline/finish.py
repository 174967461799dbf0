"""The finish stage: pin versions, run the checker, open a real onnxruntime session on the result.

What we ship must load in stock onnxruntime; a model that does not is our bug, reported as such.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, ContextManager, Iterator, Sequence

import onnx

from ..graph import external, io
from ..graph.passes.unsigned_gemm_weights import has_fused_int8_weights, unsigned_gemm_weights
from ..sessions import CPU, open_session, options_signature, run_threads, serialized, session_options

log = logging.getLogger(__name__)


def _options() -> dict[str, Any]:
    """How finish opens its session (the arguments of :func:`~onnxptq.sessions.open_session`), one
    place for :func:`finish`, :func:`finish_saved` and :func:`finish_signature` (why each: finish())."""
    return {"log_severity": 2, "inline_functions_first": False, "spinning": False, "threads": run_threads()}


def finish_signature() -> tuple:
    """The :func:`~onnxptq.pipeline.verify.session_signature` finish's session will have, told
    without opening one: whether a judgement made on other sessions holds for it
    (:meth:`~onnxptq.pipeline.verify.Verified.recall`) is known before its creation, the largest
    part of a block format's quantize (tests/test_verify_reuse.py holds the two equal)."""
    return options_signature(session_options(**_options()), CPU)


def finish_saved(model: onnx.ModelProto, path: Path, source: str, exact_sums: bool = False):
    """:func:`finish` for a model already written to ``path`` with its data file beside it (the
    streaming path, :mod:`onnxptq.graph.external`): the checker and onnxruntime read that file, so
    what is checked is what ships and the weights are read once, by onnxruntime.

    ``exact_sums`` (:func:`onnxptq.pipeline.runtime.judge_exact_sums`) is not honoured here: a
    judging copy would hold a second set of the weights this path keeps out of memory. Said instead."""
    if exact_sums and has_fused_int8_weights(model):
        log.warning("%s: the figures are this machine's onnxruntime's, whose uint8 x int8 sums saturate (x86 without "
                    "VNNI); the int8 weights kept for the target runtime are not judged on exact sums on the "
                    "streaming path", source)
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as exc:
        raise RuntimeError(f"{source}: the quantized model fails the ONNX checker (a bug in onnxptq): {exc}") from exc
    try:
        session = open_session(path, **_options())  # as finish()
    except Exception as exc:
        raise RuntimeError(f"{source}: onnxruntime cannot load the quantized model (a bug in onnxptq): {exc}") from exc
    return model, session


def finish(model: onnx.ModelProto, source: str, with_bytes: Callable[[bytes], Any] | None = None,
           also: Sequence[str] = (), exact_sums: bool = False):
    """Pin versions, run the checker, and open a real onnxruntime session: what we ship must load.

    Returns ``(model, session)``; the session is reused for the report, because creating one for a
    model full of embedded functions costs seconds (onnxruntime inlines and optimises them).
    ``with_bytes``: called with the serialized model the checker and the session read, after the
    checker and before the session (not past protobuf's limit): the delivered build's digest
    (:meth:`onnxptq.pipeline.verify.Verified.recall`) is taken from them rather than from a second
    serialization of the whole model. A true return says these bytes were already opened and judged
    on a session of this one's signature (:func:`finish_signature`: a repair candidate's,
    pipeline/verify.py): no session is opened and ``(model, None)`` returned.

    Why skip it: the verification would take that judgement and never run the session, so it was
    opened only to show that the bytes load, which the candidate's session, of the same options on
    the same bytes, already showed (mp_face_long A8W8: 7 sessions -> 6, 0.07 CPU s; bench/RESULTS.md,
    blockquant10). Only integer plans meet it: a block format's delivered build has packed weights
    and its candidates not, so their bytes differ and the delivered build is opened and judged again.

    ``also``: tensors of the main graph the session returns besides the graph outputs (the graph's
    inner decisions the verification reads, analysis/decisions.py): the checker reads the model as
    it is, the session the model with them appended as outputs, the model itself keeps its own
    outputs (:func:`_with_outputs`). Not past protobuf's limit: that session returns the graph's
    outputs only (the caller asks it which it has). Why: the decisions were read on a second
    session of an evaluation copy that had them as outputs, the quantized model's functions
    inlined and its feeds run once more for them; one session returns both (trueocr_rec MX9: 5 ->
    4 sessions; bench/RESULTS.md, blockquant12).

    ``exact_sums`` (:func:`onnxptq.pipeline.runtime.judge_exact_sums`): the checker reads the model
    as delivered, the session a copy whose int8 GEMM weights are stored as uint8, so a build for a
    target that adds in int32 is judged on exact sums where this machine's kernels saturate.
    """
    io.pin_versions(model)
    with tempfile.TemporaryDirectory(prefix="onnxptq-finish-") as folder:
        # Past protobuf's 2 GB limit neither the checker nor onnxruntime takes the model in
        # memory: both read one temporary copy with external data (the model itself is untouched).
        # Serialized once, for the checker and the session both (each serialized it again: a
        # full copy of the weights each time); None past the limit.
        data = serialized(model)
        large = data is None
        path = str(io.write_externalized(model, folder)) if large else None
        try:
            onnx.checker.check_model(path) if large else onnx.checker.check_model(data)
        except onnx.checker.ValidationError as exc:
            raise RuntimeError(f"{source}: the quantized model fails the ONNX checker (a bug in onnxptq): {exc}") from exc
        if with_bytes is not None and data is not None and with_bytes(data):
            log.debug("%s: these bytes were opened and judged on a session like finish's: no session opened", source)
            return model, None
        judged = _exact_copy(model) if exact_sums else model
        if (also or judged is not model) and data is not None:
            del data  # the checker's bytes: the session's are serialized with the extra outputs / exact weights
            with _with_outputs(judged, also):
                data = serialized(judged)
            large = data is None
            path = str(io.write_externalized(judged, folder)) if large else None  # the checker read bytes: no path yet
        elif judged is not model:  # past protobuf's limit: the session reads the judging copy's files
            (Path(folder) / "exact").mkdir()
            path = str(io.write_externalized(judged, Path(folder) / "exact"))
        try:
            # Users' level ("all"): onnxruntime's QDQ fusions run at session creation and reject
            # some valid Q/DQ layouts (e.g. per-channel scales into a QLinearMul). Functions are
            # inlined after the level-1 optimisers rather than before (sessions.open_session), so
            # those do not rewrite every block-format call's body: creating this session is the
            # largest part of a block format's quantize time (PP-OCR cls MX9 1.23 -> 0.95 s CPU,
            # rec 3.2 -> 2.3, layout 4.0 -> 2.2); the extended/all optimisers (the QDQ fusions
            # among them) still run on the inlined graph, and the outputs were bit-identical to
            # the default session's on those models (bench/RESULTS.md). Its creation's peak RSS:
            # layout MX9 +913 -> +283 MiB, rec MX9 +190 -> +209..254. No-op without functions.
            # No spinning: the pool's idle threads sleep between the verification's runs instead
            # of busy-waiting for the next (the same kernels and partitions, so the same outputs;
            # PP-OCR cls MX9, 16 feeds at load ~17: 0.19 -> 0.10 CPU s with two runs in flight).
            # Not built on a thread beside the checker: onnxruntime would allow it (it releases
            # the GIL while it builds), but the checker takes 2-8 ms here and its copy of the
            # model beside the session's build raised the ViT MX9's peak by ~38 MiB
            # (bench/RESULTS.md, "third round").
            # The cores shared by the verification's two runs in flight (sessions.run_threads): a
            # pool per run as large as the machine cost PP-OCRv4 det's verification 3-22 % more
            # CPU (the more, the quieter the machine) for the same outputs, bit for bit.
            session = open_session(path if large else data, **_options())
        except Exception as exc:
            raise RuntimeError(f"{source}: onnxruntime cannot load the quantized model (a bug in onnxptq): {exc}") from exc
        del data
    return model, session


class FileBytes:
    """The delivered file's bytes, serialized once by :func:`finish_file`, kept from finish to the save in a
    temporary file (not in memory): :meth:`write` copies them into the output.

    Why on disk: held in memory through the verification, the bytes raised PP-OCRv4 rec BF16's quantize peak
    by the file's size (241-242 -> 246-248 MiB; bench/RESULTS.md blockq22); serializing again at the save would
    run the lean rewrites a second time (0.03-0.08 CPU s a block quantize)."""

    def __init__(self, data: bytes | memoryview) -> None:
        self.size = len(data)
        self._file = tempfile.TemporaryFile(prefix="onnxptq-file-")
        try:
            self._file.write(data)
        except BaseException:
            self._file.close()
            raise

    def write(self, target: BinaryIO) -> None:
        """Copy the bytes into ``target`` (an open binary file)."""
        self._file.seek(0)
        shutil.copyfileobj(self._file, target)

    def close(self) -> None:
        self._file.close()


def finish_file(source: str, stored: onnx.ModelProto,
                written: Callable[[onnx.ModelProto], ContextManager[Any]], also: Sequence[str] = ()
                ) -> tuple[Any, dict[str, str], FileBytes | None] | None:
    """:func:`finish` on the bytes the user's file will hold: ``stored`` (the quantized model, or the copy the save
    writes: sparse float weights; its versions pinned by the caller, as complete() does) as ``written`` leaves it for the write (pipeline/lean_file.py ``lean``: no
    inferred shapes, shared call attributes, short names) is serialized once; the checker reads those
    bytes, the session reads them with ``also`` appended as outputs, and the save writes them as they are.

    Returns ``(session, names, file)``: ``names`` gives each of ``also`` under the name the file gives it
    (the session's output name), ``file`` the bytes for the save (None where no temporary file could hold
    them: the save serializes the model again); or None where this cannot be done (past protobuf's limit, external tensors,
    a tensor of ``also`` not made by a node of the main graph): :func:`finish` then, as before.

    Why: finish opened its session on the in-memory model (inferred ``value_info``, long names, calls'
    repeated attributes) and the save wrote the lean form, serialized again after a second pass of the
    lean rewrites. The lean bytes open in 0.75-0.99x the time (median 0.91; the same outputs bit for bit
    on cls and rec under ten presets, bench/RESULTS.md blockq21), the lean rewrites and one
    serialization of the model are done once, and what is checked and judged is the file as shipped."""
    graph = stored.graph
    wanted = set(also)
    made = {o: (i, j) for i, n in enumerate(graph.node) for j, o in enumerate(n.output) if o in wanted}
    if len(made) < len(wanted) or external.has_external(stored):
        return None
    count = len(graph.node)
    outputs = [len(graph.node[i].output) for i, _ in made.values()]
    with written(stored):
        # the lean rewrites rename tensors in place and only put decode nodes first (constant tables): a tensor's
        # maker is the node it was, ``shift`` places on
        shift = len(graph.node) - count
        if shift < 0 or [len(graph.node[i + shift].output) for i, _ in made.values()] != outputs:
            return None
        names = {t: graph.node[i + shift].output[j] for t, (i, j) in made.items()}
        data = serialized(stored)
        if data is None:
            return None
        returned = {o.name for o in graph.output}
    size = len(data)
    try:
        onnx.checker.check_model(data)
    except onnx.checker.ValidationError as exc:
        raise RuntimeError(f"{source}: the quantized model fails the ONNX checker (a bug in onnxptq): {exc}") from exc
    extra = [n for n in dict.fromkeys(names.values()) if n not in returned]
    if extra:  # untyped, as _with_outputs appends them: onnxruntime infers their types
        tail = onnx.ModelProto(graph=onnx.GraphProto(output=[onnx.helper.make_empty_tensor_value_info(n) for n in extra]))
        data += tail.SerializeToString()
    try:
        session = open_session(data, **_options())  # as finish()
    except Exception as exc:
        raise RuntimeError(f"{source}: onnxruntime cannot load the quantized model (a bug in onnxptq): {exc}") from exc
    try:
        file = FileBytes(memoryview(data)[:size])
    except OSError as exc:  # no room for a temporary file: the save serializes the model again, as before
        log.debug("%s: the file's bytes not kept for the save (%s)", source, exc)
        file = None
    return session, names, file


def _exact_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose int8 GEMM weights are stored as uint8 (the same values: exact sums on
    U8U8 kernels), or ``model`` itself where it has none (no copy: an npu build in a block or float
    format reads no such weight)."""
    if not has_fused_int8_weights(model):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    rewritten = unsigned_gemm_weights(copy)
    log.debug("judged on a copy with %d int8 weights stored as uint8 (exact sums on this machine)", rewritten)
    return copy


@contextlib.contextmanager
def _with_outputs(model: onnx.ModelProto, names: Sequence[str]) -> Iterator[onnx.ModelProto]:
    """``model`` with ``names`` appended to its graph's outputs for the duration of the block (those
    not outputs already), untyped (onnxruntime infers their types; the checker would refuse them,
    which is why it reads the model without them); removed after it."""
    present = {o.name for o in model.graph.output}
    count = len(model.graph.output)
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in dict.fromkeys(names) if n not in present)
    try:
        yield model
    finally:
        del model.graph.output[count:]
