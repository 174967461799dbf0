"""Block-format quantizers left out where their tensor is already on the grid (pipeline/on_grid.py).

Two kinds of check. On the NumPy reference (formats/): the proof's claim, Q(op(Q(x))) = op(Q(x))
for Relu on every proved format over edge blocks (zeros, -0, subnormals, huge values, ±Inf, NaN,
ragged blocks), and the counterexamples that keep MaxPool and MXFP8 out of the rule. Through the
whole pipeline: small convolutional models built around one op each, quantized with the rule on
and off (one quantize: emit runs twice), where the skipped quantizers must be exactly the expected
ones and both models must give the same bits on feeds with zeros, subnormals, huge values, Inf and
NaN; and openWakeWord's hey_mycroft head, a real model, where the quantizers of its
Slice/Squeeze chains go and the outputs stay identical.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq.pipeline.build as build_module
from onnxptq import get_preset, quantize
from onnxptq.config.presets import BFP16_ATTRS, MX_PRIME_ATTRS
from onnxptq.formats import fake_quantize
from onnxptq.pipeline.emit import emit

REFERENCE = {
    "BFP16": ("bfp", dict(BFP16_ATTRS)),
    "MX9": ("bfp", dict(MX_PRIME_ATTRS, bit_width=16)),
    "MX6": ("bfp", dict(MX_PRIME_ATTRS, bit_width=13)),
    "MXINT8": ("mx", {"element_dtype": "int8", "axis": 1, "block_size": 32, "rounding_mode": 2}),
}
MXFP8 = ("mx", {"element_dtype": "fp8_e4m3", "axis": 1, "block_size": 32, "rounding_mode": 2})


def _bits(a: np.ndarray) -> np.ndarray:
    """Bit patterns, every NaN made one (payloads are not part of the claim)."""
    a = np.where(np.isnan(a), np.float32(np.nan), a).astype(np.float32)
    return a.view(np.uint32)


def _edge_tensor(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Rows of very different magnitudes (2^-140 .. 2^120: subnormal blocks, huge blocks), zeros,
    -0, subnormals, ±Inf, NaN and the largest float."""
    scale = 2.0 ** rng.integers(-140, 120, size=(shape[0],) + (1,) * (len(shape) - 1))
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 40), replace=False)
    specials = np.array([0.0, -0.0, 1e-45, -3e-39, 1.2e-38, np.inf, -np.inf, np.nan, 3.4028235e38, -3.4e38],
                        np.float32)
    flat[picks] = specials[np.arange(picks.size) % specials.size]
    return x


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_relu_and_identity_of_a_quantized_tensor_are_on_its_grid(label):
    fmt, attrs = REFERENCE[label]
    rng = np.random.default_rng(5)
    for shape in [(6, 40, 3, 5), (4, 7, 2), (3, 64, 9)]:  # ragged (40, 7 channels) and whole blocks
        for _ in range(20):
            q = fake_quantize(_edge_tensor(rng, shape), fmt, **attrs)
            with np.errstate(invalid="ignore"):
                r = np.where(np.isnan(q), q, np.maximum(q, np.float32(0)))
            assert np.array_equal(_bits(fake_quantize(q, fmt, **attrs)), _bits(q))
            assert np.array_equal(_bits(fake_quantize(r, fmt, **attrs)), _bits(r))


def test_maxpool_over_channel_blocks_is_not_on_the_grid():
    """Why MaxPool has no rule: channel 1's maximum comes from another position's block, whose grid
    is finer than the grid of the output block's largest element."""
    fmt, attrs = REFERENCE["MXINT8"]
    x = np.zeros((1, 2, 1, 2), np.float32)
    x[0, :, 0, 0] = [0.5, 2.0**-7]      # a block of maximum 0.5: unit 2^-7
    x[0, :, 0, 1] = [0.25, 3 * 2.0**-8]  # a block of maximum 0.25: unit 2^-8
    q = fake_quantize(x, fmt, **attrs)
    pooled = q.max(axis=3, keepdims=True)  # [0.5, 3·2^-8]: 3·2^-8 is not a multiple of 2^-7
    assert not np.array_equal(fake_quantize(pooled, fmt, **attrs), pooled)


def test_relu_of_an_mxfp8_tensor_is_not_on_its_grid():
    """Why float elements have no rule: 1.875·2^7 (an e4m3 value) rescales past the largest normal."""
    fmt, attrs = MXFP8
    x = np.zeros((1, 2), np.float32)
    x[0] = [-448.0, 240.0]  # block maximum 448: scale 1, 240 = 1.875·2^7 is on the grid
    q = fake_quantize(x, fmt, **attrs)
    r = np.maximum(q, np.float32(0))  # maximum now 240: scale 2^-1, 240 -> 480 > 448 saturates
    assert np.array_equal(q, x) and not np.array_equal(fake_quantize(r, fmt, **attrs), r)


