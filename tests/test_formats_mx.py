"""OCP MX formats: the ONNX function is bit-exact to the NumPy reference, which follows the spec.

Differences from the reference tool asserted here on purpose: -0 stays -0 for FP elements, MXINT8
codes are symmetric (no -128), a one-element tensor is quantized, and the shared exponent is
clamped to the E8M0 range.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import _format_testing
from _format_testing import EDGE_VALUES, assert_same_bits, log_uniform, sample_values
from onnxptq.formats import MX_ELEMENT_DTYPES, fake_quantize
from onnxptq.onnx_ops import build_qdq, qdq_model
from onnxptq.formats import mx as ref
from onnxptq.onnx_ops import mx as onnx_mx

FP_ELEMENTS = [e for e in MX_ELEMENT_DTYPES if e != "int8"]
ML_DTYPES = {
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
}
VARIANTS = [("int8", 0), ("int8", 1), ("int8", 2)] + [(e, 2) for e in FP_ELEMENTS]


@functools.lru_cache(maxsize=None)
def _session(rank: int, dtype: str, opset: int = 21, **attrs) -> ort.InferenceSession:
    model = qdq_model("mx", [None] * rank, np.dtype(dtype), opset=opset, **attrs)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def onnx_mx_run(x: np.ndarray, **attrs) -> np.ndarray:
    """Run the ONNX function on ``x`` (sessions cached per rank, dtype and attributes)."""
    return _session(x.ndim, x.dtype.name, **attrs).run(None, {"x": x})[0]


def check(x: np.ndarray, context: str = "", **attrs) -> np.ndarray:
    """ONNX == reference bit for bit; return the reference."""
    want = fake_quantize(x, "mx", **attrs)
    assert_same_bits(onnx_mx_run(x, **attrs), want, f"{context} {attrs}")
    return want


# --------------------------------------------------------------------------------------------
# (1) ONNX == reference
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element_dtype,rounding_mode", VARIANTS)
def test_random_and_edge_values_bit_exact(element_dtype: str, rounding_mode: int) -> None:
    attrs = dict(element_dtype=element_dtype, block_size=32, rounding_mode=rounding_mode)
    x = sample_values(100_000, seed=1).reshape(10, 100, 100)  # 100 = 3·32 + 4: ragged blocks
    for axis in (1, 0, -1):
        check(x, f"axis {axis}", axis=axis, **attrs)  # with Inf/NaN: the masked path
    # Without Inf/NaN the function takes its fast path; (32, 3125) is not ragged along axis 0.
    finite = log_uniform(100_000, seed=9)
    finite[:12] = [0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38, -3.4e38, 3.4e38, 1, -1, 0.5]
    check(finite.reshape(10, 100, 100), "finite, ragged", axis=1, **attrs)
    check(finite.reshape(32, 3125), "finite, not ragged", axis=0, **attrs)


def _edge_blocks(block: int = 8) -> np.ndarray:
    """Blocks that hit every special path; one block per row (axis -1, block_size ``block``)."""
    rows = []
    tiny = np.float32(2.0**-149)
    for amax_exp in (-149, -140, -135, -130, -128, -127, -126, -125, -120, -118, -112, -100, 0, 100,
                     120, 126, 127):
        base = np.float32(2.0**amax_exp)
        r = np.array([1.0, -0.75, 0.5, -0.3, 0.127, 1.99, -1.999, 0.0], np.float64) * float(base)
        rows.append(np.clip(r, -3.4e38, 3.4e38))
    rows.append([tiny, -tiny, 3 * tiny, -5 * tiny, 0.0, -0.0, 7 * tiny, 2 * tiny])  # all fp32 subnormals
    rows.append([np.finfo(np.float32).max, -np.finfo(np.float32).max, 1.0, -1.0, 3e38, 1e38, 0, -0.0])
    rows.append([0.0, -0.0, 0.0, -0.0, 0.0, 0.0, -0.0, 0.0])
    rows.append([np.inf, -np.inf, np.nan, np.inf, np.nan, -np.inf, np.inf, np.nan])
    rows.append([np.inf, 1.0, np.nan, -0.0, -1.75, 1.9921875, 1.99, -2.0])
    rows.append([-0.001, -1e-30, -0.0, 0.001, 1e-30, 1.0, -1.0, 1e-45])
    rows.append([np.finfo(np.float32).tiny, -np.finfo(np.float32).tiny, 1e-38, -1e-39, 0, 0, 0, 0])
    # exact int8 ties with block max 1 (X = 0): (k + 0.5) / 64
    rows.append(np.array([64, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5], np.float64) / 64)
    rows.append(np.array([-127.5, 63.5, -63.5, 100.5, -100.5, 127.49, 0.49, -0.5], np.float64) / 64)
    out = np.array(rows, dtype=np.float32)
    return out if block == 8 else out.reshape(-1, block)


def _element_ties(element_dtype: str) -> np.ndarray:
    """Midpoints between neighbouring element values (and the values), blocks anchored at X = 0."""
    fmt = ref.ELEMENT_FORMATS[element_dtype]
    grid = np.unique(ref.quantize_elements(np.linspace(0, fmt.max_norm, 20001), fmt, 2))
    mids = (grid[1:] + grid[:-1]) / 2
    vals = np.concatenate([grid, mids, mids * (1 + 2**-20), mids * (1 - 2**-20),
                           [fmt.max_norm * 1.01, 2.0 ** (fmt.emax + 1) * (1 - 2**-23)]])
    vals = np.concatenate([vals, -vals])
    n = -(-vals.size // 7) * 7
    vals = np.resize(vals, n).reshape(-1, 7)
    anchor = np.full((vals.shape[0], 1), 2.0**fmt.emax)  # fixes the block max to 2**emax -> X = 0
    return np.concatenate([anchor, vals], axis=1).astype(np.float32)


@pytest.mark.parametrize("element_dtype,rounding_mode", VARIANTS)
def test_edge_blocks_bit_exact(element_dtype: str, rounding_mode: int) -> None:
    attrs = dict(element_dtype=element_dtype, rounding_mode=rounding_mode, axis=-1, block_size=8)
    check(_edge_blocks(), "edge blocks", **attrs)
    check(_element_ties(element_dtype), "element ties", **attrs)
    check(_element_ties("int8"), "int8-grid ties", **attrs)


@pytest.mark.parametrize("element_dtype,rounding_mode", VARIANTS)
def test_edge_blocks_plain_formulas_bit_exact(element_dtype: str, rounding_mode: int) -> None:
    """The finite edge blocks alone: the tensor's sum is finite, so the body takes its plain
    formulas (a tensor holding Inf/NaN anywhere takes the masked ones for every block), in the
    generic body and in the static one the emitter builds."""
    attrs = dict(element_dtype=element_dtype, rounding_mode=rounding_mode, axis=-1, block_size=8)
    edges = _edge_blocks()
    finite = edges[np.isfinite(edges).all(axis=1)]
    finite = finite[np.abs(finite.astype(np.float64)).sum(axis=1) < 3e38]  # no overflowing row sum
    assert finite.shape[0] >= 20 and np.isfinite(finite.astype(np.float32).sum())
    check(finite, "finite edge blocks", **attrs)
    got, name = _run_static(finite, **attrs)
    assert_same_bits(got, fake_quantize(finite, "mx", **attrs), f"static {name}")


@pytest.mark.parametrize("element_dtype,scale_search", [("int8", 0), ("int8", 1), ("fp8_e4m3", 0), ("fp4_e2m1", 1)])
def test_last_axis_transposed_view_bit_exact(element_dtype: str, scale_search: int) -> None:
    """Blocks along the last axis of a large tensor (a Gemm input) take the transposed view
    (suffix ``l``), ragged or not, plain or masked formulas."""
    for shape, axis in (((40, 300), 1), ((3, 30, 96), -1), ((300, 32), 1)):
        attrs = dict(element_dtype=element_dtype, rounding_mode=2, scale_search=scale_search, axis=axis,
                     block_size=32)
        rng = np.random.default_rng(shape[0])
        x = log_uniform(int(np.prod(shape)), seed=int(rng.integers(1 << 30))).reshape(shape)
        assert x.size >= onnx_mx.LAST_AXIS_MIN_SIZE
        for what, data in (("log-uniform", x), ("edges", _with_edges(x, rng))):
            got, name = _run_static(data, **attrs)
            assert name.endswith(f"_p{-shape[-1] % 32}l_f32"), name
            assert_same_bits(got, fake_quantize(data, "mx", **attrs), f"{what} {shape} {name}")


@pytest.mark.parametrize("element_dtype,rounding_mode", [("int8", 0), ("int8", 1), ("int8", 2), ("fp8_e4m3", 2),
                                                         ("fp6_e3m2", 2), ("fp4_e2m1", 2)])
def test_ragged_axis_tiled_view_bit_exact(element_dtype: str, rounding_mode: int) -> None:
    """A ragged block axis longer than a block, viewed as sub-blocks of gcd(n, block_size) with
    only the sub-block maxima padded (suffix ``t<k>n<n>r<rank>``): 40 channels in blocks of 32 (as
    PP-OCR cls), 72 (three blocks, the last of 8), axis 0, axis -2 of rank 4."""
    for shape, axis, k in (((2, 40, 7), 1, 8), ((3, 72, 5), 1, 8), ((100, 6), 0, 4), ((2, 3, 48, 4), -2, 16)):
        attrs = dict(element_dtype=element_dtype, rounding_mode=rounding_mode, axis=axis, block_size=32)
        rng = np.random.default_rng(sum(shape))
        x = log_uniform(int(np.prod(shape)), seed=int(rng.integers(1 << 30))).reshape(shape)
        for what, data in (("log-uniform", x), ("edges", _with_edges(x, rng)), ("edge blocks", _tile_edges(shape, axis))):
            got, name = _run_static(data, **attrs)
            assert name.endswith(f"_p{-shape[axis] % 32}t{k}n{shape[axis]}r{len(shape)}_f32"), name
            assert_same_bits(got, fake_quantize(data, "mx", **attrs), f"{what} {shape} {name}")


def _tile_edges(shape: tuple[int, ...], axis: int) -> np.ndarray:
    """The finite edge blocks' values laid along ``axis`` (the plain formulas on every scale)."""
    edges = _edge_blocks()
    vals = edges[np.isfinite(edges).all(axis=1)].ravel()
    vals = vals[np.abs(vals) < 1e37]  # keep the tensor's sum finite
    out = np.resize(vals, int(np.prod(shape))).reshape(np.moveaxis(np.empty(shape), axis, -1).shape)
    return np.ascontiguousarray(np.moveaxis(out, -1, axis)).astype(np.float32)


