"""Transformer placement rules (pipeline/transformer.py): the inside of a decomposed erf-GELU and
the residual sums LayerNorm reads stay float; everything around them is planned as before."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_small_cnn
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare
from onnxptq.pipeline.transformer import gelu_internals, residual_sums, transformer_float_tensors

S, H, F = 8, 32, 64



def _const(value, name: str) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _model(nodes: list, inits: list, name: str, output: str = "out", output_shape: tuple = (1, S, H)) -> onnx.ModelProto:
    """A model of input ``x`` (1, S, H) and one output, default-domain opset 17, IR version 8
    (what every builder here makes)."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H])],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(output_shape))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _ffn_block() -> onnx.ModelProto:
    """x -> MatMul W1 -> GELU (x/sqrt2, Erf, +1, *x, *0.5) -> MatMul W2 -> Add x (residual) -> LayerNorm."""
    rng = np.random.default_rng(0)
    c = _const
    inits = [c(rng.standard_normal((H, F)) / np.sqrt(H), "W1"), c(rng.standard_normal((F, H)) / np.sqrt(F), "W2"),
             c(np.sqrt(2.0), "sqrt2"), c(1.0, "one"), c(0.5, "half"), c(np.ones(H), "gamma"), c(np.zeros(H), "beta")]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"], name="fc1"),
        helper.make_node("Div", ["h", "sqrt2"], ["h_div"], name="gelu_div"),
        helper.make_node("Erf", ["h_div"], ["h_erf"], name="gelu_erf"),
        helper.make_node("Add", ["h_erf", "one"], ["h_add"], name="gelu_add"),
        helper.make_node("Mul", ["h", "h_add"], ["h_mul"], name="gelu_mul"),
        helper.make_node("Mul", ["h_mul", "half"], ["gelu"], name="gelu_half"),
        helper.make_node("MatMul", ["gelu", "W2"], ["y"], name="fc2"),
        helper.make_node("Add", ["y", "x"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["out"], axis=-1, name="ln"),
    ]
    return _model(nodes, inits, "ffn")


def test_rules_find_the_gelu_inside_and_the_residual_sum():
    model = _ffn_block()
    assert gelu_internals(model) == {"h_div", "h_erf", "h_add", "h_mul"}
    assert residual_sums(model) == {"res"}


@pytest.mark.parametrize("preset", ["A8W8", "MXFP8_E4M3"])
def test_plan_keeps_them_float_and_quantizes_the_rest(preset):
    # The NPU placement quantizes every quantizable op, so "the rest" is everything; the CPU one
    # also leaves ops without an integer kernel (LayerNormalization's output) alone.
    plan = make_plan(prepare(_ffn_block()), resolve_config(preset).replace(runtime="npu"))
    assert not {"h_div", "h_erf", "h_add", "h_mul", "res"} & set(plan.tensors)
    if preset == "MXFP8_E4M3":  # FP elements encode dot-product operands only (pipeline/plan/fp_blocks.py)
        assert {"x", "gelu", "W1", "W2"} <= set(plan.tensors), "the MatMuls' operands stay quantized"
        assert not {"h", "y", "out"} & set(plan.tensors), "no dot product reads the GELU input, fc2's output, the LayerNorm's"
        assert plan.tensors["x"].exclusive, "the residual Add reads x float"
    else:
        assert {"x", "h", "gelu", "y", "W1", "W2", "out"} <= set(plan.tensors), "GELU input/output and the MatMuls stay quantized"
    cpu = make_plan(prepare(_ffn_block()), resolve_config(preset))
    assert not {"h_div", "h_erf", "h_add", "h_mul", "res"} & set(cpu.tensors)


def test_quantized_block_runs_and_stays_close():
    model = _ffn_block()
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, S, H)).astype(np.float32)} for _ in range(4)]
    result = quantize(model, "A8W8", feeds)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]  # noqa: E731
    ref, got = run(model), run(result.model)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 0.05


def test_cnn_has_nothing_to_keep_float():
    assert transformer_float_tensors(prepare(make_small_cnn())) == set()


