"""One home for each fact: the copies that were merged cannot come back unnoticed.

Each check greps the package source: a second place that opens an onnxruntime session, or reads a
model's opset with its own copy of the default-domain rule, fails here with the file named.
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest
from onnx import helper

import onnxptq
from onnxptq.graph.opsets import is_onnx_domain, model_opset

PACKAGE_DIR = Path(onnxptq.__file__).resolve().parent


def _sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE_DIR)): p.read_text(encoding="utf-8") for p in PACKAGE_DIR.rglob("*.py")}


def _modules_matching(pattern: str) -> list[str]:
    regex = re.compile(pattern)
    return sorted(name for name, text in _sources().items() if regex.search(text))


def test_only_the_session_factory_opens_onnxruntime_sessions():
    assert _modules_matching(r"InferenceSession\(") == ["sessions.py"]
    assert _modules_matching(r"SessionOptions\(") == ["sessions.py"]


def test_the_default_onnx_domain_is_spelt_in_one_module():
    assert _modules_matching(r'"ai\.onnx"') == ["graph/opsets.py"]


def test_collectors_are_chosen_by_methods_alone():
    assert _modules_matching(r"def make_collector\(") == ["calibration/methods.py"]


def test_test_support_stays_out_of_the_library():
    assert _modules_matching(r"class CountingReader\b|def factory_for\(") == []


def test_one_cli_home():
    # Parsing lives in commands/ (and cli.py, which assembles them); tools/*.py are python -m shims.
    parsing = _modules_matching(r"argparse|add_argument\(")
    assert all(name == "cli.py" or name.startswith("commands/") for name in parsing), parsing
    assert _modules_matching(r"--save_as_external_data") == ["commands/convert.py"]  # the convert flags, defined once
    assert not (PACKAGE_DIR / "conversion" / "cli.py").exists()
    for tool in (PACKAGE_DIR / "tools").glob("*.py"):
        assert len(tool.read_text(encoding="utf-8").splitlines()) <= 25, tool.name


def _model(imports: dict[str, int]) -> onnx.ModelProto:
    graph = helper.make_graph([], "g", [], [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()])


@pytest.mark.parametrize("domain", ["", "ai.onnx"])
def test_model_opset_reads_either_spelling_of_the_onnx_domain(domain):
    assert model_opset(_model({domain: 17, "com.microsoft": 1})) == 17
    assert model_opset(_model({domain: 17, "com.microsoft": 1}), "com.microsoft") == 1


def test_model_opset_without_the_import_is_the_callers_default_or_an_error_naming_it():
    model = _model({"com.example": 3})
    assert model_opset(model, default=21) == 21
    with pytest.raises(ValueError, match="default ONNX"):
        model_opset(model)
    with pytest.raises(ValueError, match="'com.other'"):
        model_opset(model, "com.other")


def test_model_opset_reads_onnx_ir_models_too():
    import onnx_ir as ir

    assert model_opset(ir.serde.deserialize_model(_model({"": 13}))) == 13


def test_onnx_domain_spellings():
    assert all(is_onnx_domain(d) for d in ("", "ai.onnx", "onnx.ai"))
    assert not is_onnx_domain("com.microsoft")


def test_sessions_of_models_over_the_protobuf_limit_go_through_external_data(monkeypatch, small_cnn):
    """Past the limit the factory writes the model beside external data for the session's life."""
    import gc
    import glob
    import tempfile

    import numpy as np

    from onnxptq import sessions

    monkeypatch.setattr(sessions, "PROTO_LIMIT", 0)
    before = set(glob.glob(f"{tempfile.gettempdir()}/onnxptq-session-*"))
    session = sessions.open_session(small_cnn, threads=1, spinning=False)
    made = set(glob.glob(f"{tempfile.gettempdir()}/onnxptq-session-*")) - before
    assert len(made) == 1
    out = session.run(None, {"x": np.ones((1, 3, 16, 16), np.float32)})[0]
    assert out.shape == (1, 10)
    del session
    gc.collect()
    assert not any(Path(p).exists() for p in made)
