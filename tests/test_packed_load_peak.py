"""The load peak of packed block weights (issue 26 item 4, branch packed16): onnxruntime's constant
folding keeps every folded step's output until its pass ends, so what a decode chain adds to the
session's peak is the sum of its steps' outputs. Computed here from the graph (static shapes, no
timing): large weights decode from their own codes in their own axis order (Cast, Mul, one Reshape;
a -0 code's fmod; a ragged axis's Concat), not from a group's code stream cut by a Split and put
back by a Reshape and a Transpose each, and they decode bit for bit as before."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, shape_inference

from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import FreshNames
from onnxptq.onnx_ops import packed
from onnxptq.onnx_ops.packed import WeightPacker
from test_packed_weights import FORMATS

#: opset of the decode model: MXFP8's codes are then float8 and cast (FP8_CAST_OPSET, 19)
OPSET = 19


def _weights() -> dict[str, tuple[np.ndarray, int]]:
    """A 3x3 conv (blocks along its input channel, 9 values after it), a MatMul weight whose block
    axis (its 120 rows) ends in a ragged block under 16- and 32-blocks, and a 1x1 conv; -0 inputs
    and values MX rounding sends to -0 among them; each at least OWN_FROM elements."""
    rng = np.random.default_rng(5)
    conv = rng.normal(0, 0.1, (128, 64, 3, 3)).astype(np.float32)
    conv[0, :, 0, 0] = -0.0
    conv[1, :16] = -1e-30
    conv[1, 16:32] = 3.0
    matmul = (rng.standard_t(3, (120, 640)) * 0.05).astype(np.float32)
    pointwise = rng.normal(0, 0.2, (256, 256, 1, 1)).astype(np.float32)
    return {"conv": (conv, 1), "matmul": (matmul, 0), "pointwise": (pointwise, 1)}


def _decode_model(key: str, weights: dict[str, tuple[np.ndarray, int]], unpacked: tuple[str, ...] = (),
                  opset: int = OPSET) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The packed weights' decode model and the reference's values; ``unpacked``: weights the
    packer must refuse (too many elements to patch), left out of the model."""
    fmt, base = FORMATS[key]
    packer = WeightPacker(opset, FreshNames())
    frags, expected = [], {}
    for name, (values, axis) in weights.items():
        attrs = dict(base, axis=axis)
        fq = fake_quantize(values, fmt, **attrs)
        frag = packer.add(name, values, fq, fmt, attrs, f"{name}_out")
        if name in unpacked:
            assert frag is None, f"{key}: {name} was packed"
            continue
        assert frag is not None, f"{key}: {name} was not packed"
        frags.append(frag)
        expected[f"{name}_out"] = fq
    head = packer.finish()
    nodes = list(head.nodes) + [n for f in frags for n in f.nodes]
    inits = list(head.initializers) + [t for f in frags for t in f.initializers]
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                                    for k, v in expected.items()], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    onnx.checker.check_model(model)
    return model, expected


