"""Block formats (BFP, MX) choose their block axis per reader (issue 14): MatMul and Gemm operands
along their contracted axis, activations and weights alike; Conv along channels; an elementwise
reader (a residual Add) never moves a contracted tensor's axis back to the channel axis."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.plan import make_plan

S, H, N = 8, 64, 32


def _encoder_block() -> onnx.ModelProto:
    """x[2,S,H] -> LayerNorm -> MatMul(W[H,N]) -> Gemm-free path; LayerNorm output also feeds a
    residual Add *after* the MatMul in node order (the order that used to win)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32), "W"),
        numpy_helper.from_array(np.ones(H, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(H, np.float32), "beta"),
        numpy_helper.from_array(rng.standard_normal((N, H)).astype(np.float32), "G"),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln"], axis=-1, name="ln"),
        helper.make_node("MatMul", ["ln", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "ln"], ["res"], name="residual"),
        helper.make_node("Reshape", ["res", "shape2d"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "G"], ["out"], transB=1, name="gemm"),
    ]
    inits.append(numpy_helper.from_array(np.array([2 * S, H], np.int64), "shape2d"))
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, S, H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2 * S, N])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _conv() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 32, 3, 3)).astype(np.float32), "Wc")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "Wc"], ["y"], pads=[1, 1, 1, 1], name="conv")], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _axis(plan, name) -> int:
    t = plan.tensors[name]
    return t.axis


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MXINT8", "MXFP8_E4M3"])
def test_matmul_and_gemm_operands_block_along_the_contracted_axis(preset):
    plan = make_plan(_encoder_block(), resolve_config(preset))
    assert _axis(plan, "ln") in (-1, 2), "MatMul activation [batch, seq, hidden]: hidden (last) axis, not seq"
    assert _axis(plan, "W") == 0, "MatMul weight [K, N]: K"
    assert _axis(plan, "flat") in (-1, 1), "Gemm A [M, K]: K"
    assert _axis(plan, "G") == 1, "Gemm B with transB [N, K]: K"
    # block formats encode dot-product operands only (pipeline/plan/fp_blocks.py)
    assert "x" not in plan.tensors and "x" in plan.float_tensors
    assert plan.tensors["ln"].exclusive and plan.tensors["ln"].consumers == ["mm"], "the residual Add reads float"
    if preset != "MXFP8_E4M3":  # the every-op placement (the reference tool's) quantizes the LayerNorm input too
        every = make_plan(_encoder_block(), resolve_config(preset).replace(int_block_dot_operands_only=False))
        assert _axis(every, "x") in (-1, 2), "LayerNorm input: its normalized axis"
        assert _axis(every, "ln") in (-1, 2) and not every.tensors["ln"].exclusive


@pytest.mark.parametrize("preset", ["BFP16", "MXINT8"])
def test_conv_keeps_channels(preset):
    plan = make_plan(_conv(), resolve_config(preset))
    assert _axis(plan, "x") == 1, "Conv activation: channels"
    assert _axis(plan, "Wc") == 1, "Conv weight [O, I, kh, kw]: the input channels it contracts"


def test_refine_block_axis_off_uses_the_users_axis_everywhere():
    cfg = resolve_config("MXINT8")
    cfg = dataclasses.replace(cfg, refine_block_axis=False, int_block_dot_operands_only=False)
    plan = make_plan(_encoder_block(), cfg)
    assert _axis(plan, "ln") == 1 and _axis(plan, "x") == 1


def test_emitted_matmul_quantizes_its_activation_along_the_hidden_axis():
    """The emitted graph does what the plan says: a MatMul's [batch, seq, hidden] input is MX
    quantized in blocks along hidden, so the model equals the NumPy reference along that axis and
    not along seq (the values differ by block, so the two are told apart)."""
    import onnxruntime as ort
    from onnxptq.api import quantize
    from onnxptq.formats.mx import fake_quantize

    rng = np.random.default_rng(3)
    w = rng.standard_normal((H, N)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", S * 4, H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", S * 4, N])],
                              [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = (rng.standard_normal((1, S * 4, H)) * np.exp(rng.standard_normal((1, S * 4, 1)) * 2)).astype(np.float32)
    result = quantize(model, "MXINT8", [{"x": x}])
    got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    wq = fake_quantize(w, element_dtype="int8", axis=0, block_size=32, rounding_mode=2)
    def mx(a, axis):
        return fake_quantize(a, element_dtype="int8", axis=axis, block_size=32, rounding_mode=2)
    # the MatMul's output (the graph's, read by no dot product) stays float
    hidden = mx(x, -1) @ wq
    seq = mx(x, 1) @ wq
    np.testing.assert_allclose(got, hidden, rtol=1e-4, atol=1e-4)
    assert not np.allclose(got, seq, rtol=1e-4, atol=1e-4)


def _seq_batch_channels() -> onnx.ModelProto:
    """[seq, 1, C] activations (batch 1 in the middle, as torch's MultiheadAttention layout
    exports): a residual Add and a Relu read them; neither reduces along an axis."""
    rng = np.random.default_rng(4)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "x"], ["y"], name="mul")], "sbc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [S, 1, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [S, 1, H])],
        [numpy_helper.from_array(rng.standard_normal((S, 1, H)).astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("preset", ["BFP16", "MXINT8"])
def test_elementwise_reader_never_blocks_along_a_unit_axis(preset):
    """The user's axis 1 has length 1 here: blocks of one element would give every element its own
    exponent (not the format asked for). A reader that does not reduce blocks along C instead;
    with ``refine_block_axis=False`` the user's axis stays. No dot product here: the every-op
    placement (``int_block_dot_operands_only=False``) quantizes these elementwise readers."""
    plan = make_plan(_seq_batch_channels(), resolve_config(preset).replace(int_block_dot_operands_only=False))
    planned = {name: t.axis for name, t in plan.tensors.items() if t.axis is not None and t.role == "activation"}
    assert planned and all(a in (-1, 2) for a in planned.values()), planned
    cfg = dataclasses.replace(resolve_config(preset), refine_block_axis=False, int_block_dot_operands_only=False)
    kept = {name: t.axis for name, t in make_plan(_seq_batch_channels(), cfg).tensors.items()
            if t.axis is not None and t.role == "activation"}
    assert kept and all(a == 1 for a in kept.values()), kept
