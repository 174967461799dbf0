"""Packed block storage, its byte layout (onnx_ops/packed.py, issue 26 item 2, branch blockfile8):
blocks of one element store one code and no micro-exponent shift, and exponent bytes that span
more than 16 values are stored in planes of 4, 2 and 1 bits. Each layout decodes bit for bit to
the NumPy reference's fake-quantized weight in stock onnxruntime, and stores fewer bytes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import FreshNames
from onnxptq.onnx_ops import packed
from onnxptq.pipeline import lean_file
from onnxptq.onnx_ops.packed import WeightPacker, element_code, exponent_planes, one_element_layout
from test_packed_weights import FORMATS as ALL_FORMATS

#: the block formats whose layouts these tests touch (attributes as the presets set them: test_packed_weights' table)
FORMATS = {k: ALL_FORMATS[k] for k in ("BFP16", "MX9", "MX6", "MX4", "MXINT8", "MXINT8_search2", "MXFP4", "MXFP6_E3M2")}


def _pack_and_run(key: str, weights: dict[str, tuple[np.ndarray, int]], optional: tuple[str, ...] = (),
                  opset: int = 13) -> tuple[onnx.ModelProto, dict]:
    """Pack ``weights`` (value, block axis) in one packer, decode them in onnxruntime; assert every
    decoded weight equals the reference's bit for bit (``optional`` ones may stay unpacked: too
    many elements to patch). Returns the decode model and initializers."""
    fmt, base = FORMATS[key]
    packer = WeightPacker(opset, FreshNames())
    frags, expected = {}, {}
    for name, (values, axis) in weights.items():
        attrs = dict(base, axis=axis)
        fq = fake_quantize(values, fmt, **attrs)
        frag = packer.add(name, values, fq, fmt, attrs, f"{name}_out")
        if frag is None and name in optional:
            continue
        assert frag is not None, f"{key}: {name} was not packed"
        frags[f"{name}_out"], expected[f"{name}_out"] = frag, fq
    head = packer.finish()
    nodes = list(head.nodes) + [n for f in frags.values() for n in f.nodes]
    inits = list(head.initializers) + [t for f in frags.values() for t in f.initializers]
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                                    for k, v in expected.items()], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        for out, got in zip([o.name for o in sess.get_outputs()], sess.run(None, {})):
            want = expected[out]
            bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            assert bad.size == 0, f"{key}/{out}: {bad.size} elements differ"
    return model, {t.name: t for t in model.graph.initializer}


@pytest.mark.parametrize("key", ["MX9", "MX6", "MX4"])
def test_blocks_of_one_element_store_one_code_and_no_shift(key):
    """A conv with one input channel (blocks of 1 along it) under a format with sub-block shifts:
    the block is its own largest sub-block, so its shift is 0; it is stored as one code per
    element (MX9: one byte; MX6: 6 bits; MX4: 4 bits), with no shift field and no padding code."""
    rng = np.random.default_rng(11)
    one = rng.normal(0, 0.3, (96, 1, 3, 3)).astype(np.float32)      # 864 blocks of one element
    wide = rng.normal(0, 0.1, (32, 48)).astype(np.float32)           # whole blocks: shifted
    _, inits = _pack_and_run(key, {"one": (one, 1), "wide": (wide, 1)})
    w1 = {n[n.index("_w1_") + 4:]: t for n, t in inits.items() if "_w1_" in n}
    assert "shifts" not in w1, sorted(w1)
    bits = {"MX9": 8, "MX6": 6, "MX4": 4}[key]
    stored = sum(onnx.numpy_helper.to_array(t).size for k, t in w1.items() if k.startswith("codes"))
    assert stored * 8 <= one.size * bits + 32, (key, stored, one.size)  # (6-bit planes round up to 4 codes)
    # the whole blocks keep their shifts
    assert any(n.endswith("_w16_shifts") for n in inits), sorted(inits)


def test_exponent_planes_hold_every_span():
    """Planes are 4, 2 or 1 bits wide, cover exactly the bits the span needs (one plane where 1, 2
    or 4 bits do), and a byte from 8 bits."""
    for top in range(256):
        planes = exponent_planes(top)
        need = max(1, top.bit_length())
        if need >= 8:
            assert planes == [(8, 0)]
            continue
        assert all(b in (1, 2, 4) for b, _ in planes)
        assert sum(b for b, _ in planes) == need
        assert [at for _, at in planes] == list(np.cumsum([0] + [b for b, _ in planes])[:-1])


@pytest.mark.parametrize("key, span", [("BFP16", 20), ("BFP16", 40), ("MX9", 70), ("MXINT8", 24), ("MXFP4", 100)])
def test_exponents_spanning_more_than_16_values_are_stored_in_planes(monkeypatch, key, span):
    """Rows scaled over ``span`` binades: the exponent bytes less the lowest need 5-7 bits; they are
    stored in planes (fewer bytes than one a block) and decode bit for bit, ±0 blocks included."""
    monkeypatch.setattr(packed, "EXPONENT_PACK_FROM", 0)
    rng = np.random.default_rng(span)
    w = rng.normal(0, 1, (span * 4, 64)).astype(np.float32)
    w *= np.ldexp(np.float32(1), np.repeat(np.arange(span), 4) - span // 2)[:, None].astype(np.float32)
    w[3] = 0.0
    w[7] = -0.0
    _, inits = _pack_and_run(key, {"w": (w, 1)})
    block = int(FORMATS[key][1]["block_size"])
    rows = w.shape[0] * -(-w.shape[1] // block)
    exps = [onnx.numpy_helper.to_array(t) for n, t in inits.items() if "_exponents" in n]
    need = (span + 1).bit_length()
    assert len(exps) >= 2, "planes"
    assert sum(e.size for e in exps) <= -(-rows * need // 8) + len(exps), (key, span, [e.shape for e in exps])


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8"])
def test_a_few_hundred_exponents_go_in_a_plane_where_it_saves_its_nodes(key):
    """~600 blocks whose exponents span 10 values (PP-OCR cls's small groups, surfaces_dtc's MX9
    weight): a 4-bit plane stores ~300 B fewer than a byte a block, more than its unpacking nodes
    weigh in the delivered file (~190 B), so it is taken, and the lean model is smaller than with the
    gate before packed15 (512 B, which kept them whole). The same decoded bits either way."""
    rng = np.random.default_rng(9)
    block = int(FORMATS[key][1]["block_size"])
    w = rng.normal(0, 1, (600 * block // 32, 32)).astype(np.float32)
    w *= np.ldexp(np.float32(1), rng.integers(-5, 5, (w.shape[0], 1))).astype(np.float32)
    sizes = {}
    for gate in (512, packed.EXPONENT_PACK_FROM):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(packed, "EXPONENT_PACK_FROM", gate)
            mp.setattr(packed, "ESCAPE_EXPONENTS", False)
            model, inits = _pack_and_run(key, {"w": (w, 1)})
        exps = [onnx.numpy_helper.to_array(t) for n, t in inits.items() if "_exponents" in n]
        rows = sum(e.size for e in exps)
        with lean_file.lean(model):
            sizes[gate] = (model.ByteSize(), rows)
    blocks = w.size // min(block, 32)
    assert sizes[512][1] == blocks and sizes[packed.EXPONENT_PACK_FROM][1] <= blocks // 2 + 1, sizes
    assert sizes[packed.EXPONENT_PACK_FROM][0] < sizes[512][0] - 50, sizes


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8", "MXFP4"])
def test_exponents_with_gaps_index_a_table_of_the_ones_used(key):
    """A weight of ordinary rows and a few tiny ones (exponents spanning ~90 values, 12 used): the
    exponent table holds the values used, not the span (the rank indexes it), and every weight
    decodes bit for bit, ±0 blocks included."""
    rng = np.random.default_rng(7)
    w = rng.normal(0, 1, (64, 64)).astype(np.float32)
    w *= np.ldexp(np.float32(1), np.repeat(np.arange(8) - 4, 8))[:, None].astype(np.float32)
    w[:4] *= np.float32(2.0 ** -80)  # tiny rows: 80 binades below the rest
    w[9] = 0.0
    w[10] = -0.0
    model, inits = _pack_and_run(key, {"w": (w, 1)})
    tables = [onnx.numpy_helper.to_array(t) for n, t in inits.items() if n.startswith("pkt_e8m0")]
    assert tables and all(t.size <= 16 for t in tables), (key, [t.size for t in tables])
    exps = [e for e in np.unique(np.concatenate([np.log2(np.abs(t)) for t in tables]))]
    assert max(exps) - min(exps) >= 80  # the table still reaches both ends


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8"])
def test_integer_codes_by_arithmetic_or_table_decode_alike(monkeypatch, key):
    """8-bit integer element codes (with ``CAST_INT_CODES`` off, the forms before packed14): small
    groups decoded by arithmetic (no 256-entry table in the file), large ones by the table; both
    decode bit for bit, -0 codes and patched NaN/Inf included, and the arithmetic form stores fewer
    bytes here."""
    monkeypatch.setattr(packed, "CAST_INT_CODES", False)
    rng = np.random.default_rng(5)
    conv = rng.normal(0, 0.1, (24, 40, 3, 3)).astype(np.float32)
    conv[0, :, 0, 0] = -0.0
    conv[1, :8] = -1e-30                                              # rounds to -0 in a large block
    conv[1, 8:16] = 5.0
    depthwise = rng.normal(0, 1, (16, 1, 3, 3)).astype(np.float32)
    special = rng.normal(0, 1, (8, 70)).astype(np.float32)
    special[0, 3], special[2, 40] = np.nan, -np.inf
    weights = {"conv": (conv, 1), "depthwise": (depthwise, 1), "special": (special, 1)}
    sizes = {}
    for form, per_group in (("arithmetic", 0), ("table", 10**6)):
        monkeypatch.setattr(packed, "ARITHMETIC_GROUP_BYTES", per_group)
        model, inits = _pack_and_run(key, weights, optional=("special",))
        tables = [n for n in inits if n.startswith("pkt_el")]
        assert bool(tables) == (form == "table"), (form, tables)
        with lean_file.lean(model):  # as a delivered file holds it: short names (blockfile12)
            sizes[form] = model.ByteSize()
    assert sizes["arithmetic"] < sizes["table"], sizes


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8", "MXINT8_search2", "MX6", "MX4"])
def test_blocks_of_one_element_as_small_floats(monkeypatch, key):
    """A one-input-channel conv whose elements span 24 binades: its one-element blocks are stored
    as 12-bit small floats (sign, 6 fraction bits below the implied top bit, a 5-bit exponent
    index; ±0 by the table's 0.0 entry) in place of a code byte and a 5-bit exponent field, and
    decode bit for bit; a scale search's unnormalised codes are shifted up, the same values."""
    monkeypatch.setattr(packed, "SINGLES_FROM", 0)
    rng = np.random.default_rng(3)
    shape = (512, 1, 3, 3)
    one = (rng.uniform(1, 2, shape) * rng.choice([-1.0, 1.0], shape) * np.ldexp(1.0, rng.integers(-12, 12, shape))).astype(np.float32)
    one[0, 0, 0, :] = 0.0
    one[1, 0, 0, :] = -0.0
    _, inits = _pack_and_run(key, {"one": (one, 1)})
    w1 = {n: onnx.numpy_helper.to_array(t) for n, t in inits.items() if "_w1_" in n}
    assert any(n.endswith("_singles") for n in w1) and not any("exponents" in n or n.endswith("_codes") for n in w1), sorted(w1)
    code_bits = {"MX6": 5, "MX4": 3}.get(key, 8)  # sign + magnitude; stored: one bit less, + 5 exponent bits
    stored_bits = max(8, code_bits - 1 + 5)  # a byte plane, then planes of 4/2/1 bits
    assert sum(a.size for a in w1.values()) * 8 <= one.size * stored_bits + 64, {n: a.shape for n, a in w1.items()}


def _stft_basis(n_fft: int = 128, bins: int = 65) -> np.ndarray:
    """An STFT written as a Conv (one input channel): windowed cosines and sines, [2 bins, 1, n_fft].
    Its values span ~20 binades but crowd into the top few (|cos| > 1/2 for two thirds of them)."""
    t = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * t / n_fft)
    k = np.arange(bins)[:, None]
    basis = np.concatenate([np.cos(2 * np.pi * k * t / n_fft), -np.sin(2 * np.pi * k * t / n_fft)]) * window
    return basis[:, None, :].astype(np.float32)


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8", "MX6"])
def test_blocks_of_one_element_index_exponents_by_frequency(key):
    """An STFT's basis as a one-input-channel conv (akiki_vad's and fw_silero_v6's front ends: 0.09
    of their fp32 files): its one-element blocks' exponent indices take a rank field of at most 3
    bits with the rarer ranks in an escape stream, not the span's 5 bits: fewer stored bytes than
    the plain small-float layout, and the same decoded bits (``_pack_and_run`` checks them at both
    optimisation levels, -0 included)."""
    basis = _stft_basis()
    basis[0, 0, 5] = -0.0
    sizes = {}
    for escape in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(packed, "ESCAPE_SINGLES", escape)
            _, inits = _pack_and_run(key, {"stft": (basis, 1)})
        w1 = {n: onnx.numpy_helper.to_array(t) for n, t in inits.items() if "_w1_" in n}
        assert any(n.endswith("_singles") for n in w1), sorted(w1)
        assert any(n.endswith("_singles_esc") for n in w1) == escape, sorted(w1)
        sizes[escape] = sum(a.nbytes for a in w1.values())
    bits = {"MX6": 5}.get(key, 8) - 1  # the stored sign and fraction
    # the fields: sign, fraction and at most 3 rank bits; the escapes: one element in six or fewer, < 1 byte each
    assert sizes[True] * 8 <= basis.size * (bits + 3 + 8 / 6) + 64, (sizes, basis.size)
    assert sizes[True] < 0.9 * sizes[False], sizes


