"""What fuzz14's campaigns found (bench/export_fuzz.py, bench/fuzz_silent.py; bench/RESULTS.md "fuzz14"), each
as the smallest graph of the spelling that showed it.

1. A list built in a loop. TorchScript writes a scripted ``for`` that appends to a Python list as
   ``SequenceEmpty`` → ``Loop`` (the body ``SequenceInsert``\\ s each step) → ``ConcatFromSequence``, and
   leaves these values untyped. Our shape inference merged only the *dtype* of onnx's inferred type into
   them, which makes an untyped value a tensor: the prepared model declared ``SequenceEmpty``'s output
   ``tensor(float)``, onnxruntime refused it, and every preset stopped with "cannot load the model for
   calibration" on a model onnxruntime runs.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.passes.shape_inference import infer_shapes

T, D = 5, 8


def _seq_info(name: str) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None)))


def _loop_list_model() -> onnx.ModelProto:
    """x [T, D] → Linear → a Loop over the rows: h = tanh(x_t·W + h), each h appended to a sequence;
    ConcatFromSequence stacks them → Linear. Intermediate values untyped, as TorchScript leaves them."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    steps = "Gather xin,i row take; MatMul row,w_rec rw mm; Add rw,h s add; Tanh s h_new tanh; " \
            "SequenceInsert seq,h_new seq_new append; Identity c c_out go"
    nodes = [helper.make_node(op, ins.split(","), [out], name=name, **({"axis": 0} if op == "Gather" else {}))
             for op, ins, out, name in (step.split() for step in steps.split("; "))]
    body = helper.make_graph(
        nodes,
        "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", f, [D]), _seq_info("seq")],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_new", f, [D]),
         _seq_info("seq_new")])
    inits = [numpy_helper.from_array((rng.normal(0, 1, (D, D)) / D).astype(np.float32), "w_rec"),
             numpy_helper.from_array((rng.normal(0, 1, (D, D)) / D ** 0.5).astype(np.float32), "w_in"),
             numpy_helper.from_array((rng.normal(0, 1, (D, D)) / D ** 0.5).astype(np.float32), "w_out"),
             numpy_helper.from_array(np.zeros(D, np.float32), "h0"),
             numpy_helper.from_array(np.asarray(T, np.int64), "trips"), numpy_helper.from_array(np.asarray(True), "cond")]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w_in"], ["xin"], name="lin_in"),
         helper.make_node("SequenceEmpty", [], ["empty"], dtype=f, name="new_list"),
         helper.make_node("Loop", ["trips", "cond", "h0", "empty"], ["h_last", "rows"], body=body, name="loop"),
         helper.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=0, new_axis=1, name="stack"),
         helper.make_node("MatMul", ["stacked", "w_out"], ["y"], name="lin_out")],
        "list_loop", [helper.make_tensor_value_info("x", f, [T, D])], [helper.make_tensor_value_info("y", f, [T, D])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_shape_inference_keeps_a_sequence_a_sequence():
    inferred = infer_shapes(_loop_list_model())
    kinds = {vi.name: vi.type.WhichOneof("value") for vi in inferred.graph.value_info}
    assert kinds.get("empty") == "sequence_type" and kinds.get("rows") == "sequence_type"
    ort.InferenceSession(inferred.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("preset", ["A8W8", "BF16"])
def test_a_list_built_in_a_loop_quantizes(preset, tmp_path):
    model = _loop_list_model()
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (T, D)).astype(np.float32)} for _ in range(12)]
    out = tmp_path / "q.onnx"
    onnxptq.quantize(model, preset, data=feeds, output=str(out))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
    cos = float(want.ravel() @ got.ravel() / np.linalg.norm(want) / np.linalg.norm(got))
    assert cos > 0.99
