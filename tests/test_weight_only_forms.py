"""Weight-only int blocks: the NumPy reference, and each ONNX form held to it in stock onnxruntime.

Edge cases: an all-zero block, a K that no block size divides (the last block padded), 2/3/8 bits,
the extreme of a block being negative or positive, NaN-free ties (round half to even).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.formats import int_blocks
from onnxptq.formats.int_blocks import BlockFormat, BlockFormatError
from onnxptq.onnx_ops import weight_blocks


def _session(model: onnx.ModelProto, level: int | None = None, optimize: bool = True) -> ort.InferenceSession:
    from onnxptq.sessions import open_session

    config = {} if level is None else {"session.qdq_matmulnbits_accuracy_level": str(level)}
    return open_session(model, optimization="all" if optimize else "none", config=config)


def _model(nodes, inputs, outputs, inits, ms: bool = False) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits), opset_imports=opsets)
    m.ir_version = 10
    return m


def _weights(k: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n)).astype(np.float32)
    w[:16, 0] = 0.0  # an all-zero block in column 0
    w[40, 1] = -9.0  # a negative extreme
    w[41, 2] = 9.0  # a positive extreme
    return w


def test_rtn_symmetric_maps_the_block_extreme_to_qmin_and_rounds_half_to_even():
    fmt = BlockFormat(4, 16, True)
    w = np.zeros((16, 2), np.float32)
    w[:, 0] = np.linspace(-1, 1, 16)
    w[:3, 1] = [4.0, -1.25, 0.75]  # extreme +4 -> scale -0.5: -1.25/-0.5 = 2.5 -> 2 (half to even)
    scale, zp = int_blocks.rtn_params(w, fmt)
    assert zp is None
    assert scale[0, 1] == np.float32(-0.5)
    q = int_blocks.quantize(w, scale, zp, fmt)
    assert q[0, 1] == -8 and q[1, 1] == 2 and q[2, 1] == -2  # 0.75/-0.5 = -1.5 -> -2
    assert q.min() >= -8 and q.max() <= 7


def test_rtn_all_zero_block_has_scale_one_and_dequantizes_to_zero():
    w = np.zeros((32, 3), np.float32)
    for symmetric in (True, False):
        fmt = BlockFormat(4, 16, symmetric)
        scale, zp = int_blocks.rtn_params(w, fmt)
        assert np.all(scale == 1.0)
        assert np.all(int_blocks.fake_quantize(w, fmt) == 0.0)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_rtn_stays_in_the_bit_range_and_error_shrinks_with_bits(bits, symmetric):
    fmt = BlockFormat(bits, 32, symmetric)
    w = _weights(100, 8)
    scale, zp = int_blocks.rtn_params(w, fmt)
    q = int_blocks.quantize(w, scale, zp, fmt)
    assert q.min() >= fmt.qmin and q.max() <= fmt.qmax
    assert scale.shape == (4, 8)  # ceil(100 / 32): the last block holds 4 rows
    err = np.abs(int_blocks.dequantize(q, scale, zp, fmt) - w)
    bound = np.abs(int_blocks.expand(scale, 100, 32)) * (0.5 if symmetric else 1.0) + 1e-6
    if symmetric:  # the positive side may clip by one step (the extreme sits at qmin)
        bound = bound * 2
    assert np.all(err <= bound)


def test_bad_block_settings_name_the_option():
    with pytest.raises(BlockFormatError, match="bits=5"):
        BlockFormat(5, 32)
    with pytest.raises(BlockFormatError, match="block_size=100"):
        BlockFormat(4, 100)


@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, True), (8, False), (3, True), (2, False)])
def test_blocked_dequantizelinear_in_onnxruntime_equals_the_reference_bit_for_bit(bits, symmetric):
    fmt = BlockFormat(bits, 32, symmetric)
    w = _weights(100, 8)  # K = 100: no block size divides it
    scale, zp = int_blocks.rtn_params(w, fmt)
    q = int_blocks.quantize(w, scale, zp, fmt)
    node, inits = weight_blocks.dequantize_linear("w", q, scale, zp, fmt)
    model = _model([node], [], [helper.make_tensor_value_info("w_dq", TensorProto.FLOAT, [100, 8])], inits)
    onnx.checker.check_model(model)
    got = _session(model, optimize=False).run(None, {})[0]
    np.testing.assert_array_equal(got, int_blocks.fake_quantize(w, fmt))
    assert inits[0].data_type == {"int4": TensorProto.INT4, "uint4": TensorProto.UINT4,
                                  "int8": TensorProto.INT8, "uint8": TensorProto.UINT8}[fmt.storage]


@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, True), (8, False), (3, True)])
@pytest.mark.parametrize("k", [96, 100])
def test_matmulnbits_packing_equals_the_reference_and_the_dq_form(bits, symmetric, k):
    fmt = BlockFormat(bits, 32, symmetric)
    w = _weights(k, 24, seed=k)
    scale, zp = int_blocks.rtn_params(w, fmt)
    q = int_blocks.quantize(w, scale, zp, fmt)
    x = np.random.default_rng(1).standard_normal((3, k)).astype(np.float32)
    nodes, inits = weight_blocks.matmul_nbits("w", "x", "y", q, scale, zp, fmt, accuracy_level=1)
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    y_nbits = _session(_model(nodes, *io, inits, ms=True)).run(None, {"x": x})[0]
    ref = x @ int_blocks.fake_quantize(w, fmt)
    np.testing.assert_allclose(y_nbits, ref, rtol=1e-4, atol=1e-4)
    dq, dq_inits = weight_blocks.dequantize_linear("w", q, scale, zp, fmt)
    mm = helper.make_node("MatMul", ["x", "w_dq"], ["y"])
    y_dq = _session(_model([dq, mm], *io, dq_inits), level=1).run(None, {"x": x})[0]
    np.testing.assert_allclose(y_dq, y_nbits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("h", [96, 80])
def test_gather_block_quantized_and_matmulnbits_share_one_table(symmetric, h):
    """A tied [V, H] table: one packed initializer read by GatherBlockQuantized and MatMulNBits."""
    fmt = BlockFormat(4, 32, symmetric)
    v = 40
    table = _weights(h, v, seed=3).T.copy()  # [V, H]
    kn = np.ascontiguousarray(table.T)  # the lm_head's [K=H, N=V] view
    scale, zp = int_blocks.rtn_params(kn, fmt)
    q = int_blocks.quantize(kn, scale, zp, fmt)
    g_nodes, g_inits, packed = weight_blocks.gather_block_quantized("emb", "ids", "rows", q, scale, zp, fmt)
    m_nodes, m_inits = weight_blocks.matmul_nbits("head", "x", "logits", q, scale, zp, fmt, accuracy_level=1, packed_name=packed)
    ids = np.array([[0, 7, 39, 7]], np.int64)
    x = np.random.default_rng(2).standard_normal((2, h)).astype(np.float32)
    model = _model(g_nodes + m_nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4]),
                                       helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, h])],
                   [helper.make_tensor_value_info("rows", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)], g_inits + m_inits, ms=True)
    rows, logits = _session(model).run(None, {"ids": ids, "x": x})
    deq = int_blocks.fake_quantize(kn, fmt).T  # [V, H]
    np.testing.assert_array_equal(rows[0], deq[ids[0]])
    np.testing.assert_allclose(logits, x @ deq.T, rtol=1e-4, atol=1e-4)
    big = [t for t in g_inits + m_inits if np.prod(t.dims) >= v * h // 2]
    assert [t.name for t in big] == [packed]  # the table's bytes exist once


def test_storage_array_refuses_out_of_range_values():
    fmt = BlockFormat(3, 32, True)
    with pytest.raises(ValueError, match="int3 sym"):
        int_blocks.storage_array(np.array([[5]]), fmt)
    assert int_blocks.storage_array(np.array([[-4, 3]]), fmt).dtype == ml_dtypes.int4


@pytest.mark.parametrize("bits,symmetric", [(4, True), (4, False), (8, False), (3, True)])
def test_block_dequantize_equals_the_integer_format_reference(bits, symmetric):
    """The block-view dequantization is the blocked Q/DQ reference of formats/integer, bit for bit."""
    from onnxptq.formats import integer

    fmt = BlockFormat(bits, 32, symmetric)
    w = _weights(100, 8)
    scale, zp = int_blocks.rtn_params(w, fmt)
    q = int_blocks.quantize(w, scale, zp, fmt)
    zp_arr = np.zeros_like(scale, dtype=np.int64) if zp is None else zp
    ref = integer.dequantize(q.astype(np.int64), scale, zp_arr, axis=0, block_size=32)
    np.testing.assert_array_equal(int_blocks.dequantize(q, scale, zp, fmt), ref)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("k", [256, 200])
def test_rtn_is_byte_for_byte_onnxruntimes_matmulnbits_quantizer(symmetric, k):
    """Our RTN packs the same B, scales and zero points as onnxruntime's own quantizer (its default
    RTN config), also on a K that the block size does not divide."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    w = np.random.default_rng(k).standard_normal((k, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [numpy_helper.from_array(w, "w")])
    model = _model(graph.node, graph.input, graph.output, graph.initializer)
    quantizer = MatMulNBitsQuantizer(model, algo_config=DefaultWeightOnlyQuantConfig(block_size=128, is_symmetric=symmetric))
    quantizer.process()
    theirs = {t.name: numpy_helper.to_array(t) for t in quantizer.model.model.graph.initializer}
    fmt = BlockFormat(4, 128, symmetric)
    scale, zp = int_blocks.rtn_params(w, fmt)
    q = int_blocks.quantize(w, scale, zp, fmt)
    b = next(v for v in theirs.values() if v.dtype == np.uint8 and v.ndim == 3)
    np.testing.assert_array_equal(b, weight_blocks.pack_weight(q, fmt))
    s = next(v for v in theirs.values() if v.dtype == np.float32)
    np.testing.assert_array_equal(s.reshape(-1), scale.T.reshape(-1))
    if not symmetric:
        z = next(v for n, v in theirs.items() if n.endswith("zero_points"))
        np.testing.assert_array_equal(z.reshape(-1), weight_blocks.pack_zero_points(zp, fmt))
