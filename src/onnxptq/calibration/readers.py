"""Calibration data in every shape users bring it, turned into one stream of checked feed dicts.

Accepted sources (see :func:`as_feed_iterator`):

* any object with ``get_next()`` returning a feed dict, then ``None`` at the end — onnxruntime's
  ``CalibrationDataReader`` subclasses are used as they are;
* an iterable of feed dicts (a list, a generator, ...);
* a folder of ``.npy`` / ``.npz`` files, read one file at a time in sorted name order;
* one ``.npz`` file whose arrays are keyed by input name, samples on axis 0 (``.npy`` too, for a
  single-input model);
* a numpy array (single-input models) or a dict of arrays keyed by input name, samples on axis 0.

Memory stays O(one batch): folders are read file by file, a ``.npz`` member is decoded row block by
row block straight from the zip stream, a ``.npy`` file is memory-mapped. Nothing ever holds all
samples unless the caller handed them to us in memory.

Passes: a folder, a file, an array, a dict or a list can be read any number of times. A
``get_next()`` reader is read once — the pipeline (calibration, then any refinement that needs data
again) passes over it a single time — unless it has a ``rewind()`` method, the convention of
onnxruntime's examples, which a source calls before every pass after the first. An iterator (a
generator) is read once too; a second pass over a one-shot source raises
:class:`OneShotSourceError` rather than silently seeing no data.
"""

from __future__ import annotations

import logging
import os
import zipfile
import zlib
from tokenize import TokenError
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Union, overload

import numpy as np
import onnx
from onnxptq.errors import OnnxptqError

log = logging.getLogger(__name__)

Feed = dict[str, np.ndarray]

#: (data dtype, model dtype) pairs that are cast silently-but-logged instead of rejected: fp32
#: calibration data for an fp16 model is the common case (data pipelines produce fp32), and the
#: cast is exact up to the fp16 rounding the model applies to its input anyway.
CASTABLE: frozenset[tuple[np.dtype, np.dtype]] = frozenset({(np.dtype(np.float32), np.dtype(np.float16))})


# ---------------------------------------------------------------------------------------------
# errors


class CalibrationDataError(OnnxptqError, ValueError):
    """Calibration data that cannot feed the model. A ValueError, so the CLI reports it plainly."""


class FeedNameError(CalibrationDataError):
    """A feed names inputs the model does not have, or lacks some it needs."""


class FeedDtypeError(CalibrationDataError, TypeError):
    """A feed array's dtype does not match its model input (and is not a permitted cast)."""


class FeedRankError(CalibrationDataError):
    """A feed array has a different number of dimensions than its model input."""


class FeedShapeError(CalibrationDataError):
    """A feed array differs from a fixed (static) dimension of its model input."""


class EmptyCalibrationDataError(CalibrationDataError):
    """The source yielded no samples at all."""


class OneShotSourceError(CalibrationDataError, RuntimeError):
    """A second pass was asked of a source that can be read only once."""


# ---------------------------------------------------------------------------------------------
# model inputs


@dataclass(frozen=True)
class ModelInput:
    """One graph input that data must be fed for.

    ``dtype`` is None for non-tensor inputs or an unset element type (nothing is checked then);
    ``shape`` is None when the rank is unknown, and holds None for each dynamic dimension
    (``dim_param``, unset, or a non-positive ``dim_value`` such as Paddle's -1).
    """

    name: str
    dtype: np.dtype | None
    shape: tuple[int | None, ...] | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def describe(self) -> str:
        dims = "?" if self.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
        return f"{self.name}: {self.dtype if self.dtype is not None else '?'} {dims}"


