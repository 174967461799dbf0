"""Float element formats: ONNX realisation == NumPy reference bit for bit, ml_dtypes agreement,
spec test vectors C and D (with the [BUG]s corrected)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest

from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import qdq_model
from onnxptq.formats import floating as ref
from onnxptq.onnx_ops import floating as ops

from _format_testing import assert_same_bits, run_model, sample_values

FLOAT_FORMATS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")

# (attrs) per format: unscaled / saturating variants, scaled (function or Q/DQ scale), affine.
CASES = [
    ("bf16", {}), ("bf16", {"saturate": True}), ("bf16", {"scale": 1.5707963705062866}),
    ("bf16", {"scale": 1e-30, "saturate": True}), ("bf16", {"scale": 1.0, "zero_point": -1.0}),
    ("fp16", {}), ("fp16", {"saturate": False}), ("fp16", {"scale": 1.9388128e-05}),
    ("fp16", {"scale": 3.0, "saturate": False}), ("fp16", {"scale": 0.5, "zero_point": 2.0}),
    ("fp8_e4m3", {}), ("fp8_e4m3", {"scale": 0.1}), ("fp8_e4m3", {"scale": 1e3}),
    ("fp8_e5m2", {}), ("fp8_e5m2", {"scale": 3.0}), ("fp8_e5m2", {"scale": 1e-4}),
]
SHAPES = [(100_000,), (100, 1000), (10, 10, 1000), (10, 10, 10, 100), (2, 5, 10, 10, 100)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("fmt,attrs", CASES, ids=[f"{f}-{a}" for f, a in CASES])
def test_onnx_matches_reference(fmt: str, attrs: dict, dtype: type) -> None:
    shape = SHAPES[CASES.index((fmt, attrs)) % len(SHAPES)]
    with np.errstate(over="ignore"):
        x = sample_values(int(np.prod(shape)), CASES.index((fmt, attrs))).reshape(shape).astype(dtype)
    model = qdq_model(fmt, list(shape), dtype=dtype, **attrs)
    onnx.checker.check_model(model, full_check=True)
    assert_same_bits(run_model(model, x), fake_quantize(x, fmt, **attrs), f"{fmt} {attrs} {np.dtype(dtype)}")


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
def test_dtype_specific_fragments(fmt: str) -> None:
    """Known dtypes give fragments without CastLike; the float32 unscaled one is a bare Cast pair / Q-DQ."""
    x32 = sample_values(8192, 2)
    x16 = np.clip(x32, -6e4, 6e4).astype(np.float16)
    for dtype, x in (("float32", x32), ("float16", x16)):
        frag = ops.build(fmt, "x", "y", name="t", opset=21, dtype=dtype)
        assert not any(n.op_type == "CastLike" for n in frag.nodes)
        if dtype == "float32":
            # fp8: Div/Cast/Cast/Mul, equal to the Q/DQ pair but not fused by onnxruntime into a
            # QLinearConv without float8 kernels (see onnx_ops.floating).
            want = ["Div", "Cast", "Cast", "Mul"] if fmt.startswith("fp8") else (
                ["Clip", "Cast", "Cast"] if fmt == "fp16" else ["Cast", "Cast"])
            assert [n.op_type for n in frag.nodes] == want
        elem = onnx.helper.np_dtype_to_tensor_dtype(x.dtype)
        graph = onnx.helper.make_graph(frag.nodes, "g", [onnx.helper.make_tensor_value_info("x", elem, [x.size])],
                                       [onnx.helper.make_tensor_value_info("y", elem, [x.size])],
                                       initializer=frag.initializers)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
        model.ir_version = 10
        assert_same_bits(run_model(model, x), fake_quantize(x, fmt), f"{fmt} {dtype}")


# ------------------------------------------------------------------ independent checks of the rounding


def _bf16_rne_bits(x: np.ndarray) -> np.ndarray:
    """The spec's bf16 kernel rule on the bits: ``bits + 0x7FFF + lsb``, truncate (NaN handled apart)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    out = (((bits + 0x7FFF + lsb) >> 16) << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


@pytest.mark.parametrize("fmt,dtype", [("bf16", ml_dtypes.bfloat16), ("fp16", np.float16),
                                       ("fp8_e4m3", ml_dtypes.float8_e4m3fn), ("fp8_e5m2", ml_dtypes.float8_e5m2)])
def test_onnx_rounding_agrees_with_ml_dtypes(fmt: str, dtype: type) -> None:
    """onnxruntime's element rounding == an ml_dtypes cast of the (saturated) value."""
    x = sample_values(100_000, 9)
    sat = fmt != "bf16"
    got = run_model(qdq_model(fmt, [x.size], saturate=sat), x)
    t = ref.float_type(fmt)
    xs = np.clip(x, -t.max, t.max) if sat else x
    with np.errstate(over="ignore"):
        want = xs.astype(dtype).astype(np.float32)
    assert_same_bits(got, want, fmt)


