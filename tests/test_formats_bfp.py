"""BFP (to_bfp / BFP16) and shared micro-exponents (to_bfp_prime / MX4, MX6, MX9).

Three kinds of evidence:
1. the ONNX function in onnxruntime equals the NumPy reference bit for bit (NaN where NaN) on
   log-uniform random data, edge values, exact rounding ties, ragged blocks, every rank/axis and
   float16 inputs, over a grid of attributes — both the fast path and the exact path of the body;
2. the spec's test vectors A (the reference tool's own outputs), with the [BUG] cases asserting
   the corrected behaviour;
3. independent properties: codes are integers times the block (sub-block) scale within range,
   agreement with ml_dtypes' bfloat16/float16 rounding where BFP reduces to it, and structural
   identities (a ragged sub-block equals a zero-padded one).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from onnxptq.formats import bfp as ref
import _format_testing
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq, qdq_model
from onnxptq.onnx_ops import bfp as ops

F32 = np.finfo(np.float32)
MX = {k: v for k, v in ref.PRESETS.items()}


# ----------------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=None)
def _session(attrs: tuple, rank: int, dtype: str, opset: int) -> ort.InferenceSession:
    model = qdq_model("bfp", [None] * rank, dtype=np.dtype(dtype), opset=opset, **dict(attrs))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run_onnx(x: np.ndarray, opset: int = 21, **attrs) -> np.ndarray:
    sess = _session(tuple(sorted(attrs.items())), x.ndim, x.dtype.name, opset)
    return sess.run(None, {"x": x})[0]


def assert_bits(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    gn, wn = np.isnan(got), np.isnan(want)
    assert np.array_equal(gn, wn), f"{what}: NaN positions differ at {np.argwhere(gn != wn)[:5].tolist()}"
    ui = np.uint16 if got.dtype == np.float16 else np.uint32
    g, w = got[~gn].view(ui), want[~wn].view(ui)
    bad = np.flatnonzero(g != w)
    if bad.size:
        i = bad[0]
        raise AssertionError(
            f"{what}: {bad.size} values differ; first: onnx {got[~gn][i]!r} ({g[i]:#x}) vs reference "
            f"{want[~wn][i]!r} ({w[i]:#x})"
        )


def check(x: np.ndarray, what: str = "", opset: int = 21, **attrs) -> np.ndarray:
    """ONNX == reference bit for bit; the reference leaves ``x`` untouched. Returns the result."""
    before = x.copy()
    want = fake_quantize(x, "bfp", **attrs)
    assert np.array_equal(before.view(np.uint8), x.view(np.uint8)), "reference modified its input"
    assert_bits(run_onnx(x, opset=opset, **attrs), want, f"{what} {attrs}")
    return want


def log_uniform(shape, rng) -> np.ndarray:
    mag = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), shape))
    return (mag * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


SPECIALS = np.array(
    [0.0, -0.0, 1e-45, -1e-45, 1e-40, -3e-39, F32.tiny, -F32.tiny, F32.max, -F32.max, 3.39e38,
     np.inf, -np.inf, np.nan, 1.0, -0.5, 2.0**-149 * 3, 5.9e-39],
    np.float32,
)


def with_specials(x: np.ndarray, rng) -> np.ndarray:
    """``x`` with the special values scattered (whole blocks of them, too)."""
    y = x.copy().ravel()
    idx = rng.choice(y.size, size=min(y.size, 600), replace=False)
    y[idx] = rng.choice(SPECIALS, idx.size)
    y[:16] = [np.nan] + [1.0] * 15  # a block holding only a NaN and normal values
    y[16:32] = -0.0  # a block of -0
    y[32:48] = rng.choice([1e-40, -1e-39, 0.0, -0.0, 2.0**-149], 16)  # a block of subnormals
    return y.reshape(x.shape)


def finite_specials(x: np.ndarray, rng) -> np.ndarray:
    """``with_specials`` without Inf/NaN: the body's fast branch (taken when the tensor's sum is
    finite) must handle -0, subnormals and extremes itself."""
    y = with_specials(x, rng)
    y[~np.isfinite(y)] = -F32.max
    return y


def tiny_blocks(x: np.ndarray, rng) -> np.ndarray:
    """Finite values whose blocks sit near the bottom of the exponent range (subnormals inside):
    to_bfp_prime's flush-to-zero then matters, and scales get close to the smallest subnormal."""
    mag = np.exp(rng.uniform(np.log(1e-45), np.log(1e-35), x.shape))
    return (mag * rng.choice([-1.0, 1.0], x.shape)).astype(np.float32)


