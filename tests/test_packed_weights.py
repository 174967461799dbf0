"""Packed weight storage (onnx_ops/packed.py): the decoded weights are bit-identical to the NumPy
reference's fake-quantized weights, in stock onnxruntime (optimised and not), for every format,
on edge cases; packed and unpacked quantized models give identical outputs; files shrink."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnxptq
from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import FreshNames
from onnxptq.onnx_ops.packed import WeightPacker

#: (format, attributes) as the presets use them, plus the non-default variants that change the layout.
FORMATS = {
    "bf16": ("bf16", {}),
    "bf16_scaled": ("bf16", {"scale": 0.375}),
    "fp16": ("fp16", {"saturate": True}),
    "fp8_e4m3": ("fp8_e4m3", {"scale": 0.03125, "saturate": True}),
    "fp8_e5m2": ("fp8_e5m2", {"scale": 3.0, "saturate": True}),
    "BFP16": ("bfp", dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=2)),
    "BFP16_compiler": ("bfp", dict(bfp_method="to_bfp", bit_width=16, block_size=8, rounding_mode=0,
                                   use_compiler_version_cpu_kernel=1)),
    "MX9": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=16, block_size=16, sub_block_size=2,
                        sub_block_shift_bits=1, rounding_mode=2)),
    "MX6": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=13, block_size=16, sub_block_size=2,
                        sub_block_shift_bits=1, rounding_mode=2)),
    "MX4": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=11, block_size=16, sub_block_size=2,
                        sub_block_shift_bits=1, rounding_mode=2)),
    "MX_ragged_sub": ("bfp", dict(bfp_method="to_bfp_prime", bit_width=14, block_size=12, sub_block_size=5,
                                  sub_block_shift_bits=2, rounding_mode=0)),
    "MXINT8": ("mx", dict(element_dtype="int8", block_size=32)),
    "MXFP8_E4M3": ("mx", dict(element_dtype="fp8_e4m3", block_size=32)),
    "MXFP8_E5M2": ("mx", dict(element_dtype="fp8_e5m2", block_size=32)),
    "MXFP6_E3M2": ("mx", dict(element_dtype="fp6_e3m2", block_size=32)),
    "MXFP6_E2M3": ("mx", dict(element_dtype="fp6_e2m3", block_size=32)),
    "MXFP4": ("mx", dict(element_dtype="fp4_e2m1", block_size=32)),
    "MXFP4_search": ("mx", dict(element_dtype="fp4_e2m1", block_size=32, scale_search=1)),
    # QuantConfig.mx_weight_scale_search=2: exponents X-1, X or X+1 per block
    "MXINT8_search2": ("mx", dict(element_dtype="int8", block_size=32, scale_search=2)),
    "MXFP8_E4M3_search2": ("mx", dict(element_dtype="fp8_e4m3", block_size=32, scale_search=2)),
    "MXFP4_search2": ("mx", dict(element_dtype="fp4_e2m1", block_size=32, scale_search=2)),
}


def _weights(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, int]]:
    """Weights (value, block axis): ragged axes, depthwise-like axes of 1, edge values."""
    conv = (rng.normal(0, 0.1, (24, 40, 3, 3))).astype(np.float32)
    conv[0] = 0.0                                     # an all-zero row of blocks
    conv[1, :, 0, 0] = -0.0
    conv[2] *= np.float32(2.0**-135)                 # subnormal-scale blocks
    conv[3] *= np.float32(1e36)                      # huge
    conv[4, 5:9] = np.float32(3.0e38)
    depthwise = rng.normal(0, 1, (16, 1, 3, 3)).astype(np.float32)
    matmul = (rng.standard_t(3, (50, 33)) * 0.05).astype(np.float32)   # heavy tails, 50 = ragged
    special = rng.normal(0, 1, (8, 70)).astype(np.float32)
    special[0, 3], special[1, 10], special[2, 40] = np.nan, np.inf, -np.inf
    special[3, :16] = np.float32(1e-40)              # float32 subnormal inputs
    vector = rng.normal(0, 4, (300,)).astype(np.float32)
    half = rng.normal(0, 1, (32, 20)).astype(np.float16)
    return {"conv": (conv, 1), "depthwise": (depthwise, 1), "matmul": (matmul, 0), "special": (special, 1),
            "vector": (vector, 0), "half": (half, 1), "last_axis": (matmul.T.copy(), -1)}


def _decode_model(packer: WeightPacker, frags: dict, dtypes: dict[str, int], shapes: dict, opset: int = 13) -> onnx.ModelProto:
    head = packer.finish()
    nodes = list(head.nodes) + [n for f in frags.values() for n in f.nodes]
    inits = list(head.initializers) + [t for f in frags.values() for t in f.initializers]
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(k, dtypes[k], list(shapes[k])) for k in frags],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8 if opset < 19 else 10)
    onnx.checker.check_model(model)
    return model


#: the block formats: their elements are codes of a block (bf16/fp16/fp8 are stored as their own dtype)
BLOCK_KEYS = sorted(k for k, (fmt, _) in FORMATS.items() if fmt in ("bfp", "mx"))


@pytest.mark.parametrize("key", BLOCK_KEYS)
def test_element_codes_by_arithmetic_equal_the_table_search(key):
    """The integer element codes are found by arithmetic (emit's cost on a large embedding); they
    must be the codes the table search gives, on every kind of unit value: exact entries of both
    signs, ±0, values between entries, exact halves, the largest entry and the one past it, NaN,
    ±Inf, tiny and huge values. FP element codes keep the search (no arithmetic table)."""
    from onnxptq.onnx_ops.packed import element_code

    fmt, attrs = FORMATS[key]
    code = element_code(fmt, attrs)
    assert code is not None, f"{key}: every block format's elements are codes of at most 8 bits"
    integer = fmt == "bfp" or attrs.get("element_dtype") == "int8"
    assert (code.step is not None) == integer
    half = 1 << (code.bits - 1)
    mags = code.table[:half].astype(np.float64)
    rng = np.random.default_rng(7)
    exact = rng.choice(mags[np.isfinite(mags)], 4000) * rng.choice([-1.0, 1.0], 4000)
    between = (rng.random(4000) * (float(mags[-1]) * 1.5)) * rng.choice([-1.0, 1.0], 4000)
    edges = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-300, -1e-300, 1e300, -1e300,
                      float(mags[-1]), -float(mags[-1]), float(mags[1]) / 2, -float(mags[1]) / 2,
                      float(mags[-1]) + float(mags[1]), float(mags[-1]) + float(mags[1]) / 2, 2.0 * float(mags[-1])])
    steps = (np.arange(-3 * half, 3 * half) * (float(mags[1]) / 2 if integer else 0.25))
    units = np.concatenate([exact, between, edges, steps, [0.0]])
    units = units[: units.size // 2 * 2].reshape(-1, 2, 1)
    assert np.array_equal(code.encode(units), code.search(units))
    # and the codes are right, not merely equal: every exact entry decodes to itself, sign included
    assert np.array_equal(code.table[code.encode(exact)].view(np.uint32), exact.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("fields_by", ["arithmetic", "table"])
@pytest.mark.parametrize("key", sorted(FORMATS))
def test_decoded_weights_are_bit_identical_to_the_reference(key, fields_by, monkeypatch):
    """Both ways of unpacking sub-byte fields (packed.TABLE_FROM): Div/Mod on small groups, a
    256-entry table on large ones; and the exponent table trimmed to the bytes used."""
    from onnxptq.onnx_ops import packed

    monkeypatch.setattr(packed, "TABLE_FROM", 0 if fields_by == "table" else 10**12)
    _check_decoded(key, 13)


#: the formats whose element codes are float8 bits (decoded by a Cast from opset 19)
FP8_KEYS = ["fp8_e4m3", "fp8_e5m2", "MXFP8_E4M3", "MXFP8_E5M2", "MXFP8_E4M3_search2"]


@pytest.mark.parametrize("key", FP8_KEYS)
def test_fp8_codes_cast_from_their_float8_type_bit_identical(key):
    """At opset ≥ 19 FP8 codes are a FLOAT8E4M3FN/E5M2 initializer + Cast (no 256-entry table,
    no Gather), and decode bit for bit as the reference (NaN, ±Inf patched, -0, subnormal scales)."""
    model = _check_decoded(key, 21)
    types = {t.data_type for t in model.graph.initializer}
    assert types & {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2}
    assert not any(t.data_type == TensorProto.FLOAT and t.dims == [256] for t in model.graph.initializer)
    assert not any(n.op_type == "Gather" and n.input[0] in {t.name for t in model.graph.initializer if list(t.dims) == [256]}
                   for n in model.graph.node)
    # the table form at the same opset: the same weights, 1 KB more
    from onnxptq.onnx_ops import packed

    old = packed.FP8_CAST
    packed.FP8_CAST = False
    try:
        table_model = _check_decoded(key, 21)
    finally:
        packed.FP8_CAST = old
    assert table_model.ByteSize() - model.ByteSize() >= 1024


def _check_decoded(key: str, opset: int) -> onnx.ModelProto:
    """Pack ``_weights`` in format ``key`` at ``opset``; assert onnxruntime decodes each packed
    weight bit for bit as the reference's fake-quantized value (optimised and not); the model."""
    fmt, base = FORMATS[key]
    packer = WeightPacker(opset, FreshNames())
    frags, dtypes, expected = {}, {}, {}
    for name, (values, axis) in _weights(np.random.default_rng(7)).items():
        attrs = dict(base, axis=axis) if fmt in ("bfp", "mx") else dict(base)
        fq = fake_quantize(values, fmt, **attrs)
        frag = packer.add(name, values, fq, fmt, attrs, f"{name}_out")
        if name in ("conv", "depthwise", "matmul", "vector", "last_axis"):
            assert frag is not None, f"{key}: {name} was not packed"
        if frag is not None:
            frags[f"{name}_out"] = frag
            dtypes[f"{name}_out"] = TensorProto.FLOAT16 if values.dtype == np.float16 else TensorProto.FLOAT
            expected[f"{name}_out"] = fq
    model = _decode_model(packer, frags, dtypes, {k: v.shape for k, v in expected.items()}, opset)
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {})))
        for name, fq in expected.items():
            got = outs[name]
            assert got.dtype == fq.dtype and got.shape == fq.shape
            u = np.uint16 if fq.dtype == np.float16 else np.uint32
            bad = np.flatnonzero(got.view(u) != fq.view(u))
            assert bad.size == 0, f"{key}/{name}: {bad.size} elements differ, e.g. {got.reshape(-1)[bad[:3]]} vs {fq.reshape(-1)[bad[:3]]}"
    return model


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MX6", "MXINT8", "MXFP4"])
def test_exponents_packed_below_a_byte_and_zero_blocks_free(monkeypatch, key):
    """Exponent bytes spanning few values are stored 2 or 4 to the byte (less the group's lowest,
    by Div/Mod), and an all-zero block's byte is not allowed to widen that span: the weight
    still decodes bit for bit, its ±0 blocks included."""
    from onnxptq.onnx_ops import packed

    monkeypatch.setattr(packed, "EXPONENT_PACK_FROM", 0)
    fmt, base = FORMATS[key]
    w = np.random.default_rng(2).normal(0, 0.1, (64, 96)).astype(np.float32)
    w[5] = 0.0
    w[9] = -0.0
    attrs = dict(base, axis=1)
    fq = fake_quantize(w, fmt, **attrs)
    packer = WeightPacker(13, FreshNames())
    frag = packer.add("w", w, fq, fmt, attrs, "w_out")
    assert frag is not None
    model = _decode_model(packer, {"w_out": frag}, {"w_out": TensorProto.FLOAT}, {"w_out": w.shape})
    exps = [t for t in model.graph.initializer if t.name.endswith("_exponents")]
    n_blocks = 64 * -(-96 // int(base.get("block_size", 8)))
    assert len(exps) == 1 and onnx.numpy_helper.to_array(exps[0]).size <= n_blocks // 2, [list(t.dims) for t in exps]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {})[0]
    assert np.array_equal(got.view(np.uint32), fq.view(np.uint32)), key


@pytest.mark.parametrize("key", ["BFP16_compiler", "MX9", "MX_ragged_sub", "MXINT8", "MXFP8_E4M3"])
def test_packing_in_row_chunks_gives_the_same_bytes(monkeypatch, key):
    """The block packer works on rows of blocks a chunk at a time (emit's system CPU on a large
    embedding); chunks of a few rows must give the very bytes one chunk gives, edge rows included."""
    from onnxptq.onnx_ops import packed

    fmt, base = FORMATS[key]

    def pack() -> list[bytes]:
        packer = WeightPacker(13, FreshNames())
        out = []
        for name, (values, axis) in _weights(np.random.default_rng(7)).items():
            attrs = dict(base, axis=axis)
            frag = packer.add(name, values, fake_quantize(values, fmt, **attrs), fmt, attrs, f"{name}_out")
            out += [] if frag is None else [t.SerializeToString() for t in frag.initializers]
        return out + [t.SerializeToString() for t in packer.finish().initializers]

    whole = pack()
    monkeypatch.setattr(packed, "CHUNK_BYTES", 3 * 8 * 16)  # 1-3 rows of blocks a chunk
    assert pack() == whole and len(whole) > 3


def _conv_matmul_model() -> onnx.ModelProto:
    """A small conv + depthwise conv + matmul graph with realistic weights (ragged channel counts)."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.2, (24, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (24, 1, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.1, (40, 24, 1, 1)).astype(np.float32)
    wm = rng.normal(0, 0.05, (40, 72)).astype(np.float32)
    bm = rng.normal(0, 0.1, (72,)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=24),
        helper.make_node("Conv", ["c2", "w3"], ["c3"]),
        helper.make_node("GlobalAveragePool", ["c3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "wm"], ["m"]),
        helper.make_node("Add", ["m", "bm"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"), (wm, "wm"), (bm, "bm"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 72])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


PRESETS = ["BF16", "FP16", "BFP16", "MX9", "MX6", "MX4", "MXINT8", "MXFP8_E4M3", "MXFP8_E5M2", "MXFP6_E3M2",
           "MXFP6_E2M3", "MXFP4"]


def test_packed_and_unpacked_models_give_identical_outputs():
    model = _conv_matmul_model()
    x = np.random.default_rng(5).normal(0, 1, (1, 3, 12, 12)).astype(np.float32)
    for preset in PRESETS:
        cfg = onnxptq.get_preset(preset).replace(activation=None)  # weights are what is packed (and fast)
        packed = onnxptq.quantize(model, cfg, None).model
        plain = onnxptq.quantize(model, cfg.replace(pack_weights=False), None).model
        assert any(t.name.startswith("packed_") or t.data_type in (TensorProto.BFLOAT16, TensorProto.FLOAT16)
                   for t in packed.graph.initializer), preset
        assert not any(t.name.startswith("packed_") for t in plain.graph.initializer), preset
        if preset.startswith("MXFP8"):  # the pipeline's opset 21: codes in their float8 type, no table
            fp8 = TensorProto.FLOAT8E4M3FN if preset.endswith("E4M3") else TensorProto.FLOAT8E5M2
            assert any(t.data_type == fp8 for t in packed.graph.initializer), preset
            assert not any(t.data_type == TensorProto.FLOAT and list(t.dims) == [256] for t in packed.graph.initializer)
        outs = []
        for m in (packed, plain):
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            outs.append(sess.run(None, {"x": x})[0])
        assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)), preset


@pytest.mark.parametrize("preset, limit", [("BF16", 0.52), ("MXINT8", 0.30)])
def test_real_model_file_shrinks(preset, limit, tmp_path):
    """PP-OCRv4 rec (10.9 MB; weights in Constant nodes): the saved file against the fp32 file.
    Weights only, so the figure is the weights' storage (the quantizer functions of the
    activations add ~60 KB, measured in bench/RESULTS.md), and the file loads and runs in stock
    onnxruntime with no custom library."""
    from testkit.models import model_path

    path = str(model_path("rec"))
    result = onnxptq.quantize(path, onnxptq.get_preset(preset).replace(activation=None), None)
    out = tmp_path / "q.onnx"
    onnx.save(result.model, out)
    ratio = os.path.getsize(out) / os.path.getsize(path)
    assert ratio <= limit, f"{preset}: file is {ratio:.3f}x fp32"
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    y = sess.run(None, {sess.get_inputs()[0].name: np.zeros((1, 3, 48, 96), np.float32)})[0]
    assert np.all(np.isfinite(y))


def test_real_model_packed_output_equals_unpacked():
    """PP-OCR cls, MX4 weights (sub-byte codes, micro-exponent shifts, depthwise blocks of 1)."""
    from testkit.models import model_path

    path = str(model_path("cls"))
    cfg = onnxptq.get_preset("MX4").replace(activation=None)
    packed = onnxptq.quantize(path, cfg, None).model
    plain = onnxptq.quantize(path, cfg.replace(pack_weights=False), None).model
    x = np.random.default_rng(0).normal(0, 1, (2, 3, 48, 192)).astype(np.float32)
    outs = []
    for m in (packed, plain):
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, {sess.get_inputs()[0].name: x})[0])
    assert np.array_equal(outs[0], outs[1])
    assert sum(t.ByteSize() for t in packed.graph.initializer) < 0.35 * sum(t.ByteSize() for t in plain.graph.initializer)


def test_mxint8_matmul_weights_run_as_matmulnbits(tmp_path):
    """weight_runtime="matmulnbits": an MXINT8 MatMul weight becomes int8 + blocked DQ whose values
    are the reference's (up to the sign of zero), and onnxruntime fuses it into MatMulNBits."""
    import collections

    rng = np.random.default_rng(0)
    k, n = 200, 96  # 200 = 6 blocks of 32 + a partial one
    w = rng.normal(0, 0.05, (k, n)).astype(np.float32)
    w[:32, 0] = 0.0
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                              initializer=[onnx.numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    cfg = onnxptq.get_preset("MXINT8").replace(activation=None)
    exact = onnxptq.quantize(model, cfg, None).model
    nbits = onnxptq.quantize(model, cfg.replace(weight_runtime="matmulnbits"), None).model
    dq = [nd for nd in nbits.graph.node if nd.op_type == "DequantizeLinear"]
    assert len(dq) == 1 and {a.name: a.i for a in dq[0].attribute} == {"axis": 0, "block_size": 32}
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in nbits.graph.initializer}
    q, s = inits[dq[0].input[0]], inits[dq[0].input[1]]
    assert q.dtype == np.int8 and s.shape == (7, n)
    decoded = q.astype(np.float32) * np.repeat(s, 32, axis=0)[:k]
    assert np.array_equal(decoded, fake_quantize(w, "mx", element_dtype="int8", block_size=32, axis=0))
    x = rng.normal(0, 1, (1, k)).astype(np.float32)

    def run(m, level=None, optimized=None):
        so = ort.SessionOptions()
        if level is not None:
            so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", str(level))
        if optimized:
            so.optimized_model_filepath = optimized
        return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    ref = run(exact)
    fast = run(nbits, optimized=str(tmp_path / "opt.onnx"))
    ops = collections.Counter(nd.op_type for nd in onnx.load(tmp_path / "opt.onnx").graph.node)
    assert ops["MatMulNBits"] == 1 and ops["MatMul"] == 0 and ops["DequantizeLinear"] == 0
    assert np.abs(fast - ref).max() <= 0.02 * np.abs(ref).max()  # int8 activations
    assert np.abs(run(nbits, level=1) - ref).max() <= 1e-5 * np.abs(ref).max()  # float arithmetic
