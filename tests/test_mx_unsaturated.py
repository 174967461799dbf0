"""MX ``scale_search=3``: the block exponent that does not saturate the block maximum.

OCP's ``floor(log2(amax)) - emax`` clips an E4M3 block's maximum when its mantissa is above 1.75
(up to 12.5 %); ``scale_search=3`` takes ``X + 1`` there (formats/mx.py module doc). Checked here:
the ONNX function is bit-exact to the NumPy reference on every element type and body variant
(generic, static, whole-axis, transposed, tiled, branched INT8, float16), against an independent
reference built from ml_dtypes' float8 cast, the exponent never changes a block OCP encodes without
clipping, it never turns a finite value into Inf, and the torch twin (finetuning) agrees.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import _format_testing
from _format_testing import assert_same_bits, log_uniform, sample_values
from onnxptq.formats import MX_ELEMENT_DTYPES, fake_quantize
from onnxptq.formats import mx as ref
from test_formats_mx import _edge_blocks, _element_ties, check


@pytest.mark.parametrize("element_dtype", MX_ELEMENT_DTYPES)
def test_onnx_bit_exact(element_dtype: str) -> None:
    """Random values with Inf/NaN (masked formulas), finite ones, edge blocks and element ties."""
    attrs = dict(element_dtype=element_dtype, scale_search=3)
    check(sample_values(20_000, seed=4).reshape(20, 1000), "with specials", axis=1, block_size=32, rounding_mode=2, **attrs)
    check(log_uniform(20_000, seed=9).reshape(20, 1000), "finite", axis=1, block_size=32, rounding_mode=2, **attrs)
    check(_edge_blocks(), "edge blocks", axis=-1, block_size=8, rounding_mode=0, **attrs)
    check(_element_ties(element_dtype), "element ties", axis=-1, block_size=8, rounding_mode=2, **attrs)


@pytest.mark.parametrize("element_dtype", ["int8", "fp8_e4m3", "fp4_e2m1"])
@pytest.mark.parametrize("shape,axis,block_size", [((3, 64, 20), 1, 32), ((3, 50, 9), 1, 32), ((4, 7, 30), -1, 8),
                                                   ((2, 24, 6, 3), 1, 32), ((64, 512), 1, 32), ((2, 40, 12, 12), 1, 32)])
def test_static_bodies_bit_exact(element_dtype: str, shape: tuple, axis: int, block_size: int) -> None:
    """The bodies the emitter builds for known shapes: padded, whole-axis (``w``), transposed last
    axis with halves (``lh``), tiled ragged axis (``t``), INT8's branched one (``i``)."""
    attrs = dict(element_dtype=element_dtype, axis=axis, block_size=block_size, scale_search=3, rounding_mode=2)
    x = log_uniform(int(np.prod(shape)), seed=2).reshape(shape)
    got, name = _format_testing.run_static("mx", x, **attrs)
    assert "_ss3" in name
    assert_same_bits(got, fake_quantize(x, "mx", **attrs), name)


