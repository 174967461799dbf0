"""A spatial ReduceMean is planned as the GlobalAveragePool it is (graph/passes/spatial_means.py).

torch's default exporter (dynamo=True) writes a squeeze-excite block's ``adaptive_avg_pool2d(x, 1)``
as ``ReduceMean(axes=[2, 3], keepdims=1)`` and a classifier head's ``x.mean((2, 3))`` as
``ReduceMean(keepdims=0)``, where TorchScript writes ``GlobalAveragePool``. The built nets below are
the two spellings of the same weights; the CPU A8W8 plan must quantize the same nodes for both, and
onnxruntime must run the pools as its integer kernel. The must-nots: a norm's last-axis mean of a
``[batch, tokens, features]`` tensor, a mean over other axes, a mean of a tensor whose layout no op
defines (a graph input).
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes._common import run_passes
from onnxptq.graph.passes.shape_inference import shape_inference_pass
from onnxptq.graph.passes.spatial_means import SpatialMeanToGlobalPoolPass
from onnxptq.pipeline.plan import make_plan
from onnxptq.pipeline.prepare import prepare_for_quantization

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


WEIGHTS = [_w("w0", 16, 8, 3, 3), _w("b0", 16), _w("ws1", 4, 16, 1, 1), _w("bs1", 4), _w("ws2", 16, 4, 1, 1),
           _w("bs2", 16), _w("wp", 32, 16, 1, 1), _w("bp", 32), _w("wf", 10, 32), _w("bf", 10)]


def _mean(x: str, y: str, axes: list[int], keep: int, opset: int, name: str) -> list[onnx.NodeProto]:
    """A ReduceMean as the exporter writes it at ``opset``: axes an attribute before 18, an input from 18."""
    if opset < 18:
        return [helper.make_node("ReduceMean", [x], [y], axes=axes, keepdims=keep, name=name)]
    axes_name = f"{name}_axes"
    return [helper.make_node("Constant", [], [axes_name], value=numpy_helper.from_array(np.array(axes, np.int64))),
            helper.make_node("ReduceMean", [x, axes_name], [y], keepdims=keep, name=name)]


def se_net(spelling: str, opset: int = 18, axes=(2, 3)) -> onnx.ModelProto:
    """Conv → Relu → squeeze-excite (pool → Conv → Relu → Conv → Sigmoid → Mul) → 1×1 Conv → Relu →
    pooled head → Gemm; ``spelling`` "dynamo" (ReduceMean) or "torchscript" (GlobalAveragePool)."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("Relu", ["c0"], ["h"], name="relu0")]
    if spelling == "dynamo":
        nodes += _mean("h", "pooled", list(axes), 1, opset, "se_pool")
    else:
        nodes.append(helper.make_node("GlobalAveragePool", ["h"], ["pooled"], name="se_pool"))
    nodes += [helper.make_node("Conv", ["pooled", "ws1", "bs1"], ["s1"], name="se_a"),
              helper.make_node("Relu", ["s1"], ["r1"], name="se_relu"),
              helper.make_node("Conv", ["r1", "ws2", "bs2"], ["s2"], name="se_b"),
              helper.make_node("Sigmoid", ["s2"], ["gate"], name="se_gate"),
              helper.make_node("Mul", ["h", "gate"], ["se"], name="se_mul"),
              helper.make_node("Conv", ["se", "wp", "bp"], ["cp"], name="conv_p"),
              helper.make_node("Relu", ["cp"], ["hp"], name="relu_p")]
    if spelling == "dynamo":
        nodes += _mean("hp", "feat", [-2, -1], 0, opset, "head_pool")
    else:
        nodes += [helper.make_node("GlobalAveragePool", ["hp"], ["gp"], name="head_pool"),
                  helper.make_node("Flatten", ["gp"], ["feat"], axis=1, name="head_flatten")]
    nodes.append(helper.make_node("Gemm", ["feat", "wf", "bf"], ["y"], transB=1, name="fc"))
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])], WEIGHTS)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 8, 16, 16)).astype(np.float32)} for _ in range(n)]


def _run(model: onnx.ModelProto, feed) -> np.ndarray:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]


def _ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node)


@pytest.mark.parametrize("opset,axes", [(17, (2, 3)), (18, (-2, -1))])
def test_rewrite_is_the_same_mean(opset, axes):
    model = se_net("dynamo", opset, axes)
    out = run_passes(model, shape_inference_pass(), SpatialMeanToGlobalPoolPass())
    ops = _ops(out)
    assert ops["ReduceMean"] == 0 and ops["GlobalAveragePool"] == 2 and ops["Flatten"] == 1
    pools = {n.name for n in out.graph.node if n.op_type == "GlobalAveragePool"}
    assert pools == {"se_pool", "head_pool"}  # the exporter's node names, for overrides and reports
    assert [o.name for o in out.graph.output] == ["y"]
    onnx.checker.check_model(out, full_check=True)
    for feed in _feeds(3, 1):
        # the same mean; only the order of the additions may differ
        np.testing.assert_allclose(_run(out, feed), _run(model, feed), rtol=1e-5, atol=1e-6)


