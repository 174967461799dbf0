"""to_bfp_prime (MX9/MX6/MX4) bodies carry a NaN block into its scale through ``Max`` (issue 26 items 1
and 3, blockq18).

A block holding NaN must come out NaN as a whole (the reference's scale is NaN), but onnxruntime's
``ReduceMax`` drops a NaN unless it comes first, so the body reads NaN off the block's sum of |x|.
It used to add ``0 / (sum + 1)`` to the block's power of two (``Add``, ``Div``, ``Add``) and, where
the sub-block exponents are taken, ``Ps - Ps`` to the scales (``Sub``, ``Add``); now ``-sum`` is a
third operand of the clamp ``Max(max, 2^-127, -sum)``: at most 0 (or -Inf, an overflowed sum)
where the block is NaN-free, so the clamp is unchanged, and NaN in a NaN block, which onnxruntime's
elementwise ``Max`` propagates from any operand (unlike ``ReduceMax``). Two nodes less a call
(every call inlines its body: finish's session creation and each verification run pay per node).

Held here: the bodies hold no poison ``Div`` and clamp with a three-operand ``Max`` fed by the sum's
``Neg`` (fails on main), and they equal the NumPy reference bit for bit where that ``Max`` decides:
a NaN at every position of a block in turn (first, middle, last, the ragged last block's last
element), a NaN beside ±Inf, a NaN in a block whose sum of |x| overflows, overflowing NaN-free blocks
(-Inf operand: must stay finite scales), all-zero and -0 blocks, subnormals, in the views the
emitter builds (static ragged and whole-axis, generic, a non-chain format).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from _format_testing import assert_same_bits, fragment_session, run_static
from onnxptq.formats import fake_quantize
from onnxptq.formats.bfp import PRESETS
from onnxptq.onnx_ops import build_qdq

FORMATS = {
    "MX9": dict(PRESETS["MX9"]),
    "MX6": dict(PRESETS["MX6"]),
    # the sub-block exponents taken (no shift by compares): the scales' Max carries the NaN
    "prime-w32": dict(bfp_method="to_bfp_prime", bit_width=32, block_size=8, sub_block_size=2,
                      sub_block_shift_bits=1, rounding_mode=2),
}


def nan_blocks(shape: tuple[int, ...], axis: int, block: int, seed: int) -> np.ndarray:
    """Per position along the other axes, one case: a NaN at offset ``k`` of every block (k = 0 …
    block - 1, the last block's last element where the axis is ragged), a NaN with +Inf and -Inf, a
    NaN among values near FLT_MAX (the sum overflows), NaN-free near-FLT_MAX blocks, all zeros, -0
    with subnormals, subnormals beside a tiny normal; the rest log-uniform."""
    rng = np.random.default_rng(seed)
    x = (np.exp(rng.uniform(np.log(1e-3), np.log(1e3), shape)) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    rows = np.moveaxis(x, axis, 0).reshape(shape[axis], -1).copy()
    n, cases = rows.shape
    c = 0
    for k in range(block):
        rows[k::block, c] = np.nan
        c += 1
    rows[n - 1, c] = np.nan  # the last element of the axis (of the ragged last block)
    rows[1::block, c + 1], rows[0::block, c + 1], rows[2::block, c + 1] = np.nan, np.inf, -np.inf
    rows[:, c + 2] = np.float32(3.0e38) * rng.choice([-1.0, 1.0], n).astype(np.float32)
    rows[block - 1::block, c + 2] = np.nan
    rows[:, c + 3] = np.float32(3.0e38) * rng.choice([-1.0, 1.0], n).astype(np.float32)
    rows[:, c + 4] = 0.0
    rows[:, c + 5] = np.where(np.arange(n) % 2, -0.0, -np.float32(1e-42))
    rows[:, c + 6] = np.where(np.arange(n) % 3, np.float32(3e-39), np.float32(2.0**-120))
    assert cases >= c + 7
    return np.ascontiguousarray(np.moveaxis(rows.reshape(np.moveaxis(x, axis, 0).shape), 0, axis))


def _top_level(function: onnx.FunctionProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in function.node for o in n.output}


@pytest.mark.parametrize("shape", [(2, 48, 3, 6), (2, 40, 4, 5), (1, 16, 5, 6)], ids=["blocks", "ragged", "one-block"])
@pytest.mark.parametrize("name", list(FORMATS))
def test_the_scale_takes_nan_through_max(name, shape):
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **dict(FORMATS[name], axis=1))
    body = frag.functions[0]
    made = _top_level(body)
    zeros = {o for o, n in made.items() if n.op_type == "Constant" and not onnx.numpy_helper.to_array(n.attribute[0].t).any()}
    assert not [n for n in body.node if n.op_type == "Div" and n.input[0] in zeros], "a poison Div (0 / (sum + 1))"
    clamps = [n for n in body.node if n.op_type == "Max" and len(n.input) == 3]
    assert len(clamps) == 1, [list(n.input) for n in body.node if n.op_type == "Max"]
    neg = made.get(clamps[0].input[2])
    assert neg is not None and neg.op_type == "Neg" and made[neg.input[0]].op_type == "ReduceSum"


@pytest.mark.parametrize("shape", [(2, 48, 3, 6), (2, 40, 4, 5), (1, 16, 5, 6)], ids=["blocks", "ragged", "one-block"])
@pytest.mark.parametrize("name", list(FORMATS))
def test_static_bodies_exact_with_nan_anywhere_in_a_block(name, shape):
    attrs = dict(FORMATS[name], axis=1)
    x = nan_blocks(shape, 1, attrs["block_size"], seed=shape[1])
    got, fname = run_static("bfp", x, **attrs)
    want = fake_quantize(x, "bfp", **attrs)
    assert_same_bits(got, want, f"{name} {fname}")
    # NaN blocks are NaN whole, NaN-free blocks of huge values are not
    assert np.isnan(got).sum() > np.isnan(x).sum() and np.isfinite(got).any()


@pytest.mark.parametrize("name", list(FORMATS))
def test_generic_body_exact_with_nan_anywhere_in_a_block(name):
    attrs = dict(FORMATS[name], axis=1)
    x = nan_blocks((2, 40, 4, 5), 1, attrs["block_size"], seed=5)
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=None, dtype="float32", **attrs)
    got = fragment_session(frag, [None] * 4).run(None, {"x": x})[0]
    assert_same_bits(got, fake_quantize(x, "bfp", **attrs), f"{name} {frag.functions[0].name}")