def test_bf16_matches_spec_bit_rule() -> None:
    x = sample_values(100_000, 4)
    with np.errstate(over="ignore"):
        assert_same_bits(fake_quantize(x, "bf16"), _bf16_rne_bits(x), "bf16 bit rule")


@pytest.mark.parametrize("fmt", FLOAT_FORMATS)
def test_exact_ties_round_half_to_even(fmt: str) -> None:
    """Midpoints between neighbouring representable values round to the even mantissa."""
    t = ref.float_type(fmt)
    grid = np.unique(np.arange(256 if t.is_fp8 else 65536, dtype=np.uint16 if not t.is_fp8 else np.uint8)
                     .view(t.dtype).astype(np.float32))
    grid = grid[np.isfinite(grid) & (np.abs(grid) <= t.max)]
    lo, hi = grid[:-1].astype(np.float64), grid[1:].astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32)
    exact = mid.astype(np.float64) == (lo + hi) / 2
    mid, lo, hi = mid[exact], lo[exact], hi[exact]
    y = fake_quantize(mid, fmt, saturate=True)
    lo_even = (lo.astype(np.float32).astype(t.dtype).view(np.uint8 if t.is_fp8 else np.uint16) & 1) == 0
    np.testing.assert_array_equal(y, np.where(lo_even, lo, hi).astype(np.float32))
    assert_same_bits(run_model(qdq_model(fmt, [mid.size], saturate=True), mid), y, fmt)


def test_nan_inf_zero_handling() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40], np.float32)
    y = fake_quantize(x, "bf16")
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == -np.inf and np.signbit(y[4]) and y[5] > 0
    y = fake_quantize(x, "bf16", saturate=True)
    assert np.isnan(y[0]) and y[1] == ref.BF16_MAX and y[2] == -ref.BF16_MAX
    y = fake_quantize(x, "fp16")
    assert np.isnan(y[0]) and y[1] == 65504 and y[2] == -65504 and np.signbit(y[4]) and y[5] == 0
    y = fake_quantize(x, "fp16", saturate=False)
    assert y[1] == np.inf
    y = fake_quantize(x, "fp8_e4m3")
    assert np.isnan(y[0]) and y[1] == 448 and y[2] == -448 and np.signbit(y[4])
    y = fake_quantize(x, "fp8_e5m2")
    assert y[1] == 57344 and y[2] == -57344
    y = fake_quantize(x, "bf16", scale=0.5)
    assert np.signbit(y[4]) and y[1] == np.inf  # −0 keeps its sign through the scaled path


# ------------------------------------------------------------------ spec test vectors C


C_IN = np.array([1.0, 3.14159265, -2.7182818, 1.00390625, 1.01171875, 3.4e38, 65519.0, 70000.0, 1e-40], np.float32)


def test_vector_c_bf16() -> None:
    want = np.array([1.0, 3.140625, -2.71875, 1.0, 1.015625, np.inf, 65536.0, 70144.0, 9.183549615799121e-41],
                    np.float32)
    np.testing.assert_array_equal(fake_quantize(C_IN, "bf16"), want)
    want2 = want.copy()
    want2[-1] = np.float32(1.8367099231598242e-40)
    np.testing.assert_array_equal(fake_quantize(C_IN, "bf16", scale=2.0), want2)
    for s in (1.0, 2.0):
        assert_same_bits(run_model(qdq_model("bf16", [C_IN.size], scale=s), C_IN),
                         fake_quantize(C_IN, "bf16", scale=s), f"bf16 scale {s}")


def test_vector_c_fp16() -> None:
    want = np.array([1.0, 3.140625, -2.71875, 1.00390625, 1.01171875, 65504.0, 65504.0, 65504.0, 0.0], np.float32)
    np.testing.assert_array_equal(fake_quantize(C_IN, "fp16"), want)
    # [BUG] fixed: the reference CPU kernel ignores the scale; here scale 2 is applied.
    y = fake_quantize(C_IN, "fp16", scale=2.0)
    np.testing.assert_array_equal(y[[0, 2, 3, 4]], want[[0, 2, 3, 4]])  # power-of-two scale: same grid
    assert y[6] == 65504.0 and y[7] == 70016.0  # 65519/2 → 32752 (step 16) → 65504; 70000/2 → 35008 → 70016
    assert y[5] == 131008.0  # clamps to 2·65504, not 65504
    assert_same_bits(run_model(qdq_model("fp16", [C_IN.size], scale=2.0), C_IN), y, "fp16 scale 2")


