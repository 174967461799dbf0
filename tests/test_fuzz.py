"""Issue 18 item 13: property-based fuzzing of the whole pipeline, bounded for the suite.

Fixed seed (``derandomize``), no example database, a bounded number of examples: the same inputs on
every run, about a minute in all on two shared cores. ``bench/fuzz.py`` runs the same properties
for thousands of examples; what it found is in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import make_small_cnn, small_cnn_feeds  # noqa: E402
from testkit.fuzz import FUZZ_PRESETS, check_corrupt_model, check_quantize, corrupt, corruptions, random_graphs  # noqa: E402

_SETTINGS = dict(derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True)
def _quiet():
    """Warnings about NaN data and dropped samples are expected here; keep the output readable."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@settings(max_examples=12, **_SETTINGS)
@given(graph=random_graphs())
def test_random_graphs_under_every_preset_give_a_valid_model_or_a_documented_error(graph):
    outcomes = [check_quantize(graph, preset) for preset in FUZZ_PRESETS]
    # A graph with a Conv/MatMul/Gemm always has something to quantize under the integer presets.
    if any(op in graph.ops for op in ("Conv", "MatMul", "Gemm")):
        assert outcomes[0].ok, outcomes[0].error


_MODEL = make_small_cnn().SerializeToString()


def _npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, x=np.concatenate([f["x"] for f in small_cnn_feeds(3)]))
    return buf.getvalue()


def _npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, small_cnn_feeds(1)[0]["x"])
    return buf.getvalue()


_FILES = {"model": _MODEL, "npz": _npz(), "npy": _npy()}


@settings(max_examples=150, **_SETTINGS)
@given(kind=st.sampled_from(sorted(_FILES)), data=st.data())
def test_corrupted_model_bytes_and_calibration_files_give_a_documented_error(tmp_path_factory, kind, data):
    how = data.draw(corruptions(len(_FILES[kind])))
    damaged = corrupt(_FILES[kind], how)
    folder = tmp_path_factory.mktemp("fuzz")
    good_model, good_data = folder / "m.onnx", folder / "d.npz"
    good_model.write_bytes(_MODEL)
    good_data.write_bytes(_FILES["npz"])
    if kind == "model":
        (folder / "bad.onnx").write_bytes(damaged)
        check_corrupt_model(folder / "bad.onnx", good_data)
    elif kind == "npz":
        (folder / "bad.npz").write_bytes(damaged)
        check_corrupt_model(good_model, folder / "bad.npz")
    else:
        (folder / "calib").mkdir()
        (folder / "calib" / "0.npy").write_bytes(damaged)
        check_corrupt_model(good_model, folder / "calib")


@pytest.mark.parametrize("opset", [13, 18])
def test_the_drawn_exporter_spellings_compute_what_they_name(opset):
    """The generator's LayerNorm by ReduceSumSquare/Reciprocal and its ReduceMax keepdims=0 → Sub ÷ rank-0
    step, run by onnxruntime, against NumPy written from their definitions (a wrong spelling would fuzz
    graphs that are not the pattern they claim to be)."""
    import random

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from testkit.fuzz import _Builder

    x = np.random.default_rng(3).normal(1.0, 2.0, (2, 3, 6)).astype(np.float32)
    for op in ("NormSumSquare", "ReduceMaxSub"):
        b = _Builder(random.Random(5), TensorProto.FLOAT, opset)
        b.shapes["x"] = x.shape
        out = b.step(op, "x", None)
        graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(b.shapes[out]))], initializer=b.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        if op == "NormSumSquare":
            weights = [numpy_helper.to_array(t) for t in b.inits if t.name.startswith("w")]
            scale, shift = weights[-2], weights[-1]
            want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * scale + shift
        else:
            want = (x - x.max(-1, keepdims=True)) / (np.abs(x).max() + 1.0)
        assert got.shape == x.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 6)])
def test_the_drawn_recurrences_compute_what_they_name(shape):
    """The generator's Scan and Loop steps (a body MatMul with outer-scope weights, a carried state, the
    states stacked) run by onnxruntime against a NumPy recurrence written from the definition."""
    import random

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from testkit.fuzz import _Builder

    x = np.random.default_rng(3).normal(1.0, 2.0, shape).astype(np.float32)
    for op in ("ScanMatMul", "LoopMatMul"):
        b = _Builder(random.Random(5), TensorProto.FLOAT, 13)
        b.shapes["x"] = x.shape
        out = b.step(op, "x", None)
        graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(b.shapes[out]))], initializer=b.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        weights = [numpy_helper.to_array(t).astype(np.float64) for t in b.inits if t.name.startswith("w")]
        h, rows = np.zeros(shape[1:]), []
        for t in range(shape[0]):  # Scan: tanh(x_t·Wx + h·Wh); Loop: tanh(x_t·W + h)
            h = np.tanh(x[t] @ weights[0] + (h @ weights[1] if op == "ScanMatMul" else h))
            rows.append(h)
        assert got.shape == x.shape
        np.testing.assert_allclose(got, np.stack(rows), rtol=1e-4, atol=1e-5)