def test_static_bodies_on_unknown_batch_and_empty_tensors() -> None:
    """A static body (no size ``If``) built for a shape with an unknown batch runs on any batch,
    0 included, and keeps an empty tensor's shape."""
    for shape, axis, bs in (((None, 40, 5), 1, 32), ((None, 64), 1, 32), ((None, 3000), 1, 32)):
        attrs = dict(element_dtype="int8", rounding_mode=2, axis=axis, block_size=bs)
        frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **attrs)
        assert "_b" in frag.functions[0].name  # specialised
        sess = _format_testing.fragment_session(frag, shape)
        for batch in (0, 1, 3):
            n = batch * int(np.prod(shape[1:]))
            x = (sample_values(n, seed=batch) if n >= 100 else log_uniform(n, seed=batch)).reshape((batch, *shape[1:]))
            got = sess.run(None, {"x": x})[0]
            assert got.shape == x.shape
            assert_same_bits(got, fake_quantize(x, "mx", **attrs), f"{shape} batch {batch}")


@pytest.mark.parametrize("element_dtype", MX_ELEMENT_DTYPES)
def test_ranks_axes_block_sizes_bit_exact(element_dtype: str) -> None:
    x = sample_values(3 * 5 * 6 * 7 * 9, seed=2)
    shapes = [(945,), (35, 27), (5, 7, 27), (5, 7, 3, 9), (3, 5, 6, 7, 3)]
    for shape in shapes:
        xs = x[: int(np.prod(shape))].reshape(shape)
        for axis in range(-len(shape), len(shape)):
            for bs in (4, 32, 7):
                check(xs, f"shape {shape}", element_dtype=element_dtype, axis=axis, block_size=bs,
                      rounding_mode=2)
    check(x[:1].copy(), "one element", element_dtype=element_dtype, axis=1, block_size=32)
    check(x[:40].reshape(40), "rank 1 ignores axis", element_dtype=element_dtype, axis=3, block_size=32)


