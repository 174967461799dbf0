"""bench/newmodels.py's size_x divides the quantized file by the float model's bytes. A model that keeps its weights
in external data (round 15's khmersm: a 28 KB graph beside a 7 MB model.onnx.data) read 106-248x "larger" when only
the graph file was counted; _model_bytes counts the external-data files the initializers name."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.newmodels import _model_bytes


def _save(tmp_path, external: bool):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    path = tmp_path / ("ext.onnx" if external else "inline.onnx")
    if external:
        onnx.save(helper.make_model(graph), str(path), save_as_external_data=True, location="weights.data",
                  size_threshold=0)
    else:
        onnx.save(helper.make_model(graph), str(path))
    return path


def test_model_bytes_counts_external_data(tmp_path):
    ext, inline = _save(tmp_path, True), _save(tmp_path, False)
    assert ext.stat().st_size < 1024  # the graph alone: the weights are elsewhere
    assert _model_bytes(ext) == ext.stat().st_size + (tmp_path / "weights.data").stat().st_size
    assert _model_bytes(ext) >= 64 * 64 * 4
    assert _model_bytes(inline) == inline.stat().st_size
