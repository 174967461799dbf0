"""A disk cache for the test suite's expensive, deterministic artefacts (rendered data, float references).

Why: several test files render the same PP-OCR lines and score the float model on them (the float
CER on 200 lines costs as much as scoring a quantized model), and under ``pytest -n 2`` those files
run in different worker processes, so a fixture cannot share the result. The artefacts are pure
functions of their inputs, so they are kept under ``~/.cache/onnxptq/artefacts`` keyed by
everything that can change them: the caller's key (model file digest, counts, seeds), the source of
the testkit module that makes them, and the versions of onnxruntime, numpy and Pillow. A changed
renderer, model or runtime gives a new key, never a stale value; ``ONNXPTQ_NO_ARTEFACT_CACHE=1``
turns the cache off (everything is computed afresh).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import pickle
import tempfile
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_VERSIONED = ("onnxruntime", "numpy", "pillow", "onnx")


def cache_dir() -> Path:
    """Where artefacts live: next to the model cache of testkit.models."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onnxptq" / "artefacts"


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes: a model is keyed by its content, not its path."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _versions() -> dict[str, str]:
    out = {}
    for dist in _VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def _key(name: str, key: dict[str, Any], producers: tuple[ModuleType, ...]) -> str:
    sources = [hashlib.sha256(inspect.getsource(m).encode()).hexdigest() for m in producers]
    blob = json.dumps({"name": name, "key": key, "sources": sources, "versions": _versions()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cached(name: str, key: dict[str, Any], compute: Callable[[], T], *, producers: tuple[ModuleType, ...] = ()) -> T:
    """``compute()``, or its value from an earlier run with the same ``name``, ``key`` and producers.

    ``producers`` are the modules whose code makes the value (their source is part of the key). The
    value is written to a temporary file and renamed, so a concurrent worker never reads half a file;
    two workers computing the same value at once both write the same bytes.
    """
    if os.environ.get("ONNXPTQ_NO_ARTEFACT_CACHE"):
        return compute()
    path = cache_dir() / f"{name}-{_key(name, key, producers)}.pkl"
    if path.is_file():
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception as exc:  # a damaged cache file is recomputed, never trusted
            log.warning("artefact cache %s unreadable (%s): recomputing", path, exc)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return value