def binade_edges(rng) -> np.ndarray:
    """(4, 16, 279): block maxima at 2^e, just below 2^e and at the top of a binade for every
    float32 exponent e (subnormal to max), the rest of each block random below its max — the
    exponent extraction's hardest inputs."""
    e = np.arange(-149, 128)
    tops = np.stack([np.exp2(e), np.nextafter(np.exp2(e), 0), np.exp2(e) * (2 - 2.0**-23)]).astype(np.float32)
    tops = np.nan_to_num(tops, posinf=F32.max)[:, None, :]  # (3, 1, 277)
    x = (rng.uniform(0, 1, (4, 16, 277)) * rng.choice([-1, 1], (4, 16, 277))).astype(np.float32)
    x[:3] *= tops
    x[:3, ::2] = tops * rng.choice([-1, 1], (3, 8, 277))  # a max in every block of 2, 4, 8, 16
    x[3] = np.exp2(rng.integers(-149, 128, (16, 277))).astype(np.float32)
    return np.concatenate([x, x[:, :, :2]], axis=2)


def ties(shape, attrs: dict, rng) -> np.ndarray:
    """Blocks (along axis 1) whose elements are exact rounding ties ±(k + 1/2)·scale.

    Each block gets a random exponent E and the max 1.5·2^E. For to_bfp every element is a tie
    of the block scale 2^(E+1-m); for to_bfp_prime sub-block j gets a shift s_j in 0..D, its first
    element lies in [2^(E-s_j), 2^(E-s_j+1)) (so the shift really is s_j) and every element is a
    tie of 2^(E-s_j+1-m). k = 0 gives ±scale/2, i.e. zero results and their signs.
    """
    m = attrs.get("bit_width", 16) - 9
    bs = attrs.get("block_size", 8)
    prime = attrs.get("bfp_method") == "to_bfp_prime"
    d = (1 << attrs.get("sub_block_shift_bits", 1)) - 1 if prime else 0
    k_sub = min(attrs.get("sub_block_size", 2), bs) if prime else bs
    rows, c, cols = shape
    nb = c // bs
    e = rng.integers(-20, 20, (rows, cols, nb, 1))
    pos = np.arange(bs)
    sub = pos // k_sub
    s = rng.integers(0, d + 1, (rows, cols, nb, -(-bs // k_sub)))
    s[..., 0] = 0
    s_el = s[..., sub]
    k = rng.integers(0, 2**m - 1, (rows, cols, nb, bs))
    first = (pos % k_sub) == 0
    k = np.where(first, rng.integers(2 ** (m - 1), 2**m - 1, k.shape), k) if prime else k
    x = (k + 0.5) * np.exp2(e - s_el + 1.0 - m) * rng.choice([-1.0, 1.0], k.shape)
    x[..., 0] = 1.5 * np.exp2(e[..., 0])
    return np.moveaxis(x.reshape(rows, cols, nb * bs).astype(np.float32), -1, 1).copy()


# ---------------------------------------------------------------------- 1. ONNX == reference

GRID = [
    dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=rm) for rm in (0, 1, 2)
] + [
    dict(bfp_method="to_bfp", bit_width=bw, block_size=bs, rounding_mode=rm)
    for bw, bs, rm in [(11, 2, 2), (13, 16, 0), (10, 8, 1), (24, 16, 2), (32, 8, 0), (12, 3, 2)]
] + [
    dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=rm, use_compiler_version_cpu_kernel=1)
    for rm in (0, 2)
] + [
    dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=2, convert_to_bfloat_before_bfp=1),
] + [
    dict(bfp_method="to_bfp_prime", bit_width=bw, block_size=16, sub_block_size=2, sub_block_shift_bits=1,
         rounding_mode=rm)
    for bw in (11, 13, 16) for rm in (0, 1, 2)
] + [
    dict(bfp_method="to_bfp_prime", bit_width=bw, block_size=bs, sub_block_size=k, sub_block_shift_bits=d,
         rounding_mode=rm)
    for bw, bs, k, d, rm in [
        (16, 8, 4, 2, 2), (13, 2, 2, 1, 0), (16, 16, 4, 2, 1), (11, 8, 2, 2, 2), (20, 16, 2, 3, 2),
        (32, 8, 2, 1, 2), (16, 5, 2, 1, 2), (13, 8, 3, 2, 0), (16, 4, 8, 1, 2), (14, 16, 2, 0, 1),
    ]
] + [
    dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, sub_block_size=2, sub_block_shift_bits=1,
         rounding_mode=2, convert_to_bfloat_before_bfp=1),
]