def _attention_block() -> onnx.ModelProto:
    """x -> LayerNorm -> Q/K/V MatMuls (+bias) -> softmax(Q·Kᵀ)·V -> MatMul Wo (+bias) -> Add LN output
    (residual) -> LayerNorm: one head of a post-norm encoder layer."""
    rng = np.random.default_rng(1)
    c = _const
    w = lambda n: c(rng.standard_normal((H, H)) / np.sqrt(H), n)  # noqa: E731
    inits = [w("Wq"), w("Wk"), w("Wv"), w("Wo"), c(rng.standard_normal(H) * 0.1, "bq"), c(rng.standard_normal(H) * 0.1, "bo"),
             c(np.ones(H), "g0"), c(np.zeros(H), "b0"), c(np.ones(H), "g1"), c(np.zeros(H), "b1"), c(1 / np.sqrt(H), "scale")]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g0", "b0"], ["ln0"], axis=-1, name="ln0"),
        helper.make_node("MatMul", ["ln0", "Wq"], ["q0"], name="q_proj"),
        helper.make_node("Add", ["q0", "bq"], ["q"], name="q_bias"),
        helper.make_node("MatMul", ["ln0", "Wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["ln0", "Wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="scale_scores"),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="pv"),
        helper.make_node("MatMul", ["ctx", "Wo"], ["o0"], name="o_proj"),
        helper.make_node("Add", ["o0", "bo"], ["o"], name="o_bias"),
        helper.make_node("Add", ["o", "ln0"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "g1", "b1"], ["out"], axis=-1, name="ln1"),
    ]
    return _model(nodes, inits, "attn")


def test_integer_activations_on_a_transformer_quantize_only_matmul_inputs():
    from onnxptq.pipeline.transformer import is_transformer

    prepared = prepare(_attention_block())
    assert is_transformer(prepared) and not is_transformer(prepare(make_small_cnn()))
    plan = make_plan(prepared, resolve_config("A8W8"))
    acts = {n: t for n, t in plan.tensors.items() if t.role == "activation"}
    # 8-bit: the probs·V product reads both operands float (issue 27: ViT-S over 197 tokens).
    assert set(acts) == {"ln0", "q", "kt", "ctx"}
    assert acts["ln0"].exclusive and sorted(acts["ln0"].consumers) == ["k_proj", "q_proj", "v_proj"]
    assert {"o0", "o", "q0", "scores", "probs", "v"} <= set(plan.float_tensors)
    assert "probs·V" in plan.float_tensors["probs"]
    # A 16-bit grid resolves the small probabilities: probs·V keeps its operands quantized.
    wide = make_plan(prepared, resolve_config("A16W8"))
    assert {n for n, t in wide.tensors.items() if t.role == "activation"} == {"ln0", "q", "kt", "probs", "v", "ctx"}
    # Block formats encode the dot products' operands (pipeline/plan/fp_blocks.py), probs and v
    # included; their every-op placement (the reference tool's) quantizes the vector ops' tensors too.
    mx = make_plan(prepared, resolve_config("MXINT8"))
    assert {n for n, t in mx.tensors.items() if t.role == "activation"} == {"ln0", "q", "kt", "probs", "v", "ctx"}
    assert "o" not in mx.tensors
    assert "o" in make_plan(prepared, resolve_config("MXINT8").replace(int_block_dot_operands_only=False)).tensors


def test_the_residual_reads_the_float_layernorm_output():
    model = _attention_block()
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, S, H)).astype(np.float32)} for i in range(4)]
    result = quantize(model, resolve_config("A8W8").replace(smooth_quant=False), feeds)
    nodes = {n.name: n for n in result.model.graph.node}
    assert nodes["residual"].input[1] == "ln0" and nodes["q_proj"].input[0] != "ln0"
    sess = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    got = sess.run(None, feeds[0])[0]
    assert np.corrcoef(ref.ravel(), got.ravel())[0, 1] > 0.99


def test_int8_activation_read_by_a_float_transpose_loads_in_onnxruntime():
    """Issue 14 bug: an A8W8 model with some nodes_to_exclude that onnxruntime refused ("output_dtype
    INT8 does not match y_zero_point type UINT8", a QuantizeLinear its optimizer inserts after a
    Transpose). Here: int8 activations (NPU placement), only MatMuls quantized, the MatMul after
    the Transpose excluded, so the first MatMul's quantized output is read by a float Transpose."""
    rng = np.random.default_rng(2)
    c = _const
    inits = [c(rng.standard_normal((H, H)), "W1"), c(rng.standard_normal((H, S)), "W2"),
             numpy_helper.from_array(np.array([S, H], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("Transpose", ["h"], ["t"], perm=[0, 2, 1], name="tr"),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="rs"),
             helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")]
    model = _model(nodes, inits, "t", output="y", output_shape=(S, S))
    feeds = [{"x": rng.standard_normal((1, S, H)).astype(np.float32)} for _ in range(2)]
    cfg = resolve_config("A8W8").replace(op_types=("MatMul",), runtime="npu", nodes_to_exclude=("mm2",))
    result = quantize(model, cfg, feeds)  # finish() opens an onnxruntime session: refused before the fix
    assert result.plan.tensors["t"].share_with == "h" and result.plan.tensors["h"].quant.format == "int8"
