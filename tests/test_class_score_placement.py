"""Class scores a user reads by arg-max stay float at the graph output (analysis/class_scores.py,
``score_float_tensors``; the plan rule in pipeline/plan/assign.py).

ddddocr's CTC logits (about 14-25) were rounded to bf16 (a step of 0.125) at the output, where
float's margins between look-alike glyphs are 0.03-0.36: 8 of 192 held-out strings changed under
BF16, each at a step whose quantized margin was exactly 0 or −0.125 (bench/RESULTS.md, "ddddocr_ocr
reads"). The rule is structural: the tensors from a linear head or a softmax (and a softmax's
logits) to a class-score graph output, never a Conv head's.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.analysis.class_scores import SCORE_REASON, score_float_tensors
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

from test_floor_sequences import ctc_reader, glyph_feeds


def _readers(model: onnx.ModelProto, tensor: str) -> list[str]:
    return [n.op_type for n in model.graph.node if tensor in n.input]


def _softmax_and_conv_heads() -> onnx.ModelProto:
    """``x [1, 8, 16]``: ``MatMul → Add → Softmax`` (probabilities out) and a 1×1 ``Conv`` map out."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((4, 8, 1)).astype(np.float32), "k"),
             numpy_helper.from_array(np.zeros(4, np.float32), "kb")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="MatMul_head"),
             helper.make_node("Add", ["mm", "b"], ["logits"], name="Add_bias"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="Softmax_out", axis=-1),
             helper.make_node("Conv", ["x", "k", "kb"], ["maps"], name="Conv_head")]
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 8, 10]),
                               helper.make_tensor_value_info("maps", TensorProto.FLOAT, [1, 4, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_score_tensors_by_structure():
    # CTC head: Gemm → Reshape [T, 1, C]: the Gemm's output and the graph output, not its input.
    assert set(score_float_tensors(ctc_reader())) == {"logits2d", "logits"}
    # Softmax head: the probabilities, and behind them the linear head's logits (bias Add included);
    # a Conv head's maps are no class scores (detectors concatenate objectness, class and box maps).
    kept = score_float_tensors(_softmax_and_conv_heads())
    assert set(kept) == {"probs", "logits", "mm"} and set(kept.values()) == {SCORE_REASON}


def test_a8w8_keeps_the_ctc_logits_float_and_the_head_integer():
    model = ctc_reader()
    feeds = glyph_feeds(16)
    result = quantize(model, resolve_config("A8W8").replace(repair=False), data=feeds)
    q = result.model
    assert "QuantizeLinear" not in _readers(q, "logits2d"), "the head's output is still put on an int8 grid"
    gemm = next(n for n in q.graph.node if n.op_type == "Gemm")
    assert all(i.endswith("DequantizeLinear_Output") for i in gemm.input[:2]), "the head's input and weight must stay int8"
    assert "arg-max" in result.plan.float_tensors["logits2d"]
    # The user can still ask for the tail and the scores to be quantized.
    q2 = quantize(model, resolve_config("A8W8").replace(repair=False, quantize_postprocessing=True), data=feeds).model
    assert "QuantizeLinear" in _readers(q2, "logits2d")


def test_bf16_keeps_softmax_logits_float_not_the_conv_map():
    model = _softmax_and_conv_heads()
    feeds = [{"x": np.random.default_rng(i).standard_normal((1, 8, 16)).astype(np.float32)} for i in range(8)]
    q = quantize(model, resolve_config("BF16").replace(repair=False), data=feeds).model
    for tensor in ("mm", "logits"):
        assert _readers(q, tensor) and all(op != "Cast" for op in _readers(q, tensor)), f"{tensor} is rounded to bf16"
    producer = {o: n for n in q.graph.node for o in n.output}
    assert producer["maps"].op_type == "Cast", "the Conv map is no class score: it stays bf16 as before"