def folded_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every node output of ``model`` (a graph of initializers and the nodes that decode
    them, all folded at load), from ONNX shape inference: what the folding holds at its end."""
    inferred = shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    info = {v.name: v.type.tensor_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    total = 0
    for node in model.graph.node:
        for out in node.output:
            t = info[out]
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            assert t.HasField("shape") and None not in dims, f"{node.op_type} {out}: shape not inferred"
            total += int(np.prod(dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
    return total


#: the bound per format, over the weights' float32 bytes (main before packed16: BFP16 6.89, MXINT8 6.33,
#: MXFP8_E4M3 5.33, MX9 9.39 on these weights; packed16 4.60, 4.58, 3.58, 6.29; packed17 4.34, 4.27,
#: 3.27, 6.04: the exponents' escape on uint8, the ragged weight's scales spread by a Gather, MX9's
#: shift flags by one BitwiseAnd): the
#: block-level steps (exponents, escapes: 1/8 of the elements each under BFP16's blocks of 8) are the rest
#: MX9 6.1 -> 6.15 (packed20: 6.04 -> 6.10): its exponents stored as runs, a CumSum of the flags and their Cast to int32 a block
@pytest.mark.parametrize("key, bound", [("BFP16", 4.45), ("MXINT8", 4.4), ("MXFP8_E4M3", 3.4), ("MX9", 6.15)])
def test_large_weights_decode_from_their_own_codes_with_few_full_size_steps(key, bound):
    """The values the decode chain's folded steps hold at the end of onnxruntime's folding, over the
    weights' float32 bytes: Cast + Mul + Reshape (a weight one block along its axis: no Reshape),
    MXINT8/MX9's -0 codes one fmod, the ragged MatMul weight's parts one Concat, MX9's sub-block
    flags and their Where (half-size); the group form held 5-7 copies (its Split, each weight's
    Reshape and Transpose). The weights decode bit for bit at both optimisation levels."""
    weights = _weights()
    model, expected = _decode_model(key, weights)
    _same_bits(model, expected)
    ratio = folded_bytes(model) / sum(v.nbytes for v in expected.values())
    assert ratio <= bound, f"{key}: the folded steps hold {ratio:.2f}x the weights' bytes"
    ops = {n.op_type for n in model.graph.node}
    assert "Transpose" not in ops, ops  # each weight's codes are stored in its own axis order


def test_own_codes_off_gives_the_group_form_with_the_same_values(monkeypatch):
    """``OWN_CODES = False`` keeps every weight in its group's code stream (the form before
    packed16): the same decoded bits, more folded bytes."""
    weights = _weights()
    own, expected = _decode_model("MXINT8", weights)
    monkeypatch.setattr(packed, "OWN_CODES", False)
    grouped, _ = _decode_model("MXINT8", weights)
    assert "Split" in {n.op_type for n in grouped.graph.node}
    assert folded_bytes(grouped) > 1.3 * folded_bytes(own)
    so = ort.SessionOptions()
    got = ort.InferenceSession(grouped.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {})
    for out, value in zip([o.name for o in grouped.graph.output], got):
        assert np.array_equal(value.view(np.uint32), expected[out].view(np.uint32)), out


@pytest.mark.parametrize("key", ["MX9", "MXINT8"])
def test_a_refused_large_weight_leaves_no_trace_in_the_groups(key):
    """A large weight with too many elements the format cannot hold (Inf every 7th: more than the
    patch allows) is refused after its codes, exponents, shifts and pieces went to its groups;
    they are taken back, and the weights packed after it decode bit for bit."""
    weights = _weights()
    bad = np.random.default_rng(3).normal(0, 0.1, (128, 64, 3, 3)).astype(np.float32)
    bad.reshape(-1)[::7] = np.inf
    model, expected = _decode_model(key, {"bad": (bad, 1), **weights}, unpacked=("bad",))
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    for out, value in zip([o.name for o in model.graph.output], got):
        assert np.array_equal(value.view(np.uint32), expected[out].view(np.uint32)), out


def _mixed_weights() -> dict[str, tuple[np.ndarray, int]]:
    """One conv of at least OWN_FROM elements (its own codes) and two smaller of the same layout
    (blocks along 64 input channels: the stream group of the same width) and magnitudes (their
    exponents store as well together as apart), -0 and MX's -0 among them."""
    rng = np.random.default_rng(11)
    big = rng.normal(0, 0.1, (128, 64, 3, 3)).astype(np.float32)
    big[0, :, 0, 0] = -0.0
    mid = rng.normal(0, 0.1, (64, 64, 3, 3)).astype(np.float32)
    mid[2, :8] = -0.0
    small = rng.normal(0, 0.1, (24, 64, 3, 3)).astype(np.float32)
    return {"big": (big, 1), "mid": (mid, 1), "small": (small, 1)}


def _exponent_chains(model: onnx.ModelProto) -> int:
    """How many exponent streams the decode model stores (one a chain: ``<group>_exponents``)."""
    return sum(1 for t in model.graph.initializer if t.name.endswith(("_exponents", "_exponents_flags")))


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8", "MXFP8_E4M3"])
def test_own_and_stream_weights_of_a_layout_share_one_exponent_chain(key, monkeypatch):
    """An own-codes weight and the stream weights of its layout read their block scales from one
    exponent chain, split into the stream's rows and the own weight's (packed17): one exponent
    stream, not two, fewer stored bytes than a chain each (SHARED_CHAINS off: the form before),
    the same bits at both optimisation levels."""
    weights = _mixed_weights()
    shared, expected = _decode_model(key, weights)
    monkeypatch.setattr(packed, "SHARED_CHAINS", False, raising=False)
    apart, _ = _decode_model(key, weights)
    assert _exponent_chains(apart) == 2, _exponent_chains(apart)
    assert _exponent_chains(shared) == 1, _exponent_chains(shared)
    assert shared.ByteSize() < apart.ByteSize(), (shared.ByteSize(), apart.ByteSize())
    _same_bits(shared, expected)


