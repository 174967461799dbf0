"""A block quantizer on a graph input takes the size hint too (issue 26 items 1 and 3, quantcpu16).

``pipeline/observed_sizes.py`` sized the tensors shape inference returns (value infos and outputs),
not the graph's inputs, so the quantizer on a model's input kept its declared-shape body: PP-OCR
cls's image ``[?, 3, 48, 192]`` (27 648 elements on its feeds, below MX9's 32 k and MXINT8's 64 k
lines) kept MX9's flush ``If`` and MXINT8's two. An input's size is its feed's. The hint only picks
between two exact bodies: the input's branch-free body is checked here bit for bit against the NumPy
reference on images 10x larger than any calibration feed, with zeros, ±0, subnormals, ±Inf, NaN and
the float32 maximum written in."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from _format_testing import assert_same_bits
from onnxptq.formats import fake_quantize
from test_blockbody_one_if import _cases, _ifs


def _cls_feeds(count: int) -> tuple[str, list[dict[str, np.ndarray]]]:
    from testkit.models import model_path
    from testkit.ocr import render_cls

    images = render_cls(count, seed=3)[0]
    name = onnx.load(str(model_path("cls"))).graph.input[0].name
    return name, [{name: images[i:i + 1]} for i in range(len(images))]


def test_observed_sizes_sizes_the_graph_input_from_its_feeds() -> None:
    from onnxptq.pipeline.observed_sizes import observed_sizes
    from testkit.models import model_path

    model = onnx.load(str(model_path("cls")))
    name = model.graph.input[0].name
    feeds = [{name: np.zeros((1, 3, 48, w), np.float32)} for w in (96, 192, 96)]
    assert observed_sizes(model, feeds)[name] == 3 * 48 * 192  # the larger of the two feeds


@pytest.fixture(scope="module")
def cls_input_calls():
    """PP-OCR cls MX9 and MXINT8 built from one calibration on two rendered lines: each model and the
    quantizer call that reads the image."""
    import onnxptq
    from onnxptq.pipeline.build import build_model
    from onnxptq.pipeline.calibrate import calibrate_once
    from testkit.models import model_path

    name, feeds = _cls_feeds(2)
    cal = calibrate_once(str(model_path("cls")), onnxptq.get_preset("MX9").replace(repair=False), feeds)
    out = {}
    for preset in ("MX9", "MXINT8"):
        model = build_model(cal, onnxptq.get_preset(preset).replace(repair=False)).model
        bodies = {f.name: f for f in model.functions}
        call = next(n for n in model.graph.node if name in n.input and n.op_type in bodies)
        out[preset] = model, call
    return out


@pytest.mark.parametrize("preset,fmt", [("MX9", "bfp"), ("MXINT8", "mx")])
def test_cls_input_quantizer_is_branch_free_and_exact_far_above_its_hint(cls_input_calls, preset, fmt) -> None:
    import onnxruntime as ort
    from onnx import helper

    from onnxptq.graph.call_attributes import call_attributes

    model, call = cls_input_calls[preset]
    body = next(f for f in model.functions if f.name == call.op_type)
    assert _ifs(body.node) == 0, f"{preset}: the image's quantizer {body.name} keeps an If choosing formulas"
    # The call alone, its input declared as the model declares the image ([?, 3, 48, ?] or wider).
    image = model.graph.input[0]
    node = helper.make_node(call.op_type, ["x"], ["y"], domain=call.domain)
    node.attribute.extend(call.attribute)
    graph = helper.make_graph([node], "input_call", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [
        d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in image.type.tensor_type.shape.dim])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    alone = helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    alone.ir_version = model.ir_version
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    sess = ort.InferenceSession(alone.SerializeToString(), options, providers=["CPUExecutionProvider"])
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in call_attributes(model, call).items()}
    shape = (1, 3, 48, 1920)  # 10x the 27 648 elements the hint says
    for what, x in _cases(shape, 0):
        assert_same_bits(sess.run(None, {"x": x})[0], fake_quantize(x, fmt, **attrs), f"{preset} {what}")