@pytest.mark.parametrize("key", ["MX6", "MXFP6_E3M2", "MX4"])
@pytest.mark.parametrize("rows, by_table", [(24, False), (640, True)])
@pytest.mark.parametrize("opset", [13, 17])
def test_six_bit_codes_add_their_planes_without_reshapes(monkeypatch, key, rows, by_table, opset):
    """6-bit element codes (MXFP6's) are a 4-bit and a 2-bit plane, MX6's 5-bit codes a 4-bit and a
    1-bit plane, MX4's 3-bit codes a 2-bit and a 1-bit plane (packed20: in their own width, not a 6-
    and a 4-bit container); both unpack (by table Gather on large groups, by BitShift on small ones)
    straight to a unit of four or eight codes a row, so their sum (on uint8 where it adds, opset 14, for
    the 3- and 5-bit codes: then one Cast to int32) indexes the element table with no Reshape between, and (a row's codes whole units) the scales
    multiply the table's output as it comes: each folded step is a copy of the group in load RAM
    (rec MX6: 214 -> 157 MB at session creation, bench/RESULTS.md packed15). Decoded bit for bit
    (``_pack_and_run``); a weight whose rows are not whole fours takes one Reshape after the Gather."""
    if by_table:  # the planes through their 256-entry tables (a large group's form)
        monkeypatch.setattr(packed, "TABLE_FROM", 0)
    rng = np.random.default_rng(rows)
    w = rng.normal(0, 0.2, (rows, 64)).astype(np.float32)
    w[1, :5] = -0.0
    ragged = rng.normal(0, 0.2, (rows, 6)).astype(np.float32)  # rows of 6 codes: a Reshape after the Gather
    model, inits = _pack_and_run(key, {"w": (w, 1), "ragged": (ragged, 1)}, opset=opset)
    made = {o: n for n in model.graph.node for o in n.output}
    readers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    # 3- and 5-bit codes of a large group at opset >= 14 (packed21): one Gather from the table of (low
    # byte, its codes' high bits) built at load, indexed by the low byte's Cast plus its high bits' Gather
    combined = by_table and key != "MXFP6_E3M2" and opset >= 14
    element = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0].startswith("pkt_cb_" if combined else "pkt_el6")
               and not n.input[0].startswith(("pkt_cb_split", "pkt_cb_sh"))]  # not the high bytes' and shifts' tables
    assert len(element) == 2, [n.op_type for n in model.graph.node]
    for gather in element:
        code = made[gather.input[1]]
        if combined:
            assert code.op_type == "Add" and sorted(made[i].op_type for i in code.input) == ["Cast", "Gather"], \
                [made[i].op_type for i in code.input]
            continue
        if code.op_type == "Cast":  # the uint8 sum's one Cast to Gather's int32 indices
            assert key != "MXFP6_E3M2" and opset >= 14, (key, opset)
            code = made[code.input[0]]
        assert code.op_type == "Add" and all(made[i].op_type != "Reshape" for i in code.input), \
            [made[i].op_type for i in code.input]
    # each code takes its own width in the file: the two planes' bytes of w's 24 or 640 rows of 64 codes
    bits = {"MX6": 5, "MXFP6_E3M2": 6, "MX4": 3}[key]
    planes = [onnx.numpy_helper.to_array(t) for n, t in inits.items() if n.endswith(("_codes_lo", "_codes_hi")) and "_w6_" not in n]
    assert len(planes) == 2 and sum(a.size for a in planes) * 8 <= w.size * bits + 2 * 64, (key, [a.shape for a in planes])
    after = sorted(readers[gather.output[0]][0].op_type for gather in element)
    assert after == ["Mul", "Reshape"], after
    assert any(n.input[0].startswith("pkt_nib") for n in model.graph.node if n.op_type == "Gather") == (by_table and not combined)


