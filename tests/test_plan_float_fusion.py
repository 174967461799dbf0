"""BF16/FP16: one rounding per fused group, at its output (pipeline/plan/float_fusion.py).

Small graphs of the shapes the real models have (PP-LCNet's Conv → HardSwish/HardSigmoid blocks
with its SE gate, a transformer's MatMul + bias, a residual Add, YOLO's SiLU), planned as the
quantizer plans them; each rule has a case where it must not apply (a gate broadcast onto a map,
a node excluded, integer formats). The last tests run onnxruntime on the quantized model: the
fusions onnxruntime makes in float still happen there (it fails if onnxruntime stops fusing, or if
the rule stops removing the pairs). Until bf16lat19 the rule followed onnxruntime's own fusions
(a pair where onnxruntime fuses the reader into the producer); it now follows what bf16 hardware
rounds, which covers those and also a residual Add, a ConvTranspose's activation, a 1-D Conv's
HardSwish, a chain of epilogue ops and a MatMul + bias with a symbolic batch.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inits, x_shape, outputs: dict[str, list]) -> onnx.ModelProto:
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in outputs.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def lcnet_block() -> onnx.ModelProto:
    """PP-LCNet's depthwise-separable block with its SE gate: Conv → HardSwish → depthwise Conv →
    HardSwish → SE (GlobalAveragePool → Conv → Relu → Conv → HardSigmoid → Mul) → 1x1 Conv →
    HardSwish; plus the must-nots: a ConvTranspose → LeakyRelu, a Conv read by HardSwish and by an Add
    (two readers), and a 1-D Conv → HardSwish (onnxruntime fuses no HardSwish there) beside a 1-D
    Conv → Sigmoid (fused)."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("HardSwish", ["c0"], ["h0"]),
        helper.make_node("Conv", ["h0", "wd", "bd"], ["cd"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("HardSwish", ["cd"], ["hd"]),
        helper.make_node("GlobalAveragePool", ["hd"], ["gp"]),
        helper.make_node("Conv", ["gp", "ws1", "bs1"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["r1"]),
        helper.make_node("Conv", ["r1", "ws2", "bs2"], ["s2"]),
        helper.make_node("HardSigmoid", ["s2"], ["gate"]),
        helper.make_node("Mul", ["hd", "gate"], ["se"]),
        helper.make_node("Conv", ["se", "wp", "bp"], ["cp"]),
        helper.make_node("HardSwish", ["cp"], ["hp"]),
        # must not: ConvTranspose fuses nothing
        helper.make_node("ConvTranspose", ["hp", "wt"], ["ct"], strides=[2, 2], kernel_shape=[2, 2]),
        helper.make_node("LeakyRelu", ["ct"], ["rt"], alpha=0.1),
        # must not: two readers of the Conv output
        helper.make_node("Conv", ["rt", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c2"], ["h2"]),
        helper.make_node("Add", ["h2", "c2"], ["a2"]),
        # 1-D convolutions: HardSwish not fused (must not), Sigmoid fused
        helper.make_node("Reshape", ["a2", "shape1d"], ["seq"]),
        helper.make_node("Conv", ["seq", "w3", "b3"], ["c3"], pads=[1, 1]),
        helper.make_node("HardSwish", ["c3"], ["h3"]),
        helper.make_node("Conv", ["h3", "w4", "b4"], ["c4"], pads=[1, 1]),
        helper.make_node("Sigmoid", ["c4"], ["g4"]),
        helper.make_node("Conv", ["g4", "w5"], ["y"]),  # a weighted last layer: nothing above is a decode tail
    ]
    inits = [_w("w0", 16, 3, 3, 3), _w("b0", 16), _w("wd", 16, 1, 3, 3), _w("bd", 16), _w("ws1", 4, 16, 1, 1), _w("bs1", 4),
             _w("ws2", 16, 4, 1, 1), _w("bs2", 16), _w("wp", 32, 16, 1, 1), _w("bp", 32), _w("wt", 32, 8, 2, 2),
             _w("w2", 8, 8, 3, 3), _w("b2", 8), numpy_helper.from_array(np.array([1, 8, 256], np.int64), "shape1d"),
             _w("w3", 8, 8, 3), _w("b3", 8), _w("w4", 8, 8, 3), _w("b4", 8), _w("w5", 2, 8, 1)]
    return _model(nodes, inits, [1, 3, 16, 16], {"y": [1, 2, 256]})


def dense_head(x_shape, ac_output: bool = True) -> onnx.ModelProto:
    """MatMul + bias → Relu → MatMul + residual Add (a residual: not a bias) → MatMul + bias
    (with ``ac_output`` a graph output too: must not fuse the Sigmoid) → Sigmoid → MatMul."""
    nodes = [
        helper.make_node("MatMul", ["x", "wa"], ["ma"]),
        helper.make_node("Add", ["ma", "ba"], ["aa"]),
        helper.make_node("Relu", ["aa"], ["ra"]),
        helper.make_node("MatMul", ["ra", "wb"], ["mb"]),
        helper.make_node("Add", ["mb", "ra"], ["ab"]),  # residual: not a bias
        helper.make_node("MatMul", ["ab", "wc"], ["mc"]),
        helper.make_node("Add", ["mc", "bc"], ["ac"]),
        helper.make_node("Sigmoid", ["ac"], ["sc"]),
        helper.make_node("MatMul", ["sc", "wd"], ["y"]),
    ]
    inits = [_w("wa", 32, 32), _w("ba", 32), _w("wb", 32, 32), _w("wc", 32, 16), _w("bc", 1, 16), _w("wd", 16, 4)]
    rows = list(x_shape[:-1])
    return _model(nodes, inits, x_shape, {"y": rows + [4], **({"ac": rows + [16]} if ac_output else {})})


def _plan(model: onnx.ModelProto, preset: str, **changes):
    config = onnxptq.get_preset(preset)
    if changes:
        config = config.replace(**changes)
    prepared = prepare_for_quantization(model, config)
    names = {o: n.op_type for n in prepared.graph.node for o in n.output}
    return make_plan(prepared, config), names


@pytest.mark.parametrize("preset", ["BF16", "FP16"])
def test_lcnet_block_rounds_once_per_fused_group(preset):
    plan, _ = _plan(lcnet_block(), preset)
    # inside a group: a Conv output read by its activation (and, c2, by a residual Add of it)
    for name in ("c0", "cd", "s2", "cp", "c4", "ct", "c2", "h2", "c3"):
        assert name not in plan.tensors and "fused" in plan.float_tensors[name], name
    assert "s1" not in plan.tensors  # Conv → Relu: the rule every format had before
    # the groups' outputs stay rounded: one rounding, after the epilogue; the SE gate [1, C, 1, 1]
    # scaling the map [1, C, H, W] ends its group (a broadcast is a kernel of its own)
    for name in ("h0", "hd", "gate", "se", "hp", "rt", "a2", "h3", "g4"):
        assert plan.tensors[name].quant.format == preset.lower(), name


def test_not_applied_to_integers_or_an_unquantized_activation():
    plan, _ = _plan(lcnet_block(), "A8W8")
    # the integer CPU placement keeps its own rule: a quantizer between a Conv and its HardSwish
    assert {"cp", "s2", "c4"} <= set(plan.tensors) and plan.float_tensors == {}
    plan, _ = _plan(lcnet_block(), "BF16", fuse_activations=False)
    assert {"c0", "cd", "cp"} <= set(plan.tensors)
    # the activation left float: removing the producer's rounding would leave none at all
    prepared = prepare_for_quantization(lcnet_block(), onnxptq.get_preset("BF16"))
    hswish = next(n.name for n in prepared.graph.node if n.op_type == "HardSwish" and n.input[0] == "c0")
    plan, _ = _plan(lcnet_block(), "BF16", nodes_to_exclude=[hswish])
    assert "c0" in plan.tensors and "cd" not in plan.tensors


def test_matmul_bias_and_residual_are_in_the_group():
    plan, _ = _plan(dense_head([4, 32]), "BF16")
    # MatMul + bias + Relu: rounded once, after the Relu; a residual Add sums into its MatMul's group
    assert not {"ma", "aa", "mb"} & set(plan.tensors) and {"ra", "ab"} <= set(plan.tensors)
    # a graph output read by Sigmoid: a linear head's scores, kept float by the class-score rule
    # (analysis/class_scores.score_float_tensors), so neither it nor the MatMul behind it is rounded
    assert "mc" not in plan.tensors and "ac" not in plan.tensors and "class" in plan.float_tensors["ac"]
    for shape in ([4, 32], [1, 9, 32], ["batch", 32]):
        plan, _ = _plan(dense_head(shape, ac_output=False), "BF16")
        # whatever onnxruntime fuses at this shape, the hardware's group is MatMul + bias + Sigmoid
        assert not {"ma", "aa", "mc", "ac"} & set(plan.tensors) and "sc" in plan.tensors, shape


def _optimized_ops(model: onnx.ModelProto, tmp_path) -> list[tuple[str, str]]:
    path = os.path.join(tmp_path, "opt.onnx")
    options = ort.SessionOptions()
    options.optimized_model_filepath = path
    options.intra_op_num_threads = 1
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [(n.op_type, next((a.s.decode() for a in n.attribute if a.name == "activation"), ""))
            for n in onnx.load(path).graph.node]


def test_onnxruntime_fuses_the_activations_of_the_bf16_model(tmp_path):
    """The point of the rule: in the BF16 model onnxruntime runs every 2-D Conv → HardSwish/
    HardSigmoid/Relu as one Conv (no HardSigmoid·x, no Cast between), as in the float model, and
    MatMul + bias + Relu as one FusedGemm; the outputs stay within bf16 rounding of float."""
    model = lcnet_block()
    ops = _optimized_ops(onnxptq.quantize(model, "BF16", None).model, tmp_path)
    acts = sorted(a for op, a in ops if op in ("Conv", "FusedConv") and a)
    assert acts.count("HardSwish") == 3 and "HardSigmoid" in acts and "Relu" in acts and "Sigmoid" in acts, ops
    ops = _optimized_ops(onnxptq.quantize(dense_head([4, 32]), "BF16", None).model, tmp_path)
    assert ("FusedGemm", "Relu") in ops, ops
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(onnxptq.quantize(model, "BF16", None).model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(got - ref).max() < 0.05 and not np.array_equal(got, ref)


def silu_block() -> onnx.ModelProto:
    """A YOLO-style Conv → SiLU → Conv → SiLU, a residual Add → SiLU, and the must-nots: a Sigmoid
    read by a second node, and a Mul of a tensor with another tensor's Sigmoid."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c0"], ["g0"]),
        helper.make_node("Mul", ["c0", "g0"], ["s0"]),
        helper.make_node("Conv", ["s0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["g1"]),
        helper.make_node("Mul", ["g1", "c1"], ["s1"]),
        helper.make_node("Add", ["s1", "s0"], ["r"]),  # residual: its output is no epilogue
        helper.make_node("Sigmoid", ["r"], ["gr"]),
        helper.make_node("Mul", ["r", "gr"], ["sr"]),
        # must not: the Sigmoid is read twice
        helper.make_node("Conv", ["sr", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["g2"]),
        helper.make_node("Mul", ["c2", "g2"], ["s2"]),
        helper.make_node("Add", ["s2", "g2"], ["a2"]),
        # must not: c3 · Sigmoid(c0's SiLU) is no SiLU
        helper.make_node("Conv", ["a2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["s0"], ["g3"]),
        helper.make_node("Mul", ["c3", "g3"], ["s3"]),
        helper.make_node("Conv", ["s3", "w4"], ["y"]),
    ]
    inits = [_w(f"w{i}", 8, 8 if i else 3, 3, 3) for i in range(4)] + [_w(f"b{i}", 8) for i in range(4)] + [_w("w4", 2, 8, 1, 1)]
    return _model(nodes, inits, [1, 3, 16, 16], {"y": [1, 2, 16, 16]})


def test_silu_rounds_once_after_the_sigmoid_mul():
    plan, _ = _plan(silu_block(), "BF16")
    # behind a Conv the SiLU is its epilogue; c1's SiLU, the residual Add and the SiLU after it are one group,
    # and so are c2 · σ(c2) + σ(c2) and c3 · g3 (g3 a tensor of its own, read elementwise)
    for name in ("c0", "c1", "s1", "r", "c2", "c3"):
        assert name not in plan.tensors and "fused Conv group" in plan.float_tensors[name], name
    assert not {"g0", "g1", "gr", "g2", "s2"} & set(plan.tensors)  # inside the SiLU (structure.py's rule already)
    for name in ("s0", "sr", "a2", "g3", "s3"):  # the groups' outputs, and a Sigmoid of one (no accumulator)
        assert plan.tensors[name].quant.format == "bf16", name
    plan, _ = _plan(silu_block(), "A8W8")
    assert not any("fused" in why for why in plan.float_tensors.values())


def test_onnxruntime_runs_conv_silu_conv_in_the_nchwc_layout(tmp_path):
    ops = _optimized_ops(onnxptq.quantize(silu_block(), "BF16", None).model, tmp_path)
    kinds = [op for op, _ in ops]
    assert kinds.count("QuickGelu") >= 3, kinds
    first = kinds.index("QuickGelu")
    assert kinds[first - 1] == "Conv" and kinds[first + 1] in ("Cast", "ReorderOutput"), kinds
