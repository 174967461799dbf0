"""onnxruntime custom-op libraries for every session the pipeline opens.

A model with nodes of a custom domain (a user's own op, built as an onnxruntime custom-op
library) can be calibrated only if every session that runs it registers that library: the
calibration runs, the check of the quantized model, the report. Those sessions are opened in
several modules, deep below the entry point; a context variable set once by
:func:`onnxptq.api.quantize` (from ``CalibrationOptions.custom_op_libraries``) reaches them all
without threading one more argument through every signature, and stays correct across threads
started inside it only where they copy the context (ours do not start any that open sessions).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .errors import InputNotFoundError, UsageError

log = logging.getLogger(__name__)

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


def register(options: Any) -> Any:
    """Register the libraries in force on ``options`` (an ``onnxruntime.SessionOptions``); returns it."""
    for lib in _LIBRARIES.get():
        try:
            options.register_custom_ops_library(lib)
        except Exception as exc:  # onnxruntime raises its own Fail/RuntimeException types
            raise UsageError(f"onnxruntime cannot load the custom-op library {lib}: {' '.join(str(exc).split())}") from exc
    return options


def session_options() -> Any:
    """A fresh ``SessionOptions`` with the libraries in force registered."""
    import onnxruntime as ort

    return register(ort.SessionOptions())
