"""BFP bodies' elementwise constants broadcast at the view's rank (BFP16 ``to_bfp``, MX4/MX6/MX9
``to_bfp_prime``; onnx_ops/bfp.py).

onnxruntime 1.32's CPU broadcast runs a tensor whose last dim is 1 against a rank-0 operand element
by element (bench/fp_body_profile.py, bench/bfp_body_profile.py): on a ``(84000, 8, 1)`` BFP16 view
(a ``[21000, 32, 1]`` activation) the ``py3_round`` zero-sign ``Add`` of a runtime scalar +0 and the
``Mul`` by a scalar 0 took 17 ms each, the whole body 83 ms a call, against ~15 with constants and
the +0 shaped ``[1] * rank``. Every view whose elements after the block axis are 1 (an SE block's
``[N, C, 1, 1]``, a ``[T, C, 1]`` sequence) and every block-maxima tensor hit it.

Pinned here: no elementwise node of a BFP body (its ``If`` branches included) reads a rank-0 float
constant, or a rank-0 runtime value, together with a tensor of higher rank — ranks found by a small
dataflow over the body, not by node names — and the bodies on trailing-1 shapes give the NumPy
reference's bits on ±Inf, NaN, ±0, subnormals, the float32 maximum and ties. A block axis whose
later dims are all 1 takes the transposed view of a last axis (MX9 on ``[21000, 32, 1]``: 50 -> 12
ms a call; the ``(rows, 16, 2, 1)`` view broadcast each per-block scale over spans of 2), also with
a dynamic batch.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from _format_testing import assert_same_bits, log_uniform, run_static
from onnxptq.formats import fake_quantize
from onnxptq.formats.bfp import PRESETS
from onnxptq.onnx_ops import build_qdq

#: Binary elementwise ops whose rank-0 operand broadcasts (Clip's bounds must be scalars).
ELEMENTWISE = {"Mul", "Add", "Sub", "Div", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
               "GreaterOrEqual", "Where", "And", "Or"}
#: Ops whose output has the rank of their (single data) input.
UNARY = {"Abs", "Neg", "Cast", "CastLike", "Not", "IsNaN", "IsInf", "Round", "Sign", "Identity", "Clip"}
#: (preset, extra attributes) covering every formula: to_bfp's three roundings and the compiler
#: kernel, to_bfp_prime with the compare chain (D = 1) and with sub-block exponents (D = 3, m = 12).
CASES = [("BFP16", {}), ("BFP16", {"rounding_mode": 0}), ("BFP16", {"rounding_mode": 1}),
         ("BFP16", {"use_compiler_version_cpu_kernel": 1}), ("MX9", {}), ("MX4", {}),
         ("MX9", {"sub_block_shift_bits": 2, "bit_width": 21})]
#: (shape, axis): trailing-1 views (one block row, padded, whole axis shorter than a block, an SE
#: vector, the prime static view), one large enough for the split/If bodies, and a plain one.
SHAPES = [((96, 32, 1), 1), ((3, 40, 1, 1), 1), ((3, 40, 1, 1), -3), ((2, 12, 1), 1), ((24, 64, 1), 1),
          ((2, 16, 3, 3), 1), ((5, 48), 1)]


def _body(preset: str, extra: dict, shape: tuple, axis: int) -> onnx.FunctionProto:
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=shape, dtype="float32",
                     **dict(PRESETS[preset], axis=axis, **extra))
    return frag.functions[0]


def _mixed_rank_scalars(body: onnx.FunctionProto) -> list[tuple[str, list[str]]]:
    """Elementwise nodes (any depth of ``If``) reading a rank-0 value next to a tensor of higher rank.

    Rank-0 values: Constants of rank 0, ``Size``, reductions with ``keepdims=0`` and no axes, and
    elementwise or unary ops on rank-0 values only. Every other value has the view's rank (the
    body reduces with ``keepdims=1`` and reshapes to views)."""
    scalar: set[str] = set()
    bad: list[tuple[str, list[str]]] = []

    def walk(nodes) -> None:
        for n in nodes:
            for at in n.attribute:
                if at.type == onnx.AttributeProto.GRAPH:
                    walk(at.g.node)
            ins = [i for i in n.input if i]
            if n.op_type == "Constant":
                t = next((a.t for a in n.attribute if a.name == "value"), None)
                rank0 = (t is not None and len(t.dims) == 0) or any(a.name == "value_int" for a in n.attribute)
            elif n.op_type == "Size":
                rank0 = True
            elif n.op_type.startswith("Reduce"):
                keep = next((a.i for a in n.attribute if a.name == "keepdims"), 1)
                axes = len(ins) > 1 or any(a.name == "axes" for a in n.attribute)
                rank0 = keep == 0 and not axes
            elif n.op_type in ELEMENTWISE or n.op_type in UNARY:
                data = ins[:1] if n.op_type == "Clip" else ins
                rank0 = all(i in scalar for i in data)
                if n.op_type in ELEMENTWISE and not rank0 and any(i in scalar for i in ins):
                    bad.append((n.op_type, ins))
            else:
                rank0 = False
            if rank0:
                scalar.update(n.output)

    walk(body.node)
    return bad


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("preset,extra", CASES, ids=str)
def test_no_elementwise_op_broadcasts_a_rank0_operand(preset, extra, shape, axis) -> None:
    body = _body(preset, extra, shape, axis)
    assert any(n.op_type == "Clip" for n in body.node) or any(
        n.op_type == "Clip" for m in body.node for a in m.attribute if a.type == onnx.AttributeProto.GRAPH
        for n in a.g.node) or extra.get("use_compiler_version_cpu_kernel")  # Clip keeps scalar bounds
    bad = _mixed_rank_scalars(body)
    assert not bad, f"{body.name}: elementwise ops broadcasting a rank-0 operand {bad}"


def test_the_rank_analysis_sees_a_rank0_operand() -> None:
    """The dataflow above catches a scalar against a view (else the test above could not fail)."""
    from onnx import helper

    c = helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(np.array(0.5, np.float32)))
    r = helper.make_node("ReduceSum", ["v"], ["t"], keepdims=0)
    fn = helper.make_function("d", "f", ["v"], ["y"], [c, r, helper.make_node("Mul", ["v", "c"], ["m"]),
                                                       helper.make_node("Add", ["m", "t"], ["y"])], [])
    assert [op for op, _ in _mixed_rank_scalars(fn)] == ["Mul", "Add"]


def _edge_data(shape: tuple, seed: int) -> np.ndarray:
    """Log-uniform magnitudes over float32's range with the edge cases sprinkled in, and a third of
    the tensor tiny (blocks whose exponent math reaches the subnormal range)."""
    n = int(np.prod(shape))
    x = log_uniform(n, seed=seed)
    rng = np.random.default_rng(seed)
    f32 = np.finfo(np.float32)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -3e-41, f32.tiny / 2, f32.max, -f32.max,
                         1.5, -2.5, 0.75, -0.25, 3.0, -1e-30], np.float32)
    pick = rng.random(n) < 0.15
    x[pick] = rng.choice(specials, int(pick.sum()))
    x[: n // 3] *= np.float32(1e-30)
    return x.reshape(shape)


@pytest.mark.parametrize("shape,axis", SHAPES, ids=str)
@pytest.mark.parametrize("preset,extra", CASES, ids=str)
@pytest.mark.parametrize("finite", [True, False], ids=["finite", "special"])
def test_trailing_one_views_bit_exact(preset, extra, shape, axis, finite) -> None:
    """Finite data takes to_bfp's plain branch, data with Inf/NaN its masked one (both checked)."""
    attrs = dict(PRESETS[preset], axis=axis, **extra)
    x = _edge_data(shape, seed=sum(shape) + len(extra))
    if finite:
        x = np.where(np.isfinite(x), x, np.float32(1.25)).astype(np.float32)
    got, name = run_static("bfp", x, **attrs)
    assert_same_bits(got, fake_quantize(x, "bfp", **attrs), f"{name} {shape}")


