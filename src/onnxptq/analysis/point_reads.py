"""Landmark outputs read as points: a sample holds when its points' mean move is small against the face's size.

Why: MediaPipe's face mesh (bench/newmodels.py, ``mp_face_mesh``) writes ``points`` [1, 468, 3],
absolute crop coordinates of 40-175 px. Under MXFP8_E4M3 only half of 32 crops kept the 468 points
within 2 % of float's inter-ocular distance (the package's read-out) while the output's cosine was
0.99995: the common offset of ~96 px hides a 2 px error, and centred on each face the x/y cosine is
still 0.99936 (A8W8, which holds, 0.99985), so no cosine floor separates them (bench/RESULTS.md,
"The sixteenth round of outside models"). What a landmark's user reads is each point's position,
at a precision relative to the face's size; the graph cannot show that an output is points, so
the user declares it (``--floor-reading points=points:0.02``, config/floor_readings.py).

How the shape is read: the output's last axis holds D = 2 or 3 coordinates of K points on the axis
before it (``[..., K, D]``); a flat ``[..., K*D]`` output is read so where D is declared
(``points:TOL,D``); D = 2 declared on a last axis of 3 reads each point's first two coordinates
(x, y of x, y, z: the mesh's user draws x, y, and its z is a relative depth). A 4-D output whose axis 1
is the declared D and whose last axis is not is a channel-first grid of points ``[N, D, H, W]``
(UVDoc's 2 x 45 x 31 page grid that a GridSample reads, bench/RESULTS.md "The twentieth round"): its
H x W points are one set per sample. Every leading axis indexes samples (a batch of faces). Anything else (a last axis of other than D, fewer than 2
points, a last axis D does not divide) is a :class:`UsageError` naming the output, its shape and
the declaration that would read it.

What a sample's agreement is: its points' mean move (the landmark literature's normalized mean
error, and the face-mesh package's own read-out) at most ``TOL`` × the float point set's RMS
radius about its centroid, ``sqrt(mean_k |p_k − c|²)``. Not every point's move: on the mesh the
worst of 468 points moves 3.8 % of the radius on the median crop under A8W8, whose crops all keep
the package's read-out (bench/RESULTS.md, "landmarks"), so a worst-point rule breaks what the
user reads as kept. Not the bounding box's diagonal: that is two
extreme points' (a chin and a forehead), and it changes by up to √2 as the same face turns in the
crop; the RMS radius is every point's and does not move with rotation or translation, only with the
set's scale, which is what a landmark's precision is relative to (an inter-ocular distance is the
same kind of size, but which points are the eyes is the model's own). On the face mesh the (x, y, z)
radius is 0.78 inter-ocular distances, so the package's 2 % of the IOD is about 2.5 % of it. The
share of samples that agree is held against the top-1 floor (floor._judge_declared_points).
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError

__all__ = ["point_sets", "points_agree"]

#: the coordinates a point may have
DIMS = (2, 3)


def point_sets(name: str, values: np.ndarray, dims: int | None = None, axis: int | None = None) -> np.ndarray:
    """``values`` of output ``name`` as ``[samples, K, D]`` float64 (module docstring: how the shape is
    read); raises :class:`UsageError` naming the output and its shape where it cannot be. ``axis``: the
    coordinates' axis of a grid found by structure (analysis/coordinates.py), every sample's points one set."""
    arr = np.asarray(values)
    shape = tuple(arr.shape)
    if axis is not None and arr.ndim >= 2 and dims is not None and shape[axis] == dims:
        return np.moveaxis(arr, axis, -1).reshape(shape[0], -1, dims).astype(np.float64)
    last = shape[-1] if shape else 0
    if dims is None:
        if last not in DIMS or arr.ndim < 2:
            raise UsageError(f"floor_output_reading declares output {name!r} points, but its shape {shape} does not end "
                             f"in [K, 2] or [K, 3]: for a flat [.., K*D] output or a channel-first grid [N, D, H, W] "
                             f"declare D ('points:TOL,2' or 'points:TOL,3')")
        sets = arr.reshape(-1, shape[-2], last)
    elif last == dims and arr.ndim >= 2:
        sets = arr.reshape(-1, shape[-2], dims)
    elif dims == 2 and last == 3 and arr.ndim >= 2:  # x, y of x, y, z
        sets = arr.reshape(-1, shape[-2], 3)[..., :2]
    elif arr.ndim == 4 and shape[1] == dims:  # a channel-first grid [N, D, H, W]: H*W points a sample
        sets = np.moveaxis(arr, 1, -1).reshape(shape[0], -1, dims)
    elif last and last % dims == 0:
        sets = arr.reshape(-1, last // dims, dims)
    else:
        raise UsageError(f"floor_output_reading declares output {name!r} points of {dims} coordinates, but its last axis "
                         f"({shape}) is not a multiple of {dims}")
    if sets.shape[1] < 2:
        raise UsageError(f"floor_output_reading declares output {name!r} points, but its shape {shape} holds "
                         f"{sets.shape[1]} point per sample: a point set's size (its RMS radius) needs at least 2")
    return sets.astype(np.float64)


def points_agree(name: str, reference: np.ndarray, candidate: np.ndarray, tolerance: float,
                 dims: int | None = None, axis: int | None = None) -> tuple[int, int]:
    """``(samples whose points' mean move is <= tolerance × float's RMS radius, samples)`` of one feed's
    output ``name`` (module docstring). A candidate value that is not finite disagrees; a float set of
    zero radius (every point the same) agrees only where nothing moved. With ``axis`` (coordinates found by
    structure: analysis/coordinates.py) ``tolerance`` is the mean move itself, in the output's units (a pixel)."""
    r, g = point_sets(name, reference, dims, axis), point_sets(name, candidate, dims, axis)
    radius = np.ones(r.shape[0]) if axis is not None else np.sqrt(((r - r.mean(1, keepdims=True)) ** 2).sum(-1).mean(-1))
    with np.errstate(invalid="ignore"):
        moved = np.linalg.norm(g - r, axis=-1).mean(-1)
    agree = np.isfinite(moved) & (moved <= tolerance * radius)
    return int(agree.sum()), int(r.shape[0])
