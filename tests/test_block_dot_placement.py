"""Integer-element block formats (BFP16, MX9/MX6/MX4, MXINT8) encode dot-product operands only
(issues 26 item 3 and 27; pipeline/plan/fp_blocks.py ``dot_operands_only``).

As for the FP-element MX formats (tests/test_mxfp8_placement.py), what a MatMul/Gemm/Conv reads is
quantized (its activation, its weight, a lookup table), every vector op — residual and bias adds,
LayerNorm, softmax, GELU, layer scales — reads the float value, and the plan says why each of those
tensors stayed float. Unlike the FP-element formats, a Conv/Gemm bias is still stored in the block
format (the reference tool rounds biases like weights; it is folded, so it costs nothing at run
time). ``int_block_dot_operands_only=False`` (compat key ``BlockDotOperandsOnly: False``) restores
the every-op placement of the reference tool.

The graphs: the small ViT of test_mxfp8_placement (patch Conv, pre-norm attention blocks with
softmax, erf GELU, layer scales, residual adds) and a ResNet basic block (Conv → Relu → Conv → Add
with the block's input → Relu → Conv), whose Relu output is read by a Conv and by the residual Add.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_mxfp8_placement import _cosine_error, _outputs, images, small_vit

from onnxptq.api import quantize
from onnxptq.compat.legacy import QuantizationConfig
from onnxptq.compat.enums import ExtendedQuantType
from onnxptq.compat.options import to_quant_config
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.plan.fp_blocks import DOT_PRODUCT_OPS

#: one preset per integer-element family: BFP (to_bfp), MX prime (to_bfp_prime), MX with int8 elements
FAMILIES = ("BFP16", "MX9", "MXINT8")


@pytest.fixture(scope="module")
def vit():
    model = small_vit()
    return model, images(2, 1)


def _plan(model, calib, preset: str, **changes):
    result = quantize(model, resolve_config(preset).replace(repair=False, **changes), calib, eval_samples=0)
    return result


def _quantizer_inputs(model: onnx.ModelProto) -> set[str]:
    return {n.input[0] for n in model.graph.node if n.domain == "onnxptq"}


@pytest.mark.parametrize("preset", FAMILIES)
def test_vit_plan_encodes_dot_product_operands_only(vit, preset):
    model, calib = vit
    result = _plan(model, calib, preset)
    plan = result.plan
    kinds = {n.name: n.op_type for n in model.graph.node}
    activations = {name: t for name, t in plan.tensors.items() if t.role == "activation"}
    for name, t in activations.items():
        assert t.consumers and {kinds[c] for c in t.consumers} <= DOT_PRODUCT_OPS, (name, t.consumers)
    # what the MatMuls/Conv read: LayerNorm outputs into Q/K/V and fc1, Kᵀ, the softmax output,
    # the GELU output, the gathered class token into the head
    assert {"image", "l0.ln1", "l0.ln2", "l0.attn.kt", "l0.attn.probs", "l0.gelu.out", "cls.out"} <= set(activations)
    # vector ops read float values, each with the plan's reason: the softmax input, the GELU input,
    # the layer-scale output into the residual add, the patch Conv's output into Reshape/Add
    for name in ("l0.attn.scores", "l0.fc1.out", "l0.ls1", "l0.ls2", "patch", "l1.attn.scores"):
        reason = plan.float_tensors[name]
        assert name not in plan.tensors and "no dot product reads it" in reason and "integer-element block" in reason, name
    for name in ("l0.ls1.gamma", "pos", "cls", "l0.fc1.b"):  # elementwise constants: layer scale, position, bias Add
        assert name not in plan.tensors and plan.float_tensors[name].startswith("constant of an elementwise op"), name
    assert {"patch.W", "l0.attn.q.W", "l0.fc2.W", "head.W"} <= set(plan.tensors)
    assert plan.tensors["patch.b"].role == "bias", "an integer-element bias is still stored in the block format"
    # the emitted model: one runtime quantizer per planned activation, none on the vector ops' inputs
    quantized = _quantizer_inputs(result.model)
    assert quantized and quantized <= set(activations), quantized - set(activations)
    assert not quantized & {"l0.attn.scores", "l0.fc1.out", "l0.ls1", "patch", "embed", "l0.res1"}


def _residual_block(seed: int = 0) -> onnx.ModelProto:
    """A ResNet basic block between a stem Conv and a head Conv, BN folded into the Conv biases."""
    rng = np.random.default_rng(seed)
    c = 16
    inits = []

    def conv(x: str, name: str, cin: int, relu: bool) -> list[onnx.NodeProto]:
        inits.append(numpy_helper.from_array((rng.standard_normal((c, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32), f"{name}.W"))
        inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), f"{name}.b"))
        nodes = [helper.make_node("Conv", [x, f"{name}.W", f"{name}.b"], [f"{name}.y"], name=name, pads=[1, 1, 1, 1])]
        if relu:
            nodes.append(helper.make_node("Relu", [f"{name}.y"], [f"{name}.r"], name=f"{name}.relu"))
        return nodes

    nodes = conv("x", "stem", 3, True) + conv("stem.r", "c1", c, True) + conv("c1.r", "c2", c, False)
    nodes += [helper.make_node("Add", ["c2.y", "stem.r"], ["sum"], name="add"),
              helper.make_node("Relu", ["sum"], ["block"], name="block.relu")]
    nodes += conv("block", "head", c, False)
    graph = helper.make_graph(nodes, "residual_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("head.y", TensorProto.FLOAT, [1, c, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _residual_feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


@pytest.mark.parametrize("preset", FAMILIES)
def test_residual_block_add_reads_the_float_value(preset):
    """The stem's Relu output is read by c1 and by the residual Add: its quantizer is exclusive to
    c1, so the Add sums the float value; the Add's other input (c2's output) stays float."""
    model = _residual_block()
    result = _plan(model, _residual_feeds(2, 1), preset)
    plan = result.plan
    assert plan.tensors["stem.r"].exclusive and plan.tensors["stem.r"].consumers == ["c1"]
    assert "no dot product reads it" in plan.float_tensors["c2.y"]
    assert "block" in plan.tensors  # the head Conv's input (the block's output)
    add = next(n for n in result.model.graph.node if n.op_type == "Add")
    assert "stem.r" in add.input and "c2.y" in add.input, "the residual Add reads both float values"
    c1 = next(n for n in result.model.graph.node if n.op_type == "Conv" and n.name == "c1")
    assert c1.input[0] != "stem.r", "c1 reads the quantized value"


def test_every_op_placement_is_still_reachable(vit):
    """``int_block_dot_operands_only=False`` (and the compat key) plans the vector ops' tensors too."""
    model, calib = vit
    plan = _plan(model, calib, "MXINT8", int_block_dot_operands_only=False).plan
    assert {"l0.attn.scores", "l0.fc1.out", "l0.ls1", "patch", "pos", "l0.ls1.gamma", "l0.fc1.b"} <= set(plan.tensors)
    assert not any("dot product" in reason for reason in plan.float_tensors.values())
    legacy = dict(activation_type=ExtendedQuantType.QBFP, weight_type=ExtendedQuantType.QBFP)
    assert to_quant_config(QuantizationConfig(**legacy)).int_block_dot_operands_only
    config = to_quant_config(QuantizationConfig(**legacy, extra_options={"BlockDotOperandsOnly": False}))
    assert not config.int_block_dot_operands_only and not config.fp_block_dot_operands_only


def test_dot_operands_only_keeps_the_vit_closer_with_fewer_nodes():
    """MXINT8 on the small ViT, 8 held-out images: the every-op placement rounds the residual stream,
    the softmax input and the GELU input again at every block (measured cosine error 3.3e-4 → 1.9e-4
    with dot operands only, 241 → 152 nodes)."""
    model = small_vit()
    calib, held = images(4, 1), images(8, 2)
    ref = _outputs(model, held)
    every = _plan(model, calib, "MXINT8", int_block_dot_operands_only=False).model
    dots = _plan(model, calib, "MXINT8").model
    every_err, dots_err = _cosine_error(ref, _outputs(every, held)), _cosine_error(ref, _outputs(dots, held))
    assert dots_err < 0.8 * every_err, (dots_err, every_err)
    assert len(dots.graph.node) < 0.75 * len(every.graph.node)