@pytest.mark.parametrize("key", ["MXFP4"])
@pytest.mark.parametrize("rows, by_table", [(24, False), (640, True)])
def test_four_bit_code_pairs_meet_their_scales_without_a_reshape(monkeypatch, key, rows, by_table):
    """4-bit element codes (MXFP4's; MX4's 3-bit ones were until packed20) unpack as pairs, ``[rows, n_sub, sub/2, 2]``; that is
    what the scales multiply (given a trailing 1), with no Reshape to ``[rows, n_sub, sub]`` before:
    each folded step is a copy of the group in load RAM (rec MXFP4: 102 -> 90 MB at session
    creation, bench/RESULTS.md packed15). Decoded bit for bit (``_pack_and_run``), both unpackings."""
    if by_table:
        monkeypatch.setattr(packed, "TABLE_FROM", 0)
    rng = np.random.default_rng(rows)
    w = rng.normal(0, 0.2, (rows, 64)).astype(np.float32)
    w[1, :5] = -0.0
    model, _ = _pack_and_run(key, {"w": (w, 1)})
    readers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    element = [n for n in model.graph.node if n.op_type == "Gather" and n.input[0].startswith(("pkt_el4", "pkt_el_"))]
    assert len(element) == 1, [n.op_type for n in model.graph.node]
    assert element[0].input[0].startswith("pkt_el4") == by_table
    assert [n.op_type for n in readers[element[0].output[0]]] == ["Mul"], [n.op_type for n in readers[element[0].output[0]]]


