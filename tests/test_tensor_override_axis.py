"""A per-channel integer override of a weight the plan kept float gets the channel axis its reader implies.

Why: ``_apply_tensor_overrides`` planned such a weight with no axis, so ``TensorQuant("int8",
per_channel=True)`` on an excluded Conv's weight made one scale for the whole tensor (rnnweights' note);
the plan gives a Conv weight axis 0, a 2-D MatMul weight its last axis, Gemm's by ``transB``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq import get_preset
from onnxptq.config.schema import ConfigError, TensorQuant
from onnxptq.pipeline.plan.assign import make_plan


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "cw"),
             numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "mw"),
             numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "gw"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape")]
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
             helper.make_node("Reshape", ["p", "shape"], ["f"], name="flat"),
             helper.make_node("Concat", ["f", "f"], ["ff"], name="cat", axis=1),
             helper.make_node("MatMul", ["ff", "mw"], ["m"], name="matmul"),
             helper.make_node("Gemm", ["m", "gw"], ["y"], name="gemm", transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])], inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_override_of_a_float_kept_weight_takes_its_readers_channel_axis():
    int8_pc = TensorQuant("int8", symmetric=True, per_channel=True)
    cfg = get_preset("A8W8").replace(nodes_to_exclude=("conv", "matmul", "gemm"),
                                     tensor_overrides={"cw": int8_pc, "mw": int8_pc, "gw": int8_pc})
    plan = make_plan(_model(), cfg)
    assert (plan.tensors["cw"].axis, plan.tensors["mw"].axis, plan.tensors["gw"].axis) == (0, 1, 0)


def test_the_users_axis_wins_and_per_tensor_stays_per_tensor():
    cfg = get_preset("A8W8").replace(nodes_to_exclude=("conv", "matmul"), tensor_overrides={
        "cw": TensorQuant("int8", symmetric=True, per_channel=True, axis=-3),
        "mw": TensorQuant("int8", symmetric=True, per_channel=False)})
    plan = make_plan(_model(), cfg)
    assert plan.tensors["cw"].axis == 1  # -3 of rank 4
    assert plan.tensors["mw"].axis is None


def test_an_axis_out_of_range_is_refused_naming_the_tensor():
    cfg = get_preset("A8W8").replace(nodes_to_exclude=("matmul",), tensor_overrides={
        "mw": TensorQuant("int8", symmetric=True, per_channel=True, axis=2)})
    with pytest.raises(ConfigError, match=r"tensor_overrides\['mw'\]: axis 2 is out of range for a weight of rank 2"):
        make_plan(_model(), cfg)



def test_another_axis_for_a_weight_the_plan_has_per_channel_is_refused_naming_it():
    """The plan quantizes the Conv's weight per output channel (axis 0) for an integer Conv; a user's axis 1
    (Quark's TensorQuantOverrides ``axis``) was dropped silently, and honoured it makes onnxruntime's
    QLinearConv fail at run time ("filter scale shape invalid"): refused, naming the tensor and reader."""
    cfg = get_preset("A8W8").replace(tensor_overrides={"cw": TensorQuant("int8", symmetric=True, per_channel=True, axis=1)})
    with pytest.raises(ConfigError, match=r"tensor_overrides\['cw'\]: axis 1 is not the weight's output-channel axis 0.*Conv 'conv'"):
        make_plan(_model(), cfg)
    for axis in (None, 0, -4):  # the plan's own axis, named or not, stays
        same = get_preset("A8W8").replace(tensor_overrides={"cw": TensorQuant("int8", symmetric=True, per_channel=True, axis=axis)})
        assert make_plan(_model(), same).tensors["cw"].axis == 0
