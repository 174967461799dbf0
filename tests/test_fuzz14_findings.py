"""What fuzz14's campaigns found (bench/export_fuzz.py, bench/fuzz_silent.py; bench/RESULTS.md "fuzz14"), each
as the smallest graph of the spelling that showed it.

1. A list built in a loop. TorchScript writes a scripted ``for`` that appends to a Python list as
   ``SequenceEmpty`` → ``Loop`` (the body ``SequenceInsert``\\ s each step) → ``ConcatFromSequence``, and
   leaves these values untyped. Our shape inference merged only the *dtype* of onnx's inferred type into
   them, which makes an untyped value a tensor: the prepared model declared ``SequenceEmpty``'s output
   ``tensor(float)``, onnxruntime refused it, and every preset stopped with "cannot load the model for
   calibration" on a model onnxruntime runs.
2. A quantized activation moved by a Transpose into a Loop body (read from the outer scope). onnxruntime 1.32's
   QDQPropagationTransformer pushes the DequantizeLinear past the Transpose, looks for the tensor among the Loop's
   explicit inputs and reads past their end: the process aborts when the session opens (quantize's own finish
   step included). bench/fuzz.py seed 16 (Transpose → Conv → Transpose → Loop) under A8W8/A16W8/U16S8; int8
   activations were already requantized after such a Transpose (plan/rules.py), uint8/uint16/int16 were not.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

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


def _transposed_into_loop(path) -> None:
    """x [1, 3, 4, 3] → Transpose → 1×1 Conv → Transpose (t [1, 6, 4, 3]) → a Loop over t's first axis whose body
    Gathers row i of t from the outer scope, MatMuls it and carries a Tanh state (testkit.fuzz's LoopMatMul)."""
    rng = np.random.default_rng(3)
    f = TensorProto.FLOAT
    steps = "Gather t,i row; MatMul row,w_rec rw; Add rw,h s; Tanh s h_new; Identity h_new h_out; Identity c c_out"
    nodes = [helper.make_node(op, ins.split(","), [out], **({"axis": 0} if op == "Gather" else {}))
             for op, ins, out in (step.split() for step in steps.split("; "))]
    body = helper.make_graph(nodes, "step", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                             helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                             helper.make_tensor_value_info("h", f, [6, 4, 3])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("h_new", f, [6, 4, 3]),
                              helper.make_tensor_value_info("h_out", f, [6, 4, 3])])
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (6, 3, 1, 1)).astype(np.float32), "w_conv"),
             numpy_helper.from_array(rng.normal(0, 0.1, 6).astype(np.float32), "b_conv"),
             numpy_helper.from_array((rng.normal(0, 0.5, (3, 3))).astype(np.float32), "w_rec"),
             numpy_helper.from_array(np.zeros((6, 4, 3), np.float32), "h0"),
             numpy_helper.from_array(np.asarray(1, np.int64), "trips"), numpy_helper.from_array(np.asarray(True), "cond")]
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1, 3, 2], name="t_in"),
         helper.make_node("Conv", ["xt", "w_conv", "b_conv"], ["conv"], name="conv"),
         helper.make_node("Transpose", ["conv"], ["t"], perm=[0, 1, 3, 2], name="t_out"),
         helper.make_node("Loop", ["trips", "cond", "h0"], ["h_last", "y"], body=body, name="loop")],
        "transposed_into_loop", [helper.make_tensor_value_info("x", f, [1, 3, 4, 3])],
        [helper.make_tensor_value_info("y", f, [1, 6, 4, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


@pytest.mark.parametrize("preset", ["A8W8", "A16W8"])
def test_a_transposed_activation_read_by_a_loop_body_opens(preset, tmp_path):
    """Run in a child: on main the abort takes the process down with it."""
    src = tmp_path / "m.onnx"
    _transposed_into_loop(src)
    script = textwrap.dedent(f"""
        import numpy as np, onnxruntime as ort, onnxptq
        rng = np.random.default_rng(0)
        feeds = [{{"x": rng.normal(0, 1, (1, 3, 4, 3)).astype(np.float32)}} for _ in range(12)]
        onnxptq.quantize({str(src)!r}, {preset!r}, data=feeds, output={str(tmp_path / "q.onnx")!r})
        want = ort.InferenceSession({str(src)!r}, providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
        got = ort.InferenceSession({str(tmp_path / "q.onnx")!r}, providers=["CPUExecutionProvider"]).run(None, feeds[0])[0]
        print("cosine", float(want.ravel() @ got.ravel() / np.linalg.norm(want) / np.linalg.norm(got)))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-1500:]
    assert float(run.stdout.split("cosine")[-1]) > 0.99
