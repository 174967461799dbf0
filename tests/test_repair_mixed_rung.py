"""The mixed rung: the rest of an integer plan stepped up to 16 bits, the few nodes that 16 bits do
not serve kept float (algorithms/repair.py, issue 27 item 2).

Why: where the whole plan at 16 bits breaks, repair used to go to the float search, which keeps
nodes float with everything else back at 8 bits; where the 8-bit error is spread over the model,
that keeps most of it float. lore_detect A8W8 (its heat map declared ``peaks``) was delivered with
all 104 nodes float where "the rest at 16-bit, the output Conv float" holds at 0.692× the file
(bench/RESULTS.md, "peaks").

The planted graph: ``tests/test_repair_step_up.py``'s chain of dense layers whose hidden state
carries one channel of ~100 beside channels of ~1 (so every 8-bit activation leaves the small ones a
few codes: the error is spread), and a head writing two fields: field 0 reads that channel ×3000
(~3·10⁵), field 1 the small channels (~5). The output's own 16-bit quantizer has a step of ~5 over
that range, so field 1 (judged on its own: analysis/fields.py) breaks with the whole plan at 16
bits; with the head float, the rest at 16 bits holds. What each assertion would catch: no mixed
rung (main: every node float), the wrong node kept float (the head is the broken output's writer),
the rest left at 8 bits (the float search's answer), and a delivered file that does not hold.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxptq.algorithms.repair import mixed_floats, output_writers
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config

ROWS, H, DEPTH = 64, 16, 6  # rows per feed (each field gathers ≥ 1024 values over the held-out feeds)


def _rotation(rng: np.random.Generator, n: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q


def two_field_chain() -> onnx.ModelProto:
    rng = np.random.default_rng(21)
    inits, nodes, src = [], [], "x"
    for i in range(DEPTH):
        w = np.zeros((H, H))
        w[0, 0] = 1.0
        w[1:, 1:] = _rotation(rng, H - 1)
        inits.append(numpy_helper.from_array(w.astype(np.float32), f"w{i}"))
        inputs = [src, f"w{i}"]
        if i == DEPTH - 1:  # the head's input: channel 0 lifted to ~10⁶ by a bias (its weights stay narrow)
            inits.append(numpy_helper.from_array(np.r_[[1e6], np.zeros(H - 1)].astype(np.float32), "lift"))
            inputs.append("lift")
        nodes.append(helper.make_node("Gemm", inputs, [f"h{i}"], name=f"Gemm_{i}"))
        src = f"h{i}"
    head = np.zeros((H, 2))
    head[0, 0] = 0.003
    head[1:, 1] = rng.standard_normal(H - 1)
    inits.append(numpy_helper.from_array(head.astype(np.float32), "w_out"))
    inits.append(numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"))
    # [1, 2, N]: two fields along axis 1, as a two-channel map is (a [N, 2] row would be read as class scores)
    nodes += [helper.make_node("Gemm", [src, "w_out"], ["rows"], name="Gemm_out"),
              helper.make_node("Transpose", ["rows"], ["fields"], name="Fields", perm=[1, 0]),
              helper.make_node("Unsqueeze", ["fields", "zero"], ["out"], name="Batch")]
    graph = helper.make_graph(nodes, "two_fields", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, "N"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def feeds(n: int = 24, seed: int = 5) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.standard_normal((ROWS, H))
        x[:, 0] = 300.0 + rng.standard_normal(ROWS)
        out.append({"x": x.astype(np.float32)})
    return out


def small_field_read(ref: np.ndarray, got: np.ndarray) -> float:
    """The small field's (field 1's) cosine with float's, as its reader reads it on its own."""
    a, b = ref[0, 1].astype(np.float64), got[0, 1].astype(np.float64)
    return float(np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30), 0.0, 1.0))


A8W8 = resolve_config("A8W8").replace(floor_output_agreement={"out": small_field_read})


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return two_field_chain()


@pytest.fixture(scope="module")
def data() -> list[dict[str, np.ndarray]]:
    return feeds()