def test_vector_c_bf16_scaled() -> None:
    x = np.array([1.0, 3.14159265, -2.7182818, 0.1, 0.001], np.float32)
    scale, zp = ref.compute_float_scale(x.min(), x.max(), "bf16", scaled=True)
    assert float(scale) == 1.5707963705062866 and float(zp) == 0
    want = np.array([1.0001554489135742, 3.1415927410125732, -2.7243499755859375, 0.09970875084400177,
                     0.0010006828233599663], np.float32)
    np.testing.assert_array_equal(fake_quantize(x, "bf16", scale=scale), want)
    np.testing.assert_array_equal(fake_quantize(x, "bf16"),
                                  np.array([1.0, 3.140625, -2.71875, 0.10009765625, 0.00099945068359375], np.float32))
    assert_same_bits(run_model(qdq_model("bf16", [5], scale=float(scale)), x), want, "bf16 scaled")


# ------------------------------------------------------------------ spec test vectors D


W = np.array([-0.5, 0.1, 0.26, 0.3, 1.27], np.float32)


def test_vector_d_weights() -> None:
    s, z = ref.compute_float_scale(W.min(), W.max(), "bf16", scaled=False)
    assert (float(s), float(z)) == (1.0, 0.0)
    np.testing.assert_array_equal(fake_quantize(W, "bf16"), [-0.5, 0.10009765625, 0.259765625, 0.30078125, 1.2734375])
    s, z = ref.compute_float_scale(W.min(), W.max(), "bf16", scaled=True)
    np.testing.assert_allclose(float(s), 0.635, rtol=1e-7)
    np.testing.assert_array_equal(ref.quantize(W, "bf16", s), [-0.7890625, 0.1572265625, 0.41015625, 0.47265625, 2.0])
    s, z = ref.compute_float_scale(W.min(), W.max(), "fp16", scaled=True)
    np.testing.assert_allclose(float(s), 1.9388128e-05, rtol=1e-7)
    np.testing.assert_array_equal(ref.quantize(W, "fp16", s), [-25792, 5156, 13408, 15472, 65504])


@pytest.mark.parametrize(
    "fmt,scaled,symmetric,want",
    [
        ("bf16", False, True, (1.0, 0.0)),
        ("bf16", False, False, (1.0, 0.0)),  # [BUG] fixed: the reference gives zp ≈ −3.39e38
        ("fp16", False, False, (1.0, 0.0)),  # same defect fixed for fp16
        ("bf16", True, True, (1.5, 0.0)),
        ("bf16", True, False, (1.0, -1.0)),
        ("fp8_e4m3", True, True, (3.0 / 448, 0.0)),
        ("fp8_e5m2", True, True, (3.0 / 57344, 0.0)),
    ],
)
def test_vector_d_float_scale(fmt: str, scaled: bool, symmetric: bool, want: tuple) -> None:
    s, z = ref.compute_float_scale(-1.0, 3.0, fmt, scaled=scaled, symmetric=symmetric)
    assert s.dtype == np.float32 and z.dtype == np.float32
    assert (float(s), float(z)) == (float(np.float32(want[0])), want[1])


def test_scaled_asymmetric_bf16_round_trip_in_onnx() -> None:
    x = sample_values(10_000, 6)
    s, z = ref.compute_float_scale(-1.0, 3.0, "bf16", scaled=True, symmetric=False)
    model = qdq_model("bf16", [x.size], scale=float(s), zero_point=float(z))
    assert any(f.name == ops.FUNCTION_NAME for f in model.functions)
    assert_same_bits(run_model(model, x), fake_quantize(x, "bf16", scale=s, zero_point=z), "affine bf16")


def test_errors_name_the_bad_value() -> None:
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="fp4"):
        ref.float_type("fp4")
    with pytest.raises(ValueError, match="saturate=False"):
        fake_quantize(x, "fp8_e4m3", saturate=False)
    with pytest.raises(ValueError, match="saturate=False"):
        ops.build("fp8_e5m2", "x", "y", name="t", opset=21, saturate=False)
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        fake_quantize(x, "bf16", scale=-1.0)
    with pytest.raises(ValueError, match="zero_point must be 0"):
        fake_quantize(x, "fp8_e4m3", zero_point=1.0)
    with pytest.raises(ValueError, match="scalars"):
        fake_quantize(x, "bf16", scale=np.ones(3))
    with pytest.raises(ValueError, match="asymmetric"):
        ref.compute_float_scale(-1, 3, "fp8_e4m3", scaled=True, symmetric=False)
    with pytest.raises(ValueError, match="dtype must be"):
        ops.build("bf16", "x", "y", name="t", opset=21, dtype=np.float64)
