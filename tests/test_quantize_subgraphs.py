"""Quantization inside If and Loop bodies, on small synthetic models (issue 13).

The If model holds a Conv-Relu-Conv chain in its then branch and a MatMul-Relu in its else branch;
the Loop model runs a MatMul-Add-Tanh recurrence three times and also stacks each step; the Scan
model runs a MatMul recurrence over a sequence. For every
preset the bodies must hold quantizers (counted), the model must load in plain onnxruntime, and
the outputs must stay within the format's error of float. Calibration reads the body tensors
through extra outputs (:mod:`onnxptq.calibration.bodies`); a branch the data never takes is left
float with a warning naming it.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset, quantize
from onnxptq.pipeline.calibrate import NothingToQuantizeError
from onnxptq.calibration import runner
from onnxptq.graph.walk import ScopeIndex

PRESETS = ("A8W8", "A16W8", "BF16", "BFP16", "MX9", "MXINT8")
#: Least cosine vs float per preset: int8 weights (A8W8, A16W8) and the 8-bit-mantissa block
#: formats lose about 1e-3 on these random weights; bf16 far less.
MIN_COSINE = {"A8W8": 0.995, "A16W8": 0.997, "BF16": 0.9999, "BFP16": 0.999, "MX9": 0.999, "MXINT8": 0.999}


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)


def make_if_model(seed: int = 0) -> onnx.ModelProto:
    """y = cond ? Conv(Relu(Conv(x))) : Relu(x @ M), x [N,4,8,8]; weights live in the bodies."""
    rng = np.random.default_rng(seed)
    then_graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W1", "B1"], ["t_c1"], name="then_conv1", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["t_c1"], ["t_r1"], name="then_relu"),
         helper.make_node("Conv", ["t_r1", "W2", "B2"], ["t_y"], name="then_conv2", pads=[1, 1, 1, 1])],
        "then", [], [helper.make_tensor_value_info("t_y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        initializer=[_init(rng, "W1", (4, 4, 3, 3)), _init(rng, "B1", (4,), 0.1), _init(rng, "W2", (4, 4, 3, 3)),
                     _init(rng, "B2", (4,), 0.1)])
    else_graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "M"], ["e_m"], name="else_matmul"),
         helper.make_node("Relu", ["e_m"], ["e_y"], name="else_relu")],
        "else", [], [helper.make_tensor_value_info("e_y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        initializer=[_init(rng, "M", (8, 8))])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_graph, else_branch=else_graph)],
        "if_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def make_loop_model(seed: int = 0, steps: int = 3) -> onnx.ModelProto:
    """h_{k+1} = Tanh(h_k @ W + b) for ``steps`` steps from h_0 = x [N,16]; outputs h and every step."""
    rng = np.random.default_rng(seed)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["l_m"], name="loop_matmul"),
         helper.make_node("Add", ["l_m", "b"], ["l_a"], name="loop_add"),
         helper.make_node("Tanh", ["l_a"], ["h_out"], name="loop_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond"),
         helper.make_node("Identity", ["h_out"], ["scan_h"], name="loop_scan")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["N", 16]),
         helper.make_tensor_value_info("scan_h", TensorProto.FLOAT, ["N", 16])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "keep_going", "x"], ["h", "steps"], name="recurrence", body=body)],
        "loop_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 16]),
         helper.make_tensor_value_info("steps", TensorProto.FLOAT, [steps, "N", 16])],
        initializer=[numpy_helper.from_array(np.array(steps, np.int64), "trip"),
                     numpy_helper.from_array(np.array(True), "keep_going"),
                     _init(rng, "W", (16, 16), 0.4), _init(rng, "b", (16,), 0.1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def make_scan_model(seed: int = 0) -> onnx.ModelProto:
    """A Scan over x [T,N,8]: s_{t+1} = Relu(x_t @ U + s_t), scan output y_t = s_{t+1} @ V."""
    rng = np.random.default_rng(seed)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "U"], ["s_m"], name="scan_matmul_u"),
         helper.make_node("Add", ["s_m", "s_in"], ["s_a"], name="scan_add"),
         helper.make_node("Relu", ["s_a"], ["s_out"], name="scan_relu"),
         helper.make_node("MatMul", ["s_out", "V"], ["y_t"], name="scan_matmul_v")],
        "scan_body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, ["N", 8])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s0", "x"], ["s", "y"], name="scan", body=body, num_scan_inputs=1)],
        "scan_model",
        [helper.make_tensor_value_info("s0", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, "N", 8])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, "N", 8])],
        initializer=[_init(rng, "U", (8, 8), 0.4), _init(rng, "V", (8, 8), 0.4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def make_if_in_loop_model(seed: int = 0) -> onnx.ModelProto:
    """A Loop whose body holds an If with a MatMul in its then branch: not passable out per step."""
    rng = np.random.default_rng(seed)
    then_g = helper.make_graph([helper.make_node("MatMul", ["h_in", "W"], ["t_m"], name="inner_matmul")], "then", [],
                               [helper.make_tensor_value_info("t_m", TensorProto.FLOAT, ["N", 16])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h_in"], ["e_n"], name="inner_neg")], "else", [],
                               [helper.make_tensor_value_info("e_n", TensorProto.FLOAT, ["N", 16])])
    body = helper.make_graph(
        [helper.make_node("If", ["flag"], ["h_if"], name="inner_if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Tanh", ["h_if"], ["h_out"], name="loop_tanh"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, ["N", 16])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "keep_going", "x"], ["h"], name="recurrence", body=body)],
        "if_in_loop",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 16])],
        initializer=[numpy_helper.from_array(np.array(2, np.int64), "trip"),
                     numpy_helper.from_array(np.array(True), "keep_going"), _init(rng, "W", (16, 16), 0.4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _if_feeds(n: int, seed: int, conds: tuple[bool, ...]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (2, 4, 8, 8)).astype(np.float32), "cond": np.array(conds[i % len(conds)])}
            for i in range(n)]


def _loop_feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (2, 16)).astype(np.float32)} for _ in range(n)]


def _config(preset: str):
    config = get_preset(preset)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    return config


#: block formats encode dot-product operands only (pipeline/plan/fp_blocks.py)
BLOCK_PRESETS = ("BFP16", "MX9", "MXINT8")


def _dot_inputs_quantized(model: onnx.ModelProto) -> int:
    """Conv/MatMul nodes in any scope whose activation input is a quantizer's output (Q/DQ, our
    functions, a Cast back from bfloat16)."""
    index = ScopeIndex(model)
    quantized = {o for scope in index.scopes for n in scope.graph.node
                 if n.op_type in ("DequantizeLinear", "Cast") or n.domain == "onnxptq" for o in n.output}
    return sum(1 for scope in index.scopes for n in scope.graph.node
               if n.op_type in ("Conv", "MatMul") and n.input[0] in quantized)


def quantizers_in_bodies(model: onnx.ModelProto) -> int:
    """Quantizer nodes inside If/Loop/Scan bodies: Q/DQ, our functions, Casts to bfloat16."""
    index = ScopeIndex(model)
    count = 0
    for scope in index.scopes[1:]:
        for node in scope.graph.node:
            if node.op_type in ("QuantizeLinear", "DequantizeLinear") or node.domain == "onnxptq":
                count += 1
            elif node.op_type == "Cast" and any(a.name == "to" and a.i == TensorProto.BFLOAT16 for a in node.attribute):
                count += 1
    return count


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _outputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.concatenate([session.run([o.name], f)[0].ravel() for f in feeds]) for o in model.graph.output]


@pytest.mark.parametrize("preset", PRESETS)
def test_if_bodies_quantized_within_format_error(preset):
    model = make_if_model()
    result = quantize(model, _config(preset), _if_feeds(8, 1, (True, False)))
    onnx.checker.check_model(result.model)
    if preset in BLOCK_PRESETS:  # dot-product operands only: x (quantized once, outside) and t_r1
        assert quantizers_in_bodies(result.model) >= 1
    else:
        assert quantizers_in_bodies(result.model) >= 3, "the Conv/MatMul inputs inside both branches must be quantized"
    # then_conv1, then_conv2 and else_matmul read quantized values, but a dot product the plan leaves
    # float (A8W8's CPU placement keeps then_conv2, an image stem, float) reads its input unrounded:
    # onnxruntime would otherwise quantize its weight behind the DequantizeLinear (plan/float_dot_readers).
    floats = sum(n in result.plan.skipped_nodes for n in ("then_conv1", "then_conv2", "else_matmul"))
    assert _dot_inputs_quantized(result.model) == 3 - floats, (floats, result.plan.skipped_nodes)
    for cond in (True, False):
        feeds = _if_feeds(6, 2, (cond,))
        (ref,), (got,) = _outputs(model, feeds), _outputs(result.model, feeds)
        assert _cosine(ref, got) >= MIN_COSINE[preset], (preset, cond, _cosine(ref, got))
        assert not np.array_equal(ref, got), "a quantized body must change the output a little"


@pytest.mark.parametrize("preset", PRESETS)
def test_loop_body_quantized_within_format_error(preset):
    model = make_loop_model()
    result = quantize(model, _config(preset), _loop_feeds(8, 1))
    onnx.checker.check_model(result.model)
    assert quantizers_in_bodies(result.model) >= (0 if preset in ("A8W8", "A16W8") else 1)  # CPU integer: the body runs float on int8 weights (tests/test_loop_body_float.py)
    feeds = _loop_feeds(6, 2)
    for ref, got in zip(_outputs(model, feeds), _outputs(result.model, feeds)):
        assert _cosine(ref, got) >= MIN_COSINE[preset], (preset, _cosine(ref, got))
        assert not np.array_equal(ref, got)


@pytest.mark.parametrize("preset", ("A8W8", "BFP16"))
def test_scan_body_quantized_within_format_error(preset):
    model = make_scan_model()
    rng = np.random.default_rng(5)
    feeds = [{"s0": rng.normal(0, 1, (2, 8)).astype(np.float32), "x": rng.normal(0, 1, (4, 2, 8)).astype(np.float32)}
             for _ in range(8)]
    result = quantize(model, _config(preset), feeds)
    onnx.checker.check_model(result.model)
    assert quantizers_in_bodies(result.model) >= (0 if preset == "A8W8" else 2)  # CPU integer: the body runs float on int8 weights (tests/test_loop_body_float.py)
    for ref, got in zip(_outputs(model, feeds[:4]), _outputs(result.model, feeds[:4])):
        assert _cosine(ref, got) >= MIN_COSINE[preset], (preset, _cosine(ref, got))
        assert not np.array_equal(ref, got)


def test_if_inside_a_loop_body_is_left_float_with_the_reason(caplog):
    model = make_if_in_loop_model()
    feeds = [{"x": np.random.default_rng(i).normal(0, 1, (2, 16)).astype(np.float32), "flag": np.array(True)} for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="onnxptq"):
        result = quantize(model, _config("A8W8").replace(runtime="npu"), feeds)  # the CPU's integer placement keeps Loop bodies float
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "inside a Loop/Scan body" in messages and "'inner_if' then_branch" in messages, messages
    inner = next(s for s in ScopeIndex(result.model).scopes if s.attribute == "then_branch")
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in inner.graph.node)
    loop_body = next(s for s in ScopeIndex(result.model).scopes if s.attribute == "body")
    assert any(n.op_type == "QuantizeLinear" for n in loop_body.graph.node)  # the Tanh output still is
    (ref,), (got,) = _outputs(model, feeds), _outputs(result.model, feeds)
    assert _cosine(ref, got) >= 0.995


def test_branch_never_taken_is_left_float_with_a_warning(caplog):
    model = make_if_model()
    with caplog.at_level(logging.WARNING, logger="onnxptq"):
        result = quantize(model, _config("A8W8"), _if_feeds(6, 1, (True,)))
    warned = [r.getMessage() for r in caplog.records if "else_branch" in r.getMessage()]
    assert warned and "'branch'" in warned[0], [r.getMessage() for r in caplog.records]
    index = ScopeIndex(result.model)
    else_scope = next(s for s in index.scopes if s.attribute == "else_branch")
    then_scope = next(s for s in index.scopes if s.attribute == "then_branch")
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in else_scope.graph.node)
    # The taken branch is quantized: then_conv1's weight is dequantized in the body (then_conv2 is a
    # float image stem under the CPU placement, and its input stays float: plan/float_dot_readers).
    assert any(n.op_type == "DequantizeLinear" for n in then_scope.graph.node)
    # The branch's own weight is untouched.
    weight = next(t for t in else_scope.graph.initializer if t.name == "M")
    np.testing.assert_array_equal(numpy_helper.to_array(weight), numpy_helper.to_array(
        next(a.g for a in model.graph.node[0].attribute if a.name == "else_branch").initializer[0]))
    feeds = _if_feeds(4, 2, (False,))
    (ref,), (got,) = _outputs(model, feeds), _outputs(result.model, feeds)
    assert _cosine(ref, got) >= 0.999
    # Data-free formats need no statistics: the same untaken branch is quantized under BFP16 (its
    # MatMul's weight; its activation x is quantized once outside, and the Relu after it is no
    # dot-product operand). Unpacked, so the rounded weight is an initializer to read (a body's
    # weight is packed by default since fuzz17, decoding the same values: test_fuzz17_findings).
    bfp = quantize(model, _config("BFP16").replace(pack_weights=False), _if_feeds(6, 1, (True,)))
    scopes = ScopeIndex(bfp.model).scopes
    else_bfp = next(s for s in scopes if s.attribute == "else_branch")
    matmul = next(n for n in else_bfp.graph.node if n.op_type == "MatMul")
    stored = next(t for s in scopes for t in s.graph.initializer if t.name == matmul.input[1])
    original = numpy_helper.to_array(weight)
    assert not np.array_equal(numpy_helper.to_array(stored), original)
    np.testing.assert_allclose(numpy_helper.to_array(stored), original, rtol=0, atol=np.abs(original).max() / 64)
    assert _dot_inputs_quantized(bfp.model) == 3


def test_body_statistics_match_a_direct_run():
    """min/max of a tensor read out of a Loop body cover every iteration of every feed."""
    model = make_loop_model()
    feeds = _loop_feeds(5, 4)
    stats = runner.collect(model, {"l_a": "minmax", "h_out": "minmax"}, feeds)
    w = numpy_helper.to_array(model.graph.initializer[2])
    b = numpy_helper.to_array(model.graph.initializer[3])
    values = []
    for feed in feeds:
        h = feed["x"]
        for _ in range(3):
            a = h @ w + b
            values.append(a)
            h = np.tanh(a)
    stacked = np.stack(values)
    assert stats["l_a"].min == pytest.approx(float(stacked.min()), rel=1e-5)
    assert stats["l_a"].max == pytest.approx(float(stacked.max()), rel=1e-5)
    assert stats["h_out"].max == pytest.approx(float(np.tanh(stacked).max()), rel=1e-5)


def test_nothing_to_quantize_names_what_it_found():
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["t"], name="ident")], "b", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="neg")], "e", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="only_if", then_branch=body, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(NothingToQuantizeError, match="Neg"):
        quantize(model, _config("A8W8"), [{"x": np.ones(2, np.float32), "c": np.array(True)}])


def test_compat_enable_subgraph_maps_to_quantize_subgraphs():
    """EnableSubgraph (the reference tool's key) switches body quantization; absent, it is on."""
    from onnxptq.compat import QuantizationConfig, to_quant_config

    assert to_quant_config(QuantizationConfig()).quantize_subgraphs is True
    off = to_quant_config(QuantizationConfig(extra_options={"EnableSubgraph": False}))
    assert off.quantize_subgraphs is False
    model = make_if_model()
    config = _config("A8W8").replace(quantize_subgraphs=False)
    with pytest.raises(NothingToQuantizeError, match="Conv.*not searched"):
        quantize(model, config, _if_feeds(2, 1, (True,)))


def test_mixed_precision_names_the_layers_it_cannot_search():
    """The search flips main-graph layers only; a model whose layers all sit in bodies says so."""
    from onnxptq.config.schema import AutoMixedPrecisionOptions, ConfigError

    low = get_preset("A8W8")
    config = _config("A16W8").replace(auto_mixed_precision=AutoMixedPrecisionOptions(low.activation, low.weight, l2_target=0.5))
    with pytest.raises(ConfigError, match="3 are inside If/Loop/Scan bodies"):
        quantize(make_if_model(), config, _if_feeds(4, 1, (True, False)))
