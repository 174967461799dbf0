"""A quantizer's parameters never take a name the model already uses (pipeline/emit.py, _Builder.absorb).

A fragment names its initializers after the tensor it quantizes: ``<tensor>_scale``,
``<tensor>_zero_point``. A model may already hold such a name for something else: here a
LayerNormalization's gamma ``ln_scale`` beside its output ``ln``, the natural spelling of an
exporter that names parameters after their layer. On main the quantizer's scale for ``ln``
replaced the gamma (one initializer of that name survived), silently: A8W8 output cosine 0.49,
A16W8 0.11. The quantized model must compute what float does, and keep both tensors.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq

D = 32


def layernorm_head() -> onnx.ModelProto:
    """x [N, 32] → LayerNormalization(gamma ``ln_scale``, beta ``ln_bias``) → ``ln`` → MatMul → y [N, 8]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((1 + rng.random(D)).astype(np.float32), "ln_scale"),
             numpy_helper.from_array((rng.standard_normal(D) * 0.1).astype(np.float32), "ln_bias"),
             numpy_helper.from_array((rng.standard_normal((D, 8)) * 0.3).astype(np.float32), "w")]
    nodes = [helper.make_node("LayerNormalization", ["x", "ln_scale", "ln_bias"], ["ln"], axis=-1),
             helper.make_node("MatMul", ["ln", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run(model: onnx.ModelProto, feeds) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, f)[0] for f in feeds]).ravel()


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_quantizer_scale_does_not_replace_a_same_named_gamma(preset):
    rng = np.random.default_rng(1)
    feeds = [{"x": (rng.standard_normal((4, D)) * 3).astype(np.float32)} for _ in range(8)]
    model = layernorm_head()
    result = onnxptq.quantize(model, onnxptq.get_preset(preset).replace(repair=False), data=feeds)
    q = result.model
    gamma = [t for t in q.graph.initializer if t.name == "ln_scale"]
    assert len(gamma) == 1 and np.array_equal(numpy_helper.to_array(gamma[0]), numpy_helper.to_array(model.graph.initializer[0]))
    ln_nodes = [n for n in q.graph.node if n.op_type == "LayerNormalization"]
    assert ln_nodes and ln_nodes[0].input[1] == "ln_scale"
    assert "ln_scale" not in {i for n in q.graph.node if n.op_type != "LayerNormalization" for i in n.input}
    ref, got = _run(model, feeds), _run(q, feeds)
    assert float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got))) >= 0.99