@pytest.mark.parametrize("element_dtype,rounding_mode", VARIANTS)
def test_float16_input(element_dtype: str, rounding_mode: int) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(20_000) * np.exp(rng.uniform(-12, 10, 20_000))).astype(np.float16)
    edges = np.array([0, -0.0, 6e-8, -6e-8, 6.1e-5, 65504, -65504, np.inf, -np.inf, np.nan, 1, -1],
                     np.float16)
    x[: edges.size] = edges
    got = check(x.reshape(20, 1000), "float16", element_dtype=element_dtype, axis=1, block_size=32,
                rounding_mode=rounding_mode)
    assert got.dtype == np.float16
    big = np.array([[65504, -65504, 60000, 1.0]], np.float16)
    for search in (0, 1, 2):  # the X + 1 candidate would give 65536 -> inf in float16: never chosen
        got = check(big, "float16 max", element_dtype=element_dtype, axis=1, block_size=4,
                    rounding_mode=rounding_mode, scale_search=search)
        assert np.isfinite(got).all()


@pytest.mark.parametrize("search", [1, 2])
@pytest.mark.parametrize("element_dtype", ["int8", "fp8_e4m3", "fp4_e2m1"])
def test_scale_search_bit_exact(element_dtype: str, search: int) -> None:
    x = sample_values(20_000, seed=4).reshape(20, 1000)
    for bs in (4, 32):
        check(x, "scale_search", element_dtype=element_dtype, axis=1, block_size=bs, scale_search=search,
              rounding_mode=2)
    check(_edge_blocks(), "scale_search edges", element_dtype=element_dtype, axis=-1, block_size=8,
          scale_search=search, rounding_mode=0)


