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

from typing import Any, Collection, Sequence

import numpy as np
from onnx import TensorProto

#: run length (elements) kept together along a thinned axis when blocks may run along it; a
#: multiple of every block size the block formats use on activations (BFP 8/16, MX 32).
RUN = 32
#: elements per tensor (all kept samples together) the guard measures at most (16 Ki: a flushed
#: channel sits near 0 dB, a healthy one near 40, so tens of positions a channel tell them apart;
#: 64 Ki held 31 MiB of values on PP-OCRv4 rec and cost 4x the simulation), where the
#: protected axes allow it (they are never thinned: their extents, times ``run`` per thinned
#: axis, are the floor)
MAX_ELEMENTS = 1 << 14


def run_indices(length: int, keep_runs: int, run: int = RUN) -> np.ndarray:
    """Indices of ``keep_runs`` runs of ``run`` consecutive indices, each starting at a multiple of
    ``run``, spread evenly over ``range(length)``: run ``i`` is the one at the middle of the ``i``-th
    of ``keep_runs`` equal stretches, so a single kept run is the axis' middle, never its first
    index. (Picked from index 0, one position of a feature map was its top border row, where a
    zero-padded convolution's channels are near silent: on PP-OCRv4 rec the guard read 84 of 504
    channels of a split layer's input at 0 dB there and left a quantized Conv float.)"""
    runs = -(-length // run)
    keep_runs = max(1, min(runs, keep_runs))
    starts = ((np.arange(keep_runs) + 0.5) * runs / keep_runs).astype(np.int64) * run
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


#: positions kept per thinned axis by :func:`thin_in_graph` (before :func:`subsample` takes the rest)
IN_GRAPH_POSITIONS = 32


def thin_in_graph(graph: Any, name: str, rank: int, protect: Collection[int],
                  positions: int = IN_GRAPH_POSITIONS, dims: Sequence[int | None] | None = None,
                  elem_type: int | None = None) -> tuple[str, list[Any]]:
    """The nodes that thin tensor ``name`` (of ``rank``) inside onnxruntime: every axis but 0 and
    the ``protect``-ed ones keeps every ``floor(d / positions) + 1``-th index (at most
    ``positions`` of them), computed from the runtime shape. Their constants go into ``graph``'s
    initializers; returns the thinned tensor's name (to fetch instead of ``name``) and the nodes,
    for the caller to place right after ``name``'s producer: onnxruntime runs nodes in list
    order, and appended at the end they kept every whole tensor alive to the end of the run.

    Why in the graph: a fetched graph output is allocated on its own and stays alive to the end
    of the run, so fetching every guarded activation whole held all of one sample's activations
    at once (an 800×608 detector: about 0.6 GB); thinned in the graph, the full tensors stay
    internal and onnxruntime reuses their buffers. Single positions only: the points form, exact
    for quantizers whose blocks run along a protected axis (module docstring). ``dims``: the
    tensor's static extents where known (None: unknown), for a single Slice with constant steps;
    ``elem_type``: its ONNX element type where known (a float32 feature map is thinned by a
    pooling node instead, :func:`_pool_thinning`)."""
    from onnx import helper, numpy_helper

    if rank == 0:  # a scalar (shape arithmetic cast to float: hama's G2P encoder): nothing to thin, and a % 0 raised
        return name, []
    protected = {a % rank for a in protect}
    axes = [a for a in range(1, rank) if a not in protected]
    if not axes:
        return name, []
    stem = f"{name}__guard_thin"
    if dims is not None and len(dims) == rank and all(isinstance(dims[a], int) and dims[a] > 0 for a in axes):
        steps = [dims[a] // positions + 1 for a in axes]
        if rank == 4 and set(axes) <= {2, 3} and elem_type == TensorProto.FLOAT:
            return _pool_thinning(name, stem, dict(zip(axes, steps)))
        # Every thinned extent known: one Slice with the same steps as constants (the same
        # indices; a shape subgraph per axis is ~9 nodes a tensor that onnxruntime builds and
        # optimises with the session: the calibration's, where the guard's values come from it).
        consts = {"starts": [0] * len(axes), "ends": [np.iinfo(np.int64).max] * len(axes), "axes": axes,
                  "steps": steps}
        names = []
        for key, value in consts.items():
            graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), f"{stem}_{key}"))
            names.append(f"{stem}_{key}")
        out = f"{stem}_static"
        return out, [helper.make_node("Slice", [name, *names], [out], name=f"{stem}_Slice")]
    # Extents known at run time only: the steps from the runtime shape, for every thinned axis at
    # once (Shape, Gather of those axes, Div, Add), then one Slice: 5 nodes a tensor (one Slice and
    # four per axis before: ~9 on a feature map; onnxruntime's session creation grows with them).
    # A Slice over several axes takes the same indices as one Slice per axis.
    existing = {t.name for t in graph.initializer}
    shared = {"__guard_thin_positions": np.array([positions], np.int64), "__guard_thin_one": np.array([1], np.int64)}
    for key, value in shared.items():
        if key not in existing:
            graph.initializer.append(numpy_helper.from_array(value, key))
    consts = {"axes": np.array(axes, np.int64), "starts": np.zeros(len(axes), np.int64),
              "ends": np.full(len(axes), np.iinfo(np.int64).max, np.int64)}
    for key, value in consts.items():
        graph.initializer.append(numpy_helper.from_array(value, f"{stem}_{key}"))
    shape, dim, floor, step, out = (f"{stem}_{k}" for k in ("shape", "dims", "floor", "steps", "dynamic"))
    nodes = [
        helper.make_node("Shape", [name], [shape], name=f"{stem}_Shape"),
        helper.make_node("Gather", [shape, f"{stem}_axes"], [dim], axis=0, name=f"{stem}_Dims"),
        helper.make_node("Div", [dim, "__guard_thin_positions"], [floor], name=f"{stem}_Div"),
        helper.make_node("Add", [floor, "__guard_thin_one"], [step], name=f"{stem}_Step"),
        helper.make_node("Slice", [name, f"{stem}_starts", f"{stem}_ends", f"{stem}_axes", step], [out], name=f"{stem}_Slice"),
    ]
    return out, nodes


