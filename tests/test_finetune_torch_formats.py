"""The torch fake quantizers of fast finetuning are bit-exact with the NumPy references.

Fast finetuning tunes weights through these functions; the emitted model runs the references'
ONNX twins. Any difference would make the optimiser tune a model that is not the one shipped.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnxptq.pipeline.refine.finetune import torch_formats as tf  # noqa: E402
from onnxptq.formats import fake_quantize  # noqa: E402
from onnxptq.formats.integer import compute_scale_zp  # noqa: E402


def _tensors(seed: int = 0) -> list[np.ndarray]:
    """Weight-like tensors plus edge cases: ties, zeros of both signs, tiny, huge, subnormal, inf/nan."""
    rng = np.random.default_rng(seed)
    out = [
        rng.normal(0, 0.2, (16, 8, 3, 3)).astype(np.float32),
        (rng.normal(0, 1, (33, 20)) * np.exp2(rng.integers(-30, 30, (33, 20)))).astype(np.float32),
        rng.uniform(-4, 4, (5, 37)).astype(np.float32),
    ]
    edge = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 1e-45, -1e-40, 3.4e38, -3.4e38, 65504.0, 70000.0,
                     1.0 + 2**-8, 1.0 + 2**-9, 448.0, 464.0, 2**-126, 7.0, 2.25, -0.125] * 2, dtype=np.float32)
    out.append(edge.reshape(5, 8))
    quarter = (np.round(rng.normal(0, 8, (4, 64)) * 4) / 4).astype(np.float32)  # many exact halves
    out.append(quarter)
    return out


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint32) if a.dtype == np.float32 else a, b.view(np.uint32) if b.dtype == np.float32 else b)


def _check(x: np.ndarray, fmt: str, **attrs) -> None:
    ref = fake_quantize(x, fmt, **attrs)
    got = tf.fake_quantize(torch.from_numpy(x.copy()), fmt, **attrs).numpy()
    nan = np.isnan(ref)
    np.testing.assert_array_equal(nan, np.isnan(got))
    _same(np.where(nan, 0, ref).astype(ref.dtype), np.where(nan, 0, got).astype(got.dtype))


@pytest.mark.parametrize("fmt", ["int8", "uint8", "int4", "int16", "int32"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_integer_bit_exact(fmt, per_channel):
    for x in _tensors():
        x = np.nan_to_num(x, nan=0.0, posinf=1e3, neginf=-1e3)
        x = np.clip(x, -1e30, 1e30)
        axis = 0 if per_channel else None
        reduce = tuple(range(1, x.ndim)) if per_channel else None
        rmin, rmax = x.min(axis=reduce), x.max(axis=reduce)
        scale, zp = compute_scale_zp(rmin, rmax, fmt, symmetric=fmt != "uint8")
        # scales one notch off so that values saturate at both ends too
        _check(x, fmt, scale=np.asarray(scale, np.float32) * np.float32(0.9), zero_point=np.asarray(zp), axis=axis)


def test_integer_blocked_bit_exact():
    x = _tensors()[2]
    scale = np.full((5, 5), 0.03, np.float32)
    _check(x, "int8", scale=scale, zero_point=np.zeros((5, 5), np.int8), axis=1, block_size=8)


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"])
def test_float_bit_exact(fmt):
    for x in _tensors():
        _check(x, fmt)
        _check(x, fmt, scale=0.37, zero_point=0.0)
    for x in _tensors(1):
        _check(x, fmt, saturate=True)


BFP_CASES = [
    dict(bfp_method="to_bfp", axis=1, bit_width=16, block_size=8, rounding_mode=2),
    dict(bfp_method="to_bfp", axis=0, bit_width=12, block_size=4, rounding_mode=0),
    dict(bfp_method="to_bfp", axis=1, bit_width=16, block_size=8, rounding_mode=1, use_compiler_version_cpu_kernel=1),
    dict(bfp_method="to_bfp_prime", axis=1, bit_width=16, block_size=16, sub_block_size=2, sub_block_shift_bits=1, rounding_mode=2),
    dict(bfp_method="to_bfp_prime", axis=1, bit_width=11, block_size=16, sub_block_size=2, sub_block_shift_bits=1, rounding_mode=0),
    dict(bfp_method="to_bfp_prime", axis=0, bit_width=13, block_size=8, sub_block_size=3, sub_block_shift_bits=2, rounding_mode=1),
    dict(bfp_method="to_bfp", axis=1, bit_width=16, block_size=8, rounding_mode=2, convert_to_bfloat_before_bfp=1),
]


@pytest.mark.parametrize("attrs", BFP_CASES, ids=lambda a: f"{a['bfp_method']}-{a['bit_width']}-{a['rounding_mode']}")
def test_bfp_bit_exact(attrs):
    for x in _tensors() + _tensors(2):
        _check(x, "bfp", **attrs)
    # inf / nan pass through (to_bfp) or poison their block (to_bfp_prime)
    x = _tensors()[3].copy()
    x[0, 1], x[2, 3] = np.inf, np.nan
    _check(x, "bfp", **attrs)


@pytest.mark.parametrize("dtype", ["int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"])
@pytest.mark.parametrize("rounding_mode", [0, 2])
@pytest.mark.parametrize("scale_search", [0, 1, 2])
def test_mx_bit_exact(dtype, rounding_mode, scale_search):
    for x in _tensors() + _tensors(3):
        _check(x, "mx", element_dtype=dtype, axis=1, block_size=32 if x.shape[1] > 8 else 4,
               rounding_mode=rounding_mode, scale_search=scale_search)
    x = _tensors()[3].copy()
    x[1, 2], x[3, 4] = -np.inf, np.nan
    _check(x, "mx", element_dtype=dtype, axis=1, block_size=4, rounding_mode=rounding_mode, scale_search=scale_search)


def test_ste_gradient_is_identity():
    w = torch.tensor([0.1, -0.27, 1.3], requires_grad=True)
    y = tf.fake_quantize_ste(w, "int8", scale=0.1, zero_point=0)
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(w.grad, torch.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(y.detach().numpy(), fake_quantize(w.detach().numpy(), "int8", scale=0.1, zero_point=0))
