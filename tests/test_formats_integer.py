"""Integer formats: ONNX realisation == NumPy reference bit for bit; spec test vectors C and D."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import qdq_model
from onnxptq.formats import integer as ref
from onnxptq.onnx_ops import integer as ops

from _format_testing import assert_same_bits, run_model, sample_values


def quantize_weight(
    w: np.ndarray,
    fmt: str,
    *,
    symmetric: bool,
    axis: int | None = None,
    reduce_range: bool = False,
    scale_kind: str = "float",
    rmin: float | None = None,
    rmax: float | None = None,
    **scale_options: object,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, scale, zero_point)`` for a weight tensor from its min/max (per tensor or per ``axis``),
    composed from the reference's pieces as solve composes them (a test oracle, not library API).

    The integers are clipped to the same ``qrange`` the scale was chosen for. The reference tool
    clips signed weights to the symmetric range even when asymmetric (int8 never −128, spec §3.1
    [BUG]); here an asymmetric int8 weight can reach −128.
    """
    lo, hi = ref.weight_range(w, axis)
    lo = lo if rmin is None else np.asarray(rmin, dtype=np.float64)
    hi = hi if rmax is None else np.asarray(rmax, dtype=np.float64)
    scale, zp = ref.compute_scale_zp(
        lo, hi, fmt, symmetric=symmetric, reduce_range=reduce_range, scale_kind=scale_kind, **scale_options
    )
    qmin, qmax = ref.qrange(fmt, symmetric, reduce_range)
    t = ref.int_type(fmt)
    q = ref.quantize(w, fmt, scale, zp, axis if scale.size > 1 else None).astype(np.int64)
    q = np.clip(q, qmin, qmax).astype(t.dtype)
    return q, scale, zp

INT_FORMATS = ("int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32")


