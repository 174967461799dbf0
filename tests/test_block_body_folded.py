"""Block bodies with their shape values resolved when the function is built, and BFP16's body on
small tensors without ``If`` (issue 26 items 1 and 3, branch blockfunc).

An activation quantizer is one function call per tensor, and onnxruntime inlines, optimises and
plans every node of every call when it creates a session (the finish and verify sessions of every
quantize), then runs each node at every inference. The shape arithmetic of a body — ``Shape`` of
the input, the ``Concat`` of a view's ``Reshape`` target, ``ReduceProd`` of the dims after the
axis — was computed at run time even where shape inference had told the emitter every dim but a
dynamic batch. Now (``onnx_ops.body.Body``) it folds into constants at build time, the one unknown
dim becoming the ``Reshape`` targets' ``-1``; the function's name carries the dims (``_k``).
These tests pin that such bodies hold no shape arithmetic, that their results are the NumPy
reference's bits on every batch — empty included — and on the cases a mask could get wrong
(±Inf, NaN, ±0, subnormals, the float32 maximum), and that BFP16 (to_bfp) on a tensor known to be
small has neither ``If`` nor a sum over the tensor (``onnx_ops.bfp._bfp_flat``), while a large
one keeps its small ``If`` (branch-free, its mask and put-back cost more per call; one since blockbody14).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from _format_testing import EDGE_VALUES, assert_same_bits, fragment_session, log_uniform
from onnxptq.formats import fake_quantize
from onnxptq.formats.bfp import PRESETS
from onnxptq.onnx_ops import build_qdq

MX = {"MXINT8": "int8", "MXFP8_E4M3": "fp8_e4m3", "MXFP4": "fp4_e2m1"}
PRESET_NAMES = ["BFP16", "MX9", "MX6", *MX]
#: (dims after a dynamic batch, axis): the views the emitter builds — a whole axis or a multiple
#: of the block, a ragged axis (padded, tiled or sub-blocked), the last axis.
VIEWS = [((32, 6, 10), 1), ((40, 3, 5), 1), ((24, 7), 2), ((6, 70), 2)]
SHAPE_OPS = {"Shape", "Concat", "ReduceProd", "Size"}


def _fmt(preset: str, axis: int) -> tuple[str, dict]:
    if preset in MX:
        return "mx", dict(element_dtype=MX[preset], axis=axis, block_size=32, rounding_mode=2)
    return "bfp", dict(PRESETS[preset], axis=axis)


def _ops(nodes) -> list[str]:
    """Op types of ``nodes`` and of every subgraph inside them."""
    return [n.op_type for n in nodes] + [o for n in nodes for a in n.attribute
                                         if a.type == onnx.AttributeProto.GRAPH for o in _ops(a.g.node)]


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Log-uniform values with the edge values (±Inf, NaN, ±0, subnormals, the float32 maximum)
    scattered through, and one line of tiny negatives that round to -0."""
    rng = np.random.default_rng(seed)
    x = log_uniform(int(np.prod(shape)), seed=seed)
    if x.size:
        idx = rng.choice(x.size, min(x.size, 3 * EDGE_VALUES.size), replace=False)
        x[idx] = np.resize(EDGE_VALUES, idx.size)
        x[: min(x.size, 40)] = -np.abs(x[: min(x.size, 40)]) * np.float32(1e-30)
    return x.reshape(shape)


@pytest.mark.parametrize("dims,axis", VIEWS, ids=str)
@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_shape_values_folded_with_a_dynamic_batch(preset, dims, axis) -> None:
    fmt, attrs = _fmt(preset, axis)
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=(None, *dims), dtype="float32", **attrs)
    body = frag.functions[0]
    ops = _ops(body.node)
    assert "_k" in body.name and not SHAPE_OPS & set(ops), (body.name, sorted(SHAPE_OPS & set(ops)))
    assert all(n.op_type != "Constant" or any(n.output[0] in m.input for m in body.node) or n.output[0] in
               {i for m in body.node for a in m.attribute if a.type == onnx.AttributeProto.GRAPH for k in a.g.node for i in k.input}
               for n in body.node), "a Constant nothing reads"
    sess = fragment_session(frag, ["N", *dims])
    for batch in (1, 3, 0):
        x = _data((batch, *dims), seed=batch + len(ops))
        assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, fmt, **attrs), f"{body.name} batch {batch}")


def test_unknown_dims_keep_the_shape_values() -> None:
    """Two unknown dims (a detector's image size): nothing folds, the body reads the input's
    shape at run time, and a batch of any size and an image of any size come out right."""
    fmt, attrs = _fmt("MX9", 1)
    frag = build_qdq(fmt, "x", "y", name="q", opset=21, shape=(None, 32, None, 5), dtype="float32", **attrs)
    assert "_k" not in frag.functions[0].name and "Shape" in _ops(frag.functions[0].node)
    sess = fragment_session(frag, ["N", 32, "H", 5])
    for shape in ((2, 32, 3, 5), (1, 32, 7, 5)):
        x = _data(shape, seed=shape[2])
        assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, fmt, **attrs), str(shape))


@pytest.mark.parametrize("rounding_mode", [2, 0])
def test_to_bfp_small_tensor_body_has_no_if(rounding_mode) -> None:
    attrs = dict(PRESETS["BFP16"], axis=1, rounding_mode=rounding_mode)
    small, large = (1, 20, 6, 50), (1, 32, 24, 32)  # 6 000 and 24 576 elements
    frag = build_qdq("bfp", "x", "y", name="q", opset=21, shape=small, dtype="float32", **attrs)
    ops = _ops(frag.functions[0].node)
    assert "If" not in ops and "ReduceSum" not in ops, frag.functions[0].name
    sess = fragment_session(frag, list(small))
    for seed in range(3):
        x = _data(small, seed)
        assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, "bfp", **attrs), f"seed {seed}")
    big = build_qdq("bfp", "x", "y", name="q", opset=21, shape=large, dtype="float32", **attrs)
    assert _ops(big.functions[0].node).count("If") == 1
