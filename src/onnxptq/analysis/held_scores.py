"""The type of a judged output held per position, not whole (analysis/held_outputs.py says why),
apart from its makers so that ``class_scores``' judges can take it without importing them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: Classes of each position kept (its largest values): float's class, the blank and the two neighbours'
#: reads may be left out of the string-changing maximum, at most four, so one kept class is always
#: outside them, and every class not kept is no larger than it: the maximum is exact, ties or not.
KEEP = 5


class HeldOutputError(TypeError):
    """A held output (:class:`HeldScores`) was read as a whole array: that reading needs the
    calibration feeds' outputs whole."""


@dataclass(frozen=True, eq=False)
class HeldScores:
    """One feed's candidate class scores of a sequence (``class_scores._sequences``' ``[reads, T, C]``
    view, in float64 as the judges take it), held per position as the CTC strings judgement reads them.

    ``ref_top``: float's arg-max per position on the same feed (``[reads, T]``), the position's
    class the others are taken at. ``top``: the candidate's arg-max. ``at``: the candidate's value at
    ``ref_top``. ``index``/``value``: its :data:`KEEP` largest values (in no order) and their
    classes. ``shape``/``dtype``: the whole array's, for the floor's filters (a held array is finite:
    its makers hold no other)."""

    name: str
    shape: tuple[int, ...]
    seq_shape: tuple[int, ...]
    dtype: np.dtype
    ref_top: np.ndarray
    top: np.ndarray
    at: np.ndarray
    index: np.ndarray
    value: np.ndarray

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise HeldOutputError(f"output {self.name!r} on a calibration feed is held reduced (analysis/held_outputs.py); "
                              "this reading needs it whole")

    def largest_outside(self, masked: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        """Per position, the largest of ``values`` (default :attr:`value`, at the kept classes) over the
        kept classes ``masked`` (``[reads, T, KEEP]``, beside :attr:`index`) does not mark (``-inf``
        where every kept class is marked, as a whole row with every class marked)."""
        return np.where(masked, -np.inf, self.value if values is None else values).max(-1)


@dataclass(frozen=True, eq=False)
class HeldFloat(HeldScores):
    """Float's own scores of one calibration feed held so (``ref_top`` and ``top`` the same, ``at`` its
    value there), with its probabilities (``class_scores._probabilities`` of the whole feed) at its
    arg-max (``p_at``) and at the kept classes (``p_value``). Probabilities rise with the scores, so
    the kept classes hold their string-changing maximum too."""

    p_at: np.ndarray = None  # type: ignore[assignment]
    p_value: np.ndarray = None  # type: ignore[assignment]


def is_held(value: Any) -> bool:
    return isinstance(value, HeldScores)
