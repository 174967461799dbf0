"""Block bodies on tensors whose shape values do not fold at build time (two or more unknown dims,
PP-OCR cls's ``[?, C, ?, ?]``): their views copy the input's dims in the Reshape itself instead of
running ``Shape``/``Concat`` (and ``ReduceProd``/``Max``) in every call (onnx_ops.body.SplitAxis,
bfp._bfp_static, mx._tiled_view, bfp._prime_static), and the split to_bfp body's runtime zero
needs no Reshape (bfp._bfp_split). Same bits as the references, empty tensors included."""

from __future__ import annotations

import numpy as np
import pytest

import _format_testing
from onnxptq.formats import fake_quantize
from onnxptq.formats.bfp import PRESETS
from onnxptq.onnx_ops import build_qdq

_MX = dict(block_size=32, rounding_mode=2, scale_search=0)

CASES = [
    ("bfp", dict(PRESETS["BFP16"], axis=1), (None, 40, None, None), "_n40r4s"),  # blocks tile the axis
    ("bfp", dict(PRESETS["BFP16"], axis=1), (None, 3, None, None), "_n3r4s"),  # one block shorter than 8
    ("bfp", dict(PRESETS["BFP16"], axis=-2), ("b", 16, "t"), "_n16r3s"),  # a negative axis, rank 3
    ("bfp", dict(PRESETS["MX9"], axis=1), (None, 40, None, None), "_n40r4s"),  # sub-block maxima padded
    ("bfp", dict(PRESETS["MX6"], axis=1), ("b", 32, "t"), "_n32r3s"),  # two whole blocks
    ("mx", dict(_MX, element_dtype="int8", axis=1), (None, 40, None, None), "t8n40r4"),  # tiled: k = 8
    ("mx", dict(_MX, element_dtype="fp8_e4m3", axis=1), ("b", 72, "t"), "t8n72r3"),
    ("mx", dict(_MX, element_dtype="int8", axis=1), (None, 64, None, None), "d64r4"),  # whole blocks
    ("mx", dict(_MX, element_dtype="fp4_e2m1", axis=-2), ("b", 96, "t"), "d96r3"),
    ("mx", dict(_MX, element_dtype="int8", axis=1, scale_search=1), ("b", 64, "t"), "d64r3"),  # searched
]
FREE = ((1, 1, 1), (2, 5, 3), (0, 4, 4), (2, 0, 3), (2, 3, 0))


def _data(shape: tuple, rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    if not np.prod(shape):
        return [("empty", np.zeros(shape, np.float32))]
    mag = np.exp(rng.uniform(np.log(1e-6), np.log(1e6), shape))
    x = (mag * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    tiny = (x * np.float32(1e-39)).astype(np.float32)  # blocks of subnormals: flushes, smallest scales
    special = x.copy().ravel()
    edges = _format_testing.EDGE_VALUES
    special[: min(special.size, edges.size)] = edges[: special.size]
    return [("log-uniform", x), ("subnormal blocks", tiny), ("specials", special.reshape(shape))]


@pytest.mark.parametrize("fmt,attrs,dims,suffix", CASES,
                         ids=[f"{c[1].get('element_dtype') or c[1]['bfp_method']}-{c[3]}-ss{c[1].get('scale_search', 0)}" for c in CASES])
def test_views_copy_the_input_dims(fmt, attrs, dims, suffix):
    """No shape arithmetic left in the body but the last Reshape's ``Shape(x)``, and the same bits
    as the reference on every concrete shape: batch of one, zero batch, zero spatial dims."""
    frag = build_qdq(fmt, "x", "y", name="q", opset=18, shape=dims, dtype="float32", **attrs)
    body = frag.functions[0]
    assert suffix in body.name, body.name
    ops = [n.op_type for n in body.node]
    assert ops.count("Shape") == 1 and "Concat" not in ops and "ReduceProd" not in ops, ops
    assert ops.count("Unsqueeze") == 1, ops
    sess = _format_testing.fragment_session(frag, [d if isinstance(d, int) else f"d{i}" for i, d in enumerate(dims)])
    rng = np.random.default_rng(len(dims) + attrs["axis"])
    for free in FREE[: 3 if len(dims) == 3 else 5]:
        values = iter(free)
        shape = tuple(d if isinstance(d, int) else next(values) for d in dims)
        for what, x in _data(shape, rng):
            _format_testing.assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, fmt, **attrs),
                                             f"{what} {shape} {body.name}")


@pytest.mark.parametrize("dims", [(1, 64, 56, 56), (None, 40, None, None), ("n", 24, 16, 16)])
def test_split_body_zero_without_reshape(dims):
    """The split to_bfp body's plain branch takes its runtime +0 straight from the sum kept as
    ``[1] * rank``: no Reshape in the branch (one node fewer per call to create and to run)."""
    frag = build_qdq("bfp", "x", "y", name="q", opset=18, shape=dims, dtype="float32", **dict(PRESETS["BFP16"], axis=1))
    body = frag.functions[0]
    ifs = [n for n in body.node if n.op_type == "If"]
    assert len(ifs) == 1, body.name  # the split body: one If (maxima, +0 and the put-back carrier)
    plain = next(a.g for a in ifs[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in plain.node if n.op_type == "Reshape"] == [], [n.op_type for n in plain.node]
    sums = [n for n in body.node if n.op_type == "ReduceSum"]
    assert len(sums) == 1 and next(a.i for a in sums[0].attribute if a.name == "keepdims") == 1


@pytest.mark.parametrize("preset", ["BFP16", "MX9"])
@pytest.mark.parametrize("dims,axis,transposed", [((2, 3, 70), 2, False), ((2, 3, 1400), 2, True),
                                                  (("n", 96, 1, 1), 1, False), ((300, 40, 1, 1), 1, True)], ids=str)
def test_last_axis_transposed_only_when_large(preset, dims, axis, transposed):
    """A last block axis (or one followed by 1s) is transposed to ``(1, bs, blocks)`` only on
    tensors of bfp.LAST_AXIS_MIN_SIZE elements or more: below it the two Transposes and their
    Reshapes cost more per call than the short spans. Both views bit-exact."""
    attrs = dict(PRESETS[preset], axis=axis)
    frag = build_qdq("bfp", "x", "y", name="q", opset=18, shape=dims, dtype="float32", **attrs)
    body = frag.functions[0]
    ops = [n.op_type for n in body.node] + [n.op_type for m in body.node for a in m.attribute if a.g.node for n in a.g.node]
    assert ("Transpose" in ops) == transposed, body.name
    sess = _format_testing.fragment_session(frag, [d if isinstance(d, int) else f"d{i}" for i, d in enumerate(dims)])
    rng = np.random.default_rng(axis)
    for batch in (1, 2):
        shape = tuple(d if isinstance(d, int) else batch for d in dims)
        for what, x in _data(shape, rng):
            _format_testing.assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **attrs),
                                             f"{what} {shape} {body.name}")
