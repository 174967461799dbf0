"""Judged outputs held in the form their readings need, not whole (issue 26 item 4).

Why: the floor judges a candidate on the held-out feeds and, for outputs read as reads, on the
first calibration feeds too (``floor.measure(seen=)``). Held whole, those outputs are the largest
thing alive while a candidate is judged: PP-OCRv4 rec A8W8 holds 32 calibration feeds'
``[1, 40, 6625]`` softmax (1 MiB each) per candidate, beside float's twins, at the top of the
quantization's peak (bench/RESULTS.md, peak54). Yet the only reading of those feeds there is
the CTC strings judgement (``class_scores._judge_strings``), which needs, per position, the
candidate's arg-max, its value at float's arg-max and the largest of its values over the classes
that would change float's string. At most four classes are ever left out of that largest value
(float's own, the blank, the two neighbours' reads), so the :data:`KEEP` largest values and their
classes hold it exactly. Float's side of the same feeds is held so too, once, after calibration
(:func:`hold_float`: its arg-max, its largest values and their probabilities), the whole arrays
otherwise alive from calibration to the end of the quantization.

**Who decides.** The floor, from an output's reading (:func:`held_form_outputs`): an output held
so is a class-score sequence of an alphabet whose float reads on the held-out feeds read as a CTC
reader's (``class_scores.ctc_blank``), and no other reading the floor gives it (a mask, regions,
scores, a decoder, a declared reading, tokens, a group, a gate) reads the calibration feeds. Every
other output is kept whole.

**Exact, or loud.** A held output is no array: ``np.asarray`` of it raises
:class:`HeldOutputError`, so a reading that would need the whole array fails instead of judging
something else. The callers (``pipeline/verify.py``, repair) then run the calibration feeds
again, whole, and judge those (:func:`onnxptq.pipeline.verify.measure_seen`): the same verdict,
at the old price, where the floor's choice was wrong."""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np

from .class_scores import MAX_FIELDS, _probabilities, _sequences, _wide, background_class, ctc_blank
from .held_scores import KEEP, HeldFloat, HeldOutputError, HeldScores, is_held

__all__ = ["KEEP", "HeldFloat", "HeldOutputError", "HeldScores", "held_form_outputs", "hold_float", "hold_scores", "holder",
           "is_held"]


def _poolable(a: np.ndarray) -> bool:
    """A finite float sequence (rank 3 or more) of more than :data:`KEEP` classes: what the floor
    pools and a held form holds exactly."""
    return np.issubdtype(a.dtype, np.floating) and a.ndim >= 3 and a.shape[-1] > KEEP and bool(np.isfinite(a).all())


def _per_position(a: np.ndarray) -> np.ndarray:
    """``a`` as the judges read it: its ``[reads, T, C]`` view in float64."""
    return _wide(_sequences([a])[0])