def test_one_element_layout_refuses_what_it_cannot_hold(monkeypatch):
    """The layout only takes integer codes it can decode bit for bit: FP element codes, and an
    element whose exponent would have to go below 0 to normalise it, keep the block layout."""
    fp4 = element_code("mx", {"element_dtype": "fp4_e2m1"})
    assert one_element_layout(fp4, np.array([1, 2, 3], np.uint8), np.array([120, 121, 122], np.uint8)) is None
    bfp = element_code("bfp", {"bit_width": 16})
    assert one_element_layout(bfp, np.array([3, 70], np.uint8), np.array([0, 127], np.uint8)) is None  # 3 at 2^-127
    monkeypatch.setattr(packed, "SINGLES_FROM", 0)
    out = one_element_layout(bfp, np.array([3, 70, 128, 0], np.uint8), np.array([130, 127, 5, 9], np.uint8))
    assert out is not None
    fields, f_bits, table = out
    # 3 at 2^3 is 96 at 2^-2 (5 shifts): fraction 96-64 = 32; exponents 125-127 and the zeros' entry 0.0: 2 bits
    assert f_bits == 7 + 2 and table.size == 4 and table[-1] == 0 and fields[0] & 63 == 32 and table[fields[0] >> 7] == np.float32(2.0 ** (125 - 127))
    assert table[fields[2] >> 7] == 0 and fields[2] & 64 and table[fields[3] >> 7] == 0 and not fields[3] & 64