def test_the_rest_at_16_bits_and_the_head_float_is_delivered(model, data):
    plain = quantize(model, A8W8.replace(repair=False), data)
    assert not plain.floor.ok, "the planted break does not break the floor: nothing is tested"
    result = quantize(model, A8W8, data)  # the default budget: four builds (the rungs, the float probe, the mixed set)
    record = result.repair
    assert result.floor.ok, record.get("note")
    assert record["mixed"] and list(record["kept_float"]) == ["Gemm_out"], record["kept_float"]
    stepped = set(record["stepped_up"])
    assert stepped and "Gemm_out" not in stepped and all("16-bit" in v for v in record["stepped_up"].values())
    # every quantized node is the search's: stepped up, or handed back to 8 bits where that held
    assert stepped <= set(result.plan.nodes)
    assert record["evaluations"] <= record["allowance"] == 4
    # the delivered file writes the output unquantized and reads 16-bit activations in the stepped nodes
    q_outputs = {n.input[0] for n in result.model.graph.node if n.op_type == "QuantizeLinear"}
    assert not {"rows", "fields", "out"} & q_outputs
    zp = {t.name: t.data_type for t in result.model.graph.initializer}
    wide = [n.input[0] for n in result.model.graph.node if n.op_type == "QuantizeLinear" and len(n.input) > 2
            and zp.get(n.input[2]) in (TensorProto.UINT16, TensorProto.INT16)]
    assert wide, "no 16-bit activation in the delivered file"


def test_without_the_ladder_the_float_search_keeps_more(model, data):
    """The float search alone (no rungs) keeps more nodes float than the mixed rung's one: why the rung."""
    floated = quantize(model, A8W8.replace(repair_step_up=False, repair_budget=50.0), data)
    assert floated.floor.ok and not floated.repair["mixed"]
    assert len(floated.repair["kept_float"]) >= 3, floated.repair["kept_float"]


def test_writers_walk_back_through_unquantized_nodes():
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="Conv_a"),
         helper.make_node("Conv", ["c", "w"], ["d"], name="Conv_b"),
         helper.make_node("Sigmoid", ["d"], ["s"], name="Sig"),
         helper.make_node("Reshape", ["s", "shape"], ["y"], name="Flat"),
         helper.make_node("Relu", ["c"], ["z"], name="Relu_c")],
        "g", [], [])
    assert output_writers(g, ["y"], ["Conv_a", "Conv_b"]) == ["Conv_b"]
    assert output_writers(g, ["z"], ["Conv_a", "Conv_b"]) == ["Conv_a"]
    assert output_writers(g, ["y", "z"], ["Conv_a", "Conv_b"]) == ["Conv_a", "Conv_b"]
    assert output_writers(g, ["nope"], ["Conv_a"]) == []


def test_mixed_floats_are_few_and_fixed():
    assert mixed_floats(["w"], ["a", "b", "c"], 3) == [frozenset("w"), frozenset("wab")]
    assert mixed_floats([], ["a", "b"], 8) == [frozenset("ab")]
    assert mixed_floats(list("abcdefghij"), ["k"], 8) == []  # more writers than "a few": no mixed trial
    assert mixed_floats(["a"], ["a"], 8) == [frozenset("a")]


def test_writers_walk_into_what_an_if_reads_from_the_outer_scope():
    """An output an If writes: its only input is the condition, so the writers are the main-graph
    candidates its branches read (by name, from the outer scope), not nothing."""
    then = helper.make_graph([helper.make_node("Identity", ["d"], ["t_out"], name="T_id")], "then", [],
                             [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Sigmoid", ["c"], ["e_out"], name="E_sig")], "else", [],
                              [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
    passthrough = helper.make_graph([], "pass", [], [helper.make_tensor_value_info("k", TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="Conv_a"),
         helper.make_node("Conv", ["c", "w"], ["d"], name="Conv_b"),
         helper.make_node("Conv", ["x", "w"], ["k"], name="Conv_k"),
         helper.make_node("ReduceMax", ["x"], ["flag"], name="Flag"),
         helper.make_node("If", ["flag"], ["y"], name="Choose", then_branch=then, else_branch=other),
         helper.make_node("If", ["flag"], ["z"], name="Pass", then_branch=passthrough, else_branch=passthrough)],
        "g", [], [])
    assert output_writers(g, ["y"], ["Conv_a", "Conv_b", "Conv_k"]) == ["Conv_a", "Conv_b"]
    assert output_writers(g, ["z"], ["Conv_a", "Conv_b", "Conv_k"]) == ["Conv_k"]