def _pool_thinning(name: str, stem: str, steps: dict[int, int]) -> tuple[str, list[Any]]:
    """A float32 NCHW feature map thinned along H and/or W by ``AveragePool`` with a 1×1 kernel and
    the Slice's steps as strides: the same indices (``0, s, 2s, ...``: ``ceil(d / s)`` of them,
    ``ceil_mode`` 0, no pads) and the same values (the mean of one value is that value: NaN and
    ±inf pass, only a zero's sign may not, which no SQNR sees).

    Why not the Slice: onnxruntime's NCHWc layout pass (level "all", the calibration session's)
    keeps a chain of convolutions in its blocked layout and has to convert any tensor a Slice reads
    back to NCHW whole (a ``ReorderOutput`` of the full feature map), for every guarded activation
    of every calibration run, while it runs pooling in the blocked layout itself and converts only
    the thinned result. A PicoDet layout detector at 800×608 (BFP16: 93 guarded feature maps) ran
    its calibration session at 0.18 s a feed with the Slices, 0.13 with the pooling, 0.10 with
    neither (bench/RESULTS.md, issue 26, branch blocktime6). MaxPool would give the same indices
    but turns -inf into the lowest float, which the guard would then measure as a finite value."""
    from onnx import helper

    strides = [steps.get(2, 1), steps.get(3, 1)]
    out = f"{stem}_pooled"
    return out, [helper.make_node("AveragePool", [name], [out], kernel_shape=[1, 1], strides=strides,
                                  name=f"{stem}_AveragePool")]
