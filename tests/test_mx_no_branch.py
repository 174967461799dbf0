"""MX activation quantizers without run-time branches (issue 26 items 1 and 3).

The MX bodies (no scale search) used to choose, by two ``If`` nodes on the finiteness of the
tensor's sum, between plain formulas and formulas that mask ±Inf/NaN; each ``If`` cost
onnxruntime ~0.5 ms of session creation in every call. They now compute the block maxima from
``-|x|`` with the non-finite elements masked to 0 (``ThresholdedRelu``) and carry or put back
±Inf/NaN by their formulas (``onnx_ops.mx._fake_quantize_flat``). These tests pin that no body
but the scale search's has an ``If`` over the data (the generic body keeps its guard for empty
tensors), and that every view of the block axis gives the NumPy reference's bits on blocks built
to hit each case a mask could get wrong: one +Inf, -Inf or NaN among finite values (the finite
ones must keep the finite maximum's scale), a block of nothing but Inf/NaN, ±0, subnormals, the
float32 maximum beside an infinity, tiny negatives that round to -0, a ragged last block, and a
tensor of unknown shape; and on real activations of PP-OCR cls.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from _format_testing import assert_same_bits, fragment_session, log_uniform, run_static
from onnxptq.formats import fake_quantize
from onnxptq.onnx_ops import build_qdq
from onnxptq.onnx_ops.mx import known_small

F32 = np.finfo(np.float32)
ELEMENTS = [("int8", 2), ("int8", 0), ("fp8_e4m3", 2), ("fp4_e2m1", 2)]
#: (shape, axis): the views the emitter builds, by the function name's suffix.
VIEWS = [
    ((1, 16, 32, 32), 1),   # whole axis one block, maxima by halves ("wh"; INT8: the branched body "whi")
    ((2, 40, 16, 16), 1),   # ragged axis tiled, large (INT8: the branched body)
    ((1, 16, 6, 6), 1),     # whole axis one block ("w")
    ((2, 40, 6, 6), 1),     # ragged axis tiled by sub-blocks of 8 ("t8n40")
    ((2, 34, 5, 5), 1),     # ragged axis padded ("p30")
    ((2, 48, 100), 2),      # the last axis, transposed view, ragged ("l")
    ((1, 70, 9), 1),        # a ragged axis of 70 = 2 blocks + 6
]


def _ifs(nodes) -> int:
    """``If`` nodes anywhere in ``nodes`` (branches included) but the empty-tensor guard, whose
    then branch is one ``Identity`` (bodies built without a known axis length keep it)."""
    def guard(n) -> bool:
        then = next(a.g for a in n.attribute if a.name == "then_branch")
        return [m.op_type for m in then.node] == ["Identity"]

    return sum((n.op_type == "If" and not guard(n))
               + sum(_ifs(a.g.node) for a in n.attribute if a.type == onnx.AttributeProto.GRAPH) for n in nodes)


def _patterns(n: int, seed: int) -> np.ndarray:
    """Rows of length ``n`` (the block axis), each one case: the rows' blocks of 32 hold them."""
    rng = np.random.default_rng(seed)
    base = log_uniform(n, seed=seed)
    rows = []
    for where, value in ((0, np.inf), (n // 2, -np.inf), (n - 1, np.nan), (3, np.nan)):
        r = base.copy()
        r[where % n] = value
        rows.append(r)
    rows.append(rng.choice(np.array([np.inf, -np.inf, np.nan], np.float32), n))          # nothing finite
    rows.append(rng.choice(np.array([0.0, -0.0], np.float32), n))                        # ±0
    rows.append(rng.choice(np.array([1e-45, -1e-45, 3e-41, -2e-39, F32.tiny / 2, 0.0], np.float32), n))
    big = base.copy()
    big[::5], big[1::7] = F32.max, -np.inf                                               # the float32 max beside -Inf
    rows.append(big)
    neg = -np.abs(base) * np.float32(1e-12)
    neg[::9] = 1.0                                                                       # tiny negatives -> -0
    rows.append(neg)
    rows.append(base)
    return np.stack(rows).astype(np.float32)


def _data(shape: tuple, axis: int, seed: int = 0) -> np.ndarray:
    """A tensor whose lines along ``axis`` cycle through :func:`_patterns`."""
    moved = np.moveaxis(np.empty(shape, np.float32), axis, -1)
    lines = moved.reshape(-1, shape[axis])
    pats = _patterns(shape[axis], seed)
    lines[:] = pats[np.arange(lines.shape[0]) % len(pats)]
    return np.ascontiguousarray(np.moveaxis(lines.reshape(moved.shape), -1, axis))


@pytest.mark.parametrize("shape,axis", VIEWS + [((1, "C", 6, 6), 1), (None, 1)], ids=str)
@pytest.mark.parametrize("element_dtype,rounding_mode", ELEMENTS[:1] + ELEMENTS[2:3])
def test_mx_bodies_have_no_if_over_the_data(element_dtype, rounding_mode, shape, axis) -> None:
    """No ``If`` over the data, but in INT8 bodies of tensors not known to be small (their two
    ``If`` nodes cost less at run time than the branch-free body's passes: suffix ``i``)."""
    attrs = dict(element_dtype=element_dtype, axis=axis, block_size=32, rounding_mode=rounding_mode)
    frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **attrs)
    body = frag.functions[0]
    branched = element_dtype == "int8" and not known_small(shape)
    assert branched == (element_dtype == "int8" and (shape is None or "C" in shape or np.prod(shape) >= 16384))
    assert _ifs(body.node) == (2 if branched else 0), body.name
    assert body.name.removesuffix("_f32").endswith("i") == branched, body.name
    if branched:
        return

    def ops(nodes) -> set:
        return {n.op_type for n in nodes} | {o for n in nodes for a in n.attribute
                                             if a.type == onnx.AttributeProto.GRAPH for o in ops(a.g.node)}

    assert "ThresholdedRelu" in ops(body.node), body.name
    search = build_qdq("mx", "x", "y", name="q", opset=21, shape=shape, dtype="float32", **dict(attrs, scale_search=1))
    assert _ifs(search.functions[0].node) >= 1  # the scale search keeps its plain/masked If


@pytest.mark.parametrize("shape,axis", VIEWS, ids=str)
@pytest.mark.parametrize("element_dtype,rounding_mode", ELEMENTS)
def test_masked_blocks_bit_exact_in_every_view(element_dtype, rounding_mode, shape, axis) -> None:
    attrs = dict(element_dtype=element_dtype, axis=axis, block_size=32, rounding_mode=rounding_mode)
    x = _data(shape, axis, seed=sum(shape))
    got, name = run_static("mx", x, **attrs)
    assert_same_bits(got, fake_quantize(x, "mx", **attrs), f"{name} {shape}")


@pytest.mark.parametrize("element_dtype,rounding_mode", ELEMENTS)
def test_masked_blocks_bit_exact_shape_unknown(element_dtype, rounding_mode) -> None:
    """The generic body (no shape at build time) and the ranked one (axis length unknown), on the
    same cases, float32 and float16 input (INT8: the bodies with the If pair)."""
    attrs = dict(element_dtype=element_dtype, axis=1, block_size=32, rounding_mode=rounding_mode)
    x = _data((2, 70, 5), 1)
    for build_shape in (None, (2, "C", 5)):
        for dtype in (np.float32, np.float16):
            with np.errstate(over="ignore"):  # the float32 maximum is +Inf in float16: one more case
                xd = x.astype(dtype)
            frag = build_qdq("mx", "x", "y", name="q", opset=21, shape=build_shape, dtype=np.dtype(dtype).name, **attrs)
            sess = fragment_session(frag, [None, None, None], onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
            assert_same_bits(sess.run(None, {"x": xd})[0], fake_quantize(xd, "mx", **attrs),
                             f"{frag.functions[0].name} {dtype.__name__}")


@pytest.fixture(scope="module")
def cls_activations() -> list[np.ndarray]:
    """Every Conv output of PP-OCR cls on two real-looking inputs (a rendered text line and its
    mirror), from onnxruntime."""
    from testkit.models import model_path

    model = onnx.load(str(model_path("cls")))
    convs = [n.output[0] for n in model.graph.node if n.op_type == "Conv"]
    model.graph.output.extend(onnx.helper.make_tensor_value_info(c, onnx.TensorProto.FLOAT, None) for c in convs)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    img = np.zeros((1, 3, 48, 192), np.float32)
    rng = np.random.default_rng(3)
    for k in range(12):  # dark strokes on a light line, normalised as PP-OCR does
        img[:, :, 12:36, 8 + 15 * k: 8 + 15 * k + int(rng.integers(3, 9))] = 1.0
    img = (0.9 - img * 0.8 - 0.5) / 0.5
    outs = sess.run(convs, {sess.get_inputs()[0].name: np.concatenate([img, img[..., ::-1]])})
    assert len(outs) >= 20
    return outs


@pytest.mark.parametrize("element_dtype", ["int8", "fp8_e4m3"])
def test_real_activations_static_and_generic_bodies_agree_bit_for_bit(cls_activations, element_dtype) -> None:
    """On PP-OCR cls's Conv outputs (batch 2, 8 to 288 channels): the body specialised to each
    shape (as the emitter builds it: whole, halved, tiled or padded views), the generic body and
    the NumPy reference give the same bits."""
    attrs = dict(element_dtype=element_dtype, axis=1, block_size=32, rounding_mode=2)
    generic = fragment_session(build_qdq("mx", "x", "y", name="q", opset=21, shape=None, dtype="float32", **attrs),
                               [None] * 4)
    names = set()
    for act in cls_activations:
        want = fake_quantize(act, "mx", **attrs)
        got, name = run_static("mx", act, **attrs)
        names.add(name)
        assert_same_bits(got, want, f"{name} {act.shape}")
        assert_same_bits(generic.run(None, {"x": act})[0], want, f"generic {act.shape}")
    assert len(names) >= 3  # several views exercised
