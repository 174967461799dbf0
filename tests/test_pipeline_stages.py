"""Unit tests of the plan, solve and emit stages on small hand-built graphs.

The end-to-end tests show the stages work together; these pin each stage's own contract: which
tensors the plan picks under each granularity and exclusion rule, that solve turns known
statistics into hand-computed scales, and what emit writes, node by node.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.calibration.collectors import MinMaxCollector
from onnxptq.config.schema import QuantConfig, make_tensor_quant
from onnxptq.pipeline.emit import emit
from onnxptq.pipeline.plan import make_plan
from onnxptq.errors import ScaleOverflowError, UnknownNameError
from onnxptq.graph.check import check_config_names
from onnxptq.pipeline.solve import CalibrationMissingError, solve


def conv_relu_concat() -> onnx.ModelProto:
    """x → conv_a → relu_a ┐
       x → conv_b ─────────┴→ concat → y      (two 4-channel convolutions, one ReLU, one Concat)"""
    rng = np.random.default_rng(0)
    wa = rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32)
    wa[1] *= 20.0  # one output channel with a much larger range: per-tensor and per-channel scales differ
    wb = rng.normal(0, 1, (4, 3, 1, 1)).astype(np.float32)
    ba = rng.normal(0, 0.1, (4,)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "WA", "BA"], ["ca"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["ca"], ["ra"], name="relu_a"),
        helper.make_node("Conv", ["x", "WB"], ["cb"], name="conv_b"),
        helper.make_node("Concat", ["ra", "cb"], ["y"], name="concat", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "conv_relu_concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializer=[numpy_helper.from_array(a, n) for a, n in [(wa, "WA"), (ba, "BA"), (wb, "WB")]],
        value_info=[helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in ("ca", "ra", "cb")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def int8_config(per_channel: bool, **kw) -> QuantConfig:
    """Signed int8 everywhere, placed for an NPU-style target (the CPU target turns 8-bit
    activations into uint8 for onnxruntime's kernels; tests/test_runtime_target.py covers it)."""
    kw.setdefault("runtime", "npu")
    # The Concat closing this graph is a post-processing tail (float by default, see
    # test_range_guard.py); these tests check plan/solve/emit on it, so it is quantized here.
    kw.setdefault("quantize_postprocessing", True)
    return QuantConfig(
        activation=make_tensor_quant("int8", symmetric=True),
        weight=make_tensor_quant("int8", symmetric=True, per_channel=per_channel),
        **kw,
    )


# --- plan ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_channel", [False, True])
def test_plan_roles_axes_and_fused_relu(per_channel):
    plan = make_plan(conv_relu_concat(), int8_config(per_channel))
    roles = {name: t.role for name, t in plan.tensors.items()}
    assert roles == {"x": "activation", "WA": "weight", "BA": "bias", "WB": "weight", "ra": "activation",
                     "cb": "activation", "y": "activation"}
    # The ReLU is fused with the convolution before it: no quantizer between them.
    assert "ca" not in plan.tensors
    assert plan.tensors["WA"].axis == (0 if per_channel else None)
    assert plan.tensors["BA"].quant.format == "int32" and plan.tensors["BA"].bias_of == ("x", "WA")
    assert sorted(plan.tensors["x"].consumers) == ["conv_a", "conv_b"]
    assert plan.nodes == ["conv_a", "relu_a", "conv_b", "concat"]


def test_plan_exclusion_by_name_and_by_pattern():
    excluded = make_plan(conv_relu_concat(), int8_config(True, nodes_to_exclude=("conv_b",)))
    assert "conv_b" in excluded.skipped_nodes and "WB" not in excluded.tensors
    by_pattern = make_plan(conv_relu_concat(), int8_config(True, nodes_to_exclude=("^conv_.*",)))
    assert {"conv_a", "conv_b"} <= set(by_pattern.skipped_nodes)
    assert not {"WA", "WB", "BA"} & set(by_pattern.tensors)


def test_plan_op_type_restriction_and_unknown_node_names():
    only_conv = make_plan(conv_relu_concat(), int8_config(True, op_types=("Conv",)))
    assert "concat" in only_conv.skipped_nodes and "y" not in only_conv.tensors
    # Names are checked once, before any stage runs (graph.check.check_config_names), not by the plan.
    with pytest.raises(UnknownNameError, match="conv_c"):
        check_config_names(int8_config(True, nodes_to_quantize=("conv_c",)), conv_relu_concat())


def test_plan_does_not_change_the_model_it_reads():
    model = conv_relu_concat()
    before = model.SerializeToString()
    make_plan(model, int8_config(True))
    assert model.SerializeToString() == before


def test_plan_refuses_unnamed_nodes_and_prepare_names_them():
    from onnxptq.pipeline.prepare import prepare

    model = conv_relu_concat()
    model.graph.node[1].name = ""
    model.graph.node[3].name = "conv_a"
    before = model.SerializeToString()
    with pytest.raises(ValueError, match=r"node 1 \(Relu\) has no name"):
        make_plan(model, int8_config(True))
    assert model.SerializeToString() == before  # refused, not renamed behind the caller's back
    prepared = prepare(model, fold_constants=False, fuse=False)
    names = [n.name for n in prepared.graph.node]
    assert len(set(names)) == len(names) == 4 and all(names)
    assert make_plan(prepared, int8_config(True)).nodes == names


# --- solve --------------------------------------------------------------------------------------


def _minmax(lo: float, hi: float) -> MinMaxCollector:
    collector = MinMaxCollector()
    collector.update(np.array([lo, hi], np.float32))
    return collector


def test_solve_turns_known_ranges_into_hand_computed_scales():
    model = conv_relu_concat()
    plan = make_plan(model, int8_config(False))
    stats = {"x": _minmax(-2.0, 1.0), "ra": _minmax(0.0, 6.35), "cb": _minmax(-3.0, 2.0), "y": _minmax(-3.0, 6.35)}
    params = solve(model, plan, stats)
    # Symmetric int8 on [-127, 127]: scale = max|range| / 127, zero point 0.
    for name, bound in [("x", 2.0), ("ra", 6.35), ("cb", 3.0), ("y", 6.35)]:
        assert params[name].scale == pytest.approx(np.float32(bound / 127), rel=0, abs=0)
        assert int(params[name].zero_point) == 0
    wa = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "WA"))
    assert params["WA"].scale == np.float32(np.abs(wa).max() / 127)
    # int32 bias: input scale × weight scale.
    assert params["BA"].scale == pytest.approx(params["x"].scale * params["WA"].scale, rel=1e-7)