def _id(a: dict) -> str:
    return "-".join(f"{k[:3]}{v}" for k, v in a.items() if k != "bfp_method") + ("-prime" if "prime" in a["bfp_method"] else "")


@pytest.mark.parametrize("attrs", GRID, ids=_id)
def test_onnx_matches_reference(attrs):
    rng = np.random.default_rng(abs(hash(_id(attrs))) % 2**32)
    a = dict(attrs, axis=1)
    fits = log_uniform((5, 48, 420), rng)  # 100 800 values; C = 48 divides 2,3,4,8,16 → no padding
    check(fits, "log-uniform", **a)
    check(log_uniform((3, 50, 37), rng), "log-uniform ragged", **a)  # C = 50 → ragged last block
    check(with_specials(fits[:2], rng), "specials", **a)
    check(finite_specials(fits[:2], rng), "finite specials", **a)
    check(tiny_blocks(fits[:1], rng), "tiny exponents", **a)
    check(ties((4, 48, 64), a, rng), "exact ties", **a)
    check(binade_edges(rng), "binade edges", **a)


@pytest.mark.parametrize("method", ["to_bfp", "to_bfp_prime"])
@pytest.mark.parametrize(
    "shape,axis",
    [((37,), 1), ((64,), -1), ((6, 33), 0), ((6, 33), 1), ((6, 33), -1), ((2, 20, 5), 1), ((2, 3, 24), -1),
     ((2, 24, 3, 5), 1), ((2, 24, 3, 5), 3), ((2, 3, 4, 5, 18), -1), ((2, 17, 2, 3, 2), 1), ((40, 2), 0)],
)
def test_ranks_and_axes(method, shape, axis):
    rng = np.random.default_rng(len(shape) * 100 + axis)
    attrs = dict(MX["MX9"] if method == "to_bfp_prime" else MX["BFP16"], axis=axis)
    x = log_uniform(shape, rng)
    y = check(x, f"shape {shape} axis {axis}", **attrs)
    # blocks run along the axis: permuting another axis permutes the result the same way
    if x.ndim >= 2:
        other = (axis + 1) % x.ndim if axis >= 0 else 0
        perm = rng.permutation(x.shape[other])
        assert_bits(fake_quantize(np.take(x, perm, axis=other), "bfp", **attrs), np.take(y, perm, axis=other))


def run_static(x: np.ndarray, **attrs) -> tuple[np.ndarray, str]:
    return _format_testing.run_static("bfp", x, **attrs)


@pytest.mark.parametrize("attrs", [GRID[2], GRID[4], GRID[7], GRID[10], GRID[12], GRID[14], GRID[19], GRID[24], GRID[-1]],
                         ids=_id)
@pytest.mark.parametrize(
    "shape,axis",
    [((3, 48, 70), 1), ((3, 50, 37), 1), ((5, 7, 33), -1), ((33, 40), 0), ((2, 3, 17, 6), -2), ((1, 1), 1),
     ((6, 40), 1), ((2, 5, 70), 2), ((2, 3, 9, 4), 1), ((4, 1, 6), 1), ((2, 3, 40, 5), 2), ((36, 5), 0),
     ((3, 6, 2, 2), 1), ((2, 3, 4, 5), -3)],
)
def test_static_shape_bodies_match_reference(attrs, shape, axis):
    """Bodies specialised to a known block-axis length (no Pad/Slice, or constant ones), as the
    emitter builds them from shape inference: bit-exact on random data, specials and tiny blocks."""
    rng = np.random.default_rng(len(shape) * 10 + axis)
    a = dict(attrs, axis=axis)
    n = shape[axis]
    specials = with_specials(log_uniform(shape, rng), rng) if np.prod(shape) >= 48 else np.full(shape, np.inf, np.float32)
    for what, x in (("log-uniform", log_uniform(shape, rng)), ("specials", specials),
                    ("finite specials", finite_specials(log_uniform(shape, rng), rng) if np.prod(shape) >= 48
                     else np.full(shape, -0.0, np.float32)),
                    ("tiny exponents", tiny_blocks(log_uniform(shape, rng), rng))):
        got, name = run_static(x, **a)
        bs, k = a["block_size"], min(a.get("sub_block_size", 2), a["block_size"])
        whole = n < bs  # the axis is one block (to_bfp_prime: its last sub-block may be short)
        # a non-negative last axis: the transposed view, on a tensor of ops.LAST_AXIS_MIN_SIZE or more
        last = "l" if axis == len(shape) - 1 and np.prod(shape) >= ops.LAST_AXIS_MIN_SIZE else ""
        sized = ("f" if "prime" in a["bfp_method"] or not a.get("use_compiler_version_cpu_kernel") else "") + ("s" if np.prod(shape) >= 2 else "")  # f: small, no If; s: no size guard
        if "prime" in a["bfp_method"] and not last and axis != -1 and n % k == 0:
            view = f"_n{n}r{len(shape)}"  # sub-blocks tile the axis: the input's own dims, no padding
        else:
            view = (f"_c{n}" if whole else f"_p{-n % bs}") + last
        assert name.endswith(view + sized + "_f32"), name
        assert_bits(got, fake_quantize(x, "bfp", **a), f"{what} shape {shape} axis {axis} {name}")
    x16 = (log_uniform(shape, rng) * 0.01).astype(np.float16)  # within float16 range
    assert_bits(run_static(x16, **a)[0], fake_quantize(x16, "bfp", **a), f"float16 shape {shape}")


