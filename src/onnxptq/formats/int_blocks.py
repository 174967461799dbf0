"""Weight-only integer blocks (LLM int2/3/4/8 weights): the NumPy reference.

A weight ``W`` of a MatMul ``Y = X · W`` is ``[K, N]`` (K the reduction axis). It is cut into blocks
of ``block_size`` consecutive rows along K; each block of each column has one float32 scale (and,
asymmetric, one integer zero point). K need not be a multiple of the block size: the last block is
shorter, exactly as ONNX opset-21 blocked ``DequantizeLinear`` reads it and as onnxruntime's
``MatMulNBits`` pads it (its kernel ignores the padding rows, whose activations do not exist).

Storage: ``bits`` ≤ 4 live in int4 (symmetric) / uint4 (asymmetric), 8 bits in int8 / uint8, so a
3-bit weight is an int4 tensor whose values stay in [−4, 3]. Dequantization is
:func:`onnxptq.formats.integer.dequantize` (``float32(q − zp) · scale``), which is what
``DequantizeLinear`` and ``MatMulNBits`` compute, so a quantized model and this reference agree bit
for bit on the weights.

Round-to-nearest parameters (:func:`rtn_params`) follow onnxruntime's ``MatMulNBitsQuantizer``
(MLAS ``MlasQuantizeBlockwise``), so our RTN and theirs are the same weights:

* symmetric: the block's value of largest magnitude ``v`` (sign kept) maps to ``qmin`` (−8 for 4
  bits): ``scale = v / qmin``. The scale carries v's sign, so the full 2^b levels are used whichever
  sign the extreme has (a positive-only rule would waste the −8 level); ``DequantizeLinear`` and
  ``MatMulNBits`` both accept negative scales;
* asymmetric: the range widened to hold 0, ``scale = (max − min) / (2^b − 1)``,
  ``zp = clip(rint(−min / scale), 0, 2^b − 1)``;
* an all-zero block gets scale 1 (zp 0, or the midpoint asymmetric), so nothing divides by zero.

``q = clip(rint(w / scale) + zp, qmin, qmax)`` with round half to even, in float32 as
``QuantizeLinear`` does it.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


#: Bit widths with a storage form (int4/uint4 hold 2 and 3 bits; int8/uint8 hold 8).
SUPPORTED_BITS = (2, 3, 4, 8)
#: Block sizes onnxruntime's MatMulNBits and its DQ→MatMulNBits fusion accept.
SUPPORTED_BLOCK_SIZES = (16, 32, 64, 128, 256)


class BlockFormatError(ValueError):
    """An impossible weight-only block setting (bits, block size), naming the option."""


@dataclass(frozen=True)
class BlockFormat:
    """``bits`` per weight in blocks of ``block_size`` along K, symmetric (no zero point) or not."""

    bits: int = 4
    block_size: int = 128
    symmetric: bool = True

    def __post_init__(self) -> None:
        if self.bits not in SUPPORTED_BITS:
            raise BlockFormatError(f"bits={self.bits!r} is not supported; choose one of {SUPPORTED_BITS} "
                                   "(2 and 3 are stored in 4-bit integers, 8 in 8-bit)")
        if self.block_size not in SUPPORTED_BLOCK_SIZES:
            raise BlockFormatError(f"block_size={self.block_size!r} is not supported; choose a power of two "
                                   f"from 16 to 256 ({', '.join(map(str, SUPPORTED_BLOCK_SIZES))})")

    @property
    def qmin(self) -> int:
        return -(1 << (self.bits - 1)) if self.symmetric else 0

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.symmetric else (1 << self.bits) - 1

    @property
    def storage_bits(self) -> int:
        """4 or 8: the width of the integer type the values are stored in."""
        return 4 if self.bits <= 4 else 8

    @property
    def storage(self) -> str:
        """The ONNX element type name: int4/uint4/int8/uint8."""
        return ("int" if self.symmetric else "uint") + str(self.storage_bits)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype({"int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4, "int8": np.int8, "uint8": np.uint8}[self.storage])

    def blocks(self, k: int) -> int:
        """Number of blocks along a reduction axis of length ``k`` (the last one possibly short)."""
        return -(-int(k) // self.block_size)

    def label(self) -> str:
        return f"int{self.bits} {'sym' if self.symmetric else 'asym'} b{self.block_size}"


def block_view(w: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``w`` ``[K, N]`` as ``[Kb, block_size, N]`` padded with zeros, and the mask of real rows.

    Why: every method works on whole blocks at once (vectorised); the mask keeps the padding of
    a last short block out of every statistic. When K is a multiple of the block size the view
    shares ``w``'s memory (no copy).
    """
    k, n = w.shape
    kb = -(-k // block_size)
    mask = np.zeros((kb * block_size, 1), dtype=bool)
    mask[:k] = True
    if kb * block_size == k:
        return np.ascontiguousarray(w).reshape(kb, block_size, n), mask.reshape(kb, block_size, 1)
    padded = np.zeros((kb * block_size, n), dtype=w.dtype)
    padded[:k] = w
    return padded.reshape(kb, block_size, n), mask.reshape(kb, block_size, 1)


def unblock(x: np.ndarray, k: int) -> np.ndarray:
    """The inverse of :func:`block_view`: ``[Kb, bs, N]`` back to ``[K, N]``."""
    return x.reshape(-1, x.shape[-1])[:k]


def expand(param: np.ndarray, k: int, block_size: int) -> np.ndarray:
    """A per-block ``[Kb, N]`` parameter repeated to ``[K, N]``."""
    return np.repeat(param, block_size, axis=0)[:k]


def rtn_params(w: np.ndarray, fmt: BlockFormat) -> tuple[np.ndarray, np.ndarray | None]:
    """Round-to-nearest ``(scale [Kb, N] float32, zero_point [Kb, N] int64 or None)`` for ``w``."""
    w = np.asarray(w, dtype=np.float32)
    blocks, mask = block_view(w, fmt.block_size)
    if mask.all():
        lo, hi = blocks.min(axis=1), blocks.max(axis=1)
    else:  # the padding of a short last block must not count
        lo = np.where(mask, blocks, np.inf).min(axis=1)
        hi = np.where(mask, blocks, -np.inf).max(axis=1)
    if fmt.symmetric:
        extreme = np.where(np.abs(lo) > np.abs(hi), lo, hi).astype(np.float32)
        scale = (extreme / np.float32(fmt.qmin)).astype(np.float32)
        return np.where(scale == 0, np.float32(1.0), scale).astype(np.float32), None
    lo = np.minimum(lo, 0).astype(np.float32)
    hi = np.maximum(hi, 0).astype(np.float32)
    scale = ((hi - lo) / np.float32(fmt.qmax)).astype(np.float32)
    zero = scale == 0
    scale = np.where(zero, np.float32(1.0), scale).astype(np.float32)
    zp = np.clip(np.rint(-lo / scale), 0, fmt.qmax).astype(np.int64)
    return scale, np.where(zero, (fmt.qmax + 1) // 2, zp)


def quantize(w: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, fmt: BlockFormat) -> np.ndarray:
    """Integers ``[K, N]`` (int16: every storage type's values fit) of ``w`` on the grid ``(scale, zero_point)`` of ``fmt``.

    ``w / scale`` is one float32 division per element (as QuantizeLinear does it), rounded half to
    even; computed on the block view, so the parameters are broadcast, never repeated."""
    w = np.asarray(w, dtype=np.float32)
    k, n = w.shape
    blocks, _ = block_view(w, fmt.block_size)
    s = np.asarray(scale, np.float32)[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.rint(blocks / s)
    if zero_point is not None:
        r += np.asarray(zero_point, np.float32)[:, None, :]
    np.clip(r, fmt.qmin, fmt.qmax, out=r)
    r = np.nan_to_num(r, copy=False, nan=0.0)
    return unblock(r, k).astype(np.int16)


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, fmt: BlockFormat) -> np.ndarray:
    """``float32(q − zp) · scale`` ``[K, N]``: what ``DequantizeLinear(axis=0, block_size)`` returns.

    The same arithmetic as :func:`onnxptq.formats.integer.dequantize` (``q − zp`` is a small
    integer, exact in float32, times the float32 scale), on the block view so the parameters are
    broadcast, not repeated; tests hold the two equal."""
    q = np.asarray(q)
    k = q.shape[0]
    blocks, _ = block_view(q.astype(np.float32), fmt.block_size)
    if zero_point is not None:
        blocks = blocks - np.asarray(zero_point, np.float32)[:, None, :]
    return unblock(blocks * np.asarray(scale, np.float32)[:, None, :], k)


def fake_quantize(w: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """RTN quantize-dequantize of ``w`` ``[K, N]`` (the reference the emitted model must equal)."""
    scale, zp = rtn_params(w, fmt)
    return dequantize(quantize(w, scale, zp, fmt), scale, zp, fmt)


def storage_array(q: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """``q`` (int64) in the storage dtype of ``fmt`` (int4/uint4/int8/uint8)."""
    q = np.asarray(q)
    if q.size and (q.min() < fmt.qmin or q.max() > fmt.qmax):
        raise ValueError(f"values outside [{fmt.qmin}, {fmt.qmax}] cannot be stored as {fmt.label()}")
    return q.astype(np.int64).astype(fmt.dtype)
