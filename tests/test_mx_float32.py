"""MXINT8 and MXFP fake-quantize in float32 (formats/mx_float32.py) against the float64 reference, bit for bit.

The float32 path replaces the reference where emit quantizes MXINT8 and MXFP weights and where the
range guard simulates their activations, so it must give the reference's bits on every input: zeros of
both signs, subnormals (alone and as a block's maximum), values whose quotient falls below the
normal range, exact halves of the grid in every rounding mode, the largest finite floats, ±Inf,
NaN, and blocks that do not divide the axis.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxptq.formats import fake_quantize
from onnxptq.formats import mx_float32
from testkit.models import model_path

TINY = np.float32(1.4e-45)  # the smallest subnormal
HUGE = np.finfo(np.float32).max


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
    diff = a.view(np.uint32) != b.view(np.uint32)
    assert not diff.any(), (np.flatnonzero(diff)[:10], a.reshape(-1)[diff.reshape(-1)][:10], b.reshape(-1)[diff.reshape(-1)][:10])


def _edge_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values mixing every hard case, in random order."""
    exps = rng.integers(-149, 128, size=n)
    base = np.ldexp(rng.uniform(1.0, 2.0, size=n), exps).astype(np.float32)
    grid = (rng.integers(-300, 300, size=n) / 128.0 * np.exp2(rng.integers(-130, 120, size=n))).astype(np.float32)  # halves
    special = np.array([0.0, -0.0, TINY, -TINY, TINY * 3, 1.1754942e-38, -1.1754942e-38, 1.1754944e-38, HUGE, -HUGE,
                        np.inf, -np.inf, np.nan, 1.0, -1.0, 127 / 64, 0.5, -0.5, 2.0**-127, 2.0**127, 3.0e38],
                       np.float32)
    pick = rng.integers(0, 3, size=n)
    out = np.where(pick == 0, base, grid) * np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32)
    where = rng.random(n) < 0.15
    out[where] = rng.choice(special, size=int(where.sum()))
    return out.astype(np.float32)


@pytest.mark.parametrize("rounding_mode", [0, 1, 2])
@pytest.mark.parametrize("shape,axis,block", [((7, 45), 1, 32), ((45, 7), 0, 32), ((3, 5, 40), -1, 16),
                                               ((6, 33), 1, 8), ((100,), 0, 32), ((4, 9, 3, 3), 1, 32)])
def test_edge_cases_bit_for_bit(shape, axis, block, rounding_mode):
    rng = np.random.default_rng(hash((shape, axis, block, rounding_mode)) % 2**32)
    for _ in range(6):
        x = _edge_values(rng, int(np.prod(shape))).reshape(shape)
        attrs = dict(element_dtype="int8", axis=axis, block_size=block, rounding_mode=rounding_mode)
        _same(mx_float32.fake_quantize(x, **attrs), fake_quantize(x, "mx", **attrs))


@pytest.mark.parametrize("rounding_mode", [0, 1, 2])
def test_blocks_of_one_scale_range(rounding_mode):
    """Every block holds values of one binade span (as weights do), from subnormal to the top."""
    rng = np.random.default_rng(rounding_mode)
    for top in (-149, -140, -127, -126, -125, -60, 0, 1, 60, 126, 127):
        x = np.ldexp(rng.uniform(-2.0, 2.0, size=(8, 64)), top).astype(np.float32)
        x[:, ::9] = np.ldexp(rng.integers(-255, 256, size=x[:, ::9].shape) / 128.0, top).astype(np.float32)  # exact halves
        attrs = dict(element_dtype="int8", axis=1, block_size=32, rounding_mode=rounding_mode)
        _same(mx_float32.fake_quantize(x, **attrs), fake_quantize(x, "mx", **attrs))


@pytest.mark.parametrize("rounding_mode", [0, 1, 2])
def test_neighbours_of_the_grid_halves(rounding_mode):
    """One float32 step either side of every half of the grid, in every binade below the block's
    top: where ``|w| + 0.5`` would round in float32 and float64 does not."""
    rng = np.random.default_rng(7)
    for top in (-126, -100, -3, 0, 5, 120):
        halves = (np.arange(-255, 256, 2) / 128.0).astype(np.float64)  # (k + 1/2) / 64
        scales = [2.0**(top - d) for d in range(0, 24, 3)]
        vals = np.concatenate([halves * s for s in scales]).astype(np.float32)
        vals = np.concatenate([vals, np.nextafter(vals, np.float32(0)), np.nextafter(vals, np.float32(np.inf)),
                               np.nextafter(vals, np.float32(-np.inf))])
        vals = rng.permutation(vals)
        n = -(-vals.size // 31) * 31
        x = np.zeros(n, np.float32)
        x[: vals.size] = vals
        x = x.reshape(-1, 31)
        x = np.concatenate([np.full((x.shape[0], 1), np.float32(1.9 * 2.0**top)), x], axis=1)  # the block's top
        attrs = dict(element_dtype="int8", axis=1, block_size=32, rounding_mode=rounding_mode)
        _same(mx_float32.fake_quantize(x, **attrs), fake_quantize(x, "mx", **attrs))


def test_real_conv_weights_bit_for_bit():
    model = onnx.load(str(model_path("cls")))
    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                               for a in n.attribute if a.name == "value"]
    weights = [numpy_helper.to_array(t) for t in tensors if len(t.dims) == 4]
    assert len(weights) > 20
    for w in weights:
        w = w.astype(np.float32)
        for axis in (1, 0):
            attrs = dict(element_dtype="int8", axis=axis, block_size=32, rounding_mode=0)
            _same(mx_float32.fake_quantize(w, **attrs), fake_quantize(w, "mx", **attrs))