@dataclass(frozen=True)
class ModelInputs(Sequence[ModelInput]):
    """The inputs a feed must provide, in graph order: graph inputs minus initializers.

    Initializers listed as graph inputs (older exporters do this, IR < 4 requires it) have
    defaults and are not fed during calibration, so they are left out.
    """

    inputs: tuple[ModelInput, ...]

    @classmethod
    def from_model(cls, model: onnx.ModelProto | str | os.PathLike) -> ModelInputs:
        """Read the inputs of a ModelProto, or of a model file (weights are not loaded)."""
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load(str(model), load_external_data=False)
        inits = {t.name for t in model.graph.initializer} | {t.name for t in model.graph.sparse_initializer}
        return cls(tuple(_model_input(vi) for vi in model.graph.input if vi.name not in inits))

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.inputs]

    def by_name(self, name: str) -> ModelInput:
        for i in self.inputs:
            if i.name == name:
                return i
        raise KeyError(name)

    @overload
    def __getitem__(self, index: int) -> ModelInput: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[ModelInput]: ...
    def __getitem__(self, index: int | slice) -> ModelInput | Sequence[ModelInput]:
        return self.inputs[index]

    def __len__(self) -> int:
        return len(self.inputs)

    def __iter__(self) -> Iterator[ModelInput]:
        return iter(self.inputs)


def _model_input(vi: onnx.ValueInfoProto) -> ModelInput:
    if not vi.type.HasField("tensor_type"):
        return ModelInput(vi.name, None, None)
    tt = vi.type.tensor_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else None
    except (KeyError, TypeError, ValueError):  # element types numpy cannot hold
        dtype = None
    if not tt.HasField("shape"):
        return ModelInput(vi.name, dtype, None)
    shape = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim)
    return ModelInput(vi.name, dtype, shape)


InputsLike = Union[ModelInputs, Sequence[ModelInput], onnx.ModelProto]


def _as_inputs(model_inputs: InputsLike) -> ModelInputs:
    if isinstance(model_inputs, ModelInputs):
        return model_inputs
    if isinstance(model_inputs, onnx.ModelProto):
        return ModelInputs.from_model(model_inputs)
    return ModelInputs(tuple(model_inputs))


# ---------------------------------------------------------------------------------------------
# checking


def _check_names(names: Iterable[str], inputs: ModelInputs, source_desc: str) -> None:
    given = list(names)
    expected = inputs.names
    unknown = [n for n in given if n not in expected]
    missing = [n for n in expected if n not in given]
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown input name(s) {unknown}")
        if missing:
            parts.append(f"missing input(s) {missing}")
        raise FeedNameError(
            f"{source_desc}: {' and '.join(parts)}; the model expects {expected} "
            f"({'; '.join(i.describe() for i in inputs)})"
        )


def _check_array(
    name: str, dtype: np.dtype, shape: tuple[int, ...], spec: ModelInput, source_desc: str, *, sample_axis: bool
) -> bool:
    """Check one array's dtype, rank and fixed dims; True when it needs a cast to ``spec.dtype``.

    With ``sample_axis`` axis 0 counts samples of a stacked source, not the model's batch, so a
    fixed batch dimension is not compared there (batch sizes are checked when batches are cut).
    """
    cast = False
    if spec.dtype is not None and dtype != spec.dtype:
        if spec.dtype == np.dtype(object) and dtype.kind in "OUS":
            pass  # ONNX STRING inputs take any numpy string array
        elif (dtype, spec.dtype) in CASTABLE:
            cast = True
        else:
            hint = f"; convert it with .astype(np.{spec.dtype.name})" if spec.dtype.kind in "fiub" else ""
            raise FeedDtypeError(f"{source_desc}: input {name!r} has dtype {dtype}, the model expects {spec.dtype}{hint}")
    if spec.shape is None:
        return cast
    if len(shape) != len(spec.shape):
        raise FeedRankError(
            f"{source_desc}: input {name!r} has rank {len(shape)} (shape {list(shape)}), "
            f"the model expects rank {len(spec.shape)} ({spec.describe()})"
        )
    for axis, (got, want) in enumerate(zip(shape, spec.shape)):
        if want is not None and got != want and not (sample_axis and axis == 0):
            raise FeedShapeError(
                f"{source_desc}: input {name!r} has shape {list(shape)}, but axis {axis} of the "
                f"model input is fixed at {want} ({spec.describe()})"
            )
    return cast


