"""Block-aligned subsamples of activations: what the range guard measures, at a bounded cost.

The range guard (:mod:`.guard`) simulates every shared-scale activation with its format's NumPy
reference and measures each channel's SQNR. On a detector at 800×608 that was 2-4 samples of
every activation in the network, run through the block-format reference at about half a
microsecond per element: 115 of the 147 s an MX9 quantization of a 1.9 M-parameter model took,
and most of its 3 GB peak (the activations of all samples were held at once; bench/RESULTS.md,
"Quantize time and memory (issue 26)").

What the guard needs is every channel along the axes it measures, and enough positions per
channel to estimate its SQNR, not every position. :func:`subsample` keeps the protected axes
whole and thins the others to evenly spread indices. Its first check quantizes along a protected
axis (the block axis; integer quantizers are element-wise), so any subset of the other axes is
exact: the quantized subsample is the subsample of the quantized tensor. Only when it tries
blocks along another axis (``block-axis``, for tensors already flagged) does it need whole blocks
along the thinned axes: then ``run=RUN`` keeps runs of :data:`RUN` consecutive indices, each
starting at a multiple of :data:`RUN`; every block (sizes 8, 16, 32; sub-blocks 2) starts at a
multiple of its size from index 0, so it lies wholly inside one run or wholly outside them all.
A test holds both forms exact.
"""

from __future__ import annotations

from typing import Collection

import numpy as np

#: run length (elements) kept together along a thinned axis when blocks may run along it; a
#: multiple of every block size the block formats use on activations (BFP 8/16, MX 32).
RUN = 32
#: elements per tensor (all kept samples together) the guard measures at most, where the
#: protected axes allow it (they are never thinned: their extents, times ``run`` per thinned
#: axis, are the floor)
MAX_ELEMENTS = 1 << 16


def run_indices(length: int, keep_runs: int, run: int = RUN) -> np.ndarray:
    """Indices of ``keep_runs`` runs of ``run`` consecutive indices, each starting at a multiple of
    ``run``, spread evenly over ``range(length)``."""
    runs = -(-length // run)
    keep_runs = max(1, min(runs, keep_runs))
    starts = np.unique(np.linspace(0, runs - 1, keep_runs).round().astype(np.int64)) * run
    return np.concatenate([np.arange(s, min(s + run, length)) for s in starts])


def subsample_plan(shape: tuple[int, ...], protect: Collection[int], budget: int, run: int = 1) -> list[np.ndarray | None]:
    """Per axis, the indices kept (None: the whole axis) so that the kept size is at most ``budget``
    where the unprotected axes can give that much. Depends on the shape only, so every sample of
    one shape is thinned alike (their subsamples concatenate)."""
    rank = len(shape)
    protected = {a % rank for a in protect} if rank else set()
    kept = list(shape)
    picks: list[np.ndarray | None] = [None] * rank
    while int(np.prod(kept, dtype=np.int64)) > budget:
        free = [a for a in range(rank) if a not in protected and kept[a] > run]
        if not free:
            break
        axis = max(free, key=lambda a: kept[a])
        others = int(np.prod(kept, dtype=np.int64)) // kept[axis]
        want = max(1, budget // max(others, 1))  # elements along ``axis`` that fit
        picks[axis] = run_indices(shape[axis], max(1, want // run), run)
        kept[axis] = len(picks[axis])
        protected.add(axis)  # thinned once, to the size that fits; go on with the next axis
    return picks


def subsample(x: np.ndarray, protect: Collection[int], budget: int = MAX_ELEMENTS, run: int = 1) -> np.ndarray:
    """``x`` with its unprotected axes thinned to runs of ``run`` indices (1: single positions;
    :data:`RUN`: whole blocks along every axis; see the module docstring); ``x`` itself when it
    fits ``budget`` already, a copy otherwise (the full tensor can go)."""
    picks = subsample_plan(tuple(x.shape), protect, budget, run)
    for axis, index in enumerate(picks):
        if index is not None:
            x = np.take(x, index, axis=axis)
    return x
