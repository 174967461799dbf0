"""to_bfp_prime (MX9/MX6/MX4) bodies without the masked branch stay bit-exact on the inputs that
branch was for (issue 26 items 1 and 3).

The body used to choose, by an ``If`` on the tensor's sum and its tiny blocks, between plain
formulas and masked ones (~25 nodes onnxruntime built for every call of every session). Now
Inf/NaN reach the block's scales through arithmetic (a maximum of +Inf makes the scale NaN; a NaN,
which onnxruntime's ``ReduceMax`` drops unless it comes first, through the block's sum of |x|),
the exponent is clamped at 2^-127 as the reference's biased exponent 0 is, and only the subnormal
flush keeps a small ``If`` (the division of x or of the flushed x). Each case below puts the
value a mechanism is for where it would fail without it: a NaN second in its sub-block, ±Inf,
a block whose sum of |x| overflows (must not turn NaN), tiny normals beside subnormals in one
sub-block (the flush), subnormals alone, ±0 and negative subnormals (signed zeros), in every view
the emitter builds (whole axis by halves, several blocks, a ragged axis, the generic and ranked
bodies, the transposed last axis), against the NumPy reference, bit for bit.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from _format_testing import assert_same_bits, fragment_session, run_static
from onnxptq.formats import fake_quantize
from onnxptq.formats.bfp import PRESETS
from onnxptq.graph.walk import subgraph_nodes
from onnxptq.onnx_ops import bfp, build_qdq

FORMATS = {
    "MX9": dict(PRESETS["MX9"]),
    "MX4-rm0": dict(PRESETS["MX4"], rounding_mode=0),
    # no shift by compares (a scale of 2^-150 would be zero): the sub-block exponents
    "prime-w32": dict(bfp_method="to_bfp_prime", bit_width=32, block_size=8, sub_block_size=2,
                      sub_block_shift_bits=1, rounding_mode=2),
    "prime-d2": dict(bfp_method="to_bfp_prime", bit_width=16, block_size=8, sub_block_size=4,
                     sub_block_shift_bits=2, rounding_mode=2),
}

#: (shape, axis): the whole axis one block of 16 by halves (>= 16384 elements), three blocks,
#: a ragged axis (40: the sub-blocks' maxima padded), a ragged last axis (the transposed view), a long
#: last axis by halves
SHAPES = [((1, 16, 32, 32), 1), ((2, 48, 3, 5), 1), ((2, 40, 3, 5), 1), ((2, 3, 4, 70), -1), ((1, 4, 64, 64), -1)]

TINY = np.float32(2.0**-120)  # a normal value in a block far below the flush threshold
SUB = np.float32(2.0**-127 + 2.0**-140)  # a subnormal a tiny block's scale would keep


def edge_tensor(shape: tuple[int, ...], axis: int, seed: int) -> np.ndarray:
    """Log-uniform values; then, one case per position along the other axes (every block of
    that position holds it): a NaN second in its sub-block, a NaN first, +Inf, -Inf, values near
    FLT_MAX whose block sum overflows, tiny normals beside subnormals, subnormals alone, ±0 with
    negative subnormals, one tiny normal among zeros."""
    rng = np.random.default_rng(seed)
    x = (np.exp(rng.uniform(np.log(1e-4), np.log(1e4), shape)) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    rows = np.moveaxis(x, axis, 0).reshape(shape[axis], -1).copy()
    n, cases = rows.shape[0], rows.shape[1]
    assert cases >= 9
    rows[1::2, 0] = np.nan  # second in every sub-block of 2 (and later in larger ones)
    rows[0::7, 1] = np.nan
    rows[2::5, 2] = np.inf
    rows[3::5, 3] = -np.inf
    rows[:, 4] = np.float32(3.0e38) * rng.choice([-1.0, 1.0], n).astype(np.float32)
    rows[:, 5] = np.where(np.arange(n) % 2, SUB, -TINY * rng.random(n, dtype=np.float32))
    rows[:, 6] = -SUB * rng.random(n, dtype=np.float32)
    rows[:, 7] = np.where(np.arange(n) % 3, -0.0, -SUB)
    rows[:, 8] = 0.0
    rows[n // 2, 8] = TINY
    return np.ascontiguousarray(np.moveaxis(rows.reshape(np.moveaxis(x, axis, 0).shape), 0, axis))


def _if_branch_nodes(function: onnx.FunctionProto) -> list[int]:
    """Nodes in each ``If`` branch of ``function``, the body's size guard (a branch holding the
    whole body) and what it holds included, recursively."""
    sizes = []

    def walk(nodes) -> None:
        for node in nodes:
            if node.op_type == "If":
                for attr in node.attribute:
                    sizes.append(len(attr.g.node))
                    walk(attr.g.node)

    walk(function.node)
    return sizes


@pytest.mark.parametrize("shape,axis", SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("name", list(FORMATS))
def test_static_bodies_exact_on_edge_blocks(name, shape, axis):
    attrs = dict(FORMATS[name], axis=axis)
    x = edge_tensor(shape, axis, seed=len(name) + shape[axis])
    got, fname = run_static("bfp", x, **attrs)
    assert_same_bits(got, fake_quantize(x, "bfp", **attrs), f"{name} {fname}")
    # the cases are there: a block holding Inf/NaN turns NaN as a whole, the other blocks do not
    assert np.isnan(x).sum() < np.isnan(got).sum() < got.size


@pytest.mark.parametrize("rank_known", [False, True], ids=["generic", "ranked"])
@pytest.mark.parametrize("name", ["MX9", "prime-w32"])
def test_generic_and_ranked_bodies_exact_on_edge_blocks(name, rank_known):
    attrs = dict(FORMATS[name], axis=1)
    x = edge_tensor((2, 40, 3, 5), 1, seed=3)
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=[None, None, 3, 5] if rank_known else None,
                     dtype="float32", **attrs)
    got = fragment_session(frag, [None] * 4).run(None, {"x": x})[0]
    assert_same_bits(got, fake_quantize(x, "bfp", **attrs), f"{name} {frag.functions[0].name}")


@pytest.mark.parametrize("shape,axis", SHAPES + [((2, 40, 3, 5), None), ((1, 64, 16, 16), 1)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_only_the_flush_is_branched(shape, axis):
    """The body holds no ``If`` on a tensor known to hold fewer than FLAT_MAX_SIZE elements, and
    otherwise (besides the generic body's size guard) only the flush's: two branches of at most 4
    nodes, never the masked formulas (~25 nodes) onnxruntime built for every call."""
    attrs = dict(PRESETS["MX9"], axis=1 if axis is None else axis)
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=None if axis is None else shape, dtype="float32", **attrs)
    sizes = _if_branch_nodes(frag.functions[0])
    guard = 1 if axis is None else 0  # the generic body's If on its size: Identity / the whole body
    flush = axis is None or np.prod(shape) >= bfp.FLAT_MAX_SIZE
    assert len([s for s in sizes if s > 4]) == guard, sizes
    assert sorted(s for s in sizes if s <= 4) == sorted([1] * guard + ([4, 1] if flush else [])), sizes


def test_flush_branch_taken_only_for_tiny_blocks():
    """The same body on a tensor with and without a block below the threshold: both exact (the
    flush changes codes only where the reference flushes)."""
    attrs = dict(PRESETS["MX9"], axis=1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 48, 4, 4)).astype(np.float32)
    y = x.copy()
    y[0, :16, 0, 0] = np.where(np.arange(16) % 2, SUB, TINY)  # one block: tiny normals and subnormals
    for t in (x, y):
        got, _ = run_static("bfp", t, **attrs)
        assert_same_bits(got, fake_quantize(t, "bfp", **attrs))
    got, _ = run_static("bfp", y, **attrs)
    assert np.all(got[0, 1:16:2, 0, 0] == 0) and np.all(got[0, 0:16:2, 0, 0] != 0)


@pytest.mark.parametrize("shape,axis", [((1, 16, 32, 32), 1), ((1, 64, 16, 16), 1), ((1, 4, 64, 64), -1)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("name", ["MX9", "MX6"])
def test_flush_test_has_no_where(name, shape, axis):
    """The flush's test "some block has 0 < max < T" reads the block maxima through
    ``ThresholdedRelu`` and a ``ReduceMin``, not a ``Where`` (onnxruntime's CPU ``Where`` costs
    several elementwise passes: 2-7 % of an MX9 call on conv-net activations, branch blockspeed);
    the body, its branches included, has no ``Where`` at all. Its bits: the edge-block tests above."""
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **dict(PRESETS[name], axis=axis))
    body = frag.functions[0]
    nodes = [n.op_type for n in (*body.node, *subgraph_nodes(body))]
    assert "If" in nodes and "Where" not in nodes, frag.functions[0].name
    assert "ThresholdedRelu" in nodes
