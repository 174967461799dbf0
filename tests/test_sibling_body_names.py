"""Two sibling Loop bodies that define the same value name (graph/naming.py ``value_names``).

The pattern (nakdimon 0.2.1's Hebrew diacritizer, bench/RESULTS.md "twenty-first round"): tf2onnx writes
each Keras LSTM of a bidirectional stack as its own ``Loop``, and every body names its time step
``while/TensorArrayV2Read/TensorListGetItem:0``. ONNX allows that (only shadowing an enclosing scope is
forbidden), but emit keys quantizers by value name across all scopes: the step's quantizer went into one
body and the other bodies' MatMuls were rewired to it, so every preset failed the ONNX checker. Built
here small: two Loops over the same sequence, bodies with identical value names, each a MatMul on its
step.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq
from onnxptq.graph.naming import value_names

T, D = 6, 16


def _body(weight: str) -> onnx.GraphProto:
    """One time step: the step's row times ``weight`` (outer scope), Tanh; the same value names in every copy."""
    return helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0),
         helper.make_node("MatMul", ["x_t", weight], ["xw"]),
         helper.make_node("Tanh", ["xw"], ["y_t"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [1, D])],
    )


def _sibling_loops() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (D, D)).astype(np.float32), w) for w in ("W1", "W2")]
    inits += [numpy_helper.from_array(np.array(T, np.int64), "trips"), numpy_helper.from_array(np.array(True), "go"),
              numpy_helper.from_array(np.array([T, D], np.int64), "flat_shape")]
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "go"], ["ys1"], body=_body("W1"), name="forward"),
         helper.make_node("Loop", ["trips", "go"], ["ys2"], body=_body("W2"), name="backward"),
         helper.make_node("Add", ["ys1", "ys2"], ["ys"], name="merge"),
         helper.make_node("Reshape", ["ys", "flat_shape"], ["y"], name="flatten_steps")],
        "sibling_loops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, 1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [T, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (T, 1, D)).astype(np.float32)} for _ in range(n)]


def _run(model: onnx.ModelProto | str, feeds) -> list[np.ndarray]:
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def _bodies(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    return [a.g for n in model.graph.node if n.op_type == "Loop" for a in n.attribute if a.name == "body"]


def test_value_names_renames_the_second_body_only():
    model = _sibling_loops()
    assert value_names(model) == 6  # the second body's inputs i, cond_in and its x_t, xw, y_t, cond_out
    first, second = ({o for n in b.node for o in n.output} for b in _bodies(model))
    assert first == {"x_t", "xw", "y_t", "cond_out"}
    assert not first & second
    onnx.checker.check_model(model)
    feeds = _feeds(2, 1)
    for a, b in zip(_run(_sibling_loops(), feeds), _run(model, feeds)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("preset", ["BF16", "A8W8"])
def test_quantizes_sibling_bodies_with_the_same_names(preset, tmp_path):
    """On main: RuntimeError "the quantized model fails the ONNX checker … x_t_DequantizeLinear_Output … is not
    output of any previous nodes"."""
    src, dst = tmp_path / "loops.onnx", tmp_path / f"loops.{preset}.onnx"
    onnx.save(_sibling_loops(), src)
    onnxptq.quantize(str(src), preset, data=_feeds(8, 1), output=str(dst))
    held = _feeds(4, 1000)
    for y, yq in zip(_run(_sibling_loops(), held), _run(str(dst), held)):
        y, yq = y.ravel(), yq.ravel()
        assert float(y @ yq / np.linalg.norm(y) / np.linalg.norm(yq)) > 0.99
