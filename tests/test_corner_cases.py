"""Corner cases that once crashed or silently stayed float (issue 27 item 3 and 4).

Each graph is built the way the exporter in the zoo wrote it (tests/... issue 27):
a ViT whose patch-embedding Conv reads a Cast (HF ViT export), an audio front end whose
``ReduceMax(keepdims=0)`` makes a rank-0 tensor feeding a Clip's ``min`` (openWakeWord
melspectrogram), and recurrent seq2seq encoders (a bidirectional GRU, an LSTM) under the default
``runtime=cpu``. Every preset must give a model onnxruntime runs, close to float, with the
corner tensor's fate stated in the plan.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize


def _init(rng, name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _config(preset: str, **changes):
    config = get_preset(preset)
    return config.replace(calibration=dataclasses.replace(config.calibration, progress=False), **changes)


def _run(model: onnx.ModelProto, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [s.run(None, f)[0] for f in feeds]


def _cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


# --- a. Cast → patch-embedding Conv on a transformer graph -------------------------------------

def make_vit(seed: int = 0) -> onnx.ModelProto:
    """input (float16 pixels) → Cast → Conv(patch 4, stride 4) → Reshape/Transpose → LayerNorm →
    one attention block (Q/K/V MatMuls, Softmax) → residual → LayerNorm → MatMul head."""
    rng = np.random.default_rng(seed)
    d, p = 16, 4
    inits = [
        _init(rng, "patch.weight", (d, 3, p, p), 0.2), _init(rng, "patch.bias", (d,), 0.1),
        numpy_helper.from_array(np.array([0, d, -1], np.int64), "shape"),
        numpy_helper.from_array(np.ones(d, np.float32), "ln.g"), numpy_helper.from_array(np.zeros(d, np.float32), "ln.b"),
        _init(rng, "wq", (d, d)), _init(rng, "wk", (d, d)), _init(rng, "wv", (d, d)), _init(rng, "wo", (d, d)),
        numpy_helper.from_array(np.array(1 / np.sqrt(d), np.float32), "inv_sqrt_d"),
        _init(rng, "head", (d, 10)),
    ]
    nodes = [
        helper.make_node("Cast", ["pixels"], ["pixels_Cast_output_0"], name="Cast_0", to=TensorProto.FLOAT),
        helper.make_node("Conv", ["pixels_Cast_output_0", "patch.weight", "patch.bias"], ["patches"], name="projection",
                         kernel_shape=[p, p], strides=[p, p]),
        helper.make_node("Reshape", ["patches", "shape"], ["flat"], name="flatten"),
        helper.make_node("Transpose", ["flat"], ["tokens"], name="to_tokens", perm=[0, 2, 1]),
        helper.make_node("LayerNormalization", ["tokens", "ln.g", "ln.b"], ["h"], name="ln1", axis=-1),
        helper.make_node("MatMul", ["h", "wq"], ["q"], name="q"),
        helper.make_node("MatMul", ["h", "wk"], ["k"], name="k"),
        helper.make_node("MatMul", ["h", "wv"], ["v"], name="v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "inv_sqrt_d"], ["scaled"], name="scale"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="ctx"),
        helper.make_node("MatMul", ["ctx", "wo"], ["attn"], name="o"),
        helper.make_node("Add", ["tokens", "attn"], ["res"], name="residual"),
        helper.make_node("LayerNormalization", ["res", "ln.g", "ln.b"], ["h2"], name="ln2", axis=-1),
        helper.make_node("MatMul", ["h2", "head"], ["logits"], name="classifier"),
    ]
    graph = helper.make_graph(nodes, "vit", [helper.make_tensor_value_info("pixels", TensorProto.FLOAT16, [None, 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, 16, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vit_feeds(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"pixels": rng.standard_normal((2, 3, 16, 16)).astype(np.float16)} for _ in range(n)]


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_cast_fed_patch_conv_on_a_transformer_keeps_its_bias_float(preset):
    model = make_vit()
    # The plan of the corner case is what is checked; repair off: the model's random 10-class
    # per-token head is a linear head the accuracy floor judges by arg-max (analysis/class_scores.py),
    # and A8W8 flips its near-random tokens, so the repair would keep nodes float around it.
    result = quantize(model, _config(preset, repair=False), _vit_feeds(4, 1), eval_samples=0)
    plan = result.plan
    assert "pixels_Cast_output_0" not in plan.tensors  # transformer rule: MatMul inputs only
    assert "patch.bias" not in plan.tensors
    assert "stays float" in plan.float_tensors["patch.bias"] and "pixels_Cast_output_0" in plan.float_tensors["patch.bias"]
    assert plan.tensors["patch.weight"].quant.is_integer  # the weight is still stored quantized
    feeds = _vit_feeds(3, 7)
    cos = min(_cosine(a, b) for a, b in zip(_run(result.model, feeds), _run(model, feeds)))
    assert cos > 0.98, cos


# --- b. ReduceMax(keepdims=0) → rank-0 → Sub/Cast → Clip min, under block formats ------------

def make_melspec(seed: int = 0) -> onnx.ModelProto:
    """openWakeWord's melspectrogram tail: Conv (STFT-like) → Pow → MatMul (mel) → Clip → Log →
    ×10/ln10 → ReduceMax(keepdims=0) (rank 0) → Sub(80) → Cast → Clip(min = that scalar)."""
    rng = np.random.default_rng(seed)
    inits = [
        _init(rng, "stft", (64, 1, 32), 0.2),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.abs(rng.standard_normal((64, 32))).astype(np.float32) * 0.1, "mel"),
        numpy_helper.from_array(np.array(1e-10, np.float32), "floor"),
        numpy_helper.from_array(np.array(10 / np.log(10), np.float32), "db"),
        numpy_helper.from_array(np.array(80.0, np.float32), "range"),
    ]
    nodes = [
        helper.make_node("Conv", ["audio", "stft"], ["spec"], name="Conv_2", strides=[16]),
        helper.make_node("Pow", ["spec", "two"], ["power"], name="Pow_11"),
        helper.make_node("Transpose", ["power"], ["power_t"], name="Transpose_12", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["power_t", "mel"], ["melspec"], name="MatMul_15"),
        helper.make_node("Clip", ["melspec", "floor"], ["clipped"], name="Clip_16"),
        helper.make_node("Log", ["clipped"], ["log"], name="Log_17"),
        helper.make_node("Mul", ["log", "db"], ["dbs"], name="Mul_18"),
        helper.make_node("ReduceMax", ["dbs"], ["peak"], name="ReduceMax_24", keepdims=0),
        helper.make_node("Sub", ["peak", "range"], ["low"], name="Sub_26"),
        helper.make_node("Cast", ["low"], ["low_f"], name="Cast_27", to=TensorProto.FLOAT),
        helper.make_node("Clip", ["dbs", "low_f"], ["out"], name="Clip_28"),
    ]
    graph = helper.make_graph(nodes, "melspec", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, 1024])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 63, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _audio_feeds(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"audio": rng.standard_normal((1, 1, 1024)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("preset", ["BFP16", "MX9", "MXINT8", "MXFP8_E4M3"])
def test_rank0_tensor_under_a_block_format_stays_float_with_the_reason(preset):
    model = make_melspec()
    # Block formats encode only dot-product operands (pipeline/plan/fp_blocks.py), which here all
    # read the log's linear domain (kept float): quantize the vector ops too (the every-op
    # placement), to reach the rank-0 tensors.
    config = _config(preset, extra_op_types=("ReduceMax", "Cast", "Log", "Pow"), fp_block_dot_operands_only=False,
                     int_block_dot_operands_only=False)
    result = quantize(model, config, _audio_feeds(4, 1), eval_samples=0)
    plan = result.plan
    for name in ("peak", "low"):  # rank 0: ReduceMax(keepdims=0), then Sub
        assert name not in plan.tensors
        assert "rank-0" in plan.float_tensors[name]
    assert plan.tensors["dbs"].quant.format in ("bfp", "mx")  # the rest is still quantized
    feeds = _audio_feeds(3, 7)
    got, want = _run(result.model, feeds), _run(model, feeds)
    assert min(_cosine(a, b) for a, b in zip(got, want)) > 0.99


# --- c. recurrent layers under runtime=cpu ---------------------------------------------------

def make_recurrent(op: str, seed: int = 0) -> onnx.ModelProto:
    """Embedding-like MatMul → bidirectional GRU (or LSTM) → a bridge MatMul on Y_h (seq2seq encoder)."""
    rng = np.random.default_rng(seed)
    d, h = 24, 32
    gates = 3 if op == "GRU" else 4
    inits = [
        _init(rng, "embed", (d, d)),
        _init(rng, "W", (2, gates * h, d), 0.2), _init(rng, "R", (2, gates * h, h), 0.2), _init(rng, "B", (2, 2 * gates * h), 0.1),
        _init(rng, "bridge", (2 * h, h)),
        numpy_helper.from_array(np.array([0, 2 * h], np.int64), "shape"),
        numpy_helper.from_array(np.array([1, 0, 2], np.int64), "perm_unused"),
    ]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    nodes = [
        helper.make_node("MatMul", ["x", "embed"], ["e"], name="embed_mm"),
        helper.make_node(op, ["e", "W", "R", "B"], outs, name=f"{op.lower()}_enc", hidden_size=h, direction="bidirectional"),
        helper.make_node("Transpose", ["Y_h"], ["hb"], name="hb", perm=[1, 0, 2]),
        helper.make_node("Reshape", ["hb", "shape"], ["hcat"], name="hcat"),
        helper.make_node("MatMul", ["hcat", "bridge"], ["state"], name="bridge_mm"),
    ]
    graph = helper.make_graph(nodes, "enc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12, 2, d])],
                              [helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _seq_feeds(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((12, 2, 24)).astype(np.float32)} for _ in range(n)]


def _recurrent_case(op: str, preset: str):
    model = make_recurrent(op)
    result = quantize(model, _config(preset), _seq_feeds(4, 1), eval_samples=0)
    feeds = _seq_feeds(3, 7)
    cos = min(_cosine(a, b) for a, b in zip(_run(result.model, feeds), _run(model, feeds)))
    return model, result, cos


@pytest.mark.parametrize("op,preset", [("GRU", "A8W8"), ("GRU", "BF16"), ("GRU", "MXINT8"), ("LSTM", "A8W8")])
def test_recurrent_weights_are_quantized_under_runtime_cpu(op, preset):
    model, result, cos = _recurrent_case(op, preset)
    plan = result.plan
    assert result.config.runtime == "cpu"
    name = f"{op.lower()}_enc"
    assert name in plan.nodes and name not in plan.skipped_nodes
    for w in ("W", "R"):
        assert plan.tensors[w].role == "weight"
    assert "B" not in plan.tensors  # the bias and the states stay float
    assert cos > 0.99, cos
    if preset == "A8W8":
        assert "e" not in plan.tensors or name not in plan.tensors["e"].consumers  # X runs float
        stored = {t.name: t for t in result.model.graph.initializer}
        int8 = [t for t in stored.values() if t.data_type == TensorProto.INT8]
        assert sum(np.prod(t.dims) for t in int8) >= 2 * (3 if op == "GRU" else 4) * 32 * (24 + 32)
        size = len(result.model.SerializeToString())
        assert size < 0.5 * len(model.SerializeToString())  # the recurrent weights are most of the bytes