@pytest.mark.parametrize("preset", ["BFP16", "MX9"])
@pytest.mark.parametrize("shape,axis,transposed", [((300, 32, 1), 1, True), ((300, 40, 1, 1), -3, True),
                                                   (("N", 48, 1), 1, True), ((2, 16, 3, 3), 1, False),
                                                   ((4, 32, 0), 1, False), ((96, 32, 1), 1, False),
                                                   ((3, 40, 1, 1), -3, False), (("N", 96, 1, 1), 1, False)], ids=str)
def test_ones_after_the_axis_take_the_transposed_view(preset, shape, axis, transposed) -> None:
    """Decided by the dims after the axis (all known 1s), not by rank or axis number: an empty or
    longer trailing dim keeps the ``(rows, bs, post)`` view; so does a tensor known to be small
    (bfp.LAST_AXIS_MIN_SIZE: static, or an NCHW batch's SE vector), but not a ``[?, C, 1]``
    whose first dim may be a long time axis."""
    body = _body(preset, {}, shape, axis)
    nodes = list(body.node) + [n for m in body.node for a in m.attribute if a.type == onnx.AttributeProto.GRAPH
                               for n in a.g.node]
    assert any(n.op_type == "Transpose" for n in nodes) == transposed, body.name


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MX6"])
def test_dynamic_batch_trailing_ones_bit_exact(preset) -> None:
    """One body for ``[N, 48, 1]`` (the axis length from the axis, not the last dim) on two batches."""
    from _format_testing import fragment_session

    attrs = dict(PRESETS[preset], axis=1)
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=("N", 48, 1), dtype="float32", **attrs)
    sess = fragment_session(frag, ["N", 48, 1])
    for batch in (1, 7):
        x = _edge_data((batch, 48, 1), seed=batch)
        assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **attrs), f"{preset} batch {batch}")