@pytest.mark.parametrize("dtype", [None, "float32"])
@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX6"])
@pytest.mark.parametrize("dims,axis", [((None, 3, None, None), 1), ((-1, 40, None, None), 1), ((None, 24, 1, 1), 1),
                                       ((None, None, 20), -1), ((None, 5, 12), 2), ((None, 2), 1)])
def test_sized_bodies_on_any_batch_and_empty_tensors(preset, dims, axis, dtype):
    """A body built for the emitter's shape (batch and spatial dims unknown, the known ones
    holding >= 2 elements) has no size guard: it must still be bit-exact on every concrete shape,
    including empty tensors (a zero batch or spatial dim) and a batch of one; with and without
    the Cast pair (``dtype``)."""
    a = dict(MX[preset], axis=axis)
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=dims, dtype=dtype, **a)
    assert frag.functions[0].name.endswith("s_f32" if dtype else "s"), frag.functions[0].name
    sym = [d if isinstance(d, int) and d > 0 else f"d{i}" for i, d in enumerate(dims)]
    sess = _format_testing.fragment_session(frag, sym)
    rng = np.random.default_rng(len(dims) * 7 + axis)
    for free in ((1, 1, 1), (3, 2, 5), (0, 4, 4), (2, 0, 3), (2, 3, 0)):
        values = iter(free)
        shape = tuple(d if isinstance(d, int) and d > 0 else next(values) for d in dims)
        for what, x in (("log-uniform", log_uniform(shape, rng)), ("tiny exponents", tiny_blocks(log_uniform(shape, rng), rng))
                        if np.prod(shape) else ("empty", np.zeros(shape, np.float32))):
            assert_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **a), f"{what} {shape}")


@pytest.mark.parametrize("dtype", [None, "float32"])
@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX6"])
@pytest.mark.parametrize("dims,axis", [((1, None, 6), 1), ((None, None), 1), ((2, None, "h", 3), 1), ((None, 5, None), -1),
                                       ((None, None, 4), 0)])
def test_ranked_bodies_bit_exact(preset, dims, axis, dtype):
    """Known rank, unknown block-axis length (a sequence axis, or a dim shape inference lost):
    one ranked body runs every length — shorter than a block, ragged, whole blocks, one element,
    empty — bit-exact, with and without the Cast pair."""
    a = dict(MX[preset], axis=axis)
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=dims, dtype=dtype, **a)
    assert "_r" in frag.functions[0].name, frag.functions[0].name
    sym = [d if isinstance(d, int) else f"d{i}" for i, d in enumerate(dims)]
    sess = _format_testing.fragment_session(frag, sym)
    rng = np.random.default_rng(len(dims) * 11 + axis)
    for length in (0, 1, 3, 8, 13, 40):
        shape = tuple(d if isinstance(d, int) else (length if d is None else 2) for d in dims)
        if not np.prod(shape):
            x = np.zeros(shape, np.float32)
            assert_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **a), f"empty {shape}")
            continue
        for what, x in (("log-uniform", log_uniform(shape, rng)), ("tiny exponents", tiny_blocks(log_uniform(shape, rng), rng)),
                        ("specials", with_specials(log_uniform(shape, rng), rng) if np.prod(shape) >= 48 else
                         np.resize(SPECIALS, shape).astype(np.float32))):
            assert_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **a), f"{what} {shape} axis {axis}")


