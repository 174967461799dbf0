"""onnxptq infer: run a model over .npz / folder data and save each output as .npy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxptq import cli
from onnxptq.analysis.infer import run_and_save


@pytest.fixture
def two_output_model(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["out/relu"]), helper.make_node("Neg", ["x"], ["neg"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("out/relu", TensorProto.FLOAT, ["N", 3]), helper.make_tensor_value_info("neg", TensorProto.FLOAT, ["N", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "two.onnx"
    onnx.save(model, path)
    return path


def test_infer_npz_and_folder(tmp_path, small_cnn_path):
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x)
    out = tmp_path / "out"
    assert cli.main(["infer", str(small_cnn_path), "--data", str(tmp_path / "data.npz"), "-o", str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["00000.npy", "00001.npy", "00002.npy"]
    sess = ort.InferenceSession(str(small_cnn_path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(np.load(out / "00001.npy"), sess.run(None, {"x": x[1:2]})[0], rtol=1e-6)
    folder = tmp_path / "folder"
    folder.mkdir()
    for i in range(2):
        np.save(folder / f"{i}.npy", x[i : i + 1])
    written = run_and_save(small_cnn_path, folder, tmp_path / "out2")
    assert [p.name for p in written] == ["00000.npy", "00001.npy"]
    # a folder that already holds results is refused, so two runs are never mixed
    assert cli.main(["infer", str(small_cnn_path), "--data", str(folder), "-o", str(out)]) == 2
    assert cli.main(["infer", str(small_cnn_path), "--data", str(folder), "-o", str(out), "--overwrite"]) == 0


def test_infer_several_outputs(tmp_path, two_output_model):
    np.savez(tmp_path / "d.npz", x=np.array([[1.0, -2.0, 3.0]], np.float32))
    written = run_and_save(two_output_model, tmp_path / "d.npz", tmp_path / "o")
    assert sorted(p.name for p in written) == ["00000_neg.npy", "00000_out_relu.npy"]
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "00000_out_relu.npy"), [[1.0, 0.0, 3.0]])
