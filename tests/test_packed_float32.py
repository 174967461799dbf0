"""The packer's float32 arithmetic (onnx_ops/packed.py, issue 26 item 1): ``ElementCode.encode_scaled``
and ``_exponent_candidates`` give the same codes and exponents, bit for bit, as the float64
computation they replaced (written out here as the reference), on values built to hit every edge:
exact codes, values between codes, quotients that overflow or underflow float32 (to a subnormal or
to zero), ±0, ±Inf, NaN, subnormal inputs; and the whole packer still reproduces the reference
fake-quantized weights of real PP-OCR cls Conv weights, each group read by one Split."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import FreshNames
from onnxptq.onnx_ops import packed
from onnxptq.onnx_ops.packed import WeightPacker, block_layout, element_code

from tests.test_packed_weights import FORMATS

BLOCK_KEYS = sorted(k for k, (fmt, _) in FORMATS.items() if fmt in ("bfp", "mx"))


def _float64_encode(code: packed.ElementCode, values: np.ndarray, exponents: np.ndarray) -> np.ndarray:
    """The replaced path: float64 units ``values / 2**exponents``, then ``encode``."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        units = values.astype(np.float64) / np.ldexp(1.0, exponents)[..., None]
    return code.encode(units)


def _edge_values(code: packed.ElementCode, rng: np.random.Generator, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 rows of ``width`` and an exponent per row such that many rows are exact codes times
    ``2**exponent`` and the rest hit overflow, underflow, zeros and non-finite values."""
    half = 1 << (code.bits - 1)
    mags = code.table[:half].astype(np.float64)
    mags = mags[np.isfinite(mags)]
    exps = rng.integers(-160, 140, rows)
    exps[:8] = [-149, -140, -127, -126, -1, 0, 127, 128]
    units = rng.choice(mags, (rows, width)) * rng.choice([-1.0, 1.0], (rows, width))
    with np.errstate(over="ignore", under="ignore"):
        values = (units * np.ldexp(1.0, exps)[:, None]).astype(np.float32)
    between = rng.random((rows, width)) < 0.2  # off the grid: no code
    with np.errstate(over="ignore", under="ignore"):
        values[between] = (rng.normal(0, 1, between.sum()) * np.ldexp(1.0, np.repeat(exps, width).reshape(rows, width)[between])).astype(np.float32)
    flat = values.reshape(-1)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.4e-40, 3.4e38, -3.4e38, 1e-38], np.float32)
    where = rng.choice(flat.size, 40 * edges.size, replace=False)
    flat[where] = np.tile(edges, 40)
    # tiny values beside large exponents: the float32 quotient underflows to a subnormal or to 0
    flat[:width] = np.float32(2.0**-149)
    exps[0] = 60
    return values, exps


@pytest.mark.parametrize("key", BLOCK_KEYS)
def test_encode_scaled_matches_float64_units(key):
    fmt, attrs = FORMATS[key]
    code = element_code(fmt, attrs)
    rng = np.random.default_rng(11)
    values, exps = _edge_values(code, rng, 400, 8)
    got = code.encode_scaled(values, exps)
    want = _float64_encode(code, values, exps)
    assert got.dtype == np.uint8 and got.shape == want.shape
    mismatch = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    assert mismatch.size == 0, f"{key}: {mismatch.size} codes differ, first at value {values.reshape(-1)[mismatch[0]]!r}"
    # the test reaches both sides of every edge: exact codes (nonzero), and the underflow rows
    assert (want != 0).mean() > 0.3
    assert want[0].tolist() == [0] * values.shape[1]


def _float64_candidates(fmt: str, attrs: dict, xb: np.ndarray, layout: packed.BlockLayout) -> tuple[np.ndarray, np.ndarray]:
    """The replaced ``_exponent_candidates``: int64 exponent fields, float64 magnitudes."""
    from onnxptq.formats import mx

    bits = xb.view(np.uint32)
    e = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    if fmt == "bfp":
        if layout.shift_bits == 0:
            return np.where(e == 0xFF, 0, e).max(axis=-1), np.zeros((xb.shape[0], 1), np.int64)
        es = e.max(axis=-1)
        ej = e.reshape(xb.shape[0], layout.n_sub, layout.sub).max(axis=-1)
        return es, np.minimum(es[:, None] - ej, (1 << layout.shift_bits) - 1)
    fmt_el = mx.ELEMENT_FORMATS[str(attrs.get("element_dtype", "int8")).lower()]
    a = np.where(np.isfinite(xb), np.abs(xb.astype(np.float64)), 0.0)
    x = mx.shared_exponent(a.max(axis=-1), fmt_el)
    x = np.where(np.isnan(x), 128, x)
    return (x + 127).astype(np.int64), np.zeros((xb.shape[0], 1), np.int64)


@pytest.mark.parametrize("key", BLOCK_KEYS)
def test_exponent_candidates_match_float64(key):
    fmt, attrs = FORMATS[key]
    layout = block_layout(fmt, attrs)
    rng = np.random.default_rng(5)
    rows = 300
    with np.errstate(over="ignore"):
        xb = (rng.normal(0, 1, (rows, layout.padded)) * np.ldexp(1.0, rng.integers(-150, 128, (rows, 1)))).astype(np.float32)
    xb[0] = 0.0
    xb[1] = -0.0
    xb[2, 0], xb[3, 1], xb[4, 2] = np.inf, -np.inf, np.nan
    xb[5] = np.nan
    xb[6] = np.float32(1.4e-45)
    xb[7, -1] = np.float32(3.4e38)
    got_e, got_s = packed._exponent_candidates(fmt, attrs, xb, layout)
    want_e, want_s = _float64_candidates(fmt, attrs, xb, layout)
    assert np.array_equal(got_e, want_e) and np.array_equal(got_s, want_s)
    assert got_e.dtype == np.int64 and got_s.dtype == np.int64


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("key", ["MXINT8", "MX9", "BFP16", "MXFP8_E4M3"])
def test_packer_on_cls_weights_one_split_per_group(key, opset):
    """On every Conv weight of PP-OCR cls: the packer reproduces the reference's fake-quantized
    weights with no patch (its own NumPy check), onnxruntime decodes them bit for bit (optimised, as
    a user's session), and each group's decoded output has one reader, a Split into the weights'
    rows: a Slice per weight made onnxruntime fold each one with a copy of the whole group."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from testkit.models import model_path

    fmt, base = FORMATS[key]
    model = onnx.load(str(model_path("cls")))
    convs = {n.input[1] for n in model.graph.node if n.op_type == "Conv"}
    # this file keeps its weights in Constant nodes
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    weights.update({node.output[0]: numpy_helper.to_array(node.attribute[0].t) for node in model.graph.node
                    if node.op_type == "Constant" and node.attribute[0].name == "value"})
    packer = WeightPacker(opset, FreshNames())
    frags, expected = {}, {}
    for name in sorted(convs & set(weights)):
        values = weights[name]
        attrs = dict(base, axis=1)
        fq = fake_quantize(values, fmt, **attrs)
        frag = packer.add(name, values, fq, fmt, attrs, f"{name}_q")
        if frag is not None:
            frags[f"{name}_q"], expected[f"{name}_q"] = frag, fq
    assert len(frags) >= 10 and packer.stats.patched_elements == 0
    head = packer.finish()
    nodes = list(head.nodes) + [n for f in frags.values() for n in f.nodes]
    readers = {g.output: [n.op_type for n in nodes if g.output in n.input] for g in packer.groups.values() if g.rows}
    assert readers and all(r == ["Split"] for r in readers.values()), readers
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                                    for k, v in expected.items()],
                              initializer=list(head.initializers) + [t for f in frags.values() for t in f.initializers])
    decode = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    onnx.checker.check_model(decode)
    got = ort.InferenceSession(decode.SerializeToString(), providers=["CPUExecutionProvider"]).run(list(expected), {})
    for (name, want), value in zip(expected.items(), got):
        assert np.array_equal(value.view(np.uint32), want.view(np.uint32)), name


@pytest.mark.parametrize("width", [1, 2, 3, 5, 7, 8, 15, 16, 32])
def test_max_last_is_max(width):
    """The short-axis maximum by halving (MX9's sub-blocks of 2) is ``max(axis=-1)``, odd widths too."""
    a = np.random.default_rng(width).integers(0, 2**32, (37, 3, width), dtype=np.uint64).astype(np.uint32)
    assert np.array_equal(packed._max_last(a), a.max(axis=-1))


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_pack_fields_little_end_first(bits):
    """Fields packed little-end first, zero-padded: the bytes a reference loop writes."""
    rng = np.random.default_rng(bits)
    values = rng.integers(0, 1 << bits, 1000 + 3).astype(np.uint8)
    per = 8 // bits
    want = []
    for start in range(0, values.size, per):
        byte = 0
        for j, v in enumerate(values[start:start + per]):
            byte |= int(v) << (j * bits)
        want.append(byte)
    assert packed._pack_fields(values, bits).tolist() == want
