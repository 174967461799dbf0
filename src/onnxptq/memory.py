"""Give memory freed by a finished stage back to the operating system (peak RSS, issue 26 item 4).

Why: each stage of a quantization opens its own onnxruntime session (calibration, the held-out
float run, the range guard's float run, finish), and each one's buffers are freed when it ends.
glibc's ``malloc`` keeps freed memory in its heaps for reuse instead of returning it, and the next
stage's allocations rarely fit the holes exactly (its dynamic mmap threshold also rises after the
first large free, moving later large buffers into those heaps): RSS then only ratchets up, and the
process's peak is the sum of stages rather than the largest one. On PP-OCRv4 rec A8W8 the RSS after
calibration went from ~308 to ~252 MiB with ``malloc_trim(0)``, and after the guard from ~337 to
~274 (bench/RESULTS.md, "Quantize time and memory (issue 26)").

``collect=True`` first runs Python's cycle collector: the preparation passes build an ``onnx_ir``
graph whose nodes and values refer to each other, so the whole graph, with its copies of the
weights, is a reference cycle that outlives the pass until the collector's next full run
(PP-OCRv4 rec: ~29 MiB of dead weights through calibration; bench/RESULTS.md, issue 26 item 4,
branch recmem). A full collection costs ~45 ms of CPU in a quantizing process (many live
objects), a visible share of a small model's quantization, so it is asked for where such cycles
are known to be left and large.

:func:`release_freed` is called between stages, where nothing large is alive. It changes no value:
it only frees what nothing can reach and tells the allocator to unmap the free pages of its heaps.
The trim is a no-op where the C library is not glibc (macOS, Windows, musl), and costs a few
milliseconds.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import sys

log = logging.getLogger(__name__)

__all__ = ["release_freed", "share_malloc_arena"]


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc, or None where the C library is another (or none can be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - only glibc has it (musl does not)
    except (OSError, AttributeError):
        return None
    return libc


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where there is none."""
    libc = _libc()
    if libc is None:
        return None
    trim = libc.malloc_trim
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_freed(collect: bool = False) -> bool:
    """Return the C heap's free pages to the OS (glibc ``malloc_trim(0)``), after collecting
    unreachable reference cycles when ``collect``; True when the pages could be returned."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


#: glibc's ``mallopt`` parameter number of ``M_ARENA_MAX`` (malloc.h)
_M_ARENA_MAX = -8


@functools.lru_cache(maxsize=1)
def share_malloc_arena() -> bool:
    """Have threads that first allocate from now on share glibc's main malloc arena
    (``mallopt(M_ARENA_MAX, 1)``); True when set. Once per process; left alone where the user set
    ``MALLOC_ARENA_MAX`` (their choice stands) and where the C library is not glibc.

    Why: a quantization's sessions run on threads (onnxruntime's intra-op pools, two runs in flight
    in :func:`onnxptq.sessions.run_feeds`), and glibc gives each new thread an arena of its own
    (up to 8 per core). What a session allocates there, and the outputs it returns, are freed
    later from the main thread into that thread's arena, where only that thread reuses them:
    each stage's and each repair candidate's buffers then sat in arenas no later stage allocated
    from, :func:`release_freed` returned little of them, and the process's peak grew with every
    candidate. PP-OCRv4 rec A8W8 with its repair (three candidates): peak RSS 345-360 MiB with
    glibc's default arenas, 338 with two, 307 with one, at the same CPU time and with the same
    output bytes (bench/RESULTS.md, branch recmemory). onnxruntime allocates through its own
    arena, so its threads rarely take the shared lock.

    The setting is process-wide and stays (glibc fixes its arena limit the first time a thread
    needs one), so only the owner of the process makes it: the ``onnxptq`` command does at its
    start (a batch job), and a script that quantizes calls this itself, before its first session.
    :func:`onnxptq.quantize` never does: a library must not change the allocator of the
    application that embeds it (a server's inference threads would then contend for one lock).
    Where the user set ``MALLOC_ARENA_MAX``, their choice stands."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc = _libc()
    if libc is None:
        return False
    try:
        done = libc.mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(1)) == 1
    except AttributeError:  # pragma: no cover - glibc always has mallopt
        return False
    log.debug("malloc: threads share the main arena (M_ARENA_MAX=1): %s", done)
    return done
