"""Limit NumPy's BLAS threads while the weight-only methods run.

Why: GPTQ and AWQ make many small LAPACK/BLAS calls (Cholesky of K×K, K×K·K×N products). With
OpenBLAS's threads, each call wakes and waits for its pool; on a machine whose cores are busy
(other processes, onnxruntime's pool) that waiting dominated: GPTQ on the 2-layer test Llama took
12.6 s with NumPy's default threads and 0.65 s with one (same load, same process, measured with
``OPENBLAS_NUM_THREADS``). The products are too small to gain from a second thread anyway.

Uses ``threadpoolctl`` when installed; otherwise the ``*set_num_threads*`` entry of the OpenBLAS
library NumPy loaded (found in ``/proc/self/maps``); elsewhere it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


def _openblas() -> tuple[object, object] | None:
    try:
        import numpy  # noqa: F401  (loads its BLAS)

        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            return setter, getter
    return None


@contextlib.contextmanager
def blas_threads(count: int = 1) -> Iterator[None]:
    """Inside the block NumPy's BLAS uses at most ``count`` threads."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        with threadpool_limits(limits=count, user_api="blas"):
            yield
        return
    found = _openblas()
    if found is None:
        yield
        return
    setter, getter = found
    before = int(getter())
    setter(int(count))
    try:
        yield
    finally:
        setter(before)