def _params(fmt: str, shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random positive scales (1e-3…10, or 2^-2 for exact ties) and in-range zero points of ``shape``."""
    rng = np.random.default_rng(seed)
    t = ref.int_type(fmt)
    scale = (10.0 ** rng.uniform(-3, 1, shape)).astype(np.float32)
    lo, hi = t.qmin // 2, t.qmax // 2
    zp = rng.integers(lo, hi + 1, shape, dtype=np.int64).astype(t.dtype)
    return scale, zp


# (label, shape, axis, block_size): ranks 1 to 5, axis 0/1/-1, blocked with a ragged last block.
LAYOUTS = [
    ("tensor-r1", (100_000,), None, None),
    ("axis0-r2", (40, 2500), 0, None),
    ("axis1-r3", (25, 16, 250), 1, None),
    ("axis-1-r4", (10, 10, 40, 25), -1, None),
    ("axis1-r5", (4, 5, 10, 10, 50), 1, None),
    ("block-axis1-r3", (20, 37, 128), 1, 8),
    ("block-axis-1-r2", (1000, 100), -1, 32),
    ("block-axis0-r1", (100_000,), 0, 4096),
]


def _case(fmt: str, layout: tuple, seed: int) -> tuple[np.ndarray, dict]:
    _, shape, axis, block = layout
    x = sample_values(int(np.prod(shape)), seed).reshape(shape)
    if axis is None:
        pshape: tuple[int, ...] = ()
    elif block is None:
        pshape = (shape[axis],)
    else:
        ax = axis % len(shape)
        pshape = tuple(-(-d // block) if i == ax else d for i, d in enumerate(shape))
    scale, zp = _params(fmt, pshape, seed)
    attrs = {"scale": scale, "zero_point": zp}
    if axis is not None:
        attrs["axis"] = axis
    if block is not None:
        attrs["block_size"] = block
    return x, attrs


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("layout", LAYOUTS, ids=[l[0] for l in LAYOUTS])
@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_onnx_matches_reference(fmt: str, layout: tuple, dtype: type) -> None:
    x, attrs = _case(fmt, layout, seed=INT_FORMATS.index(fmt))
    with np.errstate(over="ignore"):
        x = x.astype(dtype)  # float16: large values become ±Inf, more edge cases
    model = qdq_model(fmt, list(x.shape), dtype=dtype, **attrs)
    onnx.checker.check_model(model, full_check=True)
    assert_same_bits(run_model(model, x), fake_quantize(x, fmt, **attrs), f"{fmt} {layout[0]} {np.dtype(dtype)}")


@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_exact_ties_round_half_to_even(fmt: str) -> None:
    """x/scale = k + 0.5 exactly: both sides round to the even neighbour."""
    t = ref.int_type(fmt)
    k = np.arange(max(t.qmin, -2000), min(t.qmax, 2000), dtype=np.float64)
    x = ((k + 0.5) * 0.25).astype(np.float32)
    y = fake_quantize(x, fmt, scale=0.25)
    want = (np.clip(np.rint(k + 0.5), t.qmin, t.qmax) * 0.25).astype(np.float32)
    assert np.all(np.rint(k + 0.5) % 2 == 0)
    np.testing.assert_array_equal(y, want)
    assert_same_bits(run_model(qdq_model(fmt, [x.size], scale=0.25), x), y, fmt)


@pytest.mark.parametrize("fmt", INT_FORMATS)
def test_dtype_specific_fragments(fmt: str) -> None:
    """``dtype="float32"`` gives casts-free fragments, ``"float16"`` fixed Casts; both match."""
    x32 = sample_values(4096, 3)
    x16 = np.where(np.abs(x32) > 6e4, np.float32(1), x32).astype(np.float16)
    for dtype, x in (("float32", x32), ("float16", x16)):
        frag = ops.build(fmt, "x", "y", name="t", opset=21, scale=0.37, zero_point=1, dtype=dtype)
        assert not any(n.op_type == "CastLike" for n in frag.nodes)
        if dtype == "float32" and fmt not in ("int32", "uint32"):
            assert [n.op_type for n in frag.nodes] == ["QuantizeLinear", "DequantizeLinear"]
        model = _model(frag, x.dtype, 21, [x.size])
        assert_same_bits(run_model(model, x), fake_quantize(x, fmt, scale=0.37, zero_point=1), f"{fmt} {dtype}")


def _model(frag, dtype, opset: int, shape: list) -> onnx.ModelProto:
    """A model ``x -> y`` around a hand-assembled fragment (as the quantizer's emit step would)."""
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = onnx.helper.make_graph(
        frag.nodes, "g", [onnx.helper.make_tensor_value_info("x", elem, shape)],
        [onnx.helper.make_tensor_value_info("y", elem, shape)], initializer=frag.initializers)
    imports = [onnx.helper.make_opsetid("", opset)] + [onnx.helper.make_opsetid(d, v) for d, v in frag.opset_imports.items()]
    model = onnx.helper.make_model(graph, opset_imports=imports, functions=frag.functions)
    model.ir_version = 10
    return model


@pytest.mark.parametrize("opset", [15, 17, 21])
def test_fragments_coexist_and_function_body_follows_opset(opset: int) -> None:
    """Two fragments (int32 per-axis function + int8 per-tensor) chained in one graph, names unique."""
    a = ops.build("int32", "x", "mid", name="a", opset=opset, scale=np.array([1e-3, 2e-3, 4e-3], np.float32),
                  zero_point=np.array([0, 5, -5], np.int32), axis=1)
    b = ops.build("int8", "mid", "y", name="b", opset=opset, scale=0.05)
    assert a.functions[0].opset_import[0].version == opset
    frag = ops.QDQNodes(a.nodes + b.nodes, a.initializers + b.initializers, a.functions, a.opset_imports)
    names = [n.name for n in frag.nodes] + [t.name for t in frag.initializers]
    assert len(names) == len(set(names))
    model = _model(frag, np.float32, opset, [10, 3, 100])
    onnx.checker.check_model(model, full_check=True)
    x = sample_values(3 * 1000, 5).reshape(10, 3, 100)
    mid = fake_quantize(x, "int32", scale=np.array([1e-3, 2e-3, 4e-3], np.float32),
                        zero_point=np.array([0, 5, -5], np.int32), axis=1)
    assert_same_bits(run_model(model, x), fake_quantize(mid, "int8", scale=0.05), f"opset {opset}")


@pytest.mark.parametrize(
    "fmt,layout", [(f, l) for f in INT_FORMATS for l in (LAYOUTS[0], LAYOUTS[2], LAYOUTS[5])],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_build_dequantize(fmt: str, layout: tuple) -> None:
    """Integer initializer + DQ fragment == reference dequantize of the reference quantize."""
    x, attrs = _case(fmt, layout, seed=11)
    if fmt == "int32":
        attrs["zero_point"] = np.zeros_like(attrs["zero_point"])  # bias: standard DQ path
    q = ref.quantize(x, fmt, attrs["scale"], attrs["zero_point"], attrs.get("axis"), attrs.get("block_size"))
    frag = ops.build_dequantize(fmt, "q", "y", name="w", opset=21, **attrs)
    frag.initializers.append(onnx.numpy_helper.from_array(q, "q"))
    graph = onnx.helper.make_graph(frag.nodes, "g", [], [onnx.helper.make_tensor_value_info("y", 1, None)],
                                   initializer=frag.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    import onnxruntime as ort

    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    want = ref.dequantize(q, attrs["scale"], attrs["zero_point"], attrs.get("axis"), attrs.get("block_size"))
    assert_same_bits(got, want, f"{fmt} {layout[0]}")
    assert_same_bits(want, fake_quantize(x, fmt, **attrs), "dequantize(quantize) == fake_quantize")


# ------------------------------------------------------------------ spec test vectors C (runtime)


def test_vector_c_runtime() -> None:
    x = np.array([0.5, 1.5, 2.5, -2.5, -0.5, 300, -300], np.float32)
    np.testing.assert_array_equal(ref.quantize(x, "int8", 1.0, 0), [0, 2, 2, -2, 0, 127, -128])
    np.testing.assert_array_equal(ref.quantize(x, "uint8", 1.0, 3), [3, 5, 5, 1, 3, 255, 0])
    np.testing.assert_array_equal(fake_quantize(x, "uint8", scale=1.0, zero_point=3), [0, 2, 2, -2, 0, 252, -3])
    x16 = np.array([1.0, -1.0, 0.00390625, 70000, -70000], np.float32)
    np.testing.assert_array_equal(ref.quantize(x16, "int16", 2.0**-8, 0), [256, -256, 1, 32767, -32768])
    np.testing.assert_array_equal(fake_quantize(x16, "int16", scale=2.0**-8),
                                  np.array([1.0, -1.0, 0.00390625, 127.99609375, -128.0], np.float32))
    np.testing.assert_array_equal(ref.quantize(x16, "uint16", 2.0**-8, 100), [356, 0, 101, 65535, 0])
    x32 = np.array([1e9, -1e9, 0.5], np.float32)
    np.testing.assert_array_equal(ref.quantize(x32, "int32", 1.0, 0), [1000000000, -1000000000, 0])
    for fmt, s, zp, xs in (("int8", 1.0, 0, x), ("uint8", 1.0, 3, x), ("int16", 2.0**-8, 0, x16),
                           ("uint16", 2.0**-8, 100, x16), ("int32", 1.0, 0, x32)):
        assert_same_bits(run_model(qdq_model(fmt, [xs.size], scale=s, zero_point=zp), xs),
                         fake_quantize(xs, fmt, scale=s, zero_point=zp), fmt)


def test_nan_maps_to_qmin_like_quantizelinear() -> None:
    for fmt in INT_FORMATS:
        t = ref.int_type(fmt)
        assert ref.quantize(np.array([np.nan], np.float32), fmt, 1.0, 0)[0] == t.qmin


# ------------------------------------------------------------------ spec test vectors D (parameters)

D_RANGE = (-1.0, 2.54)


@pytest.mark.parametrize(
    "fmt,kw,want",
    [
        ("int8", dict(symmetric=True), (-127, 127, 0, 0.019999999552965164)),
        ("int8", dict(symmetric=False), (-128, 127, -56, 0.013882352970540524)),
        ("uint8", dict(symmetric=False), (0, 255, 72, 0.013882352970540524)),
        ("uint8", dict(symmetric=True), (0, 255, 128, 0.019921569153666496)),
        ("int16", dict(symmetric=True), (-32767, 32767, 0, 7.751701195957139e-05)),
        ("uint16", dict(symmetric=False), (0, 65535, 18513, 5.40169385203626e-05)),
        ("int32", dict(symmetric=True), (-2147483647, 2147483647, 0, 1.1827796519980893e-09)),
        # The reference's PowerOfTwo scales (nearest exponent), kept as pow2_rounding="nearest".
        ("int8", dict(symmetric=True, scale_kind="pow2", pow2_rounding="nearest"), (-127, 127, 0, 0.015625)),
        ("uint8", dict(symmetric=True, scale_kind="pow2", pow2_rounding="nearest"), (0, 255, 128, 0.015625)),
        ("int8", dict(symmetric=False, scale_kind="pow2", pow2_rounding="nearest"), (-128, 127, -56, 0.015625)),
        # [BUG] fixed: the default pow2 scale is rounded up, never below the min/max scale.
        ("int8", dict(symmetric=True, scale_kind="pow2"), (-127, 127, 0, 0.03125)),
        ("uint8", dict(symmetric=True, scale_kind="pow2"), (0, 255, 128, 0.03125)),
        ("int16", dict(symmetric=True, scale_kind="int16", int16_rounding="nearest"), (-32767, 32767, 0, 5 / 2**16)),
        ("int16", dict(symmetric=True, scale_kind="int16"), (-32767, 32767, 0, 6 / 2**16)),
        ("int8", dict(symmetric=True, reduce_range=True), (-64, 64, 0, 0.03968749940395355)),
    ],
)
def test_vector_d_compute_scale_zp(fmt: str, kw: dict, want: tuple) -> None:
    scale, zp = ref.compute_scale_zp(*D_RANGE, fmt, **kw)
    qmin, qmax = ref.qrange(fmt, kw["symmetric"], kw.get("reduce_range", False))
    assert (qmin, qmax, int(zp), float(scale)) == want
    assert scale.dtype == np.float32 and zp.dtype == ref.int_type(fmt).dtype


def test_vector_d_special_ranges() -> None:
    s, z = ref.compute_scale_zp(0.5, 2.54, "uint8", symmetric=False)
    assert (int(z), float(s)) == (0, 0.009960784576833248)
    s, z = ref.compute_scale_zp(0.0, 0.0, "int8", symmetric=True)
    assert (int(z), float(s)) == (0, 1.0)


W = np.array([-0.5, 0.1, 0.26, 0.3, 1.27], np.float32)


@pytest.mark.parametrize(
    "fmt,kw,zp,scale,q",
    [
        ("int8", dict(symmetric=True), 0, 0.01, [-50, 10, 26, 30, 127]),
        ("uint8", dict(symmetric=False), 72, 0.006941176, [0, 86, 109, 115, 255]),
        # [BUG] fixed: the reference gives [-127, -42, ...] (-128 never used for asymmetric int8).
        ("int8", dict(symmetric=False), -56, 0.006941176, [-128, -42, -19, -13, 127]),
        ("int16", dict(symmetric=True), 0, 3.8758506e-05, [-12900, 2580, 6708, 7740, 32767]),
        # The reference's NonOverflow (nearest pow2) clips 1.27; kept only as pow2_rounding="nearest".
        ("int8", dict(symmetric=True, scale_kind="pow2", pow2_rounding="nearest"), 0, 0.0078125,
         [-64, 13, 33, 38, 127]),
        # [BUG] fixed NonOverflow: scale 2^-6 holds 1.27 without clipping.
        ("int8", dict(symmetric=True, scale_kind="pow2"), 0, 0.015625, [-32, 6, 17, 19, 81]),
    ],
)
def test_vector_d_weights(fmt: str, kw: dict, zp: int, scale: float, q: list) -> None:
    qa, s, z = quantize_weight(W, fmt, **kw)
    assert int(z) == zp
    np.testing.assert_allclose(float(s), scale, rtol=1e-6)
    np.testing.assert_array_equal(qa, q)


def test_pow2_ceil_never_clips() -> None:
    rng = np.random.default_rng(7)
    rmax = (10.0 ** rng.uniform(-5, 5, 2000)).astype(np.float32)
    for fmt in ("int8", "int16", "int4", "uint8"):
        sym = fmt != "uint8"
        rmin = -rmax if sym else np.zeros_like(rmax)
        s_float, _ = ref.compute_scale_zp(rmin, rmax, fmt, symmetric=sym)
        s, zp = ref.compute_scale_zp(rmin, rmax, fmt, symmetric=sym, scale_kind="pow2")
        assert np.all(s >= s_float)
        assert np.all(np.log2(s) == np.round(np.log2(s)))
        qmax = ref.qrange(fmt, sym)[1]
        assert np.all((qmax - zp.astype(np.int64)) * s.astype(np.float64) >= rmax * (1 - 1e-6))
        s16, _ = ref.compute_scale_zp(rmin, rmax, fmt, symmetric=sym, scale_kind="int16")
        assert np.all(s16 >= s_float)


def test_per_channel_ranges_elementwise() -> None:
    lo = np.array([-1.0, -0.2, 0.0, -3.0])
    hi = np.array([2.54, 0.1, 0.0, 1.0])
    for fmt in ("int8", "uint8", "int4", "uint16"):
        s, z = ref.compute_scale_zp(lo, hi, fmt, symmetric=False)
        for i in range(lo.size):
            si, zi = ref.compute_scale_zp(lo[i], hi[i], fmt, symmetric=False)
            assert (s[i], z[i]) == (si, zi)


def test_weight_range_per_channel() -> None:
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10
    lo, hi = ref.weight_range(w, axis=1)
    np.testing.assert_array_equal(lo, [-10, -6, -2])
    np.testing.assert_array_equal(hi, [5, 9, 13])
    q, s, z = quantize_weight(w, "int8", symmetric=True, axis=0)
    assert s.shape == (2,) and q.dtype == np.int8 and q.shape == w.shape


def test_qrange_table() -> None:
    assert ref.qrange("int8") == (-128, 127) and ref.qrange("int8", True) == (-127, 127)
    assert ref.qrange("int8", True, True) == (-64, 64) and ref.qrange("uint8", reduce_range=True) == (0, 127)
    assert ref.qrange("int16", reduce_range=True) == (-16384, 16384)
    assert ref.qrange("uint16", reduce_range=True) == (0, 32767)
    assert ref.qrange("int32", True) == (-(2**31 - 1), 2**31 - 1) and ref.qrange("int32", reduce_range=True) == (-(2**30), 2**30)
    assert ref.qrange("uint32", reduce_range=True) == (0, 2**31 - 1)
    assert ref.qrange("int4") == (-8, 7) and ref.qrange("int4", True) == (-7, 7) and ref.qrange("uint4") == (0, 15)


def test_int32_bias() -> None:
    q, s = ref.quantize_bias(np.array([0.1, -0.2, 1e6], np.float32), 0.02, np.array([0.5, 0.25, 1e-9], np.float32))
    assert s.dtype == np.float32 and s.shape == (3,)
    assert q.dtype == np.int32 and q[0] == 10 and q[1] == -40 and q[2] == np.iinfo(np.int32).max


def test_errors_name_the_bad_value() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="int9"):
        ref.qrange("int9")
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        ref.fake_quantize(x, "int8", scale=0.0)
    with pytest.raises(ValueError, match="no axis"):
        ref.fake_quantize(x, "int8", scale=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="length 2"):
        ref.fake_quantize(x, "int8", scale=np.ones(3, np.float32), axis=0)
    with pytest.raises(ValueError, match=r"blocked scale must have shape \(2, 2\)"):
        ref.fake_quantize(x, "int8", scale=np.ones((2, 3), np.float32), axis=1, block_size=2)
    with pytest.raises(ValueError, match="scale_kind"):
        ref.compute_scale_zp(-1, 1, "int8", symmetric=True, scale_kind="log")
    with pytest.raises(ValueError, match="zero_point"):
        ops.build("int4", "x", "y", name="t", opset=21, scale=1.0, zero_point=9)
    with pytest.raises(TypeError, match="floating-point"):
        ref.fake_quantize(np.arange(3), "int8", scale=1.0)


@pytest.mark.parametrize("ratio,uses_function", [(100.0, False), (1e5, True)])
def test_blocked_guard_paths(ratio: float, uses_function: bool) -> None:
    """onnxruntime's blocked Q sends |x/scale| >= 2^31 to qmin; both the Clip guard and the function
    fallback (scales spanning more than 2^13) must saturate huge values and Inf correctly."""
    x = np.array([[3e38, -3e38, np.inf, -np.inf, 1e12, -1e12, np.nan, 1.0]], np.float32)
    scale = np.array([[1e-3, 1e-3 * ratio]], np.float32)
    attrs = dict(scale=scale, zero_point=np.array([[3, -3]], np.int8), axis=1, block_size=4)
    frag = ops.build("int8", "x", "y", name="t", opset=21, dtype="float32", **attrs)
    assert bool(frag.functions) == uses_function
    y = run_model(qdq_model("int8", [1, 8], **attrs), x)
    assert_same_bits(y, fake_quantize(x, "int8", **attrs), f"ratio {ratio}")
    assert y[0, 0] > 0 and y[0, 2] > 0 and y[0, 4] > 0