def test_variants_coexist_in_one_model() -> None:
    """Distinct function names per variant; one model holds several; body opset follows the model."""
    frags = [build_qdq("mx", "x", "y1", name="a", opset=21, element_dtype="int8", rounding_mode=2),
             build_qdq("mx", "x", "y2", name="b", opset=21, element_dtype="fp4_e2m1", block_size=4)]
    names = {f.functions[0].name for f in frags}
    assert len(names) == 2 and all(n.startswith("MXQuantizeDequantize") for n in names)
    node = frags[0].nodes[0]
    assert node.domain == "onnxptq" and {a.name for a in node.attribute} == set(onnx_mx.ATTRIBUTES)
    assert frags[0].functions[0].opset_import[0].version == 21
    graph = helper.make_graph(
        [n for f in frags for n in f.nodes], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [2, 8]) for y in ("y1", "y2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("onnxptq", 1)],
                              functions=[f.functions[0] for f in frags])
    model.ir_version = 10
    onnx.checker.check_model(model)
    x = log_uniform(16, seed=5).reshape(2, 8)
    y1, y2 = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert_same_bits(y1, fake_quantize(x, "mx", element_dtype="int8", rounding_mode=2))
    assert_same_bits(y2, fake_quantize(x, "mx", element_dtype="fp4_e2m1", block_size=4))
    low = build_qdq("mx", "x", "y", name="q", opset=11)
    assert low.min_opset == onnx_mx.MIN_OPSET and low.functions[0].opset_import[0].version == onnx_mx.MIN_OPSET


def test_one_name_one_body() -> None:
    """A model holds one function per name, so two static shapes whose bodies differ must get
    different names (40 and 104 channels share padding 24 and sub-block 8, not the body)."""
    bodies: dict[str, bytes] = {}
    for shape in [(1, c, 3, 9) for c in (3, 8, 24, 32, 40, 48, 50, 56, 64, 72, 104, 120)] + [(4, c) for c in (40, 104, 9000)] \
            + [(c, 300) for c in (30, 40)] + [(1, None, c) for c in (64, 192)] + [(None, None), (None, 7, None)]:
        for dtype in ("int8", "fp8_e4m3"):
            for axis in (1, -1):
                frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", axis=axis,
                                 element_dtype=dtype, rounding_mode=2)
                f = frag.functions[0]
                body = f.SerializeToString()
                assert bodies.setdefault(f.name, body) == body, f"{f.name} names two bodies ({shape}, axis {axis})"