def check_feed(feed: Mapping[str, Any], model_inputs: InputsLike, source_desc: str) -> Feed:
    """Check one feed against the model's inputs and return it ready for ``InferenceSession.run``.

    Errors name the source (``source_desc``, e.g. ``"file calib/0003.npz"``) and the input:

    * :class:`FeedNameError` for unknown or missing input names, listing what the model expects;
    * :class:`FeedDtypeError` for a dtype other than the input's. The one exception is float32
      data for a float16 input, which is cast to float16 (logged at debug level), since data
      pipelines produce float32 and the model would round its input to fp16 anyway. Every other
      mismatch (float64 for float32, int32 for int64, ...) is an error rather than a silent cast;
    * :class:`FeedRankError` for a wrong number of dimensions;
    * :class:`FeedShapeError` where the model fixes a dimension and the array differs.

    Values are converted with ``np.asarray`` (lists are accepted; their dtype is then numpy's).
    """
    if not isinstance(feed, Mapping):
        raise CalibrationDataError(
            f"{source_desc}: expected a dict of input name -> array, got {type(feed).__name__}"
        )
    inputs = _as_inputs(model_inputs)
    _check_names(feed.keys(), inputs, source_desc)
    out: Feed = {}
    for name, value in feed.items():
        array = np.asarray(value)
        spec = inputs.by_name(name)
        if _check_array(name, array.dtype, array.shape, spec, source_desc, sample_axis=False):
            log.debug("%s: casting input %r from %s to %s", source_desc, name, array.dtype, spec.dtype)
            array = array.astype(spec.dtype)
        out[name] = array
    return out


# ---------------------------------------------------------------------------------------------
# streaming .npy members of a zip (.npz) without loading them whole


class _NpyStream:
    """Read a ``.npy`` stream (e.g. an ``.npz`` member) block of rows by block of rows.

    ``np.load`` on an ``.npz`` decodes a whole array at once; reading the header and then rows
    sequentially keeps a large calibration file at O(batch) memory, compressed or not.
    """

    def __init__(self, fileobj: BinaryIO, desc: str) -> None:
        self.file = fileobj
        self.desc = desc
        version = np.lib.format.read_magic(fileobj)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fileobj)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fileobj)
        else:  # pragma: no cover - numpy writes only these versions
            raise CalibrationDataError(f"{desc}: unsupported .npy format version {version}")
        if dtype.hasobject:
            raise CalibrationDataError(f"{desc}: object arrays need pickle, which calibration data may not use")
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype = dtype
        self.fortran = bool(fortran)
        self.row_items = int(np.prod(self.shape[1:], dtype=np.int64)) if self.shape else 1
        self.rows_left = self.shape[0] if self.shape else 0

    def read_rows(self, k: int) -> np.ndarray:
        k = min(k, self.rows_left)
        nbytes = k * self.row_items * self.dtype.itemsize
        buf = bytearray()
        while len(buf) < nbytes:
            try:
                chunk = self.file.read(nbytes - len(buf))
            except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
                raise CalibrationDataError(f"{self.desc}: corrupt .npz member ({exc})") from exc
            if not chunk:
                raise CalibrationDataError(f"{self.desc}: truncated .npy data")
            buf += chunk
        self.rows_left -= k
        return np.frombuffer(buf, dtype=self.dtype).reshape((k, *self.shape[1:]))


# ---------------------------------------------------------------------------------------------
# sources


