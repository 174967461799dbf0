"""``get_library_path``: a custom-op library for the reference documents' inference snippet.

The documents tell users to run::

    sess_options.register_custom_ops_library(get_library_path(device))

Our models need no library: every format is standard ONNX ops or an ONNX function embedded in the
model. But ``register_custom_ops_library`` needs a real shared library that exports
``RegisterCustomOps(OrtSessionOptions*, const OrtApiBase*)``; onnxruntime dlopens it and calls
that symbol. What we checked (onnxruntime 1.31, Linux):

* onnxruntime's own ``libonnxruntime_providers_shared.so`` loads but exports no
  ``RegisterCustomOps``: "Failed to get symbol RegisterCustomOps" — unusable, as is
  ``libonnxruntime.so`` itself.
* A library whose ``RegisterCustomOps`` registers nothing and returns success works, for any
  execution provider, and leaves the session exactly as if the line were absent.

So we carry that library as source (:data:`NOOP_SOURCE`, four lines of C) and build it once with
the system C compiler into a per-user cache, much as the reference tool JIT-builds its own.
Nothing compiled ships in the wheel. Without a C compiler the call raises RuntimeError saying that
the ``register_custom_ops_library`` line can simply be dropped for onnxptq models.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["LIBRARY_STEM", "NOOP_SOURCE", "get_library_path", "is_own_library"]

#: The one symbol onnxruntime looks up; returning NULL (no OrtStatus) means success.
NOOP_SOURCE = """\
/* onnxptq: a custom-op library that registers no operators (see onnxptq/compat/library.py). */
#if defined(_WIN32)
#define ONNXPTQ_EXPORT __declspec(dllexport)
#else
#define ONNXPTQ_EXPORT __attribute__((visibility("default")))
#endif
struct OrtStatus;
ONNXPTQ_EXPORT struct OrtStatus* RegisterCustomOps(void* options, const void* api_base) {
  (void)options;
  (void)api_base;
  return 0;
}
"""

LIBRARY_STEM = "onnxptq_noop_custom_ops"
_DEVICES = ("cpu", "gpu", "cuda", "rocm", "hip")


def _cache_dir() -> Path:
    """``$ONNXPTQ_CACHE_DIR``, else ``$XDG_CACHE_HOME/onnxptq``, else ``~/.cache/onnxptq``."""
    if os.environ.get("ONNXPTQ_CACHE_DIR"):
        return Path(os.environ["ONNXPTQ_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "onnxptq"


def _suffix() -> str:
    if sys.platform == "win32":
        return ".dll"
    if sys.platform == "darwin":
        return ".dylib"
    return ".so"


def _library_name() -> str:
    """Name keyed by source and platform, so a changed source or machine never reuses a stale build."""
    digest = hashlib.sha256(f"{NOOP_SOURCE}{platform.machine()}{sys.platform}".encode()).hexdigest()[:12]
    return f"{LIBRARY_STEM}-{digest}{_suffix()}"


def _compiler() -> str | None:
    candidates = [os.environ.get("CC"), sysconfig.get_config_var("CC"), "cc", "gcc", "clang"]
    for cand in candidates:
        if not cand:
            continue
        exe = shutil.which(cand.split()[0])
        if exe:
            return exe
    return None


def _build(target: Path) -> None:
    """Compile :data:`NOOP_SOURCE` to ``target`` atomically (a temp file renamed into place)."""
    if sys.platform == "win32":
        raise RuntimeError(
            "get_library_path: building the no-op custom-op library is not supported on Windows. onnxptq models "
            "need no custom-op library: drop the register_custom_ops_library(...) line."
        )
    cc = _compiler()
    if cc is None:
        raise RuntimeError(
            "get_library_path: no C compiler found (set CC) to build the no-op custom-op library once. onnxptq "
            "models need no custom-op library: drop the register_custom_ops_library(...) line instead."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "noop.c"
        src.write_text(NOOP_SOURCE)
        out = Path(tmp) / target.name
        cmd = [cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"get_library_path: building the no-op library failed ({' '.join(cmd)}):\n{proc.stderr}")
        os.replace(out, target)
    log.info("built the no-op custom-op library %s", target)


def get_library_path(device: str = "CPU") -> str:
    """Path of a shared library for ``SessionOptions.register_custom_ops_library``; it registers no ops.

    ``device`` is accepted as in the reference tool (CPU, GPU, CUDA, ROCM, case-insensitive); the same
    library serves every execution provider because it registers nothing. Built on first use.
    """
    if not isinstance(device, str) or device.lower() not in _DEVICES:
        raise ValueError(f"get_library_path: unknown device {device!r}; expected one of CPU, GPU, CUDA, ROCM")
    target = _cache_dir() / _library_name()
    if not target.exists():
        try:
            _build(target)
        except OSError:  # cache not writable (read-only home, sandbox): fall back to the temp folder
            target = Path(tempfile.gettempdir()) / f"onnxptq-{os.getuid() if hasattr(os, 'getuid') else 0}" / _library_name()
            if not target.exists():
                _build(target)
    return str(target)


def is_own_library(path: str | os.PathLike) -> bool:
    """True when ``path`` names a library built by :func:`get_library_path` (which registers nothing)."""
    return Path(path).name.startswith(LIBRARY_STEM + "-")
