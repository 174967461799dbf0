"""Numerics by structure (graph/structure.py): written-out normalizations and activations are found by
their dataflow and kept float inside, one rule for every format.

The synthetic blocks (tests/_structure_graphs.py) put each spelling between two MatMuls; the
LayerNorm's input carries a common mode of 12 (as residual streams do), which is what breaks
E[x²] − E[x]² when E[x²] is rounded: before the rule, BF16 output cosine 0.50 and MX9 NaN
(a negative variance under the square root).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from _structure_graphs import PATTERNS, pattern_data, pattern_model
from onnxptq.analysis.metrics import cosine_similarity
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.graph.structure import find_regions

KINDS = {
    "layernorm_ex2": "LayerNorm/GroupNorm (E[x²] − E[x]²)",
    "rmsnorm": "RMSNorm",
    "gelu_tanh": "GELU (tanh)",
    "gelu_erf": "GELU (erf)",
    "silu": "SiLU/Swish",
}
#: nodes each spelling writes (the builders in _structure_graphs.py), all inside one region
SIZES = {"layernorm_ex2": 11, "rmsnorm": 7, "gelu_tanh": 9, "gelu_erf": 5, "silu": 2}


def _held_out_cosine(model: onnx.ModelProto, quantized: onnx.ModelProto) -> float:
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(quantized.SerializeToString())
    feeds = pattern_data(6, seed=11)
    return float(np.min([cosine_similarity(ref.run(None, f)[0], got.run(None, f)[0]) for f in feeds]))


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_each_spelling_is_one_region_from_its_input_to_its_output(pattern):
    model = pattern_model(pattern, offset=12.0)
    regions = find_regions(model)
    assert len(regions) == 1, regions
    region = regions[0]
    assert region.kind == KINDS[pattern]
    producer = {o: n for n in model.graph.node for o in n.output}
    assert producer[region.x].op_type == "Add"  # the first layer's bias Add: the region's input
    assert [n.name for n in model.graph.node if region.y in n.input] == ["MatMul_out"]  # the region's output
    assert len(region.nodes) == SIZES[pattern]
    assert region.x not in region.interior and region.y not in region.interior


@pytest.mark.parametrize("preset", ["BF16", "A8W8", "MX9"])
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_quantized_patterns_keep_output_cosine(pattern, preset):
    model = pattern_model(pattern, offset=12.0)
    result = quantize(model, resolve_config(preset).replace(repair=False), pattern_data(16))
    region = find_regions(model)[0]
    # Only the region's input and output are quantized; everything inside is float, with the reason.
    assert not set(region.interior) & set(result.plan.tensors)
    reasons = {result.plan.float_tensors[t] for t in region.interior if t in result.plan.float_tensors}
    assert reasons and all("written-out" in r or "GELU inside" in r for r in reasons), reasons  # erf-GELU: the older transformer rule's words
    assert region.y in result.plan.tensors
    assert _held_out_cosine(model, result.model) >= 0.99
    assert result.repair is None  # the rule did it, not the repair


def test_without_the_rule_the_ex2_layernorm_breaks_in_bf16(monkeypatch):
    """The failure the rule exists for (so the test above cannot pass by accident)."""
    import onnxptq.pipeline.plan.rules as plan_module

    monkeypatch.setattr(plan_module, "structure_float_tensors", lambda model: {})
    model = pattern_model("layernorm_ex2", offset=12.0)
    result = quantize(model, resolve_config("BF16").replace(repair=False), pattern_data(16))
    assert not _held_out_cosine(model, result.model) >= 0.9  # 0.50 when measured (NaN for MX9)


def test_a_convolution_chain_has_no_region():
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "x"], ["y"], name="residual")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    assert find_regions(helper.make_model(graph)) == []


def test_a_tensor_escaping_the_region_stops_it():
    """A Sigmoid output also read outside (with another input: a second branch) is no activation's inside."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul"),
             helper.make_node("Add", ["s", "other"], ["z"], name="add")]
    vi = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 8]) for n in ("x", "other", "y", "z")]
    graph = helper.make_graph(nodes, "g", vi[:2], vi[2:])
    assert find_regions(helper.make_model(graph)) == []


def _region_kinds(build) -> list[tuple[str, str, str]]:
    """Regions of ``x → build(b, x) → y`` (a [2, 8, 4, 4] input)."""
    from _structure_graphs import _B

    b = _B()
    y = build(b, "x")
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8, 4, 4])],
                              [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None)], b.inits)
    return [(r.kind, r.x, r.y) for r in find_regions(helper.make_model(graph))], y


def test_more_spellings_are_regions():
    def groupnorm(b, x):  # Reshape(N, G, -1), mean/variance, Reshape back, · γ + β
        r = b.op("Reshape", x, b.ints([2, 4, -1]))
        m = b.op("ReduceMean", r, axes=[-1], keepdims=1)
        d = b.op("Sub", r, m)
        s = b.op("Sqrt", b.op("Add", b.op("ReduceMean", b.op("Pow", d, b.const(2.0)), axes=[-1], keepdims=1), b.const(1e-5)))
        back = b.op("Reshape", b.op("Div", d, s), b.ints([2, 8, 4, 4]))
        return b.op("Add", b.op("Mul", back, b.const(np.ones((8, 1, 1)))), b.const(np.zeros((8, 1, 1))))

    def mish(b, x):  # x · tanh(log(1 + exp(x)))
        return b.op("Mul", x, b.op("Tanh", b.op("Log", b.op("Add", b.op("Exp", x), b.const(1.0)))))

    def softmax(b, x):
        e = b.op("Exp", b.op("Sub", x, b.op("ReduceMax", x, axes=[-1], keepdims=1)))
        return b.op("Div", e, b.op("ReduceSum", e, b.ints([-1]), keepdims=1))

    def hardswish(b, x):
        return b.op("Mul", x, b.op("HardSigmoid", x, alpha=1 / 6, beta=0.5))

    regions, y = _region_kinds(groupnorm)
    assert len(regions) == 1 and regions[0][0] == "LayerNorm/GroupNorm (mean/variance)" and regions[0][2] == y
    for build, kind in ((mish, "Mish"), (softmax, "softmax"), (hardswish, "HardSwish")):
        regions, y = _region_kinds(build)
        assert regions == [(kind, "x", y)], (build.__name__, regions)