def _run_static(x: np.ndarray, **attrs) -> tuple[np.ndarray, str]:
    return _format_testing.run_static("mx", x, **attrs)


@pytest.mark.parametrize("element_dtype,rounding_mode,scale_search",
                         [("int8", 0, 0), ("int8", 2, 1), ("fp8_e4m3", 2, 0), ("fp6_e2m3", 2, 1), ("fp4_e2m1", 2, 0)])
@pytest.mark.parametrize("shape,axis,block_size",
                         [((3, 64, 20), 1, 32), ((3, 50, 9), 1, 32), ((4, 7, 30), -1, 8), ((33, 6), 0, 4),
                          ((2, 3, 10, 5), -2, 4), ((1, 1), 1, 32), ((1, 16, 5, 7), 1, 32), ((2, 24, 6, 3), 1, 32),
                          ((5, 3), 0, 8), ((3, 8, 4), -2, 8)])
def test_static_shape_bodies_bit_exact(element_dtype, rounding_mode, scale_search, shape, axis, block_size) -> None:
    """Bodies specialised to a known block-axis length (no Pad/Slice, or constant ones), as the
    emitter builds them from shape inference; random values with the edge values mixed in."""
    attrs = dict(element_dtype=element_dtype, rounding_mode=rounding_mode, scale_search=scale_search, axis=axis,
                 block_size=block_size)
    rng = np.random.default_rng(sum(shape) + axis)
    x = log_uniform(int(np.prod(shape)), seed=int(rng.integers(1 << 30))).reshape(shape)
    for what, data in (("log-uniform", x), ("edges", _with_edges(x, rng))):
        got, name = _run_static(data, **attrs)
        # an axis shorter than a block is one block of its own length (no padding)
        bs, pad = (shape[axis], 0) if shape[axis] < block_size else (block_size, -shape[axis] % block_size)
        # the whole axis one block (no scale search): formulas in x's own shape, axis made non-negative (suffix w<rank>)
        if shape[axis] <= block_size and not scale_search:
            assert name.endswith(f"_b{bs}_a{axis % len(shape)}_p0w{len(shape)}_f32"), name
        else:
            assert name.endswith(f"_b{bs}_a{axis if axis >= 0 else f'm{-axis}'}_p{pad}_f32"), name
        assert_same_bits(got, fake_quantize(data, "mx", **attrs), f"{what} {shape} axis {axis} {name}")
    x16 = (x * 0.01).astype(np.float16)  # within float16 range
    assert_same_bits(_run_static(x16, **attrs)[0], fake_quantize(x16, "mx", **attrs), f"float16 {shape}")


def _with_edges(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    y = x.copy().ravel()
    idx = rng.choice(y.size, size=min(y.size, 40), replace=False)
    y[idx] = rng.choice(EDGE_VALUES, idx.size)
    return y.reshape(x.shape)


def test_static_shape_falls_back_to_generic_body() -> None:
    """Unknown shape or rank, rank 1 or an axis out of range: the generic body; a known rank with
    an unknown block-axis length: the ranked body (suffix ``_b<bs>_a<axis>_r<rank>``). INT8 bodies
    of a tensor not known to be small keep the plain/masked If pair (suffix ``i``, last)."""
    for shape, axis, suffix in (((24,), 1, ""), ((2, 16), 2, ""), (None, 1, "i")):
        frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, axis=axis, element_dtype="int8")
        assert frag.functions[0].name == onnx_mx.function_name("int8", 0, 0) + suffix
    for shape, axis, suffix in (((2, None, 5), 1, "_b32_a1_r3q5i"), ((16, None), -1, "_b32_a1_r2q1i"),
                                (("b", None, "w"), 1, "_b32_a1_r3i")):
        frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, axis=axis, element_dtype="int8")
        assert frag.functions[0].name == onnx_mx.function_name("int8", 0, 0) + suffix


