"""Integer outputs in the quantization summary (issue 27, trueocr's rec.onnx).

trueocr's line reader takes its CTC decision inside the graph (``MatMul → ArgMax → ids`` int64,
beside a float ``conf``); the summary printed "output ids: cosine 0.960794 … PSNR 46.47 dB", a
cosine of token ids. An integer output is now reported as the share of its elements equal to
float's. The graph below is that head: per-step features, a linear classifier, ArgMax ids and the
max logit as a float confidence.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onnxptq.api import quantize
from onnxptq.sessions import open_session

T, F, C = 24, 16, 10


def _reader() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    w1 = numpy_helper.from_array(rng.standard_normal((F, 32)).astype(np.float32) * 0.4, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, C)).astype(np.float32) * 0.4, "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="proj"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu"),
        helper.make_node("MatMul", ["hr", "w2"], ["logits"], name="head"),
        helper.make_node("ArgMax", ["logits"], ["ids"], name="argmax", axis=-1, keepdims=0),
        helper.make_node("ReduceMax", ["logits"], ["conf"], name="conf", axes=[-1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "reader", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, F])],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, T]),
         helper.make_tensor_value_info("conf", TensorProto.FLOAT, [1, T])], initializer=[w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_integer_output_is_reported_as_equal_share_not_cosine():
    model = _reader()
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, T, F)).astype(np.float32)} for _ in range(12)]
    result = quantize(model, "A8W8", data=feeds)

    ids_line = next(line for line in result.summary().splitlines() if "output ids" in line)
    assert "equal to float" in ids_line and "cosine" not in ids_line and "PSNR" not in ids_line
    conf_line = next(line for line in result.summary().splitlines() if "output conf" in line)
    assert "cosine" in conf_line and "PSNR" in conf_line  # float outputs keep their figures

    # The figure is a share of equal ids over 8 evaluate samples of T steps each (which 8 the
    # pipeline picks is its business): a multiple of 1 / (8 T), near the share over all feeds,
    # below 1 (this head flips some near-ties under int8). The library's own sessions, as the
    # metrics are taken.
    ref, got = open_session(model), open_session(result.model)
    shares = [float(np.mean(ref.run(["ids"], f)[0] == got.run(["ids"], f)[0])) for f in feeds]
    equal = result.metrics["ids"]["equal"]
    assert abs(equal * 8 * T - round(equal * 8 * T)) < 1e-6
    assert min(shares) <= equal < 1.0 and abs(equal - np.mean(shares)) < 0.02
    assert "equal" not in result.metrics["conf"]
