"""A graph output declared with its export's size, on a model whose input size varies, builds no body for that size.

lore_process (bench/newmodels.py) is an opset-9 model whose inputs are ``[batch, height, width]`` and whose outputs
are declared ``[batch, 54, 4]`` (54: the export's count); one of them is also read inside. Upgrading the opset
(onnx's version converter) wrote the declared 54 into its readers' shapes ([batch, 54, 256]), and the shape
inference kept a declared size it could not derive, so MXINT8 and MXFP8_E4M3 built block bodies for 54 rows: the
floor's own held-out run raised onnxruntime's Reshape error (a raw exception out of ``quantize``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.config.presets import resolve_config

TRACED = 54


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.normal(0, 0.06, (256, 256)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.normal(0, 0.06, (256, 512)).astype(np.float32), "w2")
    # a Reshape to [0, -1, 256]: a row count shape inference cannot derive from a symbolic one (lore_process's
    # outputs are computed through such shape arithmetic), so only the declared output size is there to keep
    shape = numpy_helper.from_array(np.array([0, -1, 256], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["xr"]),
             helper.make_node("MatMul", ["xr", "w1"], ["m1"]), helper.make_node("Relu", ["m1"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["m2"]), helper.make_node("Relu", ["m2"], ["y"])]
    graph = helper.make_graph(nodes, "traced", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "rows", 256])],
                              [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", TRACED, 256]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", TRACED, 512])], [w1, w2, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=6)
    return model


@pytest.mark.parametrize("preset", ["MXINT8", "MXFP8_E4M3"])
def test_a_traced_output_size_is_not_built_into_the_bodies(preset, tmp_path):
    rng = np.random.default_rng(1)
    data = [{"x": rng.normal(0, 1, (1, int(n), 256)).astype(np.float32)} for n in rng.integers(5, 40, 24)]
    out = tmp_path / "q.onnx"
    result = onnxptq.quantize(_model(), dataclasses.replace(resolve_config(preset), repair=False), data=data, output=str(out))
    assert result.floor is not None
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for rows in (3, 17, TRACED + 9):
        h, y = session.run(None, {"x": rng.normal(0, 1, (1, rows, 256)).astype(np.float32)})
        assert h.shape == (1, rows, 256) and y.shape == (1, rows, 512)


def test_the_opset_upgrade_keeps_no_size_it_inferred_from_a_declared_output():
    """onnx's version converter infers shapes as it converts, the declared outputs' sizes included: the reader of the
    output ``h`` came out ``[batch, 54, 512]`` (lore_process: ``[batch, 54, 256]``), a size the preparation's own
    inference, which cannot derive it, then kept. Only value_info the source declared survives the upgrade."""
    from onnxptq.graph.passes.upgrade_opset import upgrade_opset

    source = _model()
    upgraded = upgrade_opset(source, 21)
    assert {vi.name for vi in upgraded.graph.value_info} <= {vi.name for vi in source.graph.value_info}
    sized = [vi.name for vi in upgraded.graph.value_info if any(d.dim_value == TRACED for d in vi.type.tensor_type.shape.dim)]
    assert sized == []