def _one_input_channel_net() -> onnx.ModelProto:
    """A conv with one input channel (blocks of one element along it: the small-float layout, no
    shifts) over a scale range of 2^±10, then a conv whose ragged 40 channels end in a tail block."""
    rng = np.random.default_rng(21)
    shape = (40, 1, 3, 3)
    w1 = (rng.normal(0, 1, shape) * np.ldexp(1.0, rng.integers(-10, 10, shape))).astype(np.float32)
    w1[0, 0, 0] = -0.0
    w2 = rng.normal(0, 0.1, (24, 40, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [onnx.numpy_helper.from_array(w1, "w1"), onnx.numpy_helper.from_array(w2, "w2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 8, 8])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX6", "MXINT8"])
def test_packed_model_computes_the_unpacked_models_outputs(monkeypatch, preset):
    """The layouts above inside a quantized model (weights only: the activations' functions are not
    what is packed): the same output bytes as the fp32-weight form (``pack_weights=False``)."""
    import onnxptq

    monkeypatch.setattr(packed, "SINGLES_FROM", 0)
    model = _one_input_channel_net()
    cfg = onnxptq.get_preset(preset).replace(activation=None, repair=False)
    new = onnxptq.quantize(model, cfg, None).model
    old = onnxptq.quantize(model, cfg.replace(pack_weights=False), None).model
    names = [t.name for t in new.graph.initializer]
    assert any(n.endswith("_singles") for n in names) and not any(n.endswith("_w1_shifts") for n in names), names
    x = np.random.default_rng(0).normal(0, 1, (1, 1, 8, 8)).astype(np.float32)
    outs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for m in (new, old)]
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)), preset


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8", "MX6", "MXFP4"])
def test_exponents_by_frequency_with_an_escape(monkeypatch, key):
    """A weight whose blocks crowd into 3 binades beside a tail of 40 rows spread over 70 more
    (surfaces_dtc's decayed rows): the ranks of the 3 frequent exponents are 2-bit fields, the
    rest escaped to a byte stream in block order (``f + (f // 3) * stream[cumsum(f // 3)]``);
    fewer exponent bytes than the planes of the ranks by value, and bit for bit the reference's
    blocks in onnxruntime (optimised and not), ±0 blocks included (they take the rank-0 scale)."""
    rng = np.random.default_rng(17)
    w = (rng.uniform(0, 1.5, (640, 64)) * rng.choice([-1.0, 1.0], (640, 64))).astype(np.float32)
    w[:, ::8] = 1.25  # every block's largest in [1, 2): one exponent a row
    w *= np.ldexp(np.float32(1), rng.integers(-1, 2, 640))[:, None].astype(np.float32)
    w[:40] *= np.ldexp(np.float32(1), -rng.permutation(70)[:40] - 8)[:, None].astype(np.float32)
    w[41] = 0.0
    w[43] = -0.0
    sizes = {}
    monkeypatch.setattr(packed, "RUN_EXPONENTS", False)  # one exponent a row: runs would take them (their own test)
    for on in (False, True):
        monkeypatch.setattr(packed, "ESCAPE_EXPONENTS", on)
        model, inits = _pack_and_run(key, {"w": (w, 1)})
        exps = {n: onnx.numpy_helper.to_array(t) for n, t in inits.items() if "_exponents" in n}
        assert any(n.endswith("_exponents_esc") for n in exps) == on, sorted(exps)
        sizes[on] = (sum(a.size for a in exps.values()), model.ByteSize())
    rows = w.shape[0] * -(-w.shape[1] // int(FORMATS[key][1]["block_size"]))
    assert sizes[True][0] <= -(-rows // 4) + 40 * (rows // 640) + 2, (key, rows, sizes)  # 2-bit fields + one byte an escape
    assert sizes[True][1] < sizes[False][1], sizes


def test_escape_exponents_refuses_what_a_plain_field_holds():
    """Two used exponents fit a 1-bit field: no escape; a ±0 block takes rank 0 whatever its byte."""
    table = packed.exponent_table()[100:110]
    assert packed.escape_exponents(np.array([0, 1, 1, 0]), np.zeros(4, bool), table) is None
    index = np.array([3, 3, 3, 5, 3, 9, 7, 3, 3, 5], np.int64)
    free = np.zeros(10, bool)
    free[5] = True
    bits, order, fields, stream = packed.escape_exponents(index, free, table)
    assert bits == 1 and list(order[:2]) == [3, 5] and fields[5] == 0
    assert list(stream) == [0, 0, 1, 0] and list(fields) == [0, 0, 0, 1, 0, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8", "MXFP4"])
def test_small_weights_join_a_group_others_made(key):
    """A weight below ``MIN_ELEMENTS`` (a conv's 32-element bias quantized with it) joins the group
    a larger weight of its layout made: no stream or chain of its own, fewer bytes than its float
    values, bit for bit in onnxruntime; alone (no such group) it stays float."""
    fmt, base = FORMATS[key]
    rng = np.random.default_rng(23)
    w = rng.normal(0, 0.1, (40, 64)).astype(np.float32)
    bias = rng.normal(0, 1, 32).astype(np.float32)  # whole blocks of 8, 16 and 32
    assert bias.size < packed.MIN_ELEMENTS
    alone, _ = _pack_and_run(key, {"w": (w, 1)})
    joined, inits = _pack_and_run(key, {"w": (w, 1), "b": (bias, 0)})  # asserts b packed, both bit for bit
    streams = sorted(n for n in inits if n.startswith("packed_"))
    assert len(streams) == len([t for t in alone.graph.initializer if t.name.startswith("packed_")]), streams
    # against the same model holding the bias as float32 (node names dropped: the file's decode chains have none)
    as_float = onnx.ModelProto()
    as_float.CopyFrom(alone)
    as_float.graph.initializer.append(onnx.numpy_helper.from_array(fake_quantize(bias, fmt, **dict(base, axis=0)), "b_out"))
    as_float.graph.output.append(helper.make_tensor_value_info("b_out", TensorProto.FLOAT, [32]))
    for m in (joined, as_float):
        for n in m.graph.node:
            n.name = ""
    assert joined.ByteSize() < as_float.ByteSize(), (joined.ByteSize(), as_float.ByteSize())
    # alone it starts no group; as a float16 piece it saves less than the stream's nodes: float32 as before
    packer = WeightPacker(13, FreshNames())
    attrs = dict(base, axis=0)
    fq = fake_quantize(bias, fmt, **attrs)
    assert packer.add("b", bias, fq, fmt, attrs, "b_out") is not None
    head = packer.finish()
    assert not any(g.rows for g in packer.groups.values()) and not head.nodes
    assert [t.name for t in head.initializers] == ["b_out"] and onnx.numpy_helper.to_array(head.initializers[0]).dtype == np.float32


@pytest.mark.parametrize("key", ["BFP16", "MXINT8", "MXFP4"])
def test_small_weights_without_a_group_share_one_float16_stream(key):
    """Small block weights that join no group (a model's first, squeeze-excite ones) and that
    float16 holds exactly go into one FLOAT16 stream, cast and split once (1-D pieces are Split
    outputs, others reshaped): bit for bit in onnxruntime, 2 bytes an element where float32 took 4."""
    fmt, base = FORMATS[key]
    rng = np.random.default_rng(29)
    small = {"b1": (rng.normal(0, 1, 48).astype(np.float32), 0), "b2": (rng.normal(0, 1, 40).astype(np.float32), 0),
             "se": (rng.normal(0, 1, (8, 6, 1, 1)).astype(np.float32), 1)}
    model, inits = _pack_and_run(key, small)
    half = [t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16]
    assert [t.name for t in half] == [n for n in inits if n.startswith("packed_") and n.endswith("_half")] and list(half[0].dims) == [48 + 40 + 48]
    assert not any(n.endswith("_codes") for n in inits), sorted(inits)
    # 2 bytes an element, read by one Cast and one Split (+ a Reshape for the 4-D one): the file's
    # gain is measured in bench/file_sizes.py (lean names); here the form
    assert len(half[0].raw_data) == 2 * 136
    assert sorted(n.op_type for n in model.graph.node) == ["Cast", "Reshape", "Split"], [n.op_type for n in model.graph.node]
    # a value float16 cannot hold (below its subnormals) keeps that weight out of the stream
    tiny = dict(small, b2=(small["b2"][0] * np.float32(2.0 ** -40), 0))
    packer = WeightPacker(13, FreshNames())
    attrs = dict(base, axis=0)
    assert packer.add("b2", tiny["b2"][0], fake_quantize(tiny["b2"][0], fmt, **attrs), fmt, attrs, "b2_out") is None


def _decayed_net() -> onnx.ModelProto:
    """Two convs with biases: the first's 40 output channels crowd into 3 binades beside 8 rows
    decayed 20-60 binades down (exponents by frequency with an escape), the second's 24-element
    bias below ``MIN_ELEMENTS`` (a piece of a group or of the float16 stream)."""
    rng = np.random.default_rng(31)
    w1 = rng.normal(0, 0.1, (40, 128, 3, 3)).astype(np.float32)
    w1[:8] *= np.ldexp(np.float32(1), -rng.integers(20, 60, 8))[:, None, None, None].astype(np.float32)
    w2 = rng.normal(0, 0.1, (24, 40, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.5, 40).astype(np.float32)
    b2 = rng.normal(0, 0.5, 24).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], pads=[1, 1, 1, 1])]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in (("w1", w1), ("w2", w2), ("b1", b1), ("b2", b2))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 6, 6])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("preset", ["BFP16", "MXINT8"])
