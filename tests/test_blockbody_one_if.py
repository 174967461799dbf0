"""to_bfp's split body (BFP16 on tensors not known to be small) with one ``If`` instead of two
(onnx_ops.bfp ``_bfp_split``, issue 26 items 1-3, blockbody14), and every block preset's body bit
for bit the NumPy reference on the edge cases.

Each ``If`` costs onnxruntime a session state, kernels and an allocation plan per branch in every
call of every session (PP-OCR cls BFP16: 217 subgraphs against BF16's 1). The second ``If`` only
put ±Inf/NaN back; the first now returns, beside the block maxima and the runtime +0, a carrier
the rounding's zero-sign correction multiplies (+0 on finite data: the same nodes on the same
values; -Inf/NaN where x is not finite in the masked branch), so the codes carry Inf/NaN out.
These tests pin the bits on zeros, ±0, subnormals, ±Inf, NaN, the float32 maximum, sums that
overflow, blocks not dividing the axis, rank 1, in every view and rounding mode, and
the count of ``If`` nodes per split body."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from _format_testing import EDGE_VALUES, F32, assert_same_bits, fragment_session, mx_edge_data
from onnxptq.formats import fake_quantize
from onnxptq.formats.bfp import PRESETS
from onnxptq.onnx_ops import build_qdq

MX = {"MXINT8": "int8", "MXFP8_E4M3": "fp8_e4m3", "MXFP4": "fp4_e2m1"}
ALL = ["BFP16", "MX9", "MX6", "MX4", *MX]

#: (dims given to the emitter, a concrete shape, axis): a dynamic image (the split body, PP-OCR
#: cls's ``[?, C, ?, ?]``), the same with an axis blocks tile (the copied-dims view), a ragged axis
#: (padded), a large static tensor (halves), a last axis (transposed), a sequence of unknown length
#: (known rank), unknown rank 1, and rank 0.
VIEWS = [
    (["N", 20, "H", "W"], (2, 20, 5, 7), 1),
    ([None, 40, None, None], (1, 40, 3, 6), 1),
    (["N", 24, 6, 8], (2, 24, 6, 8), 1),
    ([2, 16, 32, 40], (2, 16, 32, 40), 1),
    ([3, 96, 100], (3, 96, 100), -1),
    (["T", 33], (70, 33), 0),
    (["n"], (45,), 0),
]
# Rank 0 is not here: the plan keeps block-format activations of rank 0 float
# (pipeline/plan/corners.py ``scalar_block_tensors``); no body is built for them.


def _fmt(preset: str, axis: int, rounding_mode: int | None = None) -> tuple[str, dict]:
    if preset in MX:
        return "mx", dict(element_dtype=MX[preset], axis=axis, block_size=32, rounding_mode=2)
    attrs = dict(PRESETS[preset], axis=axis)
    if rounding_mode is not None:
        attrs["rounding_mode"] = rounding_mode
    return "bfp", attrs


def _cases(shape: tuple, seed: int) -> list[tuple[str, np.ndarray]]:
    """Edge data (every EDGE_VALUES entry, whole blocks of zeros / -0 / subnormals / non-finite
    values / maxima), the same made finite (the plain branch), a finite tensor whose sum overflows
    (the masked branch on finite data) and tensors of nothing but Inf or NaN."""
    x = mx_edge_data(shape, seed, rate=0.08)
    flat = x.reshape(-1)
    flat[: min(flat.size, len(EDGE_VALUES))] = EDGE_VALUES[: flat.size]
    for k, v in enumerate([0.0, -0.0, 1e-45, np.inf, -F32.max, np.nan]):
        flat[24 + 8 * k: 32 + 8 * k] = v  # whole blocks of one kind where they align
    finite = np.where(np.isfinite(x), x, np.float32(-2.5))
    huge = np.where(np.isfinite(x), x, np.float32(F32.max))
    return [("edge", x), ("finite", finite), ("overflowing sum", huge), ("all inf", np.full(shape, np.inf, np.float32)),
            ("all nan", np.full(shape, np.nan, np.float32)), ("-inf and -0", np.where(finite > 0, -np.inf, -0.0).astype(np.float32))]


def _size_guard(node: onnx.NodeProto) -> bool:
    """The unsized body's ``If`` that returns a tensor of < 2 elements unchanged (an Identity branch)."""
    return any(a.type == onnx.AttributeProto.GRAPH and [n.op_type for n in a.g.node] == ["Identity"] for a in node.attribute)


def _ifs(nodes) -> int:
    """``If`` nodes that choose formulas (size guards not counted), branches included."""
    count = 0
    for n in nodes:
        count += n.op_type == "If" and not _size_guard(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                count += _ifs(a.g.node)
    return count


def _check(fmt: str, attrs: dict, dims: list, shape: tuple) -> onnx.FunctionProto:
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=dims, dtype="float32", **attrs)
    sess = fragment_session(frag, [d if isinstance(d, int) or d is None else str(d) for d in dims] if dims else [])
    for seed in (0, 1):
        for what, x in _cases(shape, seed):
            assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, fmt, **attrs),
                             f"{what} {shape} seed {seed} ({frag.functions[0].name})")
    return frag.functions[0]


@pytest.mark.parametrize("rounding_mode", [2, 1, 0])
@pytest.mark.parametrize("dims,shape,axis", VIEWS, ids=str)
def test_to_bfp_bodies_bit_exact_every_rounding_mode(dims, shape, axis, rounding_mode) -> None:
    """BFP16 (to_bfp) in each rounding mode: the carrier that puts Inf/NaN back goes through the
    mode's own tie correction (modes 0 and 1) or the zero-sign product (mode 2)."""
    fmt, attrs = _fmt("BFP16", axis, rounding_mode)
    _check(fmt, attrs, dims, shape)


@pytest.mark.parametrize("dims,shape,axis", VIEWS, ids=str)
@pytest.mark.parametrize("preset", ALL)
def test_block_presets_bit_exact_on_edge_cases(preset, dims, shape, axis) -> None:
    fmt, attrs = _fmt(preset, axis)
    _check(fmt, attrs, dims, shape)


@pytest.mark.parametrize("rounding_mode", [2, 0])
@pytest.mark.parametrize("dims", [["N", 24, "H", "W"], [None, 40, None, None], [2, 16, 32, 40], ["T", 33]], ids=str)
def test_to_bfp_split_body_has_one_if(dims, rounding_mode) -> None:
    """One ``If`` per split body (it was two: the second put Inf/NaN back), one ReduceSum over the
    tensor, and no ``Where``, ``IsNaN`` or ``IsInf`` outside the masked branch: the plain path runs
    what it ran before."""
    fmt, attrs = _fmt("BFP16", 1 if len(dims) > 2 else 0, rounding_mode)
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=dims, dtype="float32", **attrs)
    body = frag.functions[0]
    guard = next((n for n in body.node if n.op_type == "If" and _size_guard(n)), None)
    nodes = list(body.node) if guard is None else list(next(a.g for a in guard.attribute if a.name == "else_branch").node)
    top = [n.op_type for n in nodes]
    assert top.count("If") == 1 and _ifs(body.node) == 1, body.name
    assert top.count("ReduceSum") == 1 and not {"Where", "IsNaN", "IsInf"} & set(top), top
    branch = next(n for n in nodes if n.op_type == "If")
    plain = next(a.g for a in branch.attribute if a.name == "then_branch")
    assert {n.op_type for n in plain.node} <= {"ReduceMax", "ReduceMin", "Neg", "Max", "Sub", "Reshape", "Split", "Constant"}