def _same_bits(model: onnx.ModelProto, expected: dict[str, np.ndarray]) -> None:
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for out, got in zip([o.name for o in sess.get_outputs()], sess.run(None, {})):
            bad = np.flatnonzero(got.view(np.uint32) != expected[out].view(np.uint32))
            assert bad.size == 0, f"{out}: {bad.size} elements differ"


@pytest.mark.parametrize("key", ["MXINT8", "MXFP8_E4M3"])
def test_a_ragged_weight_spreads_its_scales_by_one_gather(key, monkeypatch):
    """The MatMul weight's 120 rows end in a ragged 24-row block (blocks of 32): its codes are stored
    in its own shape, cast and multiplied by its sub-blocks' scales spread over the rows by one
    Gather (packed17), not two parts reshaped and joined by a Concat (a fourth full-size step at
    load): the same bits at both optimisation levels, no full-size Concat, fewer folded bytes."""
    weights = {"matmul": _weights()["matmul"]}
    spread, expected = _decode_model(key, weights)
    _same_bits(spread, expected)
    gathers = [n for n in spread.graph.node if n.op_type == "Gather" and any(a.name == "axis" for a in n.attribute)]
    assert len(gathers) == 1 and "Concat" in {n.op_type for n in spread.graph.node}
    monkeypatch.setattr(packed, "RAGGED_GATHER", False, raising=False)
    joined, _ = _decode_model(key, weights)
    size = expected["matmul_out"].nbytes
    assert folded_bytes(spread) <= folded_bytes(joined) - 0.6 * size, (folded_bytes(spread) / size, folded_bytes(joined) / size)