def test_escaped_exponents_and_small_biases_in_a_quantized_model(preset, monkeypatch):
    """In a quantized model: the decayed conv's exponents stored by frequency with an escape (runs
    off: BFP16's take runs, their own test), no quantized bias left as float32, and the same output
    bytes as the fp32-weight form."""
    import onnxptq

    monkeypatch.setattr(packed, "RUN_EXPONENTS", False)

    model = _decayed_net()
    cfg = onnxptq.get_preset(preset).replace(activation=None, repair=False)
    new = onnxptq.quantize(model, cfg, None).model
    old = onnxptq.quantize(model, cfg.replace(pack_weights=False), None).model
    names = [t.name for t in new.graph.initializer]
    assert any(n.endswith("_exponents_esc") for n in names), names
    assert not [t.name for t in new.graph.initializer if t.data_type == TensorProto.FLOAT and t.name.startswith("b")], names
    x = np.random.default_rng(0).normal(0, 1, (1, 128, 6, 6)).astype(np.float32)
    outs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            for m in (new, old)]
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32)), preset


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8"])
def test_tables_bfloat16_holds_are_stored_half_and_cast(monkeypatch, key):
    """Decode tables of float32 values whose low 16 bits are zero (exponent tables of powers of
    two, shift tables, 8-bit code tables) are stored as bfloat16 and widened by one Cast, each
    read by that Cast alone: bit for bit the same decoded weights (``_pack_and_run`` checks both
    optimisation levels), fewer bytes than the float32 tables; a table of other values stays float32."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 1, (256, 64)).astype(np.float32)
    w *= np.ldexp(np.float32(1), rng.integers(-40, 40, (256, 1))).astype(np.float32)  # ~80 exponents used
    half, inits = _pack_and_run(key, {"w": (w, 1)})
    halves = [t for t in half.graph.initializer if t.data_type == TensorProto.BFLOAT16]
    assert halves, key
    for t in halves:
        readers = [n for n in half.graph.node if t.name in n.input]
        assert len(readers) == 1 and readers[0].op_type == "Cast", (key, t.name)
        assert readers[0].attribute[0].i == TensorProto.FLOAT
    monkeypatch.setattr(packed, "HALF_TABLES", False)
    full, _ = _pack_and_run(key, {"w": (w, 1)})
    assert not any(t.data_type == TensorProto.BFLOAT16 for t in full.graph.initializer)
    assert all(len(t.raw_data) == 2 * int(np.prod(t.dims)) > packed.TABLE_CAST_BYTES for t in halves), key
    assert full.ByteSize() - half.ByteSize() > 0, key
    monkeypatch.setattr(packed, "HALF_TABLES", True)
    packer = WeightPacker(13, FreshNames())
    assert packer._half_table(np.ldexp(np.float32(1), np.arange(-133, 128)).astype(np.float32))
    assert packer._half_table(np.array([np.inf, -0.0, 1.5, -2.0 ** 100] * 8, np.float32))
    assert not packer._half_table(np.full(64, 0.1, np.float32))        # 0.1's low bits are not zero
    assert not packer._half_table(np.ones(8, np.float32))              # too small to pay for its Cast
    assert not WeightPacker(11, FreshNames())._half_table(np.ones(64, np.float32))  # Cast from bfloat16: opset 13


def _full_size_steps(model: onnx.ModelProto, elements: int) -> list[str]:
    """Op types of the decode nodes whose output holds at least half of ``elements`` values: the
    steps onnxruntime's constant folding computes (and keeps) at full size at every load."""
    outs = [o for n in model.graph.node for o in n.output]
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in outs)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    vals = dict(zip(outs, ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {})))
    return [n.op_type for n in model.graph.node if sum(vals[o].size for o in n.output) * 2 >= elements]


