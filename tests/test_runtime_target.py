"""Target runtime (issue 16): the CPU placement runs as integer kernels in onnxruntime, the NPU one is kept.

Structural checks only (what onnxruntime's optimised graph contains, what the plan decides);
latency lives in bench/latency.py. Data: rendered PP-OCR lines (testkit.ocr).
"""

from __future__ import annotations

import dataclasses
import numpy as np
import onnx
import pytest

from onnxptq import get_preset, quantize
from onnxptq.analysis.runtime_view import runtime_kernels, summary
from onnxptq.config.schema import ConfigError
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization
from testkit import ocr
from testkit.models import model_path

MATRIX_OPS = ("Conv", "MatMul", "Gemm")


def _plan(name: str, runtime: str):
    config = get_preset("A8W8").replace(runtime=runtime)
    prepared = prepare_for_quantization(onnx.load(model_path(name)), config)
    return prepared, make_plan(prepared, config)


def _quantized(name: str, lines: int, runtime: str = "cpu") -> onnx.ModelProto:
    return _quantize(name, lines, runtime).model


def _quantize(name: str, lines: int, runtime: str = "cpu"):
    # repair off: these tests read the CPU plan's placement; a floor broken on 16 lines (which it is
    # or is not by a read or two, with the CPU's kernels) would step nodes up to 16-bit float kernels
    config = get_preset("A8W8").replace(runtime=runtime, repair=False)
    config = config.replace(calibration=dataclasses.replace(config.calibration, progress=False))
    if name == "rec":
        images = ocr.render_lines(lines, seed=1, characters=ocr.load_characters(onnx.load(model_path("rec"))))[0]
    else:
        images = ocr.render_cls(lines, seed=1)[0]
    feeds = [{"x": images[i:i + 8]} for i in range(0, lines, 8)]
    return quantize(model_path(name), config, feeds, eval_samples=0)


def _float_conv_kinds(model: onnx.ModelProto, plan) -> dict[str, str]:
    """{Conv name: "depthwise" | "stem"} for the Convs the plan leaves float by the CPU cost rules."""
    kinds = {}
    for node in model.graph.node:
        reason = plan.skipped_nodes.get(node.name, "")
        if node.op_type == "Conv" and reason.startswith("runtime cpu: depthwise"):
            kinds[node.name] = "depthwise"
        elif node.op_type == "Conv" and "image stem" in reason:
            kinds[node.name] = "stem"
    return kinds


def test_unknown_runtime_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="cpu, npu"):
        get_preset("A8W8").replace(runtime="gpu")


def test_cpu_plan_uses_uint8_scalar_activations_and_skips_ops_without_integer_kernels():
    prepared, plan = _plan("cls", "cpu")
    acts = plan.activations()
    assert acts and all(t.quant.format == "uint8" and not t.quant.per_channel for t in acts)
    op_of = {n.name: n.op_type for n in prepared.graph.node}
    hardswish = [n for n, op in op_of.items() if op == "HardSwish"]
    assert hardswish and all("no integer HardSwish kernel" in plan.skipped_nodes[n] for n in hardswish)
    # Every Conv output read only by a HardSwish: range cut at -3, where HardSwish saturates.
    readers = {}
    for node in prepared.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.op_type)
    cut = [t for t in acts if readers.get(t.name) == ["HardSwish"]]
    assert cut and all(t.limits == (-3.0, None) for t in cut)


def test_npu_plan_keeps_the_signed_per_channel_depthwise_placement():
    _, plan = _plan("cls", "npu")
    acts = plan.activations()
    assert {t.quant.format for t in acts} == {"int8"}
    assert any(t.quant.per_channel for t in acts), "depthwise inputs per channel"
    assert "HardSwish" in {n.split("_")[0] for n in plan.nodes} or len(plan.nodes) > len(_plan("cls", "cpu")[1].nodes)


