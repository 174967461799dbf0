"""MX bodies on a ragged block axis followed only by 1s take the transposed view of a last axis.

A ``[T, 40, 1]`` activation blocked along axis 1 (blocks of 32) used to get the tiled view
``(T, 5, 8, 1)`` (or a padded ``(rows, 32, 1)`` one): every reduction and every per-block broadcast
then ran over spans of one element, which onnxruntime loops over one at a time, plus the sub-block
maxima's Pad/Gather. Its memory order is a last axis's, so it now takes :func:`view_last`'s
``(1, bs, blocks)`` view, under the same size rule as a last axis (0.50-0.68x the CPU per call on
``[300, 200, 1]``, bench/mx_ones_after.py). These tests pin the choice by structure (the later dims
are known 1s, the axis is ragged and longer than a block, the tensor large; an axis of whole blocks,
a short tensor or a later dim that is not 1 keep their views) and that the transposed bodies give
the NumPy reference's bits on edge values (±Inf, NaN, ±0, subnormals, the float32 maximum, ties),
with a static shape and with a dynamic batch.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from _format_testing import assert_same_bits, fragment_session, mx_edge_data
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq

ELEMENTS = [("int8", 2), ("int8", 0), ("fp8_e4m3", 2), ("fp4_e2m1", 2), ("fp6_e2m3", 2)]


def _body(shape: tuple, axis: int, element_dtype: str = "fp8_e4m3", rounding_mode: int = 2) -> onnx.FunctionProto:
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32",
                     element_dtype=element_dtype, axis=axis, block_size=32, rounding_mode=rounding_mode)
    return frag.functions[0]


def _transposed(body: onnx.FunctionProto) -> bool:
    """The body views the blocks as ``(1, bs, blocks)``: two Transposes (in and out) and no Gather
    of the tiled view's block indices."""
    ops = [n.op_type for n in body.node]
    return ops.count("Transpose") == 2 and "Gather" not in ops


@pytest.mark.parametrize("shape,axis,transposed", [
    ((300, 200, 1), 1, True),          # ragged axis (200 = 6 blocks + 8), trailing 1: transposed
    ((None, 200, 1, 1), 1, False),     # an unknown batch: only 200 elements known (the size rule)
    ((400, 40, 1, 1), -3, True),       # negative axis, two trailing 1s
    ((300, 200, 2), 1, False),         # a later dim that is not 1: the tiled view stays
    ((300, 192, 1), 1, False),         # whole blocks (6 × 32): the plain view stays
    ((600, 32, 1), 1, False),          # one block: the body in x's own shape stays
    ((20, 200, 1), 1, False),          # 4000 elements: below the size rule, as for a last axis
    ((60, 200), 1, True),              # the last axis itself (unchanged rule)
], ids=str)
def test_view_chosen_by_structure(shape, axis, transposed) -> None:
    for element_dtype, rounding_mode in ELEMENTS:
        body = _body(shape, axis, element_dtype, rounding_mode)
        assert _transposed(body) == transposed, (body.name, [n.op_type for n in body.node])
        assert body.name.split("_f32")[0].endswith(("l", "li", "lhi", "lh")) == transposed, body.name


@pytest.mark.parametrize("element_dtype,rounding_mode", ELEMENTS + [("int8", 1), ("fp8_e5m2", 2), ("fp6_e3m2", 2)])
@pytest.mark.parametrize("shape,axis", [((300, 200, 1), 1), ((250, 40, 1, 1), -3)], ids=str)
def test_transposed_bodies_bit_exact(element_dtype, rounding_mode, shape, axis) -> None:
    attrs = dict(element_dtype=element_dtype, axis=axis, block_size=32, rounding_mode=rounding_mode)
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **attrs)
    assert _transposed(frag.functions[0]), frag.functions[0].name
    sess = fragment_session(frag, list(shape), TensorProto.FLOAT)
    x = mx_edge_data(shape, seed=sum(shape) + rounding_mode + len(element_dtype), rate=0.1)
    assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "mx", **attrs), frag.functions[0].name)


@pytest.mark.parametrize("element_dtype,rounding_mode", [("int8", 2), ("fp4_e2m1", 2)])
def test_dynamic_batch_transposed_body_bit_exact(element_dtype, rounding_mode) -> None:
    """A ``[N, 8200, 1]`` input (8200 known elements, a ragged axis) folds its view with the batch
    as the Reshape's ``-1``: exact on batches 1, 2 and 0."""
    attrs = dict(element_dtype=element_dtype, axis=1, block_size=32, rounding_mode=rounding_mode)
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=("N", 8200, 1), dtype="float32", **attrs)
    assert _transposed(frag.functions[0]), frag.functions[0].name
    sess = fragment_session(frag, ["N", 8200, 1], TensorProto.FLOAT)
    for batch in (1, 2, 0):
        x = mx_edge_data((batch, 8200, 1), seed=batch + 7, rate=0.1)
        got = sess.run(None, {"x": x})[0]
        assert got.shape == x.shape
        assert_same_bits(got, fake_quantize(x, "mx", **attrs), f"{frag.functions[0].name} batch {batch}")


def test_transposed_body_in_a_model_matches_the_plain_view() -> None:
    """The same quantizer, once as the transposed body and once forced to the tiled view (a later
    dim of 1 the shape does not tell), gives the same bits inside a model (a Relu before it)."""
    shape = (300, 200, 1)
    attrs = dict(element_dtype="fp8_e4m3", axis=1, block_size=32, rounding_mode=2)
    x = mx_edge_data(shape, seed=3, rate=0.1)
    outs = []
    for declared in (shape, (300, 200, "t")):
        frag = build_qdq("mx", "r", "y", name="q", opset=21, shape=declared, dtype="float32", **attrs)
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), *frag.nodes], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], frag.initializers)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in {"": 21, **frag.opset_imports}.items()],
                              functions=frag.functions)
        m.ir_version = 8
        import onnxruntime as ort
        outs.append((ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0],
                     _transposed(frag.functions[0])))
    assert [t for _, t in outs] == [True, False]
    assert_same_bits(outs[0][0], outs[1][0], "transposed vs tiled")
