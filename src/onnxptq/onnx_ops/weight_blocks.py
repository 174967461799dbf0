"""Weight-only integer blocks in ONNX: blocked ``DequantizeLinear`` and onnxruntime's packed forms.

The numbers are those of :mod:`onnxptq.formats.int_blocks` (the reference); this module only lays
them out:

* standard opset 21: ``DequantizeLinear(q int4|uint4|int8|uint8, scale, zp, axis, block_size)``
  feeding the ``MatMul`` (any runtime reads it; onnxruntime fuses it into ``MatMulNBits``);
* ``com.microsoft::MatMulNBits``: ``B`` ``uint8 [N, K/bs, bs·bits/8]`` — each output column's
  blocks along K, two 4-bit values a byte, low nibble first, the last block padded; ``scales``
  ``[N, K/bs]``; ``zero_points`` packed the same way per column (absent: the midpoint, 8 or 128,
  which is how a symmetric weight is stored: ``q − qmin``);
* ``com.microsoft::GatherBlockQuantized`` for an embedding table ``[V, H]`` blocked along H: it
  reads ``uint8 [V, H/bs · bs/2]``, the same bytes as a ``MatMulNBits`` ``B`` of ``N = V`` (only
  the shape differs), so a tied embedding and lm_head share one initializer; the lm_head reads it
  through a ``Reshape`` (onnxruntime folds it at session start).

The facts above were checked on onnxruntime 1.32 (tests/test_weight_only_forms.py runs them).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..formats.int_blocks import BlockFormat, storage_array

MS_DOMAIN = "com.microsoft"


def _pack_nibbles(values: np.ndarray) -> np.ndarray:
    """uint8 values < 16 along the last axis (even length) two a byte, low nibble first."""
    v = values.astype(np.uint8)
    return (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)


def unsigned(q: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """``q`` as the unsigned codes MatMulNBits stores: ``q − qmin`` symmetric (zero point 2^(b−1)
    implied), ``q`` asymmetric."""
    shift = -(1 << (fmt.storage_bits - 1)) if fmt.symmetric else 0
    return (np.asarray(q, np.int64) - shift).astype(np.uint8)


def pack_weight(q: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """``q`` ``[K, N]`` as MatMulNBits' ``B`` ``[N, Kb, blob]``; the padding of a short last block is
    code 0, as onnxruntime's quantizer writes it (no activation ever meets it)."""
    k, n = q.shape
    kb = fmt.blocks(k)
    codes = unsigned(q, fmt).T  # [N, K]
    full = np.zeros((n, kb * fmt.block_size), dtype=np.uint8)
    full[:, :k] = codes
    if fmt.storage_bits == 4:
        return _pack_nibbles(full).reshape(n, kb, fmt.block_size // 2)
    return full.reshape(n, kb, fmt.block_size)


def pack_zero_points(zero_point: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """``zero_point`` ``[Kb, N]`` as MatMulNBits' flat uint8 ``zero_points`` (per column, packed)."""
    zp = np.asarray(zero_point, np.uint8).T  # [N, Kb]
    if fmt.storage_bits == 8:
        return zp.reshape(-1)
    if zp.shape[1] % 2:
        zp = np.concatenate([zp, np.zeros((zp.shape[0], 1), np.uint8)], axis=1)
    return _pack_nibbles(zp).reshape(-1)


def dequantize_linear(name: str, q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, fmt: BlockFormat,
                      *, axis: int = 0) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """A blocked ``DequantizeLinear`` whose output is the weight ``name + "_dq"``.

    ``q``/``scale``/``zero_point`` are given in the ``[K, N]`` layout; ``axis=1`` stores them
    transposed (``[N, K]``, blocks along axis 1), the layout of an embedding table read by Gather.
    """
    q_arr = storage_array(q, fmt)
    s = np.asarray(scale, np.float32)
    zp = None if zero_point is None else storage_array(zero_point, fmt)
    if axis == 1:
        q_arr, s = q_arr.T.copy(), s.T.copy()
        zp = None if zp is None else zp.T.copy()
    inits = [numpy_helper.from_array(q_arr, f"{name}_q"), numpy_helper.from_array(s, f"{name}_scale")]
    inputs = [f"{name}_q", f"{name}_scale"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, f"{name}_zp"))
        inputs.append(f"{name}_zp")
    node = helper.make_node("DequantizeLinear", inputs, [f"{name}_dq"], name=f"{name}_DequantizeLinear",
                            axis=axis, block_size=fmt.block_size)
    return node, inits


def matmul_nbits(name: str, activation: str, output: str, q: np.ndarray, scale: np.ndarray,
                 zero_point: np.ndarray | None, fmt: BlockFormat, *, bias: str | None = None,
                 accuracy_level: int | None = None, packed_name: str | None = None
                 ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """A ``MatMulNBits`` computing ``activation · W`` into ``output``.

    With ``packed_name`` the packed ``B`` is not written here: it is the 2-D initializer of that
    name (a tied embedding's :func:`gather_block_quantized` table), read through a ``Reshape``.
    """
    k, n = q.shape
    kb = fmt.blocks(k)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    b_name = f"{name}_B"
    if packed_name is None:
        inits.append(numpy_helper.from_array(pack_weight(q, fmt), b_name))
    else:
        shape_name = f"{name}_B_shape"
        inits.append(numpy_helper.from_array(np.array([n, kb, fmt.block_size * fmt.storage_bits // 8], np.int64), shape_name))
        nodes.append(helper.make_node("Reshape", [packed_name, shape_name], [b_name], name=f"{name}_B_Reshape"))
    inits.append(numpy_helper.from_array(np.asarray(scale, np.float32).T.copy(), f"{name}_scales"))
    inputs = [activation, b_name, f"{name}_scales"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(pack_zero_points(zero_point, fmt), f"{name}_zero_points"))
        inputs.append(f"{name}_zero_points")
    if bias is not None:
        inputs += [""] * (5 - len(inputs)) + [bias]
    attrs = {"K": k, "N": n, "bits": fmt.storage_bits, "block_size": fmt.block_size}
    if accuracy_level is not None:
        attrs["accuracy_level"] = int(accuracy_level)
    nodes.append(helper.make_node("MatMulNBits", inputs, [output], name=f"{name}_MatMulNBits", domain=MS_DOMAIN, **attrs))
    return nodes, inits


def gather_block_quantized(name: str, indices: str, output: str, q: np.ndarray, scale: np.ndarray,
                           zero_point: np.ndarray | None, fmt: BlockFormat
                           ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str]:
    """Rows ``indices`` of an embedding table whose transpose ``[H, V]`` was quantized as ``q``
    (blocks along H). Returns the nodes, initializers and the packed table's name (for
    :func:`matmul_nbits`'s ``packed_name``). A hidden size that is no multiple of the block
    size is padded in storage, and a ``Slice`` cuts the padding off the gathered rows."""
    k, n = q.shape
    kb = fmt.blocks(k)
    table = f"{name}_packed"
    packed = pack_weight(q, fmt).reshape(n, -1)
    inits = [numpy_helper.from_array(packed, table), numpy_helper.from_array(np.asarray(scale, np.float32).T.copy(), f"{name}_gscales")]
    inputs = [table, indices, f"{name}_gscales"]
    if zero_point is not None:
        zp = np.asarray(zero_point, np.uint8).T  # [V, Kb]
        if fmt.storage_bits == 4:
            zp = np.concatenate([zp, np.zeros((n, kb % 2), np.uint8)], axis=1) if kb % 2 else zp
            zp = _pack_nibbles(zp)
        inits.append(numpy_helper.from_array(zp, f"{name}_gzero_points"))
        inputs.append(f"{name}_gzero_points")
    padded = kb * fmt.block_size != k
    gathered = f"{name}_gathered" if padded else output
    nodes = [helper.make_node("GatherBlockQuantized", inputs, [gathered], name=f"{name}_GatherBlockQuantized",
                              domain=MS_DOMAIN, bits=fmt.storage_bits, block_size=fmt.block_size, gather_axis=0,
                              quantize_axis=1)]
    if padded:
        for suffix, value in (("starts", 0), ("ends", k), ("axes", -1)):
            inits.append(numpy_helper.from_array(np.array([value], np.int64), f"{name}_slice_{suffix}"))
        nodes.append(helper.make_node("Slice", [gathered, f"{name}_slice_starts", f"{name}_slice_ends", f"{name}_slice_axes"],
                                      [output], name=f"{name}_Slice"))
    return nodes, inits, table
