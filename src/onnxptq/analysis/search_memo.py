"""A memo of answers read from float's outputs alone, kept while a repair search runs and let go after it.

Why a module of its own: the floor's judgements ask questions of float's outputs (what each output is:
:func:`onnxptq.analysis.floor.remembered_float_kinds`; its masks' labels:
:func:`onnxptq.analysis.maps.remembered_float_labels`) whose answers are the same for every candidate a repair
search judges, since float's outputs are computed once. Each memo keeps its own keys and bounds; the scope they share
is here once: nested contexts count, and leaving the last lets every entry go, so a single judgement keeps nothing
and a long-lived process holds nothing after a search.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["SearchMemo", "scope"]


class SearchMemo:
    """Entries remembered while :func:`scope` is active (``depth`` > 0); :meth:`clear` lets them go."""

    def __init__(self) -> None:
        self.entries: dict = {}
        self.depth = 0  # active contexts

    def clear(self) -> None:
        self.entries.clear()


@contextlib.contextmanager
def scope(memo: SearchMemo) -> Iterator[None]:
    """Within it ``memo`` remembers; on leaving the last nested scope its entries are let go."""
    memo.depth += 1
    try:
        yield
    finally:
        memo.depth -= 1
        if not memo.depth:
            memo.clear()
