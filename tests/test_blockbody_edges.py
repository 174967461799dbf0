"""The MX bodies' block scale and element unit taken straight from the block minima of ``-|x|``
(onnx_ops.mx ``_fp_unit`` / ``_int_unit``, the tiled view's minima over its zero-padded sub-blocks):
bit for bit the NumPy reference on the edge cases (zeros, -0, subnormals, ±Inf, NaN, the float32
maximum, blocks of nothing but them, a block length not dividing the axis), in every view the
emitter picks, and one node fewer per call than the Neg-then-scale form (issue 26, blockbody11)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from _format_testing import F32, assert_same_bits, fragment_session, mx_edge_data
from onnxptq.formats import mx as ref
from onnxptq.onnx_ops import build_qdq

ELEMENTS = ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp4_e2m1", "int8"]

#: (shape, axis, block size): one block per axis (the body in x's own shape), whole blocks, a
#: ragged axis tiled by sub-blocks (48 in blocks of 32), a ragged axis padded (40 in blocks of 32,
#: last axis), a last axis transposed (large), a ragged axis over a dynamic batch (not folded).
VIEWS = [
    ((1, 16, 6, 24), 1, 32),
    ((2, 64, 3, 5), 1, 32),
    ((1, 48, 6, 24), 1, 32),
    ((6, 40), -1, 32),
    ((3, 96, 100), -1, 32),
    ((None, 48, 6, 8), 1, 32),
]


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Edge-case data, with whole blocks of zeros, -0, subnormals, non-finite values and maxima."""
    x = mx_edge_data(shape, seed, rate=0.05)
    flat = x.reshape(-1)  # a view: the runs land in x
    specials = [np.zeros(8, np.float32), np.full(8, -0.0, np.float32), np.full(8, 1e-45, np.float32),
                np.array([np.nan, np.inf, -np.inf, np.nan] * 2, np.float32),
                np.array([F32.max, -F32.max, 1e-40, -1e-40] * 2, np.float32),
                np.array([np.inf, 3e-39, -3e-39, 0.0] * 2, np.float32)]
    for k, v in enumerate(specials):  # runs along the flat tensor: whole blocks of one kind where they align
        flat[8 * k: 8 * k + 8] = v
    return x


def _case(element: str, shape: tuple, axis: int, bs: int, seed: int) -> tuple[np.ndarray, np.ndarray, onnx.FunctionProto]:
    dims = list(shape)
    concrete = tuple(2 if d is None else d for d in shape)
    x = _data(concrete, seed)
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=dims, dtype="float32", element_dtype=element,
                     axis=axis, block_size=bs)
    got = fragment_session(frag, dims).run(None, {"x": x})[0]
    want = ref.fake_quantize(x, element_dtype=element, axis=axis, block_size=bs)
    return got, want, frag.functions[0]


@pytest.mark.parametrize("shape,axis,bs", VIEWS, ids=str)
@pytest.mark.parametrize("element", ELEMENTS)
def test_minima_scale_bit_exact_on_edge_cases(element: str, shape: tuple, axis: int, bs: int) -> None:
    for seed in (0, 1):
        got, want, fn = _case(element, shape, axis, bs, seed)
        assert_same_bits(got, want, f"{element} {shape} axis {axis} seed {seed} ({fn.name})")


def _all_nodes(nodes) -> list[onnx.NodeProto]:
    out = []
    for n in nodes:
        out.append(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out += _all_nodes(a.g.node)
    return out


@pytest.mark.parametrize("shape,axis,bs", [v for v in VIEWS if v[0][0] is not None], ids=str)
@pytest.mark.parametrize("element", ["fp8_e4m3", "fp4_e2m1"])
def test_fp_branch_free_body_has_no_scale_neg(element: str, shape: tuple, axis: int, bs: int) -> None:
    """The branch-free FP body negates once (``-|x|``): the block minima feed the unit's float64
    product directly (a ReduceMin, the halves' Min, the tiled view's Gather), and no ``Neg`` before it."""
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=list(shape), dtype="float32", element_dtype=element,
                     axis=axis, block_size=bs)
    nodes = _all_nodes(frag.functions[0].node)
    assert not [n for n in nodes if n.op_type == "If"], frag.functions[0].name
    assert [n.op_type for n in nodes].count("Neg") == 1, frag.functions[0].name
    casts = [n for n in nodes if n.op_type == "Cast" and n.attribute[0].i == onnx.TensorProto.DOUBLE]
    assert len(casts) == 1
    producer = {o: n for n in nodes for o in n.output}
    assert producer[casts[0].input[0]].op_type in ("ReduceMin", "Min", "Gather"), producer[casts[0].input[0]].op_type


BFP16 = {"bfp_method": "to_bfp", "axis": 1, "bit_width": 16, "block_size": 8, "rounding_mode": 2}


@pytest.mark.parametrize("dims,concrete", [(["N", 24, "H", "W"], (1, 24, 6, 8)), ([2, 16, 32, 40], (2, 16, 32, 40))],
                         ids=["dynamic", "large"])
def test_bfp_split_masked_branches_bit_exact(dims: list, concrete: tuple) -> None:
    """to_bfp's split body (onnx_ops.bfp ``_bfp_split``: a tensor not known to be small) on data
    with ±Inf/NaN (its masked branches) and on the same data made finite (its plain branches): bit
    for bit the reference, zeros, -0, subnormals and the float32 maximum included."""
    from onnxptq.formats import fake_quantize

    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=dims, dtype="float32", **BFP16)
    nodes = _all_nodes(frag.functions[0].node)
    assert [n.op_type for n in nodes].count("If") == 1, frag.functions[0].name
    sess = fragment_session(frag, dims)
    for seed in (0, 1):
        x = _data(concrete, seed)
        assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **BFP16), f"{dims} seed {seed}")
        finite = np.where(np.isfinite(x), x, np.float32(3.0))  # the plain branches, same body
        assert_same_bits(sess.run(None, {"x": finite})[0], fake_quantize(finite, "bfp", **BFP16), f"{dims} finite")