def test_the_spellings_fuzz17_drew_are_regions():
    """bench/export_fuzz.py's blocks of fuzz17, as torch writes them: each one region from its input."""
    def silu_div_exp(b, x):  # x / (1 + exp(-x))
        return b.op("Div", x, b.op("Add", b.op("Exp", b.op("Neg", x)), b.const(1.0)))

    def gelu_erf_folded(b, x):  # x · (½ + ½·erf(x · 0.7071…)): 1/√2 folded into a Mul, ½ onto each term
        return b.op("Mul", x, b.op("Add", b.op("Mul", b.op("Erf", b.op("Mul", x, b.const(0.7071067811865476))), b.const(0.5)),
                                   b.const(0.5)))

    def rmsnorm_pow_sum(b, x):  # x · 1/√(Σ x² · 1/D + ε) · γ
        ms = b.op("Mul", b.op("ReduceSum", b.op("Pow", x, b.const(2.0)), b.ints([-1]), keepdims=1), b.const(0.25))
        return b.op("Mul", b.op("Mul", x, b.op("Reciprocal", b.op("Sqrt", b.op("Add", ms, b.const(1e-6))))), b.const(np.ones(4)))

    def groupnorm_5d(b, x):  # moments over (C/G, H, W) of a 5-D view, back, · γ + β
        g = b.op("Reshape", x, b.ints([2, 2, 4, 4, 4]))
        m = b.op("ReduceMean", g, b.ints([2, 3, 4]), keepdims=1)
        d = b.op("Sub", g, m)
        v = b.op("ReduceMean", b.op("Pow", d, b.const(2.0)), b.ints([2, 3, 4]), keepdims=1)
        back = b.op("Reshape", b.op("Div", d, b.op("Sqrt", b.op("Add", v, b.const(1e-5)))), b.ints([2, 8, 4, 4]))
        return b.op("Add", b.op("Mul", back, b.const(np.ones((8, 1, 1)))), b.const(np.zeros((8, 1, 1))))

    for build, kind in ((silu_div_exp, "gated activation"), (gelu_erf_folded, "GELU (erf)"), (rmsnorm_pow_sum, "RMSNorm"),
                        (groupnorm_5d, "LayerNorm/GroupNorm (mean/variance)")):
        regions, y = _region_kinds(build)
        assert regions == [(kind, "x", y)], (build.__name__, regions)


def _in_a_branch(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s network inside an ``If``'s then-branch (its weights read from the main graph, as openWakeWord's
    exported classifiers are), the else-branch passing ``x`` through; the condition is computed from ``x``."""
    g = model.graph
    shape = [d.dim_param or d.dim_value for d in g.output[0].type.tensor_type.shape.dim]
    then = helper.make_graph(list(g.node), "then", [], [helper.make_tensor_value_info("out", onnx.TensorProto.FLOAT, shape)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["passed"])], "else", [],
                              [helper.make_tensor_value_info("passed", onnx.TensorProto.FLOAT, shape)])
    nodes = [helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0, name="peak"),
             helper.make_node("Constant", [], ["low"], value=helper.make_tensor("low", onnx.TensorProto.FLOAT, [], [-1e30])),
             helper.make_node("Greater", ["peak", "low"], ["cond"], name="cond"),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="branch")]
    wrapped = helper.make_graph(nodes, "wrapped", list(g.input),
                                [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)], list(g.initializer))
    out = helper.make_model(wrapped, opset_imports=list(model.opset_import))
    out.ir_version = model.ir_version
    onnx.checker.check_model(out)
    return out


def test_a_spelling_inside_an_if_branch_is_a_region_and_stays_float_inside():
    """The rule reaches subgraphs (an exporter that wraps the network in an ``If``: openWakeWord's classifiers hold
    two mean/variance LayerNorms in their then-branch, quantized inside before; bench/RESULTS.md, quantcpu16)."""
    model = _in_a_branch(pattern_model("layernorm_ex2", offset=12.0))
    regions = find_regions(model)
    assert [r.kind for r in regions] == [KINDS["layernorm_ex2"]]
    result = quantize(model, resolve_config("BF16").replace(repair=False), pattern_data(16))
    assert not set(regions[0].interior) & set(result.plan.tensors)
    ref = ort.InferenceSession(model.SerializeToString())
    got = ort.InferenceSession(result.model.SerializeToString())
    cosines = [cosine_similarity(ref.run(None, f)[0], got.run(None, f)[0]) for f in pattern_data(6, seed=11)]
    assert min(cosines) >= 0.99  # 0.50-like when E[x²] is rounded inside the branch