@pytest.mark.parametrize("element_dtype,rounding_mode", [("int8", 0), ("int8", 2), ("fp8_e4m3", 2), ("fp4_e2m1", 2)])
def test_ranked_bodies_bit_exact(element_dtype: str, rounding_mode: int) -> None:
    """Known rank, unknown block-axis length (a sequence axis): one body runs every length —
    shorter than a block, ragged, whole blocks — and keeps empty and one-element tensors."""
    for shape, axis in (((1, None, 6), 1), ((None, None), 1), ((2, None, "h", 3), 1), ((None, 5, None), -1)):
        attrs = dict(element_dtype=element_dtype, rounding_mode=rounding_mode, axis=axis, block_size=8)
        frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **attrs)
        assert "_r" in frag.functions[0].name
        sess = _format_testing.fragment_session(frag, shape)
        rng = np.random.default_rng(len(shape))
        for length in (0, 1, 3, 8, 13, 40):
            # every unknown dim takes ``length`` ((None, None) at length 1 is a one-element tensor)
            dims = [length if d is None else (d if isinstance(d, int) else 2) for d in shape]
            x = log_uniform(int(np.prod(dims)), seed=int(rng.integers(1 << 30))).reshape(dims)
            for what, data in (("log-uniform", x), ("edges", _with_edges(x, rng) if x.size else x)):
                got = sess.run(None, {"x": data})[0]
                assert got.shape == data.shape
                assert_same_bits(got, fake_quantize(data, "mx", **attrs), f"{what} {dims} axis {axis}")


def test_onnx_axis_out_of_range_fails() -> None:
    x = np.ones((2, 8), np.float32)
    for axis in (2, -3):
        with pytest.raises(Exception):
            onnx_mx_run(x, element_dtype="int8", axis=axis, block_size=4)


# --------------------------------------------------------------------------------------------
# (2) spec test vectors B
# --------------------------------------------------------------------------------------------

TV_IN = [3.0, 0.7, 0.2, 0.11, -1.3, 0.05, 0.013, -0.3, 100.0, 5e-5, -7.77, 0.0]
TV_OUT = {
    "int8": [3.0, 0.6875, 0.1875, 0.125, -1.296875, 0.046875, 0.015625, -0.296875, 100.0, 0.0, -8.0, 0.0],
    "fp8_e4m3": [3.0, 0.6875, 0.203125, 0.109375, -1.25, 0.05078125, 0.0126953125, -0.3125, 96.0, 0.0, -8.0, 0.0],
    "fp8_e5m2": [3.0, 0.75, 0.1875, 0.109375, -1.25, 0.046875, 0.013671875, -0.3125, 96.0,
                 5.340576171875e-05, -8.0, 0.0],
    "fp6_e3m2": [3.0, 0.75, 0.1875, 0.109375, -1.25, 0.046875, 0.01171875, -0.3125, 96.0, 0.0, -8.0, 0.0],
    "fp6_e2m3": [3.0, 0.6875, 0.1875, 0.125, -1.25, 0.0625, 0.0, -0.3125, 96.0, 0.0, -8.0, 0.0],
    "fp4_e2m1": [3.0, 0.75, 0.25, 0.0, -1.5, 0.0, 0.0, -0.25, 96.0, 0.0, -8.0, 0.0],
}


@pytest.mark.parametrize("element_dtype", MX_ELEMENT_DTYPES)
@pytest.mark.parametrize("rounding_mode", [0, 2])
def test_spec_vectors_b(element_dtype: str, rounding_mode: int) -> None:
    x = np.array([TV_IN], np.float32)
    got = check(x, "TV B", element_dtype=element_dtype, block_size=4, axis=1, rounding_mode=rounding_mode)
    assert_same_bits(got, np.array([TV_OUT[element_dtype]], np.float32))


def test_spec_vectors_b_int8_ties() -> None:
    x = np.array([[1.0, 1.0078125, -1.0078125, 0.0234375]], np.float32)
    want = {0: [1.0, 1.015625, -1.015625, 0.03125], 1: [1.0, 1.015625, -1.0, 0.03125],
            2: [1.0, 1.0, -1.0, 0.03125]}
    for rm, w in want.items():
        got = check(x, "ties", element_dtype="int8", block_size=4, rounding_mode=rm)
        assert_same_bits(got, np.array([w], np.float32))