def test_compat_target_runtime_key():
    from onnxptq.compat import get_default_config
    from onnxptq.compat.options import to_quant_config

    config = get_default_config("A8W8")
    assert to_quant_config(config).runtime == "cpu"
    config.extra_options["TargetRuntime"] = "npu"
    assert to_quant_config(config).runtime == "npu"
    config.extra_options["TargetRuntime"] = "NPU"
    with pytest.raises(ConfigError, match="TargetRuntime"):
        to_quant_config(config)


def test_cpu_plan_leaves_depthwise_and_stem_convs_float_and_npu_quantizes_them():
    """onnxruntime's CPU provider runs depthwise and image-stem convolutions faster in float
    (runtime.float_conv_reason); the NPU placement quantizes every Conv, and an explicit op-type
    choice is the user's and quantizes them on the CPU target too."""
    prepared, plan = _plan("cls", "cpu")
    kinds = _float_conv_kinds(prepared, plan)
    groups = {n.name: next((a.i for a in n.attribute if a.name == "group"), 1) for n in prepared.graph.node if n.op_type == "Conv"}
    depthwise = [n for n, g in groups.items() if g > 1]
    # 8 of the 11 depthwise Convs read or feed a float op; the other 3 sit between integer ops
    # (onnxruntime would fuse them anyway) and keep our per-channel weights.
    assert set(n for n, k in kinds.items() if k == "depthwise") < set(depthwise) and len(depthwise) - 3 == 8
    assert list(kinds.values()).count("depthwise") == 8
    assert list(kinds.values()).count("stem") == 1, "the 3-channel stem, read by a float HardSwish"
    assert len(groups) - len(kinds) == 44 and all(n in plan.nodes for n in groups if n not in kinds)
    _, npu = _plan("cls", "npu")
    assert all(n in npu.nodes for n in groups)
    config = get_preset("A8W8").replace(runtime="cpu", op_types=["Conv"])
    explicit = make_plan(prepare_for_quantization(onnx.load(model_path("cls")), config), config)
    assert all(n in explicit.nodes for n in groups)


@pytest.mark.slow
def test_every_matrix_op_of_rec_a8w8_runs_as_an_integer_kernel():
    """Every Conv/MatMul the CPU plan quantizes runs as an integer kernel; the float ones are
    exactly the depthwise convolutions and the stem the plan leaves float for speed."""
    result = _quantize("rec", 16)
    float_convs = _float_conv_kinds(result.model, result.plan)
    assert sorted(float_convs.values()).count("stem") == 1 and len(float_convs) == 15
    rows = [r for r in runtime_kernels(result.model) if r.op_type in MATRIX_OPS]
    assert len([r for r in rows if r.op_type == "Conv"]) == 38
    assert len([r for r in rows if r.op_type == "MatMul"]) == 13
    floats = sorted(r.name for r in rows if r.kind != "integer")
    assert floats == sorted(float_convs), f"float matrix ops in onnxruntime's optimised graph: {floats}"
    assert {r.kernel for r in rows if r.kind == "integer"} <= {"QLinearConv", "QLinearMatMul", "MatMulIntegerToFloat", "QGemm"}


@pytest.mark.slow
def test_inspect_runtime_lists_cls_nodes(tmp_path, capsys):
    from onnxptq.cli import main

    path = tmp_path / "cls_a8w8.onnx"
    result = _quantize("cls", 16)
    onnx.save(result.model, path)
    assert main(["inspect", str(path), "--runtime"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    nodes = [line for line in lines if len(line) >= 2 and line[1] in ("integer", "float", "removed")]
    convs = {line[-1]: line[1:3] for line in nodes if line[0] == "Conv"}
    assert len(convs) == 53
    # The plan's integer Convs run as QLinearConv, the depthwise and stem Convs it leaves float run
    # float (none of them sits between a DequantizeLinear and a QuantizeLinear, where onnxruntime
    # would quantize the weight itself).
    selected = [n for n in convs if n in result.plan.nodes]
    assert len(selected) == 44 and all(convs[n] == ["integer", "QLinearConv"] for n in selected)
    left = [n for n in convs if n not in result.plan.nodes]
    floats = [n for n in left if convs[n][0] == "float"]
    assert len(left) == 9 and floats == left
    counts = next(line for line in lines if line[:1] == ["Conv"] and len(line) == 4 and line[1].isdigit())
    assert counts == ["Conv", str(53 - len(floats)), str(len(floats)), "0"], "per-op-type counts: integer / float / removed"
    hardswish = [line for line in nodes if line[0] == "HardSwish"]
    assert hardswish and all(line[1] == "float" for line in hardswish), "no integer HardSwish kernel in onnxruntime"


@pytest.mark.slow
def test_npu_placement_leaves_depthwise_convs_float_on_cpu():
    """The listing tells the two placements apart: per-channel depthwise inputs block QLinearConv."""
    counts = summary(runtime_kernels(_quantized("cls", 16, runtime="npu")))
    assert counts["Conv"].get("float", 0) > 0
    np.testing.assert_equal(sum(counts["Conv"].values()), 53)


def _chain(nodes, inits) -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))