def test_static_shape_falls_back_to_generic_body():
    """Unknown rank, rank 1 or an axis out of range: the generic body (no suffix); a known rank
    with an unknown block-axis length: the ranked body (suffix ``r<rank>``, ``q<post>``)."""
    for shape, axis in (((24,), 1), ((2, 16), 2), (None, 1)):
        frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=shape, **dict(MX["BFP16"], axis=axis))
        assert frag.functions[0].name == ops.function_name(ref.normalize_attrs(**dict(MX["BFP16"], axis=axis)), 21)
    for shape, axis, suffix in (((2, None, 5), 1, "_r3q5"), ((16, None), -1, "_r2q1"), (("b", None, "w"), 1, "_r3")):
        frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=shape, **dict(MX["BFP16"], axis=axis))
        assert frag.functions[0].name == ops.function_name(ref.normalize_attrs(**dict(MX["BFP16"], axis=axis)), 21) + suffix
    assert build_qdq("bfp", "x", "y", name="q", opset=21, shape=(2, 16, None), **MX["BFP16"]).functions[0].name.endswith("_p0s")


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX6", "MX4"])
def test_float16_inputs(preset):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 32, 41)) * np.exp(rng.uniform(-8, 8, (3, 32, 41)))).astype(np.float16)
    x.ravel()[:8] = np.array([0, -0.0, 6e-8, -6e-8, 65504, -65504, np.inf, np.nan], np.float16)
    for a in (dict(MX[preset], axis=1), dict(MX[preset], axis=1, rounding_mode=0)):
        y = check(x, "float16", **a)
        assert y.dtype == np.float16
        finite = x.astype(np.float32)
        finite[~np.isfinite(finite)] = 0
        assert_bits(y[1:], fake_quantize(finite[1:], "bfp", **a).astype(np.float16), "fp16 = fp32 path cast back")


def test_one_element_and_empty_unchanged():
    for method in ("to_bfp", "to_bfp_prime"):
        for x in (np.array([3.14159], np.float32), np.array([[np.inf]], np.float32), np.array([-1e-40], np.float32),
                  np.array([[[7.3]]], np.float16)):
            y = check(x, "one element", bfp_method=method, rounding_mode=2)
            assert_bits(y, x)
        for shape in ((0, 8), (2, 0, 3), (3, 4, 0)):  # a zero dim anywhere: the shape comes back
            empty = np.zeros(shape, np.float32)
            assert fake_quantize(empty, "bfp", bfp_method=method).shape == shape
            assert run_onnx(empty, bfp_method=method).shape == shape


@pytest.mark.parametrize("opset", [15, 17, 18, 21])
def test_body_opsets(opset):
    rng = np.random.default_rng(opset)
    x = log_uniform((2, 19, 7), rng)
    for a in (MX["BFP16"], MX["MX6"]):
        check(x, f"opset {opset}", opset=opset, **a)
    frag = build_qdq("bfp", "x", "y", name="q", opset=11, **MX["BFP16"])
    assert frag.min_opset == ops.MIN_OPSET


def test_variants_coexist_in_one_model():
    """Two specialised functions (different names) in one model, each node with the tool's attributes."""
    f1 = build_qdq("bfp", "x", "t", name="q1", opset=21, **MX["BFP16"])
    f2 = build_qdq("bfp", "t", "y", name="q2", opset=21, axis=-1, **{k: v for k, v in MX["MX4"].items()})
    assert f1.functions[0].name != f2.functions[0].name
    node = f1.nodes[0]
    assert node.domain == "onnxptq" and node.op_type.startswith("BFPQuantizeDequantize")
    names = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert names["bfp_method"] == b"to_bfp" and names["bit_width"] == 16 and names["block_size"] == 8
    assert names["rounding_mode"] == 2 and names["axis"] == 1 and "sub_block_shift_bits" in names
    graph = helper.make_graph(
        f1.nodes + f2.nodes, "two",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 16, 9])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 16, 9])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("onnxptq", 1)],
                              functions=f1.functions + f2.functions)
    model.ir_version = 10
    onnx.checker.check_model(model)
    x = log_uniform((2, 16, 9), np.random.default_rng(3))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = fake_quantize(fake_quantize(x, "bfp", **MX["BFP16"]), "bfp", axis=-1, **MX["MX4"])
    assert_bits(got, want)


# ------------------------------------------------------------------------- 2. test vectors A


def f32(*v) -> np.ndarray:
    return np.array(v, np.float32)


def both(x: np.ndarray, **attrs) -> np.ndarray:
    return check(x, "TV", **attrs)