def test_solve_per_channel_weight_scales_follow_each_channel():
    model = conv_relu_concat()
    plan = make_plan(model, int8_config(True))
    stats = {n: _minmax(-1.0, 1.0) for n in ("x", "ra", "cb", "y")}
    params = solve(model, plan, stats)
    wa = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "WA"))
    expected = (np.abs(wa).reshape(4, -1).max(axis=1) / 127).astype(np.float32)
    np.testing.assert_array_equal(params["WA"].scale, expected)


def test_solve_names_an_activation_without_statistics():
    model = conv_relu_concat()
    with pytest.raises(CalibrationMissingError, match="'cb'"):
        solve(model, make_plan(model, int8_config(False)), {"x": _minmax(-1, 1), "ra": _minmax(0, 1), "y": _minmax(-1, 1)})


def _first_weight_set_to(value: float) -> onnx.ModelProto:
    """conv_relu_concat() with the first element of its weight WA replaced by ``value``."""
    model = conv_relu_concat()
    for init in model.graph.initializer:
        if init.name == "WA":
            values = numpy_helper.to_array(init).copy()
            values.flat[0] = np.float32(value)
            init.CopyFrom(numpy_helper.from_array(values, "WA"))
    return model


def test_solve_refuses_a_weight_at_the_float32_limit_naming_it():
    # found by the corrupted-file fuzzer: a flipped exponent bit makes one weight ~1e38 and the
    # scale math used to end in a bare ValueError from inside the integer format
    model = _first_weight_set_to(3.0e38)
    with pytest.raises(ScaleOverflowError, match=r"weight 'WA' .*float32 limit.*exclude its node"):
        solve(model, make_plan(model, int8_config(False)), {n: _minmax(-1.0, 1.0) for n in ("x", "ra", "cb", "y")})


def test_solve_refuses_an_int32_bias_scale_past_float32_naming_both_scales():
    # activation scale × weight scale can pass float32 while the float model stays finite (the
    # large weight meets small activations): refused with both tensors named, not an inf scale
    model = _first_weight_set_to(1.0e33)
    stats = {n: _minmax(-1.0, 1.0) for n in ("ra", "cb", "y")} | {"x": _minmax(-1.0e12, 1.0e12)}
    with pytest.raises(ScaleOverflowError, match=r"int32 bias 'BA'.*scale\('x'\) × scale\('WA'\)"):
        solve(model, make_plan(model, int8_config(False)), stats)


# --- emit ---------------------------------------------------------------------------------------


def test_emit_writes_qdq_pairs_node_by_node():
    model = conv_relu_concat()
    plan = make_plan(model, int8_config(False))
    params = solve(model, plan, {n: _minmax(-1.0, 1.0) for n in ("x", "ra", "cb", "y")})
    out = emit(model, plan, params, fold_weights=False, store_int_weights=True)
    nodes = {n.name: n for n in out.graph.node}
    producers = {o: n for n in out.graph.node for o in n.output}
    # Every quantized input of a selected node is read through a DequantizeLinear.
    for name in ("conv_a", "conv_b", "concat"):
        for tensor in nodes[name].input:
            assert producers[tensor].op_type == "DequantizeLinear", (name, tensor)
    # Activations are Q -> DQ of the float tensor; weights are stored as int8 behind a DQ.
    dq_x = producers[nodes["conv_a"].input[0]]
    assert producers[dq_x.input[0]].op_type == "QuantizeLinear" and producers[dq_x.input[0]].input[0] == "x"
    dq_w = producers[nodes["conv_a"].input[1]]
    weight = next(t for t in out.graph.initializer if t.name == dq_w.input[0])
    assert weight.data_type == TensorProto.INT8
    dq_b = producers[nodes["conv_a"].input[2]]
    assert next(t for t in out.graph.initializer if t.name == dq_b.input[0]).data_type == TensorProto.INT32
    # The graph output keeps its name and is the dequantized value of the Concat's result.
    assert out.graph.output[0].name == "y" and producers["y"].op_type == "DequantizeLinear"
    # The input model is untouched and the output runs.
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) == 0
    onnx.checker.check_model(out)
    import onnxruntime as ort

    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros((1, 3, 8, 8), np.float32)})