@pytest.mark.parametrize("key", ["BFP16", "MX9", "MXINT8"])
def test_integer_codes_decode_in_few_full_size_steps(key):
    """8-bit integer element codes (BFP16, MX9, MXINT8) are stored as int8 and decoded by a Cast:
    no Gather of a 256-entry table, no integer Div/Mod unpacking fields of full or half size (each
    ~10 ns an element when onnxruntime folds the chain at load, rec MX9: 0.13-0.18 s); a -0 code
    costs one float fmod where a group has one (one step: each step's output stays in load RAM);
    MX9's shifts by BitShift and arithmetic.
    The decoded weights stay bit-identical, -0 codes included (MX rounding's, a -0 input's)."""
    rng = np.random.default_rng(11)
    conv = rng.normal(0, 0.1, (64, 48, 3, 3)).astype(np.float32)
    conv[0, :, 0, 0] = -0.0
    conv[1, :16] = -1e-30                        # rounds to -0 beside larger values
    conv[1, 16:32] = 3.0
    matmul = (rng.standard_t(3, (96, 80)) * 0.05).astype(np.float32)
    model, inits = _pack_and_run(key, {"conv": (conv, 1), "matmul": (matmul, 0)})
    steps = _full_size_steps(model, conv.size + matmul.size)
    assert "Gather" not in steps and "Div" not in steps and steps.count("Mod") <= 1, steps  # the one: -0's fmod
    # Cast, the -0 fix (Mod), the scale's Mul, the group's Split, each weight's Reshape and
    # Transpose (the ragged conv's Concat); MX9: its shifts' 6 half-size steps
    assert len(steps) <= {"BFP16": 6, "MXINT8": 7, "MX9": 13}[key], steps
    assert any(t.data_type == TensorProto.INT8 for t in inits.values()), "codes stored as int8"