def _largest(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position of ``x``, its :data:`KEEP` largest values' classes and the values, in any order (only
    their maximum outside a few classes is read); the classes copied out of the partition's whole-size
    index array, which would otherwise stay alive under the view."""
    order = np.argpartition(x, x.shape[-1] - KEEP, axis=-1)[..., -KEEP:].copy()
    return order, np.take_along_axis(x, order, -1)


def hold_scores(name: str, ref: np.ndarray, got: np.ndarray) -> HeldScores | np.ndarray:
    """``got`` (the candidate's output ``name`` on one calibration feed) held beside float's ``ref``
    on the same feed; ``got`` itself where the two do not pair as the floor's filters take them
    (another shape, a non-float or non-finite array: the floor skips or judges those whole)."""
    g = np.asarray(got)
    if isinstance(ref, HeldFloat):
        ref_top = ref.top
    else:
        r = np.asarray(ref)
        if not _poolable(r):
            return got
        ref_top = np.argmax(_per_position(r), -1)
    if tuple(ref.shape) != g.shape or not _poolable(g):
        return got
    x = _per_position(g)
    return HeldScores(name, tuple(g.shape), tuple(x.shape), g.dtype, ref_top, np.argmax(x, -1),
                      np.take_along_axis(x, ref_top[..., None], -1)[..., 0], *_largest(x))


def hold_float(name: str, ref: Any) -> HeldFloat | Any:
    """Float's output ``name`` on one calibration feed held as the CTC strings judgement reads float's
    side (:class:`HeldFloat`); ``ref`` itself where the floor would not pool it (not a finite float
    sequence of more than :data:`KEEP` classes)."""
    r = np.asarray(ref)
    if not _poolable(r):
        return ref
    x = _per_position(r)
    top = np.argmax(x, -1)
    order, value = _largest(x)
    p = _probabilities(x)
    return HeldFloat(name, tuple(r.shape), tuple(x.shape), r.dtype, top, top,
                     np.take_along_axis(x, top[..., None], -1)[..., 0], order, value,
                     np.take_along_axis(p, top[..., None], -1)[..., 0], np.take_along_axis(p, order, -1))


def held_form_outputs(reference: Sequence[Mapping[str, Any]], class_outputs: Mapping[str, Any] | Collection[str] = (),
                      **readings: Any) -> frozenset[str]:
    """The outputs whose calibration-feed outputs the floor reads only through the CTC strings
    judgement, so that float's and a candidate's may be held (:class:`HeldFloat`, :class:`HeldScores`;
    module docstring).

    ``reference``: float's outputs on the held-out feeds; ``class_outputs`` and ``readings``: the
    keyword arguments ``floor.measure`` is given (``Calibrated.readings``). Structural first (a
    softmax class output no other reading names), then float's own reads: an alphabet read as a
    CTC reader's. Where this is wrong, the held output's reader fails loudly and the feeds are run
    whole (module docstring)."""
    if not reference:
        return frozenset()
    kinds = class_outputs if isinstance(class_outputs, Mapping) else dict.fromkeys(class_outputs)
    others: set[str] = set()  # outputs any other reading names (the decisions' tensors are no outputs)
    for key, value in readings.items():
        if key == "det_levels":
            others.update(lv.output for levels in value or () for lv in levels)
        elif key == "read_groups":
            others.update(n for group in value or () for n in group)
        elif key not in ("decisions", "softmax_maps") and isinstance(value, (Mapping, set, frozenset, list, tuple)):
            # (a softmax map reads the calibration feeds only where the held-out data shows a two-class
            # map's rare cells, ``floor._judge_kept``: never a CTC reader's alphabet)
            others.update(n for n in value if isinstance(n, str))
            if isinstance(value, Mapping):
                others.update(v for v in value.values() if isinstance(v, str))  # a gate's sibling output
    held = set()
    for name, kind in kinds.items():
        if name in others or getattr(kind, "rule", "softmax") != "softmax":
            continue
        refs = [np.asarray(f[name]) for f in reference if name in f]
        if not refs or any(not np.issubdtype(r.dtype, np.floating) or r.ndim < 3 for r in refs):
            continue
        seqs = _sequences(refs)
        classes = seqs[0].shape[-1]
        if classes <= MAX_FIELDS:
            continue
        tops = [np.argmax(s, -1) for s in seqs]
        if ctc_blank(tops, classes, background_class(tops)) is not None:
            held.add(name)
    return frozenset(held)


def holder(held: Collection[str], names: Sequence[str], float_outputs: Sequence[Mapping[str, Any]]
           ) -> Callable[[int, list[Any]], list[Any]] | None:
    """What a run of the calibration feeds (``sessions.run_feeds``' ``reduce``) applies to feed
    ``i``'s outputs (in the order of ``names``) as they come out: each output of ``held`` held
    (:func:`hold_scores`) beside float's ``float_outputs[i]``, the whole array let go; None where
    nothing is held."""
    at = [(j, n) for j, n in enumerate(names) if n in held]
    if not at:
        return None

    def hold(i: int, outputs: list[Any]) -> list[Any]:
        ref = float_outputs[i] if i < len(float_outputs) else {}
        outputs = list(outputs)
        for j, n in at:
            if n in ref:
                outputs[j] = hold_scores(n, ref[n], outputs[j])
        return outputs

    return hold
