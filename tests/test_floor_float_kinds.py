"""What float's values say an output is, asked once per repair search (analysis/floor.py, ``remembered_float_kinds``).

Every candidate of a search is judged against the same float outputs, so a multi-label head's, a regression head's or
a class-logit map's test on float's values gives the same answer each time; asked again it was most of a verdict
(ddddocr_ocr MXFP8_E4M3: 3.1 of a 23 CPU s search in ``head_kind.shift_share``; bench/RESULTS.md, repair20). Within
the context the answer is remembered by the arrays' identity, and let go on leaving it. Fails on main ``3f112c8b``
(no such context: the import).
"""

from __future__ import annotations

import numpy as np

from onnxptq.analysis import floor
from onnxptq.analysis.floor import remembered_float_kinds


def test_float_kinds_are_asked_once_within_the_context_and_forgotten_after(monkeypatch):
    calls: list[int] = []  # the arrays each test on float's values was asked with
    asked = floor.multilabel_like
    monkeypatch.setattr(floor, "multilabel_like", lambda values: calls.append(len(values)) or asked(values))
    rng = np.random.default_rng(0)
    reference = [{"y": rng.normal(size=(64, 40)).astype(np.float32)} for _ in range(4)]
    seen = ([{"y": rng.normal(size=(64, 40)).astype(np.float32)} for _ in range(2)], [])
    alone = floor._multilabel_head("y", reference, seen)
    with remembered_float_kinds():
        answers = [floor._multilabel_head("y", reference, seen) for _ in range(3)]
        other = [{"y": r["y"].copy()} for r in reference]  # other arrays (equal values): asked again
        answers.append(floor._multilabel_head("y", other, seen))
    assert answers == [alone] * 4
    assert calls == [6, 6, 6], calls  # alone, once in the context for the same arrays, once for the others
    floor._multilabel_head("y", reference, seen)  # after the context: nothing remembered
    assert len(calls) == 4 and not floor._KINDS.entries
