"""testkit.artefacts, the suite's disk cache: a hit returns the stored value, any change in the key,
the producing module's source or a damaged file recomputes, and writes are atomic."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from testkit import artefacts, ocr


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ONNXPTQ_NO_ARTEFACT_CACHE", raising=False)
    return tmp_path / "onnxptq" / "artefacts"


def _counter():
    calls = []

    def compute():
        calls.append(1)
        return {"x": np.arange(len(calls) * 3, dtype=np.float32)}

    return calls, compute


def test_hit_returns_stored_value_and_key_change_recomputes(cache_home):
    calls, compute = _counter()
    first = artefacts.cached("t", {"seed": 1}, compute, producers=(ocr,))
    again = artefacts.cached("t", {"seed": 1}, compute, producers=(ocr,))
    assert len(calls) == 1 and np.array_equal(first["x"], again["x"])
    artefacts.cached("t", {"seed": 2}, compute, producers=(ocr,))
    artefacts.cached("t", {"seed": 1}, compute)  # other producers: another key
    assert len(calls) == 3
    assert not list(cache_home.glob("*.tmp")), "no temporary file left behind"


def test_damaged_file_is_recomputed_and_replaced(cache_home):
    calls, compute = _counter()
    artefacts.cached("t", {}, compute)
    (stored,) = cache_home.glob("t-*.pkl")
    stored.write_bytes(b"not a pickle")
    value = artefacts.cached("t", {}, compute)
    assert len(calls) == 2 and value["x"].shape == (6,)
    assert pickle.loads(stored.read_bytes())["x"].shape == (6,)


def test_switch_off_computes_every_time(cache_home, monkeypatch):
    monkeypatch.setenv("ONNXPTQ_NO_ARTEFACT_CACHE", "1")
    calls, compute = _counter()
    artefacts.cached("t", {}, compute)
    artefacts.cached("t", {}, compute)
    assert len(calls) == 2 and not cache_home.exists()


def test_file_digest_follows_content(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"model")
    b.write_bytes(b"model")
    assert artefacts.file_digest(a) == artefacts.file_digest(b)
    b.write_bytes(b"model2")
    assert artefacts.file_digest(a) != artefacts.file_digest(b)
