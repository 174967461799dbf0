"""The faster BFP16 / MX9 / MX6 / MX4 NumPy references (branch blockquant3) against slow, literal
transcriptions of the tool's kernels written here element by element in Python integers.

Why: the references in :mod:`onnxptq.formats.bfp` are the truth the ONNX bodies and the packed
weights are held to, and they were rewritten for speed (sub-block maxima by halving, rounding from
one shift, the MX product in float32, ``py3_round`` by ``rint``). Each rewrite is exact only under
an argument (a normal power-of-two scale, ``rint``'s −0); these tests check the arguments' edges:
subnormals, blocks whose scale is below the float32 normal range (the float64 fallback), zero
blocks beside normal ones, Inf/NaN blocks, ragged sub-blocks, every rounding mode, and the float32
neighbours of every half for ``py3_round``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from onnxptq.formats import bfp
from onnxptq.formats.blocks import max_last


def _f32_bits(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def _mixed(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values over the whole float32 range with the special cases mixed in."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 120, n).astype(np.float64))).astype(np.float32)
    r = rng.random(n)
    x[r < 0.06] = 0.0
    x[(r >= 0.06) & (r < 0.10)] = -0.0
    x[(r >= 0.10) & (r < 0.14)] = np.float32(3e-39) * rng.choice([-1, 1], np.count_nonzero((r >= 0.10) & (r < 0.14)))
    x[(r >= 0.14) & (r < 0.15)] = np.inf
    x[(r >= 0.15) & (r < 0.155)] = np.nan
    k = np.count_nonzero((r >= 0.2) & (r < 0.4))  # exact halves of a block's grid are likely here
    x[(r >= 0.2) & (r < 0.4)] = (rng.integers(-512, 512, k) / 4.0).astype(np.float32)
    return x


def _tiny_and_zero_blocks(block: int) -> np.ndarray:
    """A zero block, a block of tiny normals (scale below 2^-126: the float64 path), a subnormal
    block and an ordinary block, in one row."""
    rows = [np.zeros(block), np.linspace(1.2e-38, 3e-38, block), np.full(block, 5e-40), np.linspace(-3, 2.5, block)]
    return np.concatenate(rows).astype(np.float32)


# --------------------------------------------------------------------------- slow transcriptions


def _prime_slow(x: np.ndarray, m: int, bs: int, sbs: int, shift_bits: int, mode: int) -> np.ndarray:
    """``BFPPrimeCPUKernel`` on a 1-D float32 array, element by element, in Python integers."""
    out = np.empty_like(x)
    bits = x.view(np.uint32).astype(np.int64)
    for start in range(0, x.size, bs):
        idx = list(range(start, min(start + bs, x.size)))
        e = [(int(bits[i]) >> 23) & 0xFF for i in idx]
        es = max(e)
        if es == 0xFF:
            out[idx] = np.nan
            continue
        for j in range(0, len(idx), sbs):
            sub = idx[j:j + sbs]
            ej = max(e[j:j + sbs])
            shift = min(es - ej, (1 << shift_bits) - 1)
            for i in sub:
                b = int(bits[i])
                ei = (b >> 23) & 0xFF
                mant = 0 if ei == 0 else (b & 0x7FFFFF) | (1 << 23)
                t = es - shift - ei + 24 - m
                r = mant >> t
                tail = mant & ((1 << t) - 1)
                half = 1 << (t - 1)
                tie_up = {0: True, 1: b >> 31 == 0, 2: r & 1 == 1}[mode]
                up = tail > half or (tail == half and tie_up)
                if r == (1 << m) - 1:
                    up = False
                q = r + int(up)
                mag = np.float32(math.ldexp(q, es - 127 - shift + 1 - m))  # exact in float64, one rounding
                out[i] = np.copysign(mag, x[i])
    return out


def _py3_round_slow(v: np.float32) -> np.float32:
    """The tool's ``py3_round`` as written: ``floor(v)``, plus one above the half or at an odd half."""
    fl = np.floor(v)
    with np.errstate(invalid="ignore"):  # Inf - Inf: NaN, neither above nor at the half
        diff = np.float32(v - fl)
    if diff > np.float32(0.5) or (diff == np.float32(0.5) and math.fmod(float(fl), 2.0) != 0):
        return np.float32(fl + np.float32(1))
    return np.float32(fl)