def test_the_plan_decides_each_tensors_calibration():
    """Calibration (which collector) and solve (how to read it) both take their options from the plan."""
    config = QuantConfig(activation=make_tensor_quant("uint8", symmetric=False, calibration="percentile", percentile=99.9),
                         weight=make_tensor_quant("int8", symmetric=True, per_channel=True), runtime="npu")
    plan = make_plan(conv_relu_concat(), config)
    x = plan.tensors["x"]
    assert x.collector_spec(512) == {"method": "percentile", "symmetric": False, "percentile": 99.9, "num_bins": 512}
    # x is read by a Conv (plan/peaks.py): its percentile keeps what 3+ calibration batches reach
    assert x.range_options() == {"method": "percentile", "symmetric": False, "percentile": 99.9, "recurring": True,
                                 "qmin": 0, "qmax": 255}
    per_channel = make_plan(conv_relu_concat(), int8_config(True)).tensors["x"]
    assert per_channel.collector_spec() == {"method": "minmax", "symmetric": True}


def test_the_guard_simulates_the_scale_solve_writes():
    # The range guard judges a tensor under the quantizer it will get: the same share root, range
    # limits and moving average as solve (it had a copy of the root walk without the last two).
    from onnxptq.pipeline.solve import shared_activation_params

    model = conv_relu_concat()
    plan = make_plan(model, int8_config(False))
    stats = {}
    for i, name in enumerate(("x", "ra", "cb", "y")):
        collector = MinMaxCollector()
        for lo, hi in ((-1.0 - i, 1.0), (-0.2, 3.0 + i), (-0.5, 0.5)):
            collector.update(np.array([lo, hi], np.float32))
        stats[name] = collector
    next(t for t in plan.tensors.values() if t.role == "activation").limits = (-0.5, None)
    for moving_average in (False, True):
        solved = solve(model, plan, stats, moving_average=moving_average)
        for name, tplan in plan.tensors.items():
            if tplan.role == "activation" and name in solved:
                simulated = shared_activation_params(plan, tplan, stats, moving_average=moving_average)
                assert simulated.scale == solved[name].scale and simulated.zero_point == solved[name].zero_point, name


def test_the_guards_params_key_moves_with_every_input_of_the_solve():
    # The range guard memoizes shared_activation_params by shared_activation_params_key across
    # repair's builds: a key that missed one input would hand a stale scale to the guard silently.
    import dataclasses

    from onnxptq.pipeline.solve import share_root, shared_activation_params_key

    model = conv_relu_concat()
    plan = make_plan(model, int8_config(False))
    stats = {}
    for i, name in enumerate(("x", "ra", "cb", "y")):
        collector = MinMaxCollector()
        collector.update(np.array([-1.0 - i, 2.0 + i], np.float32))
        stats[name] = collector
    t = next(t for t in plan.tensors.values() if t.role == "activation" and t.name in stats)
    root = share_root(plan, t)
    source = root if root.name in stats else t
    base = shared_activation_params_key(plan, t, stats)
    assert shared_activation_params_key(plan, t, stats) == base
    changes = {
        "moving average": lambda: shared_activation_params_key(plan, t, stats, moving_average=True),
    }
    keys = {name: make() for name, make in changes.items()}
    root.limits = (None, 0.5)  # the root's live interval cuts the range
    keys["limits"] = shared_activation_params_key(plan, t, stats)
    root.limits = None
    t.covers = (-9.0, 9.0)  # a range the tensor must cover
    keys["covers"] = shared_activation_params_key(plan, t, stats)
    t.covers = None
    source.quant = dataclasses.replace(source.quant, symmetric=not source.quant.symmetric)  # a range option
    keys["range option"] = shared_activation_params_key(plan, t, stats)
    source.quant = dataclasses.replace(source.quant, symmetric=not source.quant.symmetric)
    assert shared_activation_params_key(plan, t, stats) == base
    other = MinMaxCollector()
    other.update(np.array([-5.0, 5.0], np.float32))
    keys["collector"] = shared_activation_params_key(plan, t, dict(stats, **{source.name: other}))
    for name, key in keys.items():
        assert key != base, name
