"""Round to nearest: each block's scale (and zero point) from its own extremes.

The rule is onnxruntime's ``MatMulNBitsQuantizer`` default (see :mod:`onnxptq.formats.int_blocks`),
so RTN here and there produce the same weights; the other methods start from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formats import int_blocks
from ..formats.int_blocks import BlockFormat


@dataclass
class Solved:
    """A quantized weight in the ``[K, N]`` view: integers, ``[Kb, N]`` scales and zero points."""

    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray | None
    fmt: BlockFormat

    def dequantized(self) -> np.ndarray:
        return int_blocks.dequantize(self.q, self.scale, self.zero_point, self.fmt)

    def compact(self) -> "Solved":
        """The same weight with ``q`` in one byte per value (int8, or uint8 for unsigned 8-bit):
        every layer's integers are held until the model is written, and int16/int64 would double
        or octuple what a large model's quantized weights take in memory."""
        kind = np.uint8 if (not self.fmt.symmetric and self.fmt.bits == 8) else np.int8
        return Solved(np.asarray(self.q).astype(kind), self.scale, self.zero_point, self.fmt)


def solve(w: np.ndarray, fmt: BlockFormat) -> Solved:
    """RTN of ``w`` ``[K, N]``."""
    scale, zp = int_blocks.rtn_params(w, fmt)
    return Solved(int_blocks.quantize(w, scale, zp, fmt), scale, zp, fmt)