def _e4m3_blocks(x: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """Independent reference: blocks of 32 along the last axis scaled by ``2**exponents`` and cast
    to E4M3 by ml_dtypes (saturating first, as OCP's conversion does)."""
    xb = x.reshape(x.shape[0], -1, 32).astype(np.float64)
    s = np.exp2(exponents)[..., None]
    q = np.clip(xb / s, -448, 448).astype(np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return (q * s).reshape(x.shape)


def test_e4m3_exponent_is_the_smallest_that_holds_the_maximum() -> None:
    """Against ml_dtypes: the exponent is ceil(log2(amax / 448)); blocks whose maximum OCP does not
    clip come out bit-identical to OCP's (scale_search=0); the block maximum is never clipped."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 256)) * np.exp(rng.uniform(-8, 8, (64, 1)))).astype(np.float32)
    amax = np.abs(x.reshape(64, -1, 32)).max(axis=-1).astype(np.float64)
    ceil_exp = np.ceil(np.log2(amax / 448.0))
    want = _e4m3_blocks(x, ceil_exp).astype(np.float32)
    got = fake_quantize(x, "mx", element_dtype="fp8_e4m3", axis=-1, block_size=32, rounding_mode=2, scale_search=3)
    assert_same_bits(got, want, "ceil rule vs ml_dtypes")
    ocp = fake_quantize(x, "mx", element_dtype="fp8_e4m3", axis=-1, block_size=32, rounding_mode=2)
    clipped = (amax / np.exp2(np.floor(np.log2(amax)) - 8)) > 448
    assert 0.05 < clipped.mean() < 0.4  # OCP clips about one block in five here
    same = np.repeat(~clipped, 32, axis=-1)
    assert_same_bits(got[same], ocp[same], "unclipped blocks keep OCP's exponent")
    blk = lambda y: np.abs(y.reshape(64, -1, 32).astype(np.float64)).max(axis=-1)  # noqa: E731
    assert (blk(got) >= amax * (1 - 2.0**-4)).all()  # within half a step of the max: never clipped
    assert (blk(ocp)[clipped] < amax[clipped] * (1 - 2.0**-4)).any()  # OCP's rule does clip them
    err = lambda y: ((y.astype(np.float64) - x) ** 2).sum()  # noqa: E731
    assert err(got) < 0.9 * err(ocp)


@pytest.mark.parametrize("element_dtype", ["fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "int8"])
def test_never_overflows(element_dtype: str) -> None:
    """A maximum that would round up to the input type's overflow keeps OCP's exponent: float16
    65504 and float32 near 2^128 stay finite (in the reference and in the ONNX function)."""
    for x in (np.array([[65504, -60000, 1.0, 2.0, 40000, 0.5, -3.0, 65000]], np.float16),
              np.array([[3.4e38, -3.3e38, 1.0, 2.0, 1e38, 0.5, -3.0, 3.39e38]], np.float32),
              np.array([[30000, -29000, 1.0, 2.0, 31000, 0.5, -3.0, 32700]], np.float16)):
        got = check(x, "near overflow", element_dtype=element_dtype, axis=1, block_size=8, rounding_mode=2, scale_search=3)
        assert np.isfinite(got).all(), (x.dtype, got)


def test_float16_bit_exact() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20_000) * np.exp(rng.uniform(-12, 10, 20_000))).astype(np.float16)
    x[:6] = [0, -0.0, 65504, -65504, np.inf, np.nan]
    for e in ("fp8_e4m3", "fp6_e2m3"):
        got = check(x.reshape(20, 1000), "float16", element_dtype=e, axis=1, block_size=32, rounding_mode=2, scale_search=3)
        assert got.dtype == np.float16


def test_torch_twin_agrees() -> None:
    """Finetuning's torch formats compute the same exponent (pipeline/refine/finetune/torch_formats.py)."""
    torch = pytest.importorskip("torch")
    from onnxptq.pipeline.refine.finetune.torch_formats import fake_quantize_mx

    for x in (log_uniform(8_000, seed=11).reshape(8, 1000), _edge_blocks()[np.isfinite(_edge_blocks()).all(axis=1)],
              np.array([[65504, -60000, 1.0, 2.0, 40000, 0.5, -3.0, 65000]], np.float16)):
        for e in ("fp8_e4m3", "fp4_e2m1", "int8"):
            attrs = dict(element_dtype=e, axis=-1, block_size=8, rounding_mode=2, scale_search=3)
            got = fake_quantize_mx(torch.from_numpy(np.ascontiguousarray(x)), **attrs).numpy()
            assert_same_bits(got, fake_quantize(x, "mx", **attrs), f"torch {e} {x.dtype}")


def test_bad_value_names_scale_search() -> None:
    with pytest.raises(ValueError, match="scale_search.*3 \\(the one above where"):
        ref.check_attributes("fp8_e4m3", 1, 32, 2, 5)