# ----------------------------------------------------------------------------- through the pipeline

C, H, W = 40, 6, 5


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _model(op: str) -> onnx.ModelProto:
    """x -> Conv -> a; a -> Conv (a is quantized); b = op(a) -> Conv (b is quantized); sum.

    Every op is one case of :mod:`onnxptq.pipeline.on_grid`; ``b``'s quantizer is redundant for
    the ``*_kept``-free names and must stay for the others (see ``CASES``)."""
    rng = np.random.default_rng(0)
    inits = [_const("w0", rng.standard_normal((C, 3, 1, 1)).astype(np.float32)),
             _const("w1", rng.standard_normal((8, C, 1, 1)).astype(np.float32) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"]), helper.make_node("Conv", ["a", "w1"], ["ya"])]
    c_in = C  # channels the op's output has, for the second Conv's weight
    if op == "Relu":
        nodes.append(helper.make_node("Relu", ["a"], ["b"]))
    elif op == "MaxPool":
        nodes.append(helper.make_node("MaxPool", ["a"], ["b"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]))
    elif op == "Transpose_hw":
        nodes.append(helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 3, 2]))
    elif op == "Transpose_ch":
        nodes.append(helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1, 3]))
        c_in = H
    elif op == "Reshape_flat":
        inits.append(_const("shape", np.array([1, C, H * W, 1], np.int64)))
        nodes.append(helper.make_node("Reshape", ["a", "shape"], ["b"]))
    elif op == "Reshape_split":
        inits.append(_const("shape", np.array([1, C // 2, 2 * H, W], np.int64)))
        nodes.append(helper.make_node("Reshape", ["a", "shape"], ["b"]))
        c_in = C // 2
    elif op in ("Slice_h", "Slice_c"):
        axis, end = (2, H - 2) if op == "Slice_h" else (1, C - 8)
        inits += [_const("st", np.array([1], np.int64)), _const("en", np.array([end], np.int64)),
                  _const("ax", np.array([axis], np.int64))]
        nodes.append(helper.make_node("Slice", ["a", "st", "en", "ax"], ["b"]))
        c_in = C if op == "Slice_h" else C - 9
    elif op in ("Concat_h", "Concat_c"):
        axis = 2 if op == "Concat_h" else 1
        nodes.append(helper.make_node("Concat", ["a", "a"], ["b"], axis=axis))
        c_in = C if axis == 2 else 2 * C
    elif op in ("Resize_nearest", "Resize_linear"):
        inits.append(_const("scales", np.array([1, 1, 2, 2], np.float32)))
        nodes.append(helper.make_node("Resize", ["a", "", "scales"], ["b"], mode=op.split("_")[1]))
    elif op == "Concat_c32":  # 32 channels, then 40: every block of b is a block of one input
        inits += [_const("w0b", rng.standard_normal((32, 3, 1, 1)).astype(np.float32)),
                  _const("w1b", rng.standard_normal((8, 32, 1, 1)).astype(np.float32) * 0.1)]
        nodes += [helper.make_node("Conv", ["x", "w0b"], ["a2"]), helper.make_node("Conv", ["a2", "w1b"], ["ya2"]),
                  helper.make_node("Add", ["ya", "ya2"], ["ya_"]), helper.make_node("Concat", ["a2", "a"], ["b"], axis=1)]
        c_in = 32 + C
    else:
        raise ValueError(op)
    inits.append(_const("w2", rng.standard_normal((8, c_in, 1, 1)).astype(np.float32) * 0.1))
    nodes += [helper.make_node("Conv", ["b", "w2"], ["yb"]),
              helper.make_node("ReduceSum", ["ya_" if op == "Concat_c32" else "ya"], ["sa"], keepdims=0),
              helper.make_node("ReduceSum", ["yb"], ["sb"], keepdims=0),
              helper.make_node("Add", ["sa", "sb"], ["y"])]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


#: op -> whether b's quantizer is redundant (for the proved formats), or the presets where it is:
#: Concat_c stacks 40 + 40 channels along the block axis, aligned for BFP16's blocks of 8 only
CASES = {"Relu": True, "MaxPool": False, "Transpose_hw": True, "Transpose_ch": False, "Reshape_flat": True,
         "Reshape_split": False, "Slice_h": True, "Slice_c": False, "Concat_h": True, "Concat_c": {"BFP16"},
         "Concat_c32": True, "Resize_nearest": True, "Resize_linear": False}


def _quantize_both(model, preset: str, feeds: list[dict]):
    """One quantize whose emit also builds the model without the rule: (with, without)."""
    without = {}

    def both(*args, **kwargs):
        without["model"] = emit(*args, **kwargs, skip_on_grid=False)
        return emit(*args, **kwargs)

    original = build_module.emit
    build_module.emit = both
    try:
        # the every-op placement (the reference tool's), where quantizers sit between data-movement
        # ops; the integer block presets' default encodes dot-product operands only
        cfg = dataclasses.replace(get_preset(preset), repair=False, int_block_dot_operands_only=False)
        result = quantize(model, cfg, feeds, eval_samples=0)
    finally:
        build_module.emit = original
    return result.model, without["model"]


def _quantizers(model: onnx.ModelProto) -> list[str]:
    return [n.input[0] for n in model.graph.node if n.domain == "onnxptq"]


def _outputs(model: onnx.ModelProto, feeds: list[dict]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return [out for f in feeds for out in sess.run(None, {k: v for k, v in f.items() if k in names})]


def _edge_feeds() -> list[dict]:
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((1, 3, H, W)).astype(np.float32) * s} for s in (1.0, 1e-38, 1e30)]
    special = rng.standard_normal((1, 3, H, W)).astype(np.float32)
    special[0, 0, 0, :3] = [np.inf, np.nan, 0.0]
    special[0, 1, 2, 1] = -np.inf
    return feeds + [{"x": special}, {"x": np.zeros((1, 3, H, W), np.float32)}]


#: every op on MXINT8; on the BFP formats the element-wise, reshape and transpose rules and two
#: cases that must stay (the test budget: each case is a quantize)
SMALL = [(op, "MXINT8") for op in sorted(CASES)] + [
    (op, preset) for preset in ("BFP16", "MX9") for op in ("Relu", "Reshape_flat", "Transpose_hw", "MaxPool", "Slice_c",
                                                         "Concat_c")]


@pytest.mark.parametrize("op, preset", SMALL)
def test_rule_on_small_models(op, preset):
    calib = [{"x": np.random.default_rng(i).standard_normal((1, 3, H, W)).astype(np.float32)} for i in range(2)]
    with_rule, without = _quantize_both(_model(op), preset, calib)
    before, after = _quantizers(without), _quantizers(with_rule)
    assert "b" in before and "a" in before  # both tensors are planned
    expected = CASES[op] if isinstance(CASES[op], bool) else preset in CASES[op]
    assert ("b" not in after) == expected, f"{op} {preset}: {after}"
    assert len(before) - len(after) == (1 if expected else 0)
    for got, want in zip(_outputs(with_rule, _edge_feeds()), _outputs(without, _edge_feeds())):
        assert np.array_equal(_bits(got), _bits(want))


def test_no_rule_for_mxfp8():
    calib = [{"x": np.random.default_rng(0).standard_normal((1, 3, H, W)).astype(np.float32)}]
    with_rule, without = _quantize_both(_model("Relu"), "MXFP8_E4M3", calib)
    assert "b" in _quantizers(with_rule) and _quantizers(with_rule) == _quantizers(without)


@functools.lru_cache(maxsize=None)
def _wake_word():
    from testkit import zoo

    model = zoo.get("oww_hey_mycroft")
    return str(model.path()), model.samples("calibration")[:4], model.samples("heldout")[:4]


@pytest.mark.parametrize("preset", ["MXINT8", "MX9"])
def test_wake_word_model_slices_and_squeezes_left_out_outputs_identical(preset):
    """openWakeWord's hey_mycroft head (a real model from the zoo): the Slice/Squeeze/Concat
    chains between its quantized layers lose their quantizers, and held-out feeds give the same
    bits with and without the rule."""
    path, calib, feeds = _wake_word()
    with_rule, without = _quantize_both(path, preset, calib)
    left_out = set(_quantizers(without)) - set(_quantizers(with_rule))
    assert len(left_out) >= 3 and len(_quantizers(with_rule)) == len(_quantizers(without)) - len(left_out)
    producers = {o: n.op_type for n in with_rule.graph.node for o in n.output}
    assert {producers[t] for t in left_out} <= {"Slice", "Squeeze", "Unsqueeze", "Concat", "Reshape", "Transpose",
                                                "Relu", "Gather", "Flatten", "Identity"}
    for got, want in zip(_outputs(with_rule, feeds), _outputs(without, feeds)):
        assert np.array_equal(_bits(got), _bits(want))