@pytest.mark.parametrize("key", ["BFP16", "MX9"])
def test_the_exponents_escape_decodes_on_uint8_from_opset_14(key):
    """Exponents by frequency with an escape (the 3x3 conv's) are decoded with uint8 Div, Mul and
    Add at opset >= 14 (ONNX's uint8 arithmetic), int32 only for CumSum and the table's Gather
    (packed17): the same bits as the int32 chain at opset 13, fewer folded bytes."""
    weights = {"conv": _weights()["conv"]}
    narrow, expected = _decode_model(key, weights, opset=14)
    wide, _ = _decode_model(key, weights, opset=13)
    _same_bits(narrow, expected)
    _same_bits(wide, expected)
    inferred = shape_inference.infer_shapes(narrow, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    divs = [n for n in narrow.graph.node if n.op_type == "Div"]
    assert divs and all(types[n.output[0]] == TensorProto.UINT8 for n in divs), [types[n.output[0]] for n in divs]
    assert folded_bytes(narrow) < folded_bytes(wide) - 0.1 * expected["conv_out"].nbytes


def test_a_shared_chain_only_where_it_stores_fewer_bytes(monkeypatch):
    """An own weight whose blocks span a dozen binades (its exponents need 4 bits) beside stream
    weights whose blocks crowd into a few (2 bits) store their exponents in fewer bytes apart than
    in one chain of 4-bit fields: two chains are kept, in fewer bytes than one forced (a chain's
    nodes priced at 10 KB), the same bits either way."""
    weights = _mixed_weights()
    rng = np.random.default_rng(11)
    big = np.exp2(rng.uniform(-12, 0, (128, 64, 3, 3))) * rng.choice([-1.0, 1.0], (128, 64, 3, 3))
    weights["big"] = (big.astype(np.float32), 1)
    apart, expected = _decode_model("BFP16", weights)
    monkeypatch.setattr(packed, "CHAIN_NODE_BYTES", 10_000, raising=False)
    forced, _ = _decode_model("BFP16", weights)
    assert _exponent_chains(apart) == 2 and _exponent_chains(forced) == 1
    assert apart.ByteSize() < forced.ByteSize(), (apart.ByteSize(), forced.ByteSize())
    _same_bits(apart, expected)
    _same_bits(forced, expected)


@pytest.mark.parametrize("key", ["MX9", "MX6", "MX4"])
def test_a_stream_groups_shifts_pick_a_half_or_whole_scale_by_where(key, monkeypatch):
    """Weights under OWN_FROM (one code stream a layout) whose sub-blocks carry 1-bit shifts: the
    shifts, unpacked as booleans in the scales' shape, pick the block scale or its half by one
    Where (packed17), where 2^-s as a float a sub-block, its Reshape and its product with the
    scales were three steps held at load: the same bits at opsets 13 and 19, at least one copy of
    the weights fewer folded, fewer stored bytes (WHERE_SHIFTS off: the form before)."""
    rng = np.random.default_rng(2)
    weights = {"a": (rng.normal(0, 0.1, (64, 64, 3, 3)).astype(np.float32), 1),
               "b": (rng.normal(0, 0.1, (32, 48, 3, 3)).astype(np.float32), 1),
               "c": (rng.normal(0, 0.1, (30, 50)).astype(np.float32), 0)}
    for opset in (13, 19):
        monkeypatch.setattr(packed, "WHERE_SHIFTS", True, raising=False)
        where, expected = _decode_model(key, weights, opset=opset)
        monkeypatch.setattr(packed, "WHERE_SHIFTS", False, raising=False)
        before, _ = _decode_model(key, weights, opset=opset)
        _same_bits(where, expected)
        assert "Where" in {n.op_type for n in where.graph.node}
        size = sum(v.nbytes for v in expected.values())
        assert folded_bytes(where) < folded_bytes(before) - size, (folded_bytes(where) / size, folded_bytes(before) / size)
        assert where.ByteSize() < before.ByteSize()


def test_a_shared_table_key_names_one_tensor():
    """The ragged weight's Range scalars and the int64 shapes share the packer's table keys space: a
    shape [32, 1] and an int32 scalar 1 of a 32-wide block were once both "i32_1" (an invalid graph
    on attacut_c MXINT8, packed17); a key reused for other values is now refused."""
    packer = WeightPacker(OPSET, FreshNames())
    name = packer._ints([32, 1])
    assert packer._ints([32, 1]) == name
    with pytest.raises(AssertionError, match="reused"):
        packer._table("i32_1", np.array(1, np.int32))
    rng = np.random.default_rng(4)
    weights = {"ragged": (rng.normal(0, 0.1, (120, 640)).astype(np.float32), 0),
               "column": (rng.normal(0, 0.1, (32, 1)).astype(np.float32), 0)}
    model, expected = _decode_model("MXINT8", weights)
    _same_bits(model, expected)


@pytest.mark.parametrize("key, bound", [("MX4", 6.5), ("MX6", 7.1)])
def test_three_and_five_bit_codes_of_a_large_group_take_one_index_a_low_byte(key, bound):
    """MX4's 3-bit and MX6's 5-bit codes of a group large enough for the byte tables (TABLE_FROM):
    one Gather of the elements from a table of (low byte, its codes' high bits, its pairs' shifts)
    built at load, indexed by an int32 a low byte (packed21). packed20's planes gave uint8 codes a
    plane, their sum and its int32 Cast a code, then the table's float and each pair's shift as a
    bool and a Where'd scale: 7.95x / 8.20x the weights' bytes held on these weights (the 4-bit
    container before packed20: 6.32x / 9.57x), rec MX4's session peak 105.8 -> 124.8 MB. The same
    bits at both optimisation levels; at opset 13 (no uint8 Add) the planes' form, the same bits."""
    rng = np.random.default_rng(3)
    weights = {"a": (rng.normal(0, 0.1, (256, 256, 3, 3)).astype(np.float32), 1),
               "b": (rng.normal(0, 0.1, (512, 512, 1, 1)).astype(np.float32), 1)}
    model, expected = _decode_model(key, weights)
    _same_bits(model, expected)
    ratio = folded_bytes(model) / sum(v.nbytes for v in expected.values())
    assert ratio <= bound, f"{key}: the folded steps hold {ratio:.2f}x the weights' bytes"
    assert not {"Where", "BitwiseAnd"} & {n.op_type for n in model.graph.node}  # the shifts are in the index
    old, expected13 = _decode_model(key, weights, opset=13)
    _same_bits(old, expected13)