def test_tv1_rounding_modes():
    x = f32(4.0, 0.03125, -0.03125, 0.09375, -0.09375, 0.15625, -0.15625, 7.99).reshape(1, 8)
    want = {
        0: f32(4.0, 0.0625, -0.0625, 0.125, -0.125, 0.1875, -0.1875, 7.9375),
        1: f32(4.0, 0.0625, -0.0, 0.125, -0.0625, 0.1875, -0.125, 7.9375),
        2: f32(4.0, 0.0, 0.0, 0.125, -0.125, 0.125, -0.125, 7.9375),
    }
    for rm, w in want.items():
        assert_bits(both(x, bit_width=16, block_size=8, rounding_mode=rm).ravel(), w, f"TV1 rm{rm}")  # ±0 exact


def test_tv2_tv2b():
    x = f32(0.1, 0.2, -0.3, 1.0, 3.14159, -2.5, 0.001, 7.9).reshape(1, 8)
    assert_bits(both(x, rounding_mode=2).ravel(), f32(0.125, 0.1875, -0.3125, 1.0, 3.125, -2.5, 0.0, 7.875))
    assert_bits(both(x, bit_width=13, rounding_mode=2).ravel(), f32(0.0, 0.0, -0.5, 1.0, 3.0, -2.5, 0.0, 7.5))


def test_tv3_specials():
    x = f32(np.inf, 1.0, np.nan, 0.0, -0.0, 1e-40, 3.0, -1.5).reshape(1, 8)
    assert_bits(both(x, rounding_mode=0).ravel(), f32(np.inf, 1.0, np.nan, 0.0, -0.0, 0.0, 3.0, -1.5))
    y = both(x, bfp_method="to_bfp_prime", bit_width=16, block_size=8, sub_block_size=2, sub_block_shift_bits=1,
             rounding_mode=2)
    assert np.isnan(y).all()  # TV3b: ±Inf anywhere turns the block into NaN
    assert (y.view(np.uint32) == 0x7FFFFFFF).all()  # the kernel's NaN pattern (reference side)


def test_tv4_padding():
    assert_bits(both(f32(3.0, 0.7, 0.2).reshape(1, 3), bit_width=13, rounding_mode=2).ravel(), f32(3.0, 0.75, 0.25))


def test_tv5_mx():
    x = f32(3.0, 0.7, 0.2, 0.11, -1.3, 0.05, 0.013, -0.3, 1, 2, 3, 4, 5, 6, 7, 8).reshape(2, 8)
    want = {
        11: f32(3.0, 1.0, 0.0, 0.0, -1.5, 0.0, 0.0, -0.5, 0.0, 2.0, 4.0, 4.0, 4.0, 6.0, 8.0, 8.0),
        13: f32(3.0, 0.75, 0.25, 0.125, -1.25, 0.0, 0.0, -0.25, 1, 2, 3, 4, 5, 6, 7, 8),
        16: f32(3.0, 0.6875, 0.203125, 0.109375, -1.296875, 0.046875, 0.015625, -0.296875, 1, 2, 3, 4, 5, 6, 7, 8),
    }
    for bw, w in want.items():
        y = both(x, bfp_method="to_bfp_prime", bit_width=bw, block_size=8, sub_block_size=2, sub_block_shift_bits=1,
                 rounding_mode=2, axis=1)
        np.testing.assert_array_equal(y.ravel(), w, err_msg=f"TV5 bw{bw}")


def test_tv6_shift_bits():
    x = f32(8.0, 0.5, 1.5, 1.25).reshape(1, 4)
    p = dict(bfp_method="to_bfp_prime", bit_width=13, block_size=4, sub_block_size=2, rounding_mode=2)
    np.testing.assert_array_equal(both(x, sub_block_shift_bits=1, **p).ravel(), f32(8.0, 0.0, 1.5, 1.0))
    np.testing.assert_array_equal(both(x, sub_block_shift_bits=2, **p).ravel(), f32(8.0, 0.0, 1.5, 1.25))
    np.testing.assert_array_equal(both(x, bit_width=13, block_size=4, rounding_mode=2).ravel(), f32(8.0, 0.0, 2.0, 1.0))