def test_covers_only_what_it_computes():
    assert mx_float32.covers("mx", {"element_dtype": "int8"}, np.float32)
    assert mx_float32.covers("mx", {}, np.float32)
    assert not mx_float32.covers("mx", {"element_dtype": "int8", "scale_search": 2}, np.float32)
    assert not mx_float32.covers("mx", {"element_dtype": "fp8_e4m3"}, np.float32)  # rounding_mode 0: the arithmetic
    assert mx_float32.covers("mx", {"element_dtype": "fp8_e4m3", "rounding_mode": 2}, np.float32)
    assert not mx_float32.covers("mx", {"element_dtype": "fp8_e4m3", "rounding_mode": 2, "scale_search": 3}, np.float32)
    assert not mx_float32.covers("mx", {"element_dtype": "fp4_e2m1", "rounding_mode": 2}, np.float16)
    assert not mx_float32.covers("mx", {"element_dtype": "int8"}, np.float16)
    assert not mx_float32.covers("bfp", {}, np.float32)
    with pytest.raises(ValueError, match="scale_search"):
        mx_float32.fake_quantize(np.ones((2, 32), np.float32), scale_search=1)
    with pytest.raises(ValueError, match="float16"):
        mx_float32.fake_quantize(np.ones((2, 32), np.float16))


FP_ELEMENTS = ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"]


@pytest.mark.parametrize("element", FP_ELEMENTS)
@pytest.mark.parametrize("shape,axis,block", [((7, 45), 1, 32), ((45, 7), 0, 32), ((3, 5, 40), -1, 16),
                                               ((100,), 0, 32), ((4, 9, 3, 3), 1, 32)])
def test_fp_elements_edge_cases_bit_for_bit(element, shape, axis, block):
    """FP elements (MXFP8/6/4, rounded half to even by the reference's cast): every hard case."""
    rng = np.random.default_rng(hash((element, shape, axis, block)) % 2**32)
    for _ in range(6):
        x = _edge_values(rng, int(np.prod(shape))).reshape(shape)
        attrs = dict(element_dtype=element, axis=axis, block_size=block, rounding_mode=2)
        _same(mx_float32.fake_quantize(x, **attrs), fake_quantize(x, "mx", **attrs))


@pytest.mark.parametrize("element", FP_ELEMENTS)
def test_fp_grid_points_and_their_halves(element):
    """Every element value of the grid, the halves between neighbours and one float32 step either
    side of each, in blocks whose top puts them in every binade, the subnormal ones included, and at
    the shared exponent's clamp (a block maximum below 2^(emax-127))."""
    import ml_dtypes
    from onnxptq.formats.mx import ELEMENT_ML_DTYPES

    dtype = ELEMENT_ML_DTYPES[element]
    bits = 8 if element.startswith("fp8") else 6 if element.startswith("fp6") else 4
    grid = np.unique(np.abs(np.arange(2**bits, dtype=np.uint8).view(dtype).astype(np.float32) if bits == 8 else
                                np.array([ml_dtypes.finfo(dtype).max], np.float32)))
    if bits != 8:  # fp6/fp4: every value by casting a dense range onto the grid
        grid = np.unique(np.abs(np.linspace(-8e4, 8e4, 200001).astype(np.float32).astype(dtype).astype(np.float32)))
    grid = grid[np.isfinite(grid)]
    halves = (grid[:-1] + grid[1:]) / 2
    vals = np.concatenate([grid, halves, np.nextafter(halves, np.float32(0)), np.nextafter(halves, np.float32(np.inf))])
    top = np.float32(grid.max())
    for shift in (-160, -140, -127, -126, -60, 0, 30, 127 - int(np.log2(top))):
        v = (vals.astype(np.float64) * 2.0**shift).astype(np.float32)
        n = -(-v.size // 31) * 31
        x = np.zeros(n, np.float32)
        x[: v.size] = v
        x = x.reshape(-1, 31)
        x = np.concatenate([np.full((x.shape[0], 1), np.float32(float(top) * 2.0**shift)), x], axis=1)
        x = x * np.where(np.arange(x.size).reshape(x.shape) % 3 == 0, -1, 1).astype(np.float32)
        attrs = dict(element_dtype=element, axis=1, block_size=32, rounding_mode=2)
        _same(mx_float32.fake_quantize(x, **attrs), fake_quantize(x, "mx", **attrs))


def test_real_conv_weights_bit_for_bit_fp8():
    model = onnx.load(str(model_path("cls")))
    tensors = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                               for a in n.attribute if a.name == "value"]
    weights = [numpy_helper.to_array(t).astype(np.float32) for t in tensors if len(t.dims) == 4]
    assert len(weights) > 20
    for w in weights:
        for element in ("fp8_e4m3", "fp4_e2m1"):
            attrs = dict(element_dtype=element, axis=1, block_size=32, rounding_mode=2)
            _same(mx_float32.fake_quantize(w, **attrs), fake_quantize(w, "mx", **attrs))