def test_spec_vectors_b_specials() -> None:
    x = np.array([[np.inf, 1.0, np.nan, -0.0, -1.75, 1.9921875, 1.99, -2.0]], np.float32)
    got = check(x, "specials", element_dtype="int8", block_size=4, rounding_mode=2)
    assert_same_bits(got, np.array([[np.inf, 1.0, np.nan, -0.0, -1.75, 2.0, 2.0, -2.0]], np.float32))
    got = check(x, "specials", element_dtype="fp4_e2m1", block_size=4, rounding_mode=2)
    # The reference tool gives +0.0 for the -0.0 input; we keep the sign (deliberate difference).
    assert_same_bits(got, np.array([[np.inf, 1.0, np.nan, -0.0, -2.0, 2.0, 2.0, -2.0]], np.float32))


def test_int8_is_symmetric_unlike_reference_tool() -> None:
    """OCP MXINT8 leaves -128 unused: -1.999 in a block with max |x| in [1, 2) clamps to -127/64."""
    x = np.array([[-1.999, 0.5, 0.25, 1.0]], np.float32)
    got = check(x, "int8 -128", element_dtype="int8", block_size=4, rounding_mode=2)
    assert got[0, 0] == np.float32(-127 / 64)  # the reference tool gives -2.0 (code -128)


def test_one_element_tensor_is_quantized() -> None:
    """The reference tool returns a 1-element tensor unchanged; we quantize it as a block of one."""
    x = np.array([3.14159], np.float32)
    assert_same_bits(check(x, "1 elem", element_dtype="fp4_e2m1"), np.array([3.0], np.float32))
    assert_same_bits(check(x, "1 elem", element_dtype="int8"), np.array([3.15625], np.float32))


def test_empty_tensors_keep_their_shape() -> None:
    """A zero dim anywhere (not only the first) comes back as the same empty shape."""
    for shape in ((0, 8), (2, 0, 3), (3, 4, 0)):
        empty = np.zeros(shape, np.float32)
        assert fake_quantize(empty, "mx", element_dtype="int8").shape == shape
        assert onnx_mx_run(empty, element_dtype="int8").shape == shape


def test_shared_exponent_clamps_to_e8m0() -> None:
    fmt = ref.ELEMENT_FORMATS["fp8_e5m2"]
    amax = np.array([0.0, 2.0**-149, 2.0**-112, 2.0**-111, 2.0**127])
    np.testing.assert_array_equal(ref.shared_exponent(amax, fmt), [-127, -127, -127, -126, 112])
    np.testing.assert_array_equal(ref.shared_exponent(np.array([2.0**127]), ref.ELEMENT_FORMATS["int8"]), [127])
    # A block of fp32 subnormals in MXFP4: scale 2**-127, elements 0.5/1/1.5... of it
    x = np.array([[2.0**-127, 2.0**-128, 2.0**-129, -(2.0**-130)]], np.float32)
    assert_same_bits(check(x, "subnormal block", element_dtype="fp4_e2m1", block_size=4),
                     np.array([[2.0**-127, 2.0**-128, 0.0, -0.0]], np.float32))


