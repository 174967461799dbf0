"""The block view shared by every block format: a tensor as blocks of ``block_size`` along one axis.

BFP, the shared-microexponent MX formats, the OCP MX formats and finetuning's torch twins of them
all quantize a tensor as rows of blocks along ``axis``; the last block of a row is zero-padded.
:func:`to_blocks` makes that view ([..., blocks, block_size], the axis moved last) and
:func:`from_blocks` undoes it. They take NumPy arrays or torch tensors (by their methods, so this
module needs no torch), so the layout rule is written once for the references and for finetuning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BlockView:
    """How :func:`from_blocks` restores a tensor: its blocked axis, length and padded shape."""

    axis: int
    length: int
    padded_shape: tuple[int, ...]


def _move(x: Any, source: int, destination: int) -> Any:
    return x.movedim(source, destination) if hasattr(x, "movedim") else np.moveaxis(x, source, destination)


def to_blocks(x: Any, axis: int, block_size: int) -> tuple[Any, BlockView]:
    """``x`` with ``axis`` moved last, zero-padded to whole blocks, as ``[..., n_blocks, block_size]``.

    ``axis`` must already be normalised (``0 <= axis < x.ndim``). The padding is exact zeros, which
    every block format ignores (a zero never raises a block's maximum).
    """
    moved = _move(x, axis, -1)
    length = int(moved.shape[-1])
    n_blocks = -(-length // block_size)
    if n_blocks * block_size == length:
        padded = moved
    else:
        shape = tuple(moved.shape[:-1]) + (n_blocks * block_size,)
        padded = moved.new_zeros(shape) if hasattr(moved, "new_zeros") else np.zeros(shape, moved.dtype)
        padded[..., :length] = moved
    blocks = padded.reshape(tuple(moved.shape[:-1]) + (n_blocks, block_size))
    return blocks, BlockView(axis, length, tuple(padded.shape))


def max_last(a: np.ndarray) -> np.ndarray:
    """``a.max(axis=-1)`` (NumPy), by halving when the axis is short: NumPy reduces a short last
    axis row by row (MX9's sub-blocks of 2: 1.6M exponents took 36 ms against 2.5 by one
    ``maximum`` of the two halves; 8: 8.1 against 6.9 ms; from 16 on ``max`` is faster). A maximum
    is exact in any order, so the result is the same array."""
    if a.shape[-1] >= 16 or a.shape[-1] == 0:
        return a.max(axis=-1)
    while a.shape[-1] > 1:
        width, half = a.shape[-1], a.shape[-1] // 2
        folded = np.maximum(a[..., :half], a[..., half:2 * half])
        a = np.concatenate([folded, a[..., 2 * half:]], axis=-1) if width % 2 else folded
    return a[..., 0]


def from_blocks(blocks: Any, view: BlockView) -> Any:
    """The tensor of :func:`to_blocks` back in its own layout: padding dropped, the axis in place."""
    return _move(blocks.reshape(view.padded_shape)[..., : view.length], -1, view.axis)
