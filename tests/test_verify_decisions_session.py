"""The graph's inner decisions are read from finish's session (pipeline/finish.py ``also``, complete._verify).

Before: the verification ran the held-out (and judged calibration) feeds through finish's session for the
graph's outputs, then opened a second session on an evaluation copy with the decisions' tensors as outputs
and ran the same feeds again for them: on a block-format model a second inlining of every quantizer call
(trueocr_rec MX9: 5 sessions, 1.7 CPU s; bench/RESULTS.md, blockquant12). Now finish's session returns both,
and the judgement is the one the two sessions made (the same outputs bit for bit).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxptq.analysis.decisions as decisions_mod
import onnxptq.pipeline.complete as complete_mod
import onnxptq.pipeline.finish as finish_mod
from onnxptq import get_preset
from onnxptq.analysis.decisions import KEY
from onnxptq.api import quantize

T, F, C = 16, 12, 10  # steps, features per step, classes


def _reader() -> onnx.ModelProto:
    """A CTC-like head that takes its ArgMax in the graph (ids) beside a float confidence (conf)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((F, C)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([2], np.int64), "axes")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["l0"], name="head"),
             helper.make_node("Add", ["l0", "b"], ["logits"], name="head_bias"),
             helper.make_node("ArgMax", ["logits"], ["ids"], name="argmax", axis=2, keepdims=0),
             helper.make_node("Softmax", ["logits"], ["p"], name="softmax", axis=2),
             helper.make_node("ReduceMax", ["p", "axes"], ["conf"], name="conf", keepdims=0)]
    graph = helper.make_graph(nodes, "reader", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, F])],
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, T]),
                               helper.make_tensor_value_info("conf", TensorProto.FLOAT, [1, T])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def reader() -> tuple[onnx.ModelProto, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(1)
    return _reader(), [{"x": rng.standard_normal((1, T, F)).astype(np.float32)} for _ in range(24)]


def _quantize(monkeypatch: pytest.MonkeyPatch, reader, preset: str, one_session: bool):
    """The quantization, the sessions finish and the decisions' evaluation copy opened."""
    opened = {"finish": 0, "decisions": 0}
    for name, module in (("finish", finish_mod), ("decisions", decisions_mod)):
        def counted(model, *args, _real=module.open_session, _name=name, **kwargs):
            # the decisions' sessions on the quantized model (the float model's are calibration's)
            opened[_name] += _name == "finish" or _quantized(model)
            return _real(model, *args, **kwargs)
        monkeypatch.setattr(module, "open_session", counted)
    if not one_session:  # the form before: finish's session returns the graph's outputs only
        monkeypatch.setattr(complete_mod, "decision_tensors", lambda model, decisions: {})
    model, data = reader
    result = quantize(model, dataclasses.replace(get_preset(preset), repair=False), data=data)
    monkeypatch.undo()
    return result, opened


def _quantized(model) -> bool:
    """Whether ``model`` (a ModelProto) holds quantizers: Q/DQ nodes or our functions."""
    return isinstance(model, onnx.ModelProto) and (len(model.functions) > 0 or any(
        n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node))


@pytest.mark.parametrize("preset", ["MX9", "A8W8"])
def test_decisions_come_from_finish_session_with_the_same_judgement(monkeypatch, reader, preset):
    one, opened_one = _quantize(monkeypatch, reader, preset, one_session=True)
    two, opened_two = _quantize(monkeypatch, reader, preset, one_session=False)
    assert opened_one == {"finish": 1, "decisions": 0}, opened_one
    assert opened_two == {"finish": 1, "decisions": 1}, opened_two  # the second session this saves
    # the decision was judged, and judged alike: the verdict and the figures of the two forms are one
    assert KEY + "argmax" in one.floor.outputs, one.summary()
    assert one.floor.to_json() == two.floor.to_json()
    assert one.metrics == two.metrics
    # the delivered model is the user's graph: the decision's tensor was an output of the session's bytes only
    assert [o.name for o in one.model.graph.output] == ["ids", "conf"]
    assert one.model.SerializeToString() == two.model.SerializeToString()


def test_past_the_protobuf_limit_the_decisions_are_read_on_the_evaluation_copy(monkeypatch, reader):
    """Past protobuf's limit finish's session reads a file without the extra outputs (pipeline/finish.py): the
    verification asks the session which outputs it has and reads the decisions on the evaluation copy, as before,
    with the same judgement (finish's model past the limit here: its serialization gives None, as there)."""
    small, _ = _quantize(monkeypatch, reader, "A8W8", one_session=True)
    monkeypatch.setattr(finish_mod, "serialized", lambda model, limit=None: None)  # undone by _quantize, after it
    large, opened = _quantize(monkeypatch, reader, "A8W8", one_session=True)
    assert opened == {"finish": 1, "decisions": 1}, opened
    assert KEY + "argmax" in large.floor.outputs, large.summary()
    assert large.floor.to_json() == small.floor.to_json()
    assert large.metrics == small.metrics


def test_finish_returns_the_extra_tensors_and_leaves_the_model_as_it_was(reader):
    model = onnx.ModelProto()
    model.CopyFrom(reader[0])
    before = model.graph.SerializeToString()
    _, session = finish_mod.finish(model, "reader", also=("logits", "ids"))
    assert [o.name for o in session.get_outputs()] == ["ids", "conf", "logits"]
    assert model.graph.SerializeToString() == before
    feed = reader[1][0]
    logits, ids = session.run(["logits", "ids"], feed)
    assert np.array_equal(ids, logits.argmax(axis=2))


def test_the_second_look_runs_the_reserve_on_finish_session(monkeypatch):
    """A look the first held-out samples ask for (test_evalsamples_looks' clean classifier, 96 feeds: a reserve of
    24) is taken on the session finish opened for the verification, not on a second one of the same bytes; its
    verdict is the one a fresh session gives."""
    from test_evalsamples_looks import _classifier, _clear_rows

    import onnxptq.pipeline.second_look as look_mod

    rng = np.random.default_rng(0)
    feeds = [{"x": _clear_rows(rng, 4, 0.3)} for _ in range(96)]
    cfg = dataclasses.replace(get_preset("MX9"), repair=False)
    results, opened = {}, {}
    for reuse in (True, False):
        count = [0]

        def counted(*args, _real=finish_mod.open_session, **kwargs):
            count[0] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(finish_mod, "open_session", counted)
        if not reuse:  # the form before: the look opened its own session
            def fresh(calibrated, cfg_, result, eval_samples, _real=look_mod.second_look):
                result._session = None
                return _real(calibrated, cfg_, result, eval_samples)
            monkeypatch.setattr(look_mod, "second_look", fresh)
        results[reuse] = quantize(_classifier(), cfg, feeds)
        opened[reuse] = count[0]
        monkeypatch.undo()
    assert "second look" in results[True].timings and results[True].floor.samples == 32
    assert opened == {True: 1, False: 2}, opened
    assert results[True].floor.to_json() == results[False].floor.to_json()
    assert results[True].metrics == results[False].metrics
    assert results[True]._session is None  # not held past the look


@pytest.mark.parametrize("preset", ["A8W8", "MXINT8"])
def test_the_judged_outputs_are_a_plain_sessions(monkeypatch, reader, preset) -> None:
    """The floor judges the graph outputs on a session whose model also returns the decision tensor (here ``logits``,
    a MatMul + Add that onnxruntime fuses under Q/DQ): those outputs are bit for bit what a user's default session
    on the delivered model returns (bench/judged_vs_plain.py measures it on zoo models)."""
    import onnxruntime as ort

    seen = {}
    real = complete_mod.decision_tensors

    def spy(model, decisions):
        seen["decisions"] = list(decisions)
        return real(model, decisions)

    monkeypatch.setattr(complete_mod, "decision_tensors", spy)
    model, feeds = reader
    result = quantize(model, get_preset(preset), feeds)
    extra, names = decisions_mod.with_decision_outputs(result.model, seen["decisions"])
    assert names and len(extra.graph.output) > len(result.model.graph.output)
    plain = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    judged = ort.InferenceSession(extra.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = [o.name for o in plain.get_outputs()]
    for feed in feeds[-6:]:
        for a, b in zip(plain.run(outs, feed), judged.run(outs, feed)):
            assert np.array_equal(a, b)