def _bfp_slow(x: np.ndarray, m: int, bs: int) -> np.ndarray:
    """``BFPCPUKernel`` (rounding mode 2, not the compiler variant) on a 1-D float32 array."""
    out = np.empty_like(x)
    bits = x.view(np.uint32).astype(np.int64)
    for start in range(0, x.size, bs):
        idx = range(start, min(start + bs, x.size))
        es = max(0 if (int(bits[i]) >> 23) & 0xFF == 0xFF else (int(bits[i]) >> 23) & 0xFF for i in idx)
        exp = es - 127
        scale = np.float32(math.ldexp(1.0, exp - (m - 1)))
        max_v = np.float32(math.ldexp(1.0, exp + 1) - float(scale))
        for i in idx:
            if not np.isfinite(x[i]):
                out[i] = x[i]
                continue
            with np.errstate(over="ignore", under="ignore"):
                v = np.float32(x[i] / scale)
                y = np.float32(_py3_round_slow(v) * scale)
            out[i] = max(-max_v, min(y, max_v))
    return out


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("width", list(range(1, 21)))
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.float32])
def test_max_last_is_max(width, dtype):
    rng = np.random.default_rng(width)
    a = (rng.standard_normal((5, 7, width)) * 100).astype(dtype)
    if dtype == np.float32:
        a[0, 0, width // 2] = np.nan  # NumPy's max propagates NaN; the halving must too
    assert np.array_equal(max_last(a), a.max(axis=-1), equal_nan=True)


def test_py3_round_on_every_neighbour_of_the_halves():
    halves = (np.arange(-4100, 4100) / 2).astype(np.float32)
    big = np.float32([2**23 - 1, 2**23, 2**23 + 1, 2**24 + 2, 1e30])
    v = np.concatenate([halves, np.nextafter(halves, np.float32(np.inf)), np.nextafter(halves, np.float32(-np.inf)),
                        big, -big, np.float32([0.0, -0.0, -0.25, -1e-30, np.inf, -np.inf])])
    got = bfp._py3_round(v)
    want = np.array([_py3_round_slow(x) for x in v], np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # the tool's +0 for v in [-0.5, 0), while -0 stays -0
    assert _f32_bits(bfp._py3_round(np.float32([-0.5]))[0]) == 0
    assert _f32_bits(bfp._py3_round(np.float32([-0.0]))[0]) == 0x80000000
    # a strided view (the reference rounds views of its blocks)
    assert np.array_equal(bfp._py3_round(v[::3]).view(np.uint32), want[::3].view(np.uint32))


@pytest.mark.parametrize("bit_width,block,sub,shift_bits", [(16, 16, 2, 1), (13, 16, 2, 1), (11, 16, 2, 1), (16, 7, 2, 3), (12, 8, 3, 2)])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_prime_reference_matches_the_kernel_element_by_element(bit_width, block, sub, shift_bits, mode):
    rng = np.random.default_rng(bit_width * 10 + mode)
    m = bit_width - 9
    for x in (_mixed(rng, 40 * block), _tiny_and_zero_blocks(block), _mixed(rng, 3 * block)[np.isfinite(_mixed(rng, 3 * block))]):
        got = bfp.fake_quantize(x, bfp_method="to_bfp_prime", axis=0, bit_width=bit_width, block_size=block,
                                sub_block_size=sub, sub_block_shift_bits=shift_bits, rounding_mode=mode)
        want = _prime_slow(x, m, block, sub, shift_bits, mode)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_prime_float32_and_float64_products_agree_across_the_boundary():
    """A zero block beside a normal one takes the float32 product; one block of tiny normals sends
    the whole tensor to the float64 product: both give the kernel's bits."""
    normal = _tiny_and_zero_blocks(16)[[*range(16), *range(48, 64)]]
    tiny = _tiny_and_zero_blocks(16)
    for x in (normal, tiny):
        got = bfp.fake_quantize(x, bfp_method="to_bfp_prime", axis=0, bit_width=16, block_size=16, sub_block_size=2,
                                sub_block_shift_bits=1, rounding_mode=2)
        assert np.array_equal(got.view(np.uint32), _prime_slow(x, 7, 16, 2, 1, 2).view(np.uint32))


@pytest.mark.parametrize("bit_width,block", [(16, 8), (12, 16), (16, 3)])
def test_bfp16_reference_matches_the_kernel_element_by_element(bit_width, block):
    rng = np.random.default_rng(bit_width + block)
    for x in (_mixed(rng, 60 * block), _tiny_and_zero_blocks(block)):
        got = bfp.fake_quantize(x, bfp_method="to_bfp", axis=0, bit_width=bit_width, block_size=block, rounding_mode=2)
        want = _bfp_slow(x, bit_width - 9, block)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
