"""finish's session reads the delivered file's own bytes, and the save writes them (pipeline/finish.py ``finish_file``).

Before: finish serialized the in-memory model (inferred shapes, long names, calls' repeated attributes) for its
checker and its session, and the save ran the lean rewrites again and serialized the file: what was judged was not
the file as shipped, and a block format's quantize did the rewrites and a serialization twice. Now the file's bytes
are serialized once; the graph's inner decisions the verification reads are appended to the session's copy as
outputs under the names the file gives them, and the verdict is the one the in-memory form's session gave.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

import onnxptq.pipeline.complete as complete_mod
import onnxptq.pipeline.finish as finish_mod
from onnxptq import get_preset
from onnxptq.analysis.decisions import KEY
from onnxptq.api import quantize

from test_quantize_cost import conv_chain
from test_sparse_storage import _feeds as _bank_feeds
from test_sparse_storage import _model as _bank_model
from test_verify_decisions_session import T, F, _reader


def _cfg(name: str, **changes):
    cfg = get_preset(name)
    return dataclasses.replace(cfg, calibration=dataclasses.replace(cfg.calibration, progress=False), repair=False, **changes)


def _data(n: int, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0, 1, (1, 4, 12, 12)).astype(np.float32)} for _ in range(n)]


def _opened(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes each finish session is opened on, in order."""
    seen: list[bytes] = []

    def capture(model, *args, _real=finish_mod.open_session, **kwargs):
        seen.append(model if isinstance(model, bytes) else model.SerializeToString())
        return _real(model, *args, **kwargs)

    monkeypatch.setattr(finish_mod, "open_session", capture)
    return seen


@pytest.mark.parametrize("preset", ["BF16", "MX9", "A8W8"])
def test_the_session_judged_the_saved_files_bytes(monkeypatch, tmp_path, preset):
    seen = _opened(monkeypatch)
    out = tmp_path / "q.onnx"
    result = quantize(conv_chain(2), _cfg(preset), _data(12), str(out))
    assert result.floor is not None  # judged on held-out feeds, on that session
    assert seen == [out.read_bytes()]
    assert result._file is None  # not held past the save


def test_a_sparse_file_is_the_judged_one(monkeypatch, tmp_path):
    """runtime "cpu" writes mostly-zero float weights sparse: the session read those sparse bytes too."""
    seen = _opened(monkeypatch)
    out = tmp_path / "q.onnx"
    quantize(_bank_model(), _cfg("BF16"), _bank_feeds(12, 1), str(out))
    assert len(onnx.load_from_string(seen[0]).graph.sparse_initializer) == 1
    assert seen == [out.read_bytes()]


def test_decisions_are_read_under_the_files_names_with_the_same_judgement(monkeypatch, tmp_path):
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, T, F)).astype(np.float32)} for _ in range(24)]
    seen = _opened(monkeypatch)
    out = tmp_path / "q.onnx"
    one = quantize(_reader(), _cfg("MX9"), feeds, str(out))
    file = out.read_bytes()
    assert len(seen) == 1 and seen[0].startswith(file) and len(seen[0]) > len(file)
    judged, saved = onnx.load_from_string(seen[0]), onnx.load_from_string(file)
    extra = [o.name for o in judged.graph.output][len(saved.graph.output):]
    made = {o for n in saved.graph.node for o in n.output}
    assert extra and set(extra) <= made  # the decision's tensor, as the file names it
    assert not set(extra) & {o for n in one.model.graph.node for o in n.output}  # not the in-memory name
    assert KEY + "argmax" in one.floor.outputs, one.summary()
    # the in-memory form's session (finish() as before) judges alike and the file is the same
    monkeypatch.setattr(complete_mod, "finish_file", lambda *a, **k: None)
    other = tmp_path / "other.onnx"
    two = quantize(_reader(), _cfg("MX9"), feeds, str(other))
    assert len(seen) == 2 and not seen[1].startswith(file)
    assert one.floor.to_json() == two.floor.to_json()
    assert one.metrics == two.metrics
    assert other.read_bytes() == file