def test_tv7_axis0_compiler_kernel_bfloat_fp16():
    x = f32(3.0, 0.7, 0.2, 0.11, -1.3, 0.05, 0.013, -0.3).reshape(2, 4)
    np.testing.assert_array_equal(
        both(x, block_size=2, rounding_mode=2, axis=0),
        f32(3.0, 0.703125, 0.19921875, 0.109375, -1.3125, 0.046875, 0.013671875, -0.30078125).reshape(2, 4),
    )
    x7b = f32(1.999, 0.5, 0.25, -1.0, 0.001, 0.3, 1.0, 1.5).reshape(1, 8)
    np.testing.assert_array_equal(both(x7b, rounding_mode=0).ravel(), f32(1.984375, 0.5, 0.25, -1.0, 0.0, 0.296875, 1.0, 1.5))
    np.testing.assert_array_equal(
        both(x7b, rounding_mode=0, use_compiler_version_cpu_kernel=1).ravel(), f32(2.0, 0.5, 0.25, -1.0, 0.0, 0.3125, 1.0, 1.5)
    )
    # TV7c: [BUG] corrected — the caller's input is NOT rounded in place (check() asserts it).
    x7c = f32(1.00390625, 1.01171875, 3.14159, 0.3, 0.7, 0.2, 0.11, 2.0).reshape(1, 8)
    np.testing.assert_array_equal(
        both(x7c, rounding_mode=2, convert_to_bfloat_before_bfp=1).ravel(),
        f32(1.0, 1.0, 3.125, 0.3125, 0.6875, 0.1875, 0.125, 2.0),
    )
    assert x7c[0, 1] == np.float32(1.01171875)
    # TV7d
    np.testing.assert_array_equal(both(f32(3.14159)), f32(3.14159))
    x16 = np.array([3, 0.7, 0.2, 0.11, -1.3, 0.05, 0.013, -0.3], np.float16).reshape(1, 8)
    y16 = both(x16, rounding_mode=0)
    assert y16.dtype == np.float16
    np.testing.assert_array_equal(y16.ravel(), np.array([3.0, 0.6875, 0.1875, 0.125, -1.3125, 0.0625, 0.0, -0.3125], np.float16))


def test_bug_ragged_sub_block_is_a_short_last_sub_block():
    """[BUG] corrected: block_size % sub_block_size != 0 — the tool leaves garbage; here the
    trailing elements form a shorter sub-block, i.e. the same as zero-padding every block."""
    rng = np.random.default_rng(11)
    x = log_uniform((6, 5 * 7), rng)  # 7 blocks of 5 per row
    attrs = dict(bfp_method="to_bfp_prime", bit_width=13, sub_block_size=2, sub_block_shift_bits=2, rounding_mode=2, axis=1)
    y = both(x, block_size=5, **attrs)
    padded = np.concatenate([x.reshape(6, 7, 5), np.zeros((6, 7, 1), np.float32)], axis=2).reshape(6, 42)
    y6 = fake_quantize(padded, "bfp", block_size=6, **attrs).reshape(6, 7, 6)[..., :5].reshape(6, 35)
    assert_bits(y, y6)
    assert np.isfinite(y).all()


# --------------------------------------------------------------------- 3. independent checks


def _block_view(x: np.ndarray, bs: int) -> np.ndarray:
    n = x.shape[-1]
    pad = -n % bs
    return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)]).reshape(x.shape[:-1] + (-1, bs))


@pytest.mark.parametrize("bw,rm", [(16, 2), (13, 0), (11, 1)])
def test_bfp_elements_are_codes_times_block_scale(bw, rm):
    rng = np.random.default_rng(bw)
    x = log_uniform((64, 96), rng)
    y = fake_quantize(x, "bfp", bit_width=bw, block_size=8, rounding_mode=rm, axis=1)
    m = bw - 9
    xb, yb = _block_view(x, 8), _block_view(y, 8)
    _, e = np.frexp(np.abs(xb).max(-1, keepdims=True))  # amax = f·2^e, f in [0.5, 1)
    scale = np.ldexp(1.0, e - 1 - (m - 1))
    codes = yb / scale
    assert np.array_equal(codes, np.round(codes)), "not an integer multiple of the block scale"
    assert np.abs(codes).max() <= 2**m - 1
    assert np.all(np.abs(yb - xb) <= scale / 2 + (np.abs(codes) == 2**m - 1) * scale)  # nearest, or saturated


