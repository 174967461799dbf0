"""bench/session_phases.py splits an onnxruntime session creation at its verbose log's markers, and
bench/quantize_stages.py times the parts of deliver a quantize with the floor on goes through
(issue 26 item 1: where a block format's extra quantize time goes)."""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import quantize_stages  # noqa: E402
import session_phases  # noqa: E402


def _line(second: float, message: str, severity: str = "V") -> str:
    return f"2026-11-29 00:00:{second:09.6f}000 [{severity}:onnxruntime:, file.cc:1 Fn] {message}"


def test_parse_splits_a_creation_at_the_logs_markers() -> None:
    log = [
        _line(0.0, "Session Options { ... }", "I"),
        _line(0.010, "Initializing session.", "I"),
        _line(0.012, "Applying 40 graph transformer(s) for level 1 for up to 10 step(s)."),
        _line(0.013, "Applying graph transformer ConstantFolding on step 1."),
        _line(0.053, "GraphTransformer ConstantFolding modified: 1 with status: OK", "I"),
        _line(0.060, "Applying graph transformer ReshapeFusion on step 1."),
        _line(0.061, "GraphTransformer ReshapeFusion modified: 0 with status: OK", "I"),
        _line(0.070, "Stopping graph transformer iteration for level 1 after step 2 because the graph was not modified."),
        _line(0.100, "Applying 31 graph transformer(s) for level 2 for up to 10 step(s)."),
        _line(0.101, "Applying graph transformer ConvActivationFusion on step 1."),
        _line(0.110, "GraphTransformer ConvActivationFusion modified: 1 with status: OK", "I"),
        _line(0.120, "Applying 2 graph transformer(s) for level 3 for up to 10 step(s)."),
        _line(0.121, "Applying graph transformer NchwcTransformer on step 1."),
        _line(0.130, "GraphTransformer NchwcTransformer modified: 1 with status: OK", "I"),
        _line(0.150, " All nodes placed on [CPUExecutionProvider]. Number of nodes: 1234", "I"),
        _line(0.160, "Saving initialized tensors.", "I"),
        _line(0.170, "Saving initialized tensors.", "I"),
        _line(0.200, "Session successfully initialized.", "I"),
    ]
    ph = session_phases.parse(["not a log line", *log])
    assert ph.total == pytest.approx(0.2)
    assert ph.load == pytest.approx(0.010)
    assert ph.level1 == pytest.approx(0.058)
    assert ph.folding == pytest.approx(0.040)  # ConstantFolding's own work, not the resolve after it
    assert ph.inline == pytest.approx(0.030)
    assert ph.levels23 == pytest.approx(0.050)
    assert ph.finalize == pytest.approx(0.050)
    assert ph.resolves == {"1": 1, "2": 1, "3": 1}
    assert (ph.nodes, ph.subgraphs) == (1234, 2)
    with pytest.raises(ValueError, match="verbose"):
        session_phases.parse(["nothing onnxruntime wrote"])


def _model_with_a_branching_call() -> bytes:
    """Two calls of a local function holding an If, and a weight decoded by a foldable Cast."""
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    body = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
            helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.float32))),
            helper.make_node("Less", ["s", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    fn = helper.make_function("test.phases", "Q", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    w = numpy_helper.from_array(np.arange(8, dtype=np.float16).reshape(1, 8), "w16")
    nodes = [helper.make_node("Cast", ["w16"], ["w"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["X", "w"], ["a"]),
             helper.make_node("Q", ["a"], ["q1"], domain="test.phases"),
             helper.make_node("Q", ["q1"], ["Y"], domain="test.phases")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.phases", 1)],
                              functions=[fn])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_verbose_phases_of_a_real_creation() -> None:
    data = _model_with_a_branching_call()
    ph = session_phases.verbose_phases(data)
    assert ph.total > 0 and ph.load + ph.level1 + ph.inline + ph.levels23 + ph.finalize <= ph.total + 1e-9
    assert ph.nodes >= 2 + 2 * 3  # the calls inlined: their ReduceSum, Less and If in the main graph
    assert ph.subgraphs >= 1 + 2 * 2  # the main graph and both branches of each inlined If
    assert ph.resolves.get("1", 0) >= 1  # the float16 weight's Cast folded at level 1
    assert session_phases.create_seconds(data, 1) > 0


def test_quantize_stages_times_a_context_managers_entry_and_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """lean (pipeline/lean_file.py) is a context manager: its cost is in entering and leaving it,
    not in the call; and deliver is timed where quantize() calls it (api.py's name)."""
    events: list[str] = []

    @contextlib.contextmanager
    def lean(model: list[str]):
        events.append("enter")
        model.append("lean")
        try:
            yield model
        finally:
            model.remove("lean")
            events.append("exit")

    fake = types.ModuleType("fake_complete")
    fake.lean = lean
    monkeypatch.setitem(sys.modules, "fake_complete", fake)
    monkeypatch.setattr(quantize_stages, "WHERE", [("fake_complete", "lean", "lean")])
    clock = iter(range(100))
    added: list[tuple[str, float]] = []
    quantize_stages._wrap_where(lambda k, d: added.append((k, d)), lambda: float(next(clock)))
    model: list[str] = []
    with fake.lean(model) as held:
        assert held == ["lean"] and events == ["enter"]
        events.append("block")
    assert model == [] and events == ["enter", "block", "exit"]
    assert [k for k, _ in added] == ["where_lean", "where_lean"]  # the entry, then the exit
    assert ("onnxptq.api", "deliver", "deliver") in quantize_stages.STAGES
    assert "lean" in quantize_stages.CONTEXTS
