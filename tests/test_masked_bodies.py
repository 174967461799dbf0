"""The masked (Inf/NaN) formulas of every block-format body, written for few nodes, stay bit-exact.

Each BFP/MX function call chooses at run time between plain formulas (finite data: every real
activation) and masked ones (Inf/NaN in the tensor, a finite sum that overflows, and for
to_bfp_prime a block so small that its subnormals need flushing). The masked formulas are never
taken on real data, yet every node of them costs onnxruntime session-creation time in every call
of every quantized model, so they are written for few nodes: MX and to_bfp branch only the block
maxima and the last node around shared scale and rounding nodes; to_bfp_prime finds a block
holding Inf/NaN through its maxima (NaN mapped to +Inf, NaN scales) instead of per-element masks.
Here each body variant the emitter builds (static, tiled, last-axis, ranked, generic) runs on
tensors that take each masked path, against the NumPy reference, bit for bit, and the format's
own rule for specials is asserted directly too (to_bfp and MX: Inf/NaN pass through; to_bfp_prime:
a block holding one turns into NaN).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _format_testing import assert_same_bits, fragment_session, run_static
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq

F32 = np.finfo(np.float32)

FORMATS = {
    "BFP16": ("bfp", dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=2)),
    "BFP13-rm0": ("bfp", dict(bfp_method="to_bfp", bit_width=13, block_size=16, rounding_mode=0)),
    "MX9": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, sub_block_size=2,
                        sub_block_shift_bits=1, rounding_mode=2)),
    "MX6-rm1": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=13, block_size=16, sub_block_size=2,
                            sub_block_shift_bits=1, rounding_mode=1)),
    # m + D > 22: a sub-block shift found by compares would underflow to a zero scale (see
    # bfp._prime_exact_chain), so the masked formulas take the sub-block exponents
    "prime-w32": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=32, block_size=8, sub_block_size=2,
                              sub_block_shift_bits=1, rounding_mode=2)),
    "prime-d2": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=16, block_size=8, sub_block_size=4,
                             sub_block_shift_bits=2, rounding_mode=2)),
    "MXINT8": ("mx", dict(element_dtype="int8", block_size=32, rounding_mode=2)),
    "MXINT8-rm0": ("mx", dict(element_dtype="int8", block_size=32, rounding_mode=0)),
    "MXFP8_E4M3": ("mx", dict(element_dtype="fp8_e4m3", block_size=32, rounding_mode=2)),
    "MXFP4": ("mx", dict(element_dtype="fp4_e2m1", block_size=32, rounding_mode=2)),
}

#: (shape, axis): divides the block (static, no padding); 40 channels (ragged: padded, MX's tiled
#: view, to_bfp_prime's unpadded sub-block view); a long last axis (the transposed view)
SHAPES = [((2, 64, 3, 5), 1), ((2, 40, 3, 5), 1), ((2, 3, 4, 2100), -1)]


def _blocks(x: np.ndarray, axis: int):
    """``x`` with the block axis first: ``x[i]`` is one row of the axis."""
    return np.moveaxis(x, axis, 0)


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """A contiguous copy of ``x`` with the block axis first, as (axis length, rest)."""
    return np.ascontiguousarray(_blocks(x, axis)).reshape(x.shape[axis], -1)


def _back(rows: np.ndarray, like: np.ndarray, axis: int) -> np.ndarray:
    """Undo :func:`_rows` for a tensor shaped like ``like``."""
    return np.ascontiguousarray(np.moveaxis(rows.reshape(_blocks(like, axis).shape), 0, axis))


def special_tensor(shape: tuple[int, ...], axis: int, seed: int) -> np.ndarray:
    """Log-uniform values, then along the block axis at a few positions: a NaN among normal
    values, +Inf among normal values, a lone -Inf, blocks of ±0, of subnormals, of tiny normals
    mixed with subnormals (below to_bfp_prime's threshold), FLT_MAX, and specials in the last
    (ragged) block."""
    rng = np.random.default_rng(seed)
    mag = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), shape))
    x = (mag * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    flat = _rows(x, axis)
    n = flat.shape[0]
    flat[3, 0] = np.nan
    flat[17, 1] = np.inf
    flat[:, 2] = 0.0
    flat[5, 2] = -np.inf  # a lone -Inf among zeros
    flat[:, 3] = rng.choice([0.0, -0.0], n)
    flat[:, 4] = rng.choice([1e-45, -1e-40, 5.9e-39, -0.0, 2.0**-149], n).astype(np.float32)
    flat[:, 5] = (rng.uniform(2.0**-126, 2.0**-118, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    flat[::3, 5] = rng.choice([1e-45, -1e-40, 5.9e-39], flat[::3, 5].shape).astype(np.float32)
    flat[:, 6] = F32.max * rng.choice([-1.0, 1.0], n)
    flat[n - 1, 7] = -np.inf
    flat[n - 2, 8] = np.nan
    return _back(flat, x, axis)


def tiny_finite_tensor(shape: tuple[int, ...], axis: int, seed: int) -> np.ndarray:
    """Finite, summing to a finite value, with blocks whose maxima lie just above the normal
    range and subnormals inside: to_bfp_prime's masked formulas (the flush), the plain ones of
    the others."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-1, 1, shape)).astype(np.float32)
    flat = _rows(x, axis)
    flat[:, ::2] = (rng.uniform(2.0**-126, 2.0**-120, flat[:, ::2].shape) * rng.choice([-1.0, 1.0], flat[:, ::2].shape)).astype(np.float32)
    flat[::2, ::4] = rng.choice([1e-45, -1e-40, 5.9e-39, -0.0], flat[::2, ::4].shape).astype(np.float32)
    return _back(flat, x, axis)


def overflowing_tensor(shape: tuple[int, ...], axis: int, seed: int) -> np.ndarray:
    """Finite values whose sum overflows to +Inf: the masked formulas on finite data."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-1, 1, shape) * 1e3).astype(np.float32)
    flat = _rows(x, axis)
    flat[:, :3] = F32.max
    return _back(flat, x, axis)


def run_generic(fmt: str, x: np.ndarray, **attrs) -> np.ndarray:
    """The body for unknown dims (known rank: the ranked view) on ``x``."""
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=(None,) * x.ndim, dtype="float32", **attrs)
    return fragment_session(frag, [None] * x.ndim).run(None, {"x": x})[0]


def assert_special_rule(label: str, x: np.ndarray, y: np.ndarray, axis: int, block_size: int) -> None:
    """The format's own rule for Inf/NaN, independent of the reference: to_bfp and MX pass them
    through; to_bfp_prime turns each block holding one into NaN."""
    bad = ~np.isfinite(x)
    if FORMATS[label][1].get("bfp_method") != "to_bfp_prime":
        assert np.array_equal(np.isnan(y), np.isnan(x)), f"{label}: NaN positions move"
        inf = np.isinf(x)
        assert np.array_equal(y[inf], x[inf]), f"{label}: an infinity does not pass through"
        return
    xb, yb = _blocks(x, axis), _blocks(y, axis)
    for start in range(0, xb.shape[0], block_size):
        block_bad = ~np.isfinite(xb[start:start + block_size])
        hit = block_bad.any(axis=0)
        assert np.isnan(yb[start:start + block_size][:, hit]).all(), f"{label}: a block holding Inf/NaN is not NaN"
        assert np.isfinite(yb[start:start + block_size][:, ~hit]).all(), f"{label}: a finite block gives Inf/NaN"
    assert bad.any()


@pytest.mark.parametrize("label", list(FORMATS))
@pytest.mark.parametrize("shape,axis", SHAPES, ids=["static", "ragged40", "last-axis"])
def test_masked_formulas_bit_exact(label, shape, axis):
    fmt, attrs = FORMATS[label]
    attrs = dict(attrs, axis=axis)
    seed = sum(map(ord, label)) + shape[1]
    for what, x in (("Inf/NaN", special_tensor(shape, axis, seed)),
                    ("tiny blocks, finite sum", tiny_finite_tensor(shape, axis, seed + 1)),
                    ("finite, sum overflows", overflowing_tensor(shape, axis, seed + 2))):
        want = fake_quantize(x, fmt, **attrs)
        got, name = run_static(fmt, x, **attrs)
        assert_same_bits(got, want, f"{label} {what} static body {name}")
        assert_same_bits(run_generic(fmt, x, **attrs), want, f"{label} {what} ranked body")
        if what == "Inf/NaN":
            assert_special_rule(label, x, got, axis, attrs["block_size"])


def test_generic_body_without_rank_on_specials():
    """The body for an unknown shape (no rank: axis and block size computed at run time)."""
    for label in ("BFP16", "MX9", "MXINT8", "MXFP8_E4M3"):
        fmt, attrs = FORMATS[label]
        x = special_tensor((2, 40, 3, 5), 1, 7)
        frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=None, axis=1, **attrs)
        got = fragment_session(frag, None).run(None, {"x": x})[0]
        assert_same_bits(got, fake_quantize(x, fmt, axis=1, **attrs), f"{label} generic body")
        assert_special_rule(label, x, got, 1, attrs["block_size"])
