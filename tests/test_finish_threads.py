"""finish's session, which the verification runs two feeds at a time, has one pool of the cores a
run gets (issue 26 item 1): not a machine-sized pool per run.

The saving is held by the session's options (a spy on the thread count, not a timing); its
safety by the outputs: the delivered file, the floor's verdict and the figures of a quantization
(a built conv chain) are those the default pool gives, bit for bit, and the session's outputs on
PP-OCR cls equal a default session's.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import onnxptq.pipeline.finish as finish_mod
import onnxptq.sessions as sessions
from onnxptq.api import quantize
from onnxptq.config.presets import get_preset
from onnxptq.pipeline.finish import finish
from onnxptq.sessions import open_session, run_threads


def _cfg(name: str):
    cfg = get_preset(name)
    return cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.random((1, 3, 48, 192), dtype=np.float32)} for _ in range(n)]


@pytest.mark.parametrize("cores, expected", [(1, 1), (2, 1), (3, 1), (16, 8)])
def test_run_threads_shares_the_cores_among_the_runs_in_flight(monkeypatch, cores, expected):
    monkeypatch.setattr(sessions.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert sessions.RUNS_IN_FLIGHT == 2
    assert run_threads() == expected


def test_finish_session_runs_on_one_thread_a_run_on_two_cores(monkeypatch):
    """The spy: the session finish() opens has ``run_threads()`` intra-op threads (onnxruntime's
    default pool, 0 in its options, is what the saving undone gives)."""
    from onnx import TensorProto, helper

    monkeypatch.setattr(sessions.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    _, session = finish(model, "relu")
    assert session.get_session_options().intra_op_num_threads == 1


def test_verification_on_one_thread_delivers_what_the_default_pool_delivers(monkeypatch, tmp_path):
    """A conv chain (MXFP8_E4M3, the FP element bodies), quantized with finish's pool and with
    onnxruntime's default one (``run_threads`` 0): the same file bytes, floor verdict and figures."""
    from test_quantize_cost import conv_chain

    rng = np.random.default_rng(2)
    data = [{"x": rng.uniform(0, 1, (1, 4, 24, 24)).astype(np.float32)} for _ in range(4)]  # the floor judges these 4
    results = {}
    for label, threads in (("run", run_threads), ("default", lambda: 0)):
        monkeypatch.setattr(finish_mod, "run_threads", threads)
        out = tmp_path / f"{label}.onnx"
        r = quantize(conv_chain(3), _cfg("MXFP8_E4M3").replace(repair=False), data, out, eval_samples=4)
        results[label] = (out.read_bytes(), json.dumps(r.floor.to_json(), sort_keys=True, default=str), r.metrics)
    assert results["run"][0] == results["default"][0]
    assert results["run"][1] == results["default"][1]
    assert results["run"][2] == results["default"][2]


def test_finish_session_gives_a_default_sessions_outputs_on_pp_ocr_cls():
    """PP-OCR cls MXFP8_E4M3 (~50 block-function calls; a block format quantizes without data):
    finish()'s session, its runs two in flight as the verification's, gives a default session's
    outputs bit for bit."""
    from testkit.models import model_path

    model = quantize(model_path("cls"), _cfg("MXFP8_E4M3"), None).model
    _, session = finish(model, "cls")
    default = open_session(model)
    names = [o.name for o in default.get_outputs()]
    feeds = _feeds(4, seed=9)
    ours = sessions.run_feeds(session, names, feeds)
    for feed, got in zip(feeds, ours):
        for a, b in zip(got, default.run(names, feed)):
            np.testing.assert_array_equal(a, b)


def test_streaming_evaluation_runs_two_at_a_time_with_the_figures_of_runs_one_at_a_time(tmp_path, monkeypatch):
    """Where nothing is held out (the streaming path) the figures come from finish's session too:
    its runs go two at a time through ``run_feeds`` (a pool of one of two runs' cores would leave
    the rest idle one run at a time), and the figures are those of one run at a time."""
    import onnxptq.analysis.compare as compare_mod
    from onnxptq.graph import external
    from test_quantize_streaming import _chain

    path = _chain(tmp_path)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal((2, 256)).astype(np.float32)} for _ in range(4)]
    monkeypatch.setattr(external, "STREAM_THRESHOLD", 0)
    calls: list[int] = []
    real = compare_mod.run_feeds

    def spy(session, names, batch):
        calls.append(len(batch))
        return real(session, names, batch)

    monkeypatch.setattr(compare_mod, "run_feeds", spy)
    together = quantize(str(path), "MX9", feeds, output=tmp_path / "a" / "q.onnx", eval_samples=4).metrics
    assert calls == [4]
    monkeypatch.setattr(compare_mod, "run_feeds", lambda session, names, batch: [session.run(list(names), f) for f in batch])
    alone = quantize(str(path), "MX9", feeds, output=tmp_path / "b" / "q.onnx", eval_samples=4).metrics
    assert together == alone and together["y"]["cosine"] > 0.99