def test_dynamo_spelling_is_planned_as_torchscript_spelling():
    config = onnxptq.get_preset("A8W8")
    plans = {s: make_plan(prepare_for_quantization(se_net(s), config), config) for s in ("dynamo", "torchscript")}
    dyn, ts = plans["dynamo"], plans["torchscript"]
    # main left both pools float ("onnxruntime has no integer ReduceMean kernel")
    assert {"se_pool", "head_pool"} <= set(dyn.nodes), dyn.skipped_nodes
    assert sorted(dyn.nodes) == sorted(ts.nodes)
    # the same quantized tensors; only the head pool's output (before the Flatten) is named anew
    assert set(dyn.tensors) ^ set(ts.tensors) == {"feat_pooled", "gp"}


def test_onnxruntime_runs_the_pools_on_integers(tmp_path):
    model = se_net("dynamo")
    out = tmp_path / "q.onnx"
    onnxptq.quantize(model, "A8W8", data=_feeds(24, 1), output=str(out))
    opt = tmp_path / "opt.onnx"
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(opt)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
    ops = _ops(onnx.load(str(opt)))
    assert ops["QLinearGlobalAveragePool"] == 2 and ops["ReduceMean"] == 0, ops


def _flatten_then_mean() -> onnx.ModelProto:
    """``x.flatten(2).mean(-1)`` of a Conv → Relu output: a spatial mean of a [N, C, H·W] tensor."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("Reshape", ["r0", "shape"], ["flat"], name="flatten2"),
             helper.make_node("ReduceMean", ["flat"], ["y"], axes=[-1], keepdims=0, name="mean")]
    inits = [WEIGHTS[0], WEIGHTS[1], numpy_helper.from_array(np.array([0, 0, -1], np.int64), "shape")]
    graph = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _must_nots() -> onnx.ModelProto:
    """Three ReduceMeans the pass must leave alone: a norm's last-axis mean of a MatMul's [1, T, D]
    output, a Conv output's mean over channels and width, and a spatial mean of a graph input."""
    nodes = [helper.make_node("MatMul", ["t", "wt"], ["m"], name="proj"),
             helper.make_node("ReduceMean", ["m"], ["mu"], axes=[-1], keepdims=1, name="norm_mean"),
             helper.make_node("Sub", ["m", "mu"], ["y1"], name="centre"),
             helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
             helper.make_node("ReduceMean", ["c0"], ["y2"], axes=[1, 3], keepdims=1, name="other_axes"),
             helper.make_node("ReduceMean", ["x"], ["y3"], axes=[2, 3], keepdims=1, name="input_mean")]
    inits = [WEIGHTS[0], WEIGHTS[1], _w("wt", 12, 12)]
    graph = helper.make_graph(
        nodes, "n", [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 6, 12]),
                     helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y2", "y3")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_flattened_spatial_mean_is_rewritten_and_others_are_not():
    model = _flatten_then_mean()
    out = run_passes(model, shape_inference_pass(), SpatialMeanToGlobalPoolPass())
    assert _ops(out)["ReduceMean"] == 0 and _ops(out)["GlobalAveragePool"] == 1
    feed = {"x": np.random.default_rng(2).standard_normal((1, 8, 16, 16)).astype(np.float32)}
    np.testing.assert_allclose(_run(out, feed), _run(model, feed), rtol=1e-5, atol=1e-6)
    kept = run_passes(_must_nots(), shape_inference_pass(), SpatialMeanToGlobalPoolPass())
    assert sorted(n.name for n in kept.graph.node if n.op_type == "ReduceMean") == ["input_mean", "norm_mean", "other_axes"]


def test_the_rewrite_is_the_users_choice_and_the_reference_key_sets_it():
    from onnxptq.compat import QuantizationConfig
    from onnxptq.compat.options import to_quant_config

    model = se_net("dynamo")
    on = prepare_for_quantization(model, onnxptq.get_preset("A8W8"))
    off = prepare_for_quantization(model, onnxptq.get_preset("A8W8").replace(pool_spatial_means=False))
    assert _ops(on)["ReduceMean"] == 0 and _ops(on)["GlobalAveragePool"] == 2
    assert _ops(off)["ReduceMean"] == 2 and _ops(off)["GlobalAveragePool"] == 0
    # the reference tool's key: absent, ours (on); False, as written
    assert to_quant_config(QuantizationConfig()).pool_spatial_means is True
    keep = QuantizationConfig(extra_options={"ConvertReduceMeanToGlobalAvgPool": False})
    assert to_quant_config(keep).pool_spatial_means is False