class _Source:
    """One kind of calibration source: how to describe it, whether it can be re-read, its feeds."""

    desc: str
    reiterable: bool = True
    #: what the feed being yielded came from (a folder's file); messages about values name it
    current: str = ""

    def feeds(self, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
        """Yield checked feeds; ``batch_size`` is a hint that stacked sources slice by."""
        raise NotImplementedError

    def rewind(self) -> None:
        """Prepare a pass after the first (only called when ``reiterable``)."""


class _ReaderSource(_Source):
    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.desc = f"calibration data reader {type(reader).__name__}"
        self._rewind: Callable[[], Any] | None = getattr(reader, "rewind", None)
        self.reiterable = callable(self._rewind)

    def rewind(self) -> None:
        assert self._rewind is not None
        self._rewind()

    def feeds(self, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
        k = 0
        while True:
            feed = self.reader.get_next()
            if feed is None:
                return
            yield check_feed(feed, inputs, f"{self.desc}, feed #{k}")
            k += 1


class _IterableSource(_Source):
    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items
        self.reiterable = not isinstance(items, Iterator)
        kind = "iterator" if not self.reiterable else "iterable"
        self.desc = f"{kind} of feeds ({type(items).__name__})"

    def feeds(self, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
        for k, feed in enumerate(self.items):
            yield check_feed(feed, inputs, f"{self.desc}, item #{k}")


def _single_input(inputs: ModelInputs, desc: str) -> ModelInput:
    if len(inputs) != 1:
        raise FeedNameError(
            f"{desc}: a bare array can only feed a single-input model, but the model has inputs "
            f"{inputs.names}; use an .npz or a dict keyed by input name"
        )
    return inputs[0]


def _slices(n: int, step: int) -> Iterator[slice]:
    for start in range(0, n, step):
        yield slice(start, min(start + step, n))


def _check_stacked(
    arrays: Mapping[str, tuple[np.dtype, tuple[int, ...]]], inputs: ModelInputs, desc: str
) -> tuple[int, list[str]]:
    """Check stacked arrays (samples on axis 0); return the sample count and the inputs to cast."""
    _check_names(arrays.keys(), inputs, desc)
    counts = set()
    to_cast = []
    for name, (dtype, shape) in arrays.items():
        if len(shape) == 0:
            raise FeedRankError(f"{desc}: input {name!r} is a scalar; samples must lie along axis 0")
        if _check_array(name, dtype, shape, inputs.by_name(name), desc, sample_axis=True):
            to_cast.append(name)
        counts.add(shape[0])
    if len(counts) > 1:
        raise FeedShapeError(
            f"{desc}: arrays hold different numbers of samples on axis 0: "
            + ", ".join(f"{n}: {s[0]}" for n, (_, s) in arrays.items())
        )
    return counts.pop(), to_cast


def _cast(feed: Feed, names: Sequence[str], inputs: ModelInputs, desc: str) -> Feed:
    for name in names:
        target = inputs.by_name(name).dtype
        log.debug("%s: casting input %r from %s to %s", desc, name, feed[name].dtype, target)
        feed[name] = feed[name].astype(target)
    return feed


class _StackedSource(_Source):
    """Arrays in memory (or memory-mapped) keyed by input name, samples on axis 0."""

    def __init__(self, arrays: Mapping[str, Any] | Callable[[], Mapping[str, Any]], desc: str) -> None:
        self._arrays = arrays
        self.desc = desc

    def feeds(self, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
        arrays = self._arrays() if callable(self._arrays) else self._arrays
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        n, to_cast = _check_stacked({k: (v.dtype, v.shape) for k, v in arrays.items()}, inputs, self.desc)
        for sl in _slices(n, batch_size or 1):
            yield _cast({k: np.ascontiguousarray(v[sl]) for k, v in arrays.items()}, to_cast, inputs, self.desc)


class _NpzSource(_Source):
    """One ``.npz`` keyed by input name; members are streamed row block by row block."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.desc = f"file {path}"

    def feeds(self, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
        yield from _npz_feeds(self.path, inputs, batch_size or 1, self.desc)


#: What numpy's readers raise on damaged bytes: a bad header (a dict literal that no longer parses,
#: or parses into keys of mixed types: TypeError from sorting them), a short read, a broken zip.
_DAMAGED_DATA = (ValueError, TypeError, OSError, EOFError, SyntaxError, TokenError, zipfile.BadZipFile, zlib.error)


def _npz_feeds(path: Path, inputs: ModelInputs, rows: int, desc: str) -> Iterator[Feed]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise CalibrationDataError(f"{desc}: not a valid .npz file ({exc})") from exc
    with archive:
        members = {m[:-4] if m.endswith(".npy") else m: m for m in archive.namelist()}
        _check_names(members.keys(), inputs, desc)
        streams = {}
        for name, member in members.items():
            try:
                streams[name] = _NpyStream(archive.open(member), f"{desc}[{name}]")
            except _DAMAGED_DATA as exc:
                for opened in streams.values():
                    opened.file.close()
                raise CalibrationDataError(f"{desc}[{name}]: not readable NumPy data ({' '.join(str(exc).split())})") from exc
        try:
            if any(s.fortran for s in streams.values()):
                # Fortran-ordered rows are not contiguous in the file: fall back to whole arrays.
                with _load_numpy(path, desc) as data:
                    whole = _read_members(data, desc)
                yield from _StackedSource(whole, desc).feeds(inputs, rows)
                return
            n, to_cast = _check_stacked({k: (s.dtype, s.shape) for k, s in streams.items()}, inputs, desc)
            for _ in _slices(n, rows):
                feed = {name: s.read_rows(rows) for name, s in streams.items()}
                yield _cast(feed, to_cast, inputs, desc)
        finally:
            for s in streams.values():
                s.file.close()


class _FolderSource(_Source):
    """A folder of ``.npy`` / ``.npz`` files, one feed per file in sorted name order.

    A ``.npy`` file feeds the only input of a single-input model; an ``.npz`` file is keyed by
    input name. A file whose arrays have one dimension fewer than the model input is taken as a
    single sample and given a leading batch axis (folders of per-sample ``[C, H, W]`` arrays are
    common). Other files are ignored (logged at debug level).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.desc = f"folder {folder}"

    def _files(self) -> list[Path]:
        files, skipped = [], []
        for entry in sorted(self.folder.iterdir()):
            if entry.is_file() and entry.suffix in (".npy", ".npz") and not entry.name.startswith("."):
                files.append(entry)
            else:
                skipped.append(entry.name)
        if skipped:
            log.debug("%s: ignoring %d entries that are not .npy/.npz files: %s", self.desc, len(skipped), skipped[:5])
        if not files:
            raise EmptyCalibrationDataError(f"calibration data is empty: {self.desc} holds no .npy or .npz files")
        return files

    def feeds(self, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
        for path in self._files():
            desc = f"file {path}"
            self.current = desc
            if path.suffix == ".npy":
                spec = _single_input(inputs, desc)
                feed = {spec.name: _load_numpy(path, desc)}
            else:
                with _load_numpy(path, desc) as data:
                    feed = _read_members(data, desc)
            for name, array in feed.items():
                spec_rank = inputs.by_name(name).rank if name in inputs.names else None
                if spec_rank is not None and array.ndim == spec_rank - 1:
                    feed[name] = array[np.newaxis]
            yield check_feed(feed, inputs, desc)


def _load_numpy(path: Path, desc: str, **kwargs: Any) -> Any:
    """``np.load`` without pickles; a file that is not NumPy data is an error naming the file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise CalibrationDataError(f"{desc}: cannot be read ({exc.strerror or exc})") from exc
    if not (head.startswith(b"\x93NUMPY") or head.startswith(b"PK")):
        kind = ".npz (zip)" if path.suffix == ".npz" else ".npy"
        raise CalibrationDataError(f"{desc}: not NumPy data (no {kind} header; write it with numpy.save / numpy.savez)")
    try:
        return np.load(path, allow_pickle=False, **kwargs)
    except _DAMAGED_DATA as exc:
        raise CalibrationDataError(f"{desc}: not NumPy .npy/.npz data ({' '.join(str(exc).split())})") from exc


def _read_members(data: Any, desc: str) -> Feed:
    """Every member of an open ``.npz``; a corrupt member is an error naming the file and member."""
    feed = {}
    for key in data.files:
        try:
            feed[key] = data[key]
        except _DAMAGED_DATA as exc:
            raise CalibrationDataError(f"{desc}[{key}]: not readable NumPy data ({' '.join(str(exc).split())})") from exc
    return feed


def _open(data: Any, inputs: ModelInputs) -> _Source:
    """Classify ``data`` into one of the source kinds, most specific first."""
    if callable(getattr(data, "get_next", None)):
        return _ReaderSource(data)
    if isinstance(data, (str, os.PathLike)):
        path = Path(data)
        if path.is_dir():
            return _FolderSource(path)
        if not path.exists():
            raise FileNotFoundError(f"calibration data {path} does not exist")
        if path.suffix == ".npz":
            return _NpzSource(path)
        if path.suffix == ".npy":
            spec = _single_input(inputs, f"file {path}")
            return _StackedSource(lambda: {spec.name: _load_numpy(path, f"file {path}", mmap_mode="r")}, f"file {path}")
        raise CalibrationDataError(
            f"calibration data {path}: unsupported file type {path.suffix!r}; expected a folder of "
            ".npy/.npz files, one .npz keyed by input name, or one .npy"
        )
    if isinstance(data, np.ndarray):
        desc = f"numpy array of shape {list(data.shape)}"
        spec = _single_input(inputs, desc)
        return _StackedSource({spec.name: data}, desc)
    if isinstance(data, Mapping):
        return _StackedSource(data, f"dict of arrays keyed by {list(data.keys())}")
    if isinstance(data, Iterable) and not isinstance(data, (bytes, bytearray)):
        return _IterableSource(data)
    raise TypeError(
        f"cannot read calibration data from {type(data).__name__}; pass an object with get_next() "
        "(e.g. an onnxruntime CalibrationDataReader), an iterable of feed dicts, a folder of "
        ".npy/.npz files, an .npz file keyed by input name, or a numpy array"
    )


# ---------------------------------------------------------------------------------------------
# batching and the public iterator


def _rows(feed: Feed, desc: str) -> int:
    counts = {a.shape[0] if a.ndim else None for a in feed.values()}
    if len(counts) != 1 or None in counts:
        raise FeedShapeError(
            f"{desc}: cannot re-batch a feed whose arrays do not share axis 0: "
            + ", ".join(f"{k}: {list(a.shape)}" for k, a in feed.items())
        )
    return counts.pop()  # type: ignore[return-value]


def _rebatch(feeds: Iterator[Feed], batch_size: int, desc: str) -> Iterator[Feed]:
    """Cut a stream of feeds into batches of exactly ``batch_size`` rows (the last may be short).

    Feeds already of the right size pass through without a copy; others are buffered, concatenated
    and split, so memory is at most about two batches.
    """
    buffer: list[Feed] = []
    held = 0
    for feed in feeds:
        rows = _rows(feed, desc)
        if not buffer and rows == batch_size:
            yield feed
            continue
        buffer.append(feed)
        held += rows
        while held >= batch_size:
            merged = {k: np.concatenate([f[k] for f in buffer]) for k in buffer[0]}
            yield {k: v[:batch_size] for k, v in merged.items()}
            rest = {k: v[batch_size:] for k, v in merged.items()}
            held -= batch_size
            buffer = [rest] if held else []
    if held:
        yield {k: np.concatenate([f[k] for f in buffer]) for k in buffer[0]}


def _fixed_batch(inputs: ModelInputs) -> int | None:
    dims = {i.shape[0] for i in inputs if i.shape and i.shape[0] is not None}
    return dims.pop() if len(dims) == 1 else None


def _iterate(source: _Source, inputs: ModelInputs, batch_size: int | None) -> Iterator[Feed]:
    fixed = _fixed_batch(inputs)
    stacked = isinstance(source, (_StackedSource, _NpzSource))
    if batch_size is not None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if fixed is not None and batch_size != fixed:
            raise FeedShapeError(
                f"batch_size={batch_size} cannot be used: the model fixes the batch dimension (axis 0) "
                f"at {fixed} ({'; '.join(i.describe() for i in inputs)})"
            )
    elif stacked and fixed is not None:
        batch_size = fixed  # stacked samples are cut to the model's own batch size
    feeds = source.feeds(inputs, batch_size)
    if batch_size is not None and not stacked:
        feeds = _rebatch(feeds, batch_size, source.desc)
    empty = True
    watch = _FiniteWatch()
    for feed in feeds:
        if batch_size is not None and fixed is not None and _rows(feed, source.desc) != fixed:
            log.warning(
                "%s: dropping the last %d sample(s): the model fixes the batch size at %d",
                source.desc, _rows(feed, source.desc), fixed,
            )
            continue
        empty = False
        watch.add(feed, source.current or source.desc)
        yield feed
    if empty:
        raise EmptyCalibrationDataError(f"calibration data is empty: {source.desc} yielded no samples")
    watch.finish(source.desc)


class NonFiniteDataError(CalibrationDataError):
    """An input's calibration data holds no finite value at all (every value NaN or ±Inf)."""


class _FiniteWatch:
    """Counts NaN/Inf per float input over a pass.

    Why: statistics ignore non-finite values, so data that is all NaN would calibrate nothing and
    give scale 1.0 and a NaN report without a word. All non-finite is an error naming the input
    and where the data came from; some non-finite values are a warning with the count.
    """

    def __init__(self) -> None:
        self.total: dict[str, int] = {}
        self.bad: dict[str, int] = {}
        self.where: dict[str, list[str]] = {}

    def add(self, feed: Feed, where: str) -> None:
        for name, array in feed.items():
            if array.dtype.kind != "f" or array.size == 0:
                continue
            bad = int(array.size - np.count_nonzero(np.isfinite(array)))
            self.total[name] = self.total.get(name, 0) + array.size
            if bad:
                self.bad[name] = self.bad.get(name, 0) + bad
                places = self.where.setdefault(name, [])
                if where not in places:
                    places.append(where)

    def finish(self, desc: str) -> None:
        for name, bad in self.bad.items():
            places = self.where[name]
            shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
            if bad == self.total[name]:
                raise NonFiniteDataError(
                    f"calibration data for input {name!r} is all NaN/Inf ({bad} values) in {shown}; "
                    "no statistics can be computed from it"
                )
            log.warning(
                "calibration data for input %r holds %d NaN/Inf values of %d (%.3g%%) in %s; statistics ignore them",
                name, bad, self.total[name], 100.0 * bad / self.total[name], shown,
            )


def rereadable(data: Any, model_inputs: InputsLike) -> bool:
    """Whether ``data`` can be read more than once (see the module doc: not an iterator, not a
    ``get_next()`` reader without ``rewind()``). Reads nothing."""
    return _open(data, _as_inputs(model_inputs)).reiterable


def rewind(data: Any) -> None:
    """Prepare a second pass over ``data``: a ``get_next()`` reader's ``rewind()``; other rereadable
    sources need nothing (each :func:`as_feed_iterator` starts afresh)."""
    again = getattr(data, "rewind", None)
    if callable(getattr(data, "get_next", None)) and callable(again):
        again()


def as_feed_iterator(data: Any, model_inputs: InputsLike, batch_size: int | None = None) -> Iterator[Feed]:
    """Stream checked feed dicts from any supported calibration source (see the module doc).

    ``batch_size`` None keeps the source's own batches: feeds from a reader or an iterable and the
    files of a folder pass unchanged, while stacked sources (one ``.npz``/``.npy``, an array, a dict
    of arrays), which have no batches of their own, yield one sample per feed (axis 0 kept, length
    1; or the model's batch size where it fixes axis 0). With ``batch_size`` every feed has
    exactly that many samples along axis 0 except possibly the last, which is dropped with a
    warning when the model fixes its batch dimension (a ``batch_size`` other than that fixed size
    is a :class:`FeedShapeError`). Every feed is
    checked with :func:`check_feed`; errors name the reader/file/item. A source that yields nothing
    raises :class:`EmptyCalibrationDataError` (a ValueError) when the iterator is exhausted.

    This reads the source once.
    """
    inputs = _as_inputs(model_inputs)
    return _iterate(_open(data, inputs), inputs, batch_size)
