"""A weight the float graph computes from a few small constants stays computed in the file
(graph/passes/fold_constants.py's growth rule, blockfile9).

Why: onnx-asr's resamplers build a [320, 1, 1, 459] sinc kernel from two ramps through Add, Sin
and Cos; folded at prepare, every quantized file stored the kernel (17-53x the 8.8 KB float file).
The model here is the same shape of computation at a quarter of the size: a [128, 1, 1, 300]
kernel (38 400 elements, over ``GROWN_FROM``) from ramps of 128 and 300 numbers (1.7 KB: 22x).
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.call_attributes import call_attributes
from onnxptq.pipeline.prepare import prepare

fc = importlib.import_module("onnxptq.graph.passes.fold_constants")  # the package exports the function by this name

ROWS, TAPS = 128, 300


def _sinc_net() -> onnx.ModelProto:
    """x [1, 1, 1, 940] -> Conv with a kernel sin(pi t / 16) / (t^2 + 1), t = r / 128 + tap, built from two ramps."""
    inits = [numpy_helper.from_array(np.arange(ROWS, dtype=np.float32) / ROWS, "rows"),
             numpy_helper.from_array(np.arange(TAPS, dtype=np.float32) - TAPS / 2, "taps"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "ax12"),
             numpy_helper.from_array(np.array(np.pi / 16, np.float32), "w"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    nodes = [helper.make_node("Unsqueeze", ["rows", "ax1"], ["rows_col"]),
             helper.make_node("Add", ["rows_col", "taps"], ["t"]),           # [128, 300]: the growth
             helper.make_node("Mul", ["t", "w"], ["arg"]),
             helper.make_node("Sin", ["arg"], ["s"]),
             helper.make_node("Mul", ["t", "t"], ["t2"]),
             helper.make_node("Add", ["t2", "one"], ["den"]),
             helper.make_node("Div", ["s", "den"], ["k2"]),
             helper.make_node("Unsqueeze", ["k2", "ax12"], ["kernel"]),     # [128, 1, 1, 300]
             helper.make_node("Conv", ["x", "kernel"], ["y"], strides=[1, 64])]
    graph = helper.make_graph(nodes, "sinc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 940])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, ROWS, 1, 11])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def sinc() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(3)
    t = np.arange(940, dtype=np.float32)
    feeds = [{"x": (np.sin(t * f) + rng.normal(0, 0.05, 940)).astype(np.float32)[None, None, None]}
             for f in (0.01, 0.03, 0.07, 0.11)]
    return _sinc_net(), feeds


def _run(model: onnx.ModelProto, feeds: list) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def test_grows_is_structural():
    """The rule reads only sizes: large and many times the bytes it is made from."""
    assert fc.grows(ROWS * TAPS, 4 * (ROWS + TAPS))
    assert not fc.grows(ROWS * TAPS, 4 * ROWS * TAPS)      # a Transpose/Mul of a stored weight
    assert not fc.grows(512, 24)                           # a Range of positions: small, folded as before
    assert not fc.grows(65664, 8 * 1032)                   # swift_f0: a zero fill scattered from 8 KB


def test_prepare_keeps_the_grown_chain_and_the_float_outputs(sinc):
    """Prepared, the kernel is still computed (no [128, 300] initializer), and onnxruntime gives the
    float model's outputs bit for bit (the same Sin as the float model's), where the folded form
    holds the reference evaluator's values."""
    model, feeds = sinc
    kept = prepare(model)
    assert max(int(np.prod(t.dims)) for t in kept.graph.initializer) <= TAPS
    assert any(n.op_type == "Sin" for n in kept.graph.node)
    for a, b in zip(_run(kept, feeds), _run(model, feeds)):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fc, "GROWTH", None)
        m.setattr(fc, "SHARED_GROWTH", None)
        folded = prepare(model)
    assert max(int(np.prod(t.dims)) for t in folded.graph.initializer) == ROWS * TAPS