@pytest.mark.parametrize("preset", ["MX9", "MX6", "MX4"])
def test_mx_elements_are_codes_times_sub_block_scale(preset):
    rng = np.random.default_rng(1)
    a = MX[preset]
    x = log_uniform((32, 128), rng)
    x[np.abs(x) < F32.tiny] = 0
    y = fake_quantize(x, "bfp", axis=1, **a)
    m = a["bit_width"] - 9
    xs = x.reshape(32, 8, 8, 2)  # (rows, blocks, sub-blocks, 2)
    _, es = np.frexp(np.abs(xs).max(axis=(2, 3), keepdims=True))
    _, ej = np.frexp(np.abs(xs).max(axis=3, keepdims=True))
    shift = np.minimum(es - ej, 1)
    scale = np.ldexp(1.0, es - 1 - shift + 1 - m)
    codes = y.reshape(xs.shape) / scale
    assert np.array_equal(codes, np.round(codes))
    assert np.abs(codes).max() <= 2**m - 1
    # MX keeps more precision than plain BFP of the same element width in small sub-blocks
    plain = fake_quantize(x, "bfp", bit_width=a["bit_width"], block_size=16, rounding_mode=2, axis=1)
    assert np.abs(y - x).sum() < np.abs(plain - x).sum()


@pytest.mark.parametrize("method", ["to_bfp", "to_bfp_prime"])
def test_one_element_blocks_round_like_ml_dtypes(method):
    """block_size 1 = rounding each value to m significant bits, saturating at the binade top:
    m = 8 is bfloat16's significand, m = 11 float16's (round half to even, mode 2)."""
    rng = np.random.default_rng(5)
    x = (rng.uniform(1, 2, 20000) * np.exp2(rng.integers(-14, 15, 20000)) * rng.choice([-1, 1], 20000)).astype(np.float32)
    for bw, dt in ((17, ml_dtypes.bfloat16), (20, np.float16)):
        y = fake_quantize(x, "bfp", bfp_method=method, bit_width=bw, block_size=1, sub_block_size=1, rounding_mode=2)
        r = x.astype(dt).astype(np.float32)
        same_binade = np.frexp(r)[1] == np.frexp(x)[1]
        assert np.array_equal(y[same_binade], r[same_binade])
        top = np.ldexp(np.float32(1) - np.float32(2.0 ** -(bw - 9)), np.frexp(x)[1]) * np.sign(x)
        assert np.array_equal(y[~same_binade], top[~same_binade].astype(np.float32))


def test_convert_to_bfloat_matches_ml_dtypes():
    """With convert_to_bfloat_before_bfp=1 and enough BFP bits, the output is exactly bf16(x)."""
    rng = np.random.default_rng(9)
    x = (rng.uniform(1, 2, (40, 64)) * rng.choice([-1, 1], (40, 64))).astype(np.float32)
    for method in ("to_bfp", "to_bfp_prime"):
        y = both(x, bfp_method=method, bit_width=18, block_size=8, rounding_mode=2, convert_to_bfloat_before_bfp=1)
        assert_bits(y, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_mode2_zero_signs_follow_each_kernel():
    """to_bfp's py3_round gives +0 for v in [-0.5, 0) but keeps -0 for -0; to_bfp_prime keeps
    the input's sign on every zero."""
    x = f32(4.0, -0.01, -0.0, 0.0, -0.03125, 1e-30, -1e-30, 1.0).reshape(1, 8)
    y = both(x, rounding_mode=2)
    assert list(np.signbit(y.ravel())) == [False, False, True, False, False, False, False, False]
    yp = both(x, bfp_method="to_bfp_prime", rounding_mode=2)
    assert list(np.signbit(yp.ravel())) == [False, True, True, False, True, False, True, False]


def test_attribute_errors():
    x = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="bfp_method"):
        fake_quantize(x, "bfp", bfp_method="to_mx")
    with pytest.raises(ValueError, match="bit_width"):
        fake_quantize(x, "bfp", bit_width=9)
    with pytest.raises(ValueError, match="bit_width"):
        fake_quantize(x, "bfp", bit_width=33)
    with pytest.raises(ValueError, match="block_size"):
        fake_quantize(x, "bfp", block_size=0)
    with pytest.raises(ValueError, match="rounding_mode"):
        fake_quantize(x, "bfp", rounding_mode=3)
    with pytest.raises(ValueError, match="sub_block_shift_bits"):
        fake_quantize(x, "bfp", sub_block_shift_bits=-1)
    with pytest.raises(ValueError, match="axis"):
        fake_quantize(x, "bfp", axis=2)
    with pytest.raises(TypeError, match="float32 or float16"):
        fake_quantize(x.astype(np.float64), "bfp")
    with pytest.raises(ValueError, match="bfp_method"):
        build_qdq("bfp", "x", "y", name="q", opset=21, bfp_method="nope")
    # the legacy spelling is accepted
    np.testing.assert_array_equal(
        fake_quantize(x, "bfp", bfp_method="to_bfp_prime_shared"), fake_quantize(x, "bfp", bfp_method="to_bfp_prime")
    )