# --------------------------------------------------------------------------------------------
# (3) element rounding agrees with ml_dtypes casts
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element_dtype", FP_ELEMENTS)
def test_element_rounding_matches_ml_dtypes(element_dtype: str) -> None:
    fmt = ref.ELEMENT_FORMATS[element_dtype]
    rng = np.random.default_rng(6)
    lim = 2.0 ** (fmt.emax + 1)
    vals = np.concatenate([rng.uniform(-lim, lim, 60_000),
                           np.exp2(rng.uniform(fmt.emin - fmt.mbits - 3, fmt.emax + 1, 60_000))
                           * rng.choice([-1, 1], 60_000),
                           _element_ties(element_dtype)[:, 1:].ravel()]).astype(np.float32)
    vals = vals[np.abs(vals) < lim]
    n = vals.size // 31 * 31
    x = np.concatenate([np.full((n // 31, 1), 2.0**fmt.emax, np.float32), vals[:n].reshape(-1, 31)], axis=1)
    got = check(x, "ml_dtypes", element_dtype=element_dtype, axis=1, block_size=32)[:, 1:].ravel()
    v = x[:, 1:].ravel()
    inside = np.abs(v) <= fmt.max_norm
    cast = v[inside].astype(ML_DTYPES[element_dtype]).astype(np.float32)
    assert_same_bits(got[inside], cast, "inside range")
    # Saturation: beyond max normal the element clamps, keeping the sign (ml_dtypes may give inf/NaN).
    np.testing.assert_array_equal(got[~inside], np.copysign(fmt.max_norm, v[~inside]).astype(np.float32))
    assert (~inside).any() and inside.sum() > 50_000


def test_int8_element_rounding_modes() -> None:
    """INT8 elements: (k + 0.5)/64 ties go half away / half up / half even; codes clamp at ±127."""
    k = np.arange(-127, 127, dtype=np.float64)
    v = (k + 0.5) / 64
    x = np.concatenate([np.ones((v.size, 1)), v[:, None]], axis=1).astype(np.float32)
    want = {0: np.where(k >= 0, k + 1, k), 1: k + 1, 2: 2 * np.round((k + 0.5) / 2)}
    for rm, codes in want.items():
        got = check(x, f"int8 rm{rm}", element_dtype="int8", axis=1, block_size=2, rounding_mode=rm)[:, 1]
        codes = np.clip(codes, -127, 127)
        np.testing.assert_array_equal(got, (codes / 64).astype(np.float32))
        assert np.signbit(got[k == -1]).all()  # -0.5/64 rounds to -0 in every mode


# --------------------------------------------------------------------------------------------
# (4) scale_search never increases the per-block squared error
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element_dtype", MX_ELEMENT_DTYPES)
def test_scale_search_never_worse(element_dtype: str) -> None:
    x = sample_values(32_000, seed=7)
    x = x[np.isfinite(x)]
    x = x[: x.size // 32 * 32].reshape(-1, 32)
    rng = np.random.default_rng(8)
    x = np.concatenate([x, rng.standard_normal((500, 32)).astype(np.float32)])
    attrs = dict(element_dtype=element_dtype, axis=1, block_size=32, rounding_mode=2)
    y0 = fake_quantize(x, "mx", **attrs).astype(np.float64)
    y1 = fake_quantize(x, "mx", scale_search=1, **attrs).astype(np.float64)
    e0 = ((y0 - x) ** 2).sum(axis=1)
    e1 = ((y1 - x) ** 2).sum(axis=1)
    assert (e1 <= e0 * (1 + 1e-12)).all()
    if element_dtype in ("fp4_e2m1", "fp8_e4m3", "int8"):
        assert (e1 < e0).any(), "the search should help some blocks"
    assert_same_bits(onnx_mx_run(x, scale_search=1, **attrs), y1.astype(np.float32), "search onnx")


# --------------------------------------------------------------------------------------------
# attributes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs,match",
    [
        (dict(element_dtype="fp8"), "element_dtype"),
        (dict(element_dtype="int8", rounding_mode=3), "rounding_mode"),
        (dict(element_dtype="int8", block_size=0), "block_size"),
        (dict(element_dtype="int8", scale_search=4), "scale_search"),
        (dict(element_dtype="int8", axis=1.5), "axis"),
        (dict(element_dtype="int8", axis=2), "axis"),
    ],
)
def test_bad_attributes(attrs: dict, match: str) -> None:
    x = np.ones((2, 8), np.float32)
    with pytest.raises((ValueError, TypeError), match=match):
        fake_quantize(x, "mx", **attrs)
    if "axis" not in attrs or isinstance(attrs["axis"], float):
        with pytest.raises((ValueError, TypeError), match=match):
            build_qdq("mx", "x", "y", name="q", opset=21, **attrs)


def test_bad_input_dtype() -> None:
    with pytest.raises(TypeError, match="float32 or float16"):
        fake_quantize(np.ones(4, np.float64), "mx")


def test_edge_values_constant_is_covered() -> None:
    """Every shared edge value passes through the random test's first block unchanged in kind."""
    y = fake_quantize(EDGE_VALUES, "mx", element_dtype="fp8_e4m3")
    assert np.isnan(y[np.isnan(EDGE_VALUES)]).all() and np.isinf(y[np.isinf(EDGE_VALUES)]).all()