def test_a_fill_scattered_from_stored_values_is_folded_as_before():
    """A zero fill (ConstantOfShape: 32 Ki elements from a shape) that a ScatterElements writes
    3 Ki stored values into is data the file holds anyway (the look-ahead counts the Scatter's
    indices and values): folded, as before the rule."""
    n, k = 1 << 15, 3072
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array([n], np.int64), "shape"),
             numpy_helper.from_array(rng.choice(n, k, replace=False).astype(np.int64), "idx"),
             numpy_helper.from_array(rng.normal(size=k).astype(np.float32), "vals")]
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("ScatterElements", ["zeros", "idx", "vals"], ["table"]),
             helper.make_node("Mul", ["x", "table"], ["y"])]
    graph = helper.make_graph(nodes, "fill", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    prepared = prepare(model)
    assert not any(n.op_type in ("ConstantOfShape", "ScatterElements") for n in prepared.graph.node)
    assert max(int(np.prod(t.dims)) for t in prepared.graph.initializer) == n


@pytest.mark.parametrize("preset", ["BFP16", "MXINT8"])
def test_quantized_file_holds_the_ramps_not_the_kernel(sinc, preset, tmp_path):
    """The delivered file is smaller than half a byte per kernel element (no stored form of the
    kernel is: the folded form's file holds it at 8+ bits an element), keeps the Sin, and its
    outputs follow the float model's."""
    model, feeds = sinc
    cfg = onnxptq.get_preset(preset).replace(repair=False)
    path, old = tmp_path / "q.onnx", tmp_path / "folded.onnx"
    onnxptq.quantize(model, cfg, feeds[:2], output=str(path))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fc, "GROWTH", None)
        m.setattr(fc, "SHARED_GROWTH", None)
        onnxptq.quantize(model, cfg, feeds[:2], output=str(old))
    assert old.stat().st_size > ROWS * TAPS  # the folded kernel, at 8+ bits an element
    assert path.stat().st_size < ROWS * TAPS / 2, f"{preset}: {path.stat().st_size} B"
    q = onnx.load(str(path))
    assert any(n.op_type == "Sin" for n in q.graph.node)
    # the kernel's quantizer blocks it as the weight quantizer would (along the input channels)
    producer = {o: n for n in q.graph.node for o in n.output}  # (the file's tensor names are short: found by structure)
    call = producer[next(n for n in q.graph.node if n.op_type == "Conv").input[1]]
    assert call.domain == "onnxptq", preset
    assert call_attributes(q, call)["axis"] == 1, preset
    for a, b in zip(_run(q, feeds), _run(model, feeds)):
        cos = float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert cos > 0.995, (preset, cos)  # 8-bit input and kernel: 0.998-0.9999


@pytest.mark.parametrize("preset", ["FP16", "BF16"])
def test_the_chain_runs_float_and_only_the_kernel_takes_the_format(sinc, preset, tmp_path):
    """Under the 16-bit presets the chain onnxruntime computes at load stays float32 (no Cast
    pair inside it: an argument up to 150 in half precision bends the kernel), and the Conv reads
    the kernel in the preset's format; the outputs follow the float model's at 16-bit accuracy."""
    model, feeds = sinc
    path = tmp_path / "q.onnx"
    onnxptq.quantize(model, onnxptq.get_preset(preset).replace(repair=False), feeds[:2], output=str(path))
    q = onnx.load(str(path))
    producer = {o: n for n in q.graph.node for o in n.output}
    for op in ("Sin", "Div"):
        node = next(n for n in q.graph.node if n.op_type == op)
        assert all(producer.get(i) is None or producer[i].op_type != "Cast" for i in node.input), (preset, op)
    conv = next(n for n in q.graph.node if n.op_type == "Conv")
    assert producer[conv.input[1]].op_type == "Cast", preset  # the kernel, cast back from 16 bits
    for a, b in zip(_run(q, feeds), _run(model, feeds)):
        cos = float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert cos > 0.9995, (preset, cos)  # FP16 0.99999, BF16 0.9998 (the chain in 16 bits: 0.99)
