"""Repair ordered by sensitivity (issue 27 item 2; algorithms/sensitivity.py, algorithms/repair.py).

Three sensitive nodes planted far apart in a 24-layer MatMul chain: at each spot, ``Mul_hot_i``
scales token 0 by 1000 and ``Mul_inv_i`` scales it back (float never sees it); a per-tensor int8
weight range over ``[1000, 1, …, 1]`` rounds the ones to 0, so each ``Mul_hot_i`` alone quantized
drops the output cosine to 0; every other node is harmless. In graph order every half of the plan holds one of them, so the bisection over builds
splits down to single nodes (about 2·k·log2(n) builds); with the minimum of eight builds it still
keeps much of the chain float. The switch model ranks the nodes by chunks alone quantized (one
session run each), and the builds bisect the prefix of that ranking: exactly the three kept.
"""

from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import TensorProto, helper

from _structure_graphs import H, S, _B, pattern_data
from onnxptq.algorithms import repair
from onnxptq.algorithms.sensitivity import switch_model
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.pipeline.calibrate import DEFAULT_HOLDOUT, calibrate_once
from onnxptq.pipeline.complete import complete

A8W8 = resolve_config("A8W8")
SPOTS = (3, 11, 19)
PLANTED = {f"Mul_hot_{i}" for i in SPOTS}


def spread_model(layers: int = 24) -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    b = _B()
    hot = np.ones((S, 1), np.float32)
    hot[0] = 1000.0
    inv = np.ones((S, 1), np.float32)
    inv[0] = 1e-3
    mask = np.ones((S, 1), np.float32)
    mask[0] = 0.0
    src = "x"
    for i in range(layers):
        w = b.const(np.eye(H) + 0.2 * rng.standard_normal((H, H)), f"w{i}")
        src = b.op("MatMul", src, w)
        if i % 2:
            src = b.op("Relu", src)
        if i in SPOTS:
            b.nodes.append(helper.make_node("Mul", [src, b.const(hot, f"hot{i}")], [f"hot_out{i}"], name=f"Mul_hot_{i}"))
            b.nodes.append(helper.make_node("Mul", [f"hot_out{i}", b.const(inv, f"inv{i}")], [f"inv_out{i}"], name=f"Mul_inv_{i}"))
            src = f"inv_out{i}"
    b.nodes.append(helper.make_node("Mul", [src, b.const(mask, "mask")], ["masked"], name="Mul_mask"))
    b.nodes.append(helper.make_node("MatMul", ["masked", b.const(rng.standard_normal((H, 1)), "w_out")], ["out"], name="MatMul_out"))
    graph = helper.make_graph(b.nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", S, H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", S, 1])], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_the_switch_model_search_keeps_only_the_scattered_sensitive_nodes():
    cfg = A8W8.replace(repair_budget=50.0)  # the default search; only a loaded machine's clock is taken out
    result = quantize(spread_model(), cfg, pattern_data(32))
    record = result.repair
    assert record["before"]["ok"] is False and result.floor.ok, result.summary()
    assert set(record["kept_float"]) == PLANTED, record["kept_float"]
    assert record["search"]["searched_on"] == "switch model" and record["search"]["ranked"]
    # "everything float", then the prefix bisection (log2 of the nodes) and the cleanup of the three
    assert record["evaluations"] <= 16 and record["finished"], record
    ranked = [name for name, _ in record["search"]["most_sensitive"]]
    assert set(ranked[:3]) == PLANTED


def test_the_bisection_in_graph_order_keeps_more_with_the_same_eight_builds():
    """What repair did before: the same calibration, eight builds (MIN_TRIALS) of the bisection."""
    model, data = spread_model(), pattern_data(32)
    calibrated = calibrate_once(model, A8W8, data, holdout=DEFAULT_HOLDOUT)
    first = complete(calibrated, A8W8, deliver_now=False)
    assert not first.floor.ok
    judge = repair._Judge(calibrated, A8W8)
    kept, finished = repair._search(judge, list(first.plan.nodes), repair._Trials(time.process_time(), 0.0))
    assert not finished and judge.evaluations == repair.MIN_TRIALS
    # (a planted node may leave the set: with its neighbours float the plan does not quantize it)
    assert len(kept) >= 3 * len(PLANTED), sorted(kept)


def test_the_switch_model_reproduces_both_ends():
    """Every switch on: the quantized model's outputs; every switch off: float's (the float inputs
    each node reads, fused ReLUs recomputed)."""
    import onnxruntime as ort

    model, data = spread_model(), pattern_data(4, seed=9)
    result = quantize(model, A8W8.replace(repair=False), pattern_data(32))
    owners = {name: [c for c in t.consumers if c in result.plan.nodes] or ([t.producer] if t.producer in result.plan.nodes else [])
              for name, t in result.plan.tensors.items()}
    switches = switch_model(model, result.model, owners)
    assert switches is not None and PLANTED <= set(switches.nodes)
    run = ort.InferenceSession(switches.model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    everything = frozenset(switches.nodes)
    for feed in data:
        np.testing.assert_allclose(run.run(None, {**feed, **switches.feed(frozenset())})[0], got.run(None, feed)[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(run.run(None, {**feed, **switches.feed(everything)})[0], ref.run(None, feed)[0], rtol=1e-4, atol=1e-4)
