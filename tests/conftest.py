"""Shared fixtures: a small synthetic CNN (the reference tool's end-to-end check model) and its data."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def make_small_cnn(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """Conv-Relu-Conv-Add-GlobalAveragePool-Flatten-Gemm on [N,3,16,16], as in spec test vector F."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0, 0.1, (8,)).astype(np.float32)
    w2 = rng.normal(0, 0.2, (8, 8, 3, 3)).astype(np.float32)
    b2 = rng.normal(0, 0.1, (8,)).astype(np.float32)
    wg = rng.normal(0, 0.3, (8, 10)).astype(np.float32)
    bg = rng.normal(0, 0.1, (10,)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["a1"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flatten"),
        helper.make_node("Gemm", ["f1", "WG", "BG"], ["y"], name="fc"),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in [(w1, "W1"), (b1, "B1"), (w2, "W2"), (b2, "B2"), (wg, "WG"), (bg, "BG")]]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def small_cnn_feeds(n: int = 4, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


@pytest.fixture
def small_cnn() -> onnx.ModelProto:
    return make_small_cnn()


@pytest.fixture
def small_cnn_path(tmp_path, small_cnn):
    path = tmp_path / "small_cnn.onnx"
    onnx.save(small_cnn, path)
    return path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` (real PP-OCR models, minutes each) run first, the rest after in
    their collected order. Why: under ``pytest -n 2`` a worker that meets a 200 s test near the end
    runs it alone while the other sits idle; started first, the long tests overlap and the many
    short ones fill in behind them (longest-first scheduling). Order only: every test still runs."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _one_intra_op_thread_per_worker() -> None:
    """Sessions the tests open without a thread count get one intra-op thread, under pytest-xdist.

    Why: the suite runs one worker per core (``-n 2`` on 2 cores, .ci/run). onnxruntime's default
    pool is one thread per core, so two workers each running a default session ask for twice the
    cores there are; every parallel op then waits for its slowest slice, and idle pool threads spin
    on CPU the other worker needs (PP-OCRv4 rec over 96 lines: 9.0 CPU s with the default pool, 6.3
    with one thread, the same outputs; tests/test_quantize_ppocr.py set it by hand). The library's
    own heavy sessions already size their pools to the cores (``sessions.run_threads``). A session
    given an explicit thread count keeps it; outside xdist nothing changes."""
    import onnxruntime as ort

    default = ort.InferenceSession
    if getattr(default, "_one_thread_per_worker", False):
        return

    class OneThreadSession(default):
        _one_thread_per_worker = True

        def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
            if sess_options is None:
                sess_options = ort.SessionOptions()
            if sess_options.intra_op_num_threads == 0:  # 0: onnxruntime's default, one per core
                sess_options.intra_op_num_threads = 1
            super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)

    OneThreadSession.__name__ = OneThreadSession.__qualname__ = "InferenceSession"
    ort.InferenceSession = OneThreadSession


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _one_intra_op_thread_per_worker()
