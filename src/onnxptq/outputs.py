"""Where outputs may go, and how they are written: nothing the user owns is ever lost.

Two jobs, both about output files:

* :func:`check_outputs` decides, before any work is done, that every output path of a command can
  be written and replaces none of the command's inputs (the model, its external-data files, the
  calibration files, a plan it reads) nor another output. Paths are compared by
  ``os.path.samefile`` where both exist (so symlinks and hard links are seen through) and by their
  resolved form otherwise. A path that ends with a separator, names a folder, or names something
  that is not a regular file (a device, a FIFO, a socket) is refused: renaming a temporary file
  over ``/dev/null`` would replace the device node.
* :func:`atomic_files` writes a file through a temporary file in the same folder and
  ``os.replace``: a failure (disk full, SIGTERM) leaves neither a partial output nor a ``*.tmp``,
  and raises :class:`SaveError` with the path and the cause in one line. The new file gets the
  mode a plain ``open()`` would give (``0666 & ~umask``), or keeps the mode of the file it replaces.
  A symlink is written through: its target is replaced, the link stays.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

from .errors import (
    OutputCollisionError,
    OutputFolderMissingError,
    OutputIsFolderError,
    OutputNotWritableError,
    OutputPathError,
    SaveError,
)

log = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


# ---------------------------------------------------------------------------------------------
# what a command reads


def model_files(model: Any) -> list[Path]:
    """The files a model path stands for: the model itself and every external-data file it names.

    A ModelProto (no file) gives nothing; a file that cannot be parsed gives just itself (its
    loader reports the problem; here we only need to know what must not be written over).
    """
    if not isinstance(model, (str, os.PathLike)):
        return []
    path = Path(model)
    files = [path]
    if not path.is_file():
        return files
    try:
        import onnx
        from onnx.external_data_helper import _get_all_tensors

        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - any parse failure: the loader will say what is wrong
        return files
    seen: set[str] = set()
    for tensor in _get_all_tensors(proto):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value not in seen:
                seen.add(entry.value)
                files.append(path.parent / entry.value)
    return files


def data_files(data: Any) -> list[Path]:
    """The files a calibration-data argument stands for: a file, or the files of a folder."""
    if not isinstance(data, (str, os.PathLike)):
        return []
    path = Path(data)
    if path.is_dir():
        try:
            return [path] + [p for p in sorted(path.iterdir()) if p.is_file()]
        except OSError:
            return [path]
    return [path]


# ---------------------------------------------------------------------------------------------
# checking outputs


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def resolve_output(output: PathLike, label: str = "output") -> Path:
    """Validate one output path and return the path of the regular file that will be written.

    A symlink resolves to its target (written through, the link stays). Raises
    :class:`OutputIsFolderError` for a folder or a path ending with a separator,
    :class:`OutputPathError` for a device/FIFO/socket, :class:`OutputFolderMissingError` and
    :class:`OutputNotWritableError` for the folder it goes into.
    """
    text = os.fspath(output)
    if not text:
        raise OutputPathError(f"the {label} path is empty")
    if text.endswith(os.sep) or (os.altsep and text.endswith(os.altsep)):
        raise OutputIsFolderError(f"{label} path {text} ends with a path separator, so it names a folder; give a file name")
    path = Path(text)
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        raise OutputIsFolderError(f"{label} path is a folder, not a file: {text}")
    if path.exists():
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise OutputPathError(f"{label} path {text} is {_kind(mode)}, not a regular file; refusing to replace it")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.exists():
        raise OutputFolderMissingError(f"{label} folder does not exist: {folder}")
    if not folder.is_dir():
        raise OutputFolderMissingError(f"{label} folder {folder} is not a folder")
    if not os.access(folder, os.W_OK):
        raise OutputNotWritableError(f"{label} folder is not writable: {folder}")
    return path


def same_path(a: PathLike, b: PathLike) -> bool:
    """True when two paths name one file: by inode where both exist, else by resolved path."""
    pa, pb = Path(a), Path(b)
    try:
        if pa.exists() and pb.exists():
            return os.path.samefile(pa, pb)
    except OSError:
        pass
    return os.path.realpath(pa) == os.path.realpath(pb)


def check_outputs(outputs: Mapping[str, PathLike | None], inputs: Mapping[str, Iterable[PathLike]]) -> dict[str, Path]:
    """Validate every output and refuse any that would replace an input or another output.

    Args:
        outputs: label (as the user knows it, e.g. ``"-o"``, ``"--plan"``) → path; None is skipped.
        inputs: label (e.g. ``"the input model"``) → the files it stands for
            (see :func:`model_files`, :func:`data_files`).

    Returns label → the resolved path to write. Raises :class:`OutputCollisionError` naming both.
    """
    resolved: dict[str, Path] = {}
    for label, output in outputs.items():
        if output is None:
            continue
        path = resolve_output(output, label)
        for in_label, files in inputs.items():
            for file in files:
                if same_path(path, file):
                    raise OutputCollisionError(
                        f"{label} path {output} is the same file as {in_label} {file}; refusing to overwrite the input"
                    )
        for other_label, other in resolved.items():
            if same_path(path, other):
                raise OutputCollisionError(f"{label} path {output} is the same file as the {other_label} path {other}; "
                                           "give each output its own file")
        resolved[label] = path
    return resolved


def check_io(outputs: Mapping[str, PathLike | None], *, models: Mapping[str, Any] = {},
             data: Mapping[str, Any] = {}, files: Mapping[str, PathLike | None] = {}) -> dict[str, Path]:
    """:func:`check_outputs` for a command: ``models`` (label → path or ModelProto) stand for their
    file and external-data files, ``data`` (label → calibration source) for its files, ``files``
    for themselves (a plan that is read, ...)."""
    inputs: dict[str, list[Path]] = {}
    for label, model in models.items():
        found = model_files(model)
        if found:
            inputs[label] = found[:1]
        if found[1:]:
            inputs[f"the external-data file of {label}"] = found[1:]
    for label, source in data.items():
        inputs[label] = data_files(source)
    for label, file in files.items():
        if file is not None:
            inputs[label] = [Path(file)]
    return check_outputs(outputs, inputs)


# ---------------------------------------------------------------------------------------------
# writing


def current_umask() -> int:
    """The process umask (read by setting and restoring it: POSIX offers no read-only call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The mode a plain ``open(path, 'w')`` leaves: the replaced file's, or 0666 & ~umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~current_umask()


class _Terminated(BaseException):
    """Raised by our SIGTERM handler inside a save, so the ``finally`` cleanup runs."""


@contextlib.contextmanager
def _cleanup_on_sigterm() -> Iterator[None]:
    """While saving, turn SIGTERM into an exception so temporaries are removed, then die of it.

    Only the main thread can own signal handlers; elsewhere the save runs without this guard.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, previous)
        log.warning("terminated during a save; temporary files removed")
        if callable(previous):
            previous(signal.SIGTERM, None)
        else:
            os.kill(os.getpid(), signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM)
    finally:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, previous)


class AtomicFiles:
    """Temporary files in the destination folder, moved into place together on success.

    ``temp(final)`` gives the temporary path to write ``final`` through; :meth:`commit` replaces
    each final path by its temporary (keeping or setting the mode); :meth:`discard` removes them.
    """

    def __init__(self) -> None:
        self.pending: list[tuple[Path, Path]] = []

    def temp(self, final: Path) -> Path:
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        os.close(fd)
        self.pending.append((Path(tmp), final))
        return Path(tmp)

    def commit(self) -> None:
        for tmp, final in self.pending:
            os.chmod(tmp, _mode_for(final))
        for tmp, final in self.pending:
            os.replace(tmp, final)
        self.pending.clear()

    def discard(self) -> None:
        for tmp, _ in self.pending:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        self.pending.clear()


@contextlib.contextmanager
def atomic_files(label: str, output: PathLike) -> Iterator[AtomicFiles]:
    """Write one or more files atomically; errors become one-line :class:`SaveError`\\ s.

    Usage::

        with atomic_files("model", out) as files:
            tmp = files.temp(out)
            write(tmp)
    """
    files = AtomicFiles()
    try:
        with _cleanup_on_sigterm():
            try:
                yield files
                files.commit()
            finally:
                files.discard()
    except OSError as exc:
        if isinstance(exc, SaveError):
            raise
        cause = exc.strerror or str(exc)
        error = SaveError(f"cannot write {label} {output}: {cause}")
        error.errno = exc.errno
        raise error from exc


def write_bytes(output: PathLike, data: bytes, *, label: str = "file") -> Path:
    """Write ``data`` to ``output`` atomically (see :func:`atomic_files`)."""
    path = resolve_output(output, label)
    with atomic_files(label, output) as files:
        files.temp(path).write_bytes(data)
    return path


def write_text(output: PathLike, text: str, *, label: str = "file") -> Path:
    """Write ``text`` (UTF-8) to ``output`` atomically."""
    return write_bytes(output, text.encode("utf-8"), label=label)