def test_cpu_plan_drops_cheap_ops_with_no_integer_producer_and_stems_with_no_integer_reader():
    """An Add fed by a float op and a stem read only by float ops get no quantizers on the CPU
    target (the Add's output is quantized once for an integer reader); the same Add behind an
    integer Conv, and everything on the NPU target, keep them."""
    from onnx import helper

    rng = np.random.default_rng(0)
    inits = {"W0": rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "d": np.array(0.5, np.float32),
             "Wd": rng.normal(size=(8, 1, 3, 3)).astype(np.float32), "Wp": rng.normal(size=(4, 8, 1, 1)).astype(np.float32)}
    stem = helper.make_node("Conv", ["x", "W0"], ["s"], name="stem", pads=[1, 1, 1, 1])
    act = helper.make_node("HardSwish", ["s"], ["h"], name="hswish")
    shift = helper.make_node("Add", ["h", "d"], ["a"], name="shift")
    dw = helper.make_node("Conv", ["a", "Wd"], ["dwo"], name="dw", group=8, pads=[1, 1, 1, 1])
    pw = helper.make_node("Conv", ["dwo", "Wp"], ["y"], name="pw")
    model = _chain([stem, act, shift, dw, pw], inits)
    cpu = get_preset("A8W8").replace(runtime="cpu")
    plan = make_plan(model, cpu)
    assert plan.nodes == ["pw"]
    assert "image stem" in plan.skipped_nodes["stem"] and "no integer producer" in plan.skipped_nodes["shift"]
    assert "depthwise" in plan.skipped_nodes["dw"]
    assert {"s", "h", "a"}.isdisjoint(plan.tensors)
    assert set(make_plan(model, cpu.replace(runtime="npu")).nodes) >= {"stem", "shift", "dw", "pw"}
    # In front of the integer pointwise Conv the float shift's output is quantized once, for it.
    model = _chain([stem, act, helper.make_node("Add", ["h", "d"], ["a"], name="shift"),
                    helper.make_node("Conv", ["a", "Wp"], ["y"], name="pw")], {k: v for k, v in inits.items() if k != "Wd"})
    plan = make_plan(model, cpu)
    assert plan.nodes == ["pw"] and "a" in plan.tensors and "h" not in plan.tensors
    # Behind an integer Conv the Add stays integer (QLinearAdd on the Conv's uint8 output).
    model = _chain([helper.make_node("Conv", ["x", "W0"], ["s"], name="conv", pads=[1, 1, 1, 1]),
                    helper.make_node("Conv", ["s", "Wp"], ["p"], name="pw"),
                    helper.make_node("Add", ["p", "d"], ["a"], name="shift"),
                    helper.make_node("Conv", ["a", "W2"], ["y"], name="out")],
                   {"W0": inits["W0"], "Wp": inits["Wp"], "d": inits["d"], "W2": rng.normal(size=(4, 4, 1, 1)).astype(np.float32)})
    assert make_plan(model, cpu).nodes == ["conv", "pw", "shift", "out"]
