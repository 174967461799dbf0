"""MX INT8 bodies take the element unit ``scale·2^-6`` straight from the block maxima.

A body call on a PP-OCR-sized activation costs onnxruntime a fixed ~0.5-2 µs per executed node
besides its passes, and the INT8 unit used to be ``Neg`` (of the block minima of ``-|x|``) →
pow2_floor → ``Max`` (the E8M0 floor) → ``Mul`` by ``2^-6``. The sign and the ``2^-6`` now ride
in pow2_floor's first float64 product and the floor reads ``2^-133`` (onnx_ops.mx._int_unit):
two nodes fewer in the branch-free body, one in the branched one. These tests pin the structure
(no ``Mul`` by ``2^-6``; no ``Neg`` in a branch-free body whose view gives one value per block)
and the bits against formats/mx.py where the clamp and the sign matter: blocks whose maximum is
0, subnormal, just below / at / above ``2^-127``, ``FLT_MAX``, with ±Inf, NaN and ±0 mixed in,
for every rounding mode, on branch-free (small known), branched (dynamic) and tiled views.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from _format_testing import assert_same_bits, fragment_session
from onnxptq.formats import fake_quantize
from onnxptq.graph.walk import subgraph_nodes
from onnxptq.onnx_ops import build_qdq

#: (declared shape, run shape): branch-free whole-axis / plain view (small, known), branched
#: (a dynamic batch and a large tensor), tiled (a ragged axis of 40 in blocks of 32).
SHAPES = [((2, 32, 3, 4), (2, 32, 3, 4)), ((2, 64, 3, 4), (2, 64, 3, 4)),
          (("N", 64, 16, 24), (2, 64, 16, 24)), ((2, 40, 3, 4), (2, 40, 3, 4))]


def _frag(shape, rounding_mode: int):
    return build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32",
                     element_dtype="int8", axis=1, block_size=32, rounding_mode=rounding_mode)


def _constants(body: onnx.FunctionProto) -> dict[str, np.ndarray]:
    return {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in body.node
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}


@pytest.mark.parametrize("shape,run", SHAPES, ids=str)
@pytest.mark.parametrize("rounding_mode", [0, 1, 2])
def test_unit_from_the_maxima(shape, run, rounding_mode) -> None:
    body = _frag(shape, rounding_mode).functions[0]
    consts = _constants(body)
    by_unit = [n for n in (*body.node, *subgraph_nodes(body)) if n.op_type == "Mul"
               and any(i in consts and consts[i].size == 1 and float(consts[i].reshape(-1)[0]) == 2.0**-6 for i in n.input)]
    assert not by_unit, f"{body.name}: a Mul by 2^-6 (the unit from the scale)"
    floor = [n for n in body.node if n.op_type == "Max"
             and any(i in consts and consts[i].size == 1 and float(consts[i].reshape(-1)[0]) == 2.0**-133 for i in n.input)]
    assert len(floor) == 1, f"{body.name}: the unit's E8M0 floor 2^-133"
    branch_free = not any(n.op_type == "If" for n in body.node)
    tiled = any(n.op_type == "Gather" for n in body.node)
    if branch_free and not tiled:
        minima = {o for n in body.node if n.op_type == "ReduceMin" for o in n.output}
        negated = [n for n in body.node if n.op_type == "Neg" and minima & set(n.input)]
        assert not negated, f"{body.name}: the block minima negated"


def _edge_blocks(shape: tuple, seed: int) -> np.ndarray:
    """Per (row, block): a block maximum drawn from the E8M0 clamp's neighbourhood and float32's
    edges, the block's other elements below it (subnormals, ±0, ties of the unit) and a few
    non-finite elements."""
    rng = np.random.default_rng(seed)
    f32 = np.finfo(np.float32)
    tops = np.array([0.0, 1e-45, 3e-39, 2.0**-127 * 0.75, 2.0**-127, 2.0**-127 * 1.5, 2.0**-126, 1.0, 127.5,
                     2.0**100, f32.max], np.float32)
    x = np.zeros(shape, np.float32)
    n, c = shape[0], shape[1]
    rest = int(np.prod(shape[2:]))
    flat = x.reshape(n, c, rest)
    for i in range(n):
        for j0 in range(0, c, 32):
            j1 = min(j0 + 32, c)
            top = np.float32(rng.choice(tops))
            frac = rng.choice(np.array([0.5, 0.25, 1 / 128, 3 / 256, 1 / 512, 0.0, 1e-9], np.float32), (j1 - j0, rest))
            sign = rng.choice(np.array([-1.0, 1.0], np.float32), (j1 - j0, rest))
            flat[i, j0:j1] = sign * top * frac
            flat[i, j0, 0] = top * rng.choice(np.array([-1.0, 1.0], np.float32))
    pick = rng.random(x.size) < 0.02
    x.reshape(-1)[pick] = rng.choice(np.array([np.inf, -np.inf, np.nan, -0.0], np.float32), int(pick.sum()))
    return x


@pytest.mark.parametrize("shape,run", SHAPES, ids=str)
@pytest.mark.parametrize("rounding_mode", [0, 1, 2])
def test_unit_bits_at_the_clamp(shape, run, rounding_mode) -> None:
    frag = _frag(shape, rounding_mode)
    sess = fragment_session(frag, list(shape), TensorProto.FLOAT)
    for seed in (0, 1):
        x = _edge_blocks(run, seed + rounding_mode)
        ref = fake_quantize(x, "mx", element_dtype="int8", axis=1, block_size=32, rounding_mode=rounding_mode)
        assert_same_bits(sess.run(None, {"x": x})[0], ref, f"{frag.functions[0].name} seed {seed}")


@pytest.mark.parametrize("shape,run", SHAPES, ids=str)
@pytest.mark.parametrize("rounding_mode", [0, 1])
def test_tie_rounding_has_no_where(shape, run, rounding_mode) -> None:
    """Rounding modes 0 and 1 move the ties by ``r - (0 - step)`` (Cast of the tie test), not by a
    full-tensor ``Where``: onnxruntime's CPU ``Where`` cost more than the ops that replace it
    (per call 0.68-0.88x without it, bench/RESULTS.md, branch blockspeed). Only a masked ``If``
    branch (never taken on finite data) may hold one. Bits: test_unit_bits_at_the_clamp."""
    body = _frag(shape, rounding_mode).functions[0]
    top = [n.op_type for n in body.node]
    assert "Where" not in top, body.name
    assert top.count("Round") == 1 and top.count("Sign") == (1 if rounding_mode == 0 else 0), body.name
