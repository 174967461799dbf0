"""The held-out feeds run as the user runs a streamed model: each call fed the candidate's own previous state.

Where the model carries state and the calibration data is a stream (analysis/streams.py: a feed's state
inputs are float's state outputs of another feed), the floor's held-out feeds — every third of the data's
first feeds (``calibrate.split_holdout``) — sit in that stream between calibration feeds. A candidate judged
on them one call at a time gets float's state on every call and never meets its own drift (decibri's
FastEnhancer-T A16W8: every held-out chunk within 20 dB SNR of float's per call, 0.967 streamed). So the
calibration keeps the calls between them with float's outputs (``calibrate.stream_feeds``), and the candidate
runs over each chain of linked feeds in order up to its last held-out call (:func:`held_out_outputs`); its
outputs on the held-out calls are judged against float's, which are float's streamed outputs already.

Cost: the calls of the chains instead of the held-out calls alone: at most ``HOLDOUT_RATIO`` (3) times as
many runs, one call at a time (a streamed call needs the one before it). Only models whose data the
stream rule finds pay it.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

import numpy as np

from ..analysis.streams import Stream, carried_outputs, find_stream, held_out_chains, state_pairs, streamed_outputs
from ..analysis.evidence import clips
from ..sessions import run_feeds

log = logging.getLogger(__name__)

#: a :class:`onnxptq.pipeline.calibrate.Calibrated` (not imported: calibration settles its stream here)
Calibrated = Any

__all__ = ["held_out_outputs", "judged_stream", "settle_stream"]


def _find(calibrated: Calibrated, candidates: list[tuple[str, str]]) -> tuple[Stream | None, list[dict[str, np.ndarray]]]:
    """The stream over the held-out feeds (first, by their index) and the calibration feeds kept with float outputs."""
    held = {id(f) for f in calibrated.holdout}
    pool = calibrated.reads_kept if len(calibrated.reads_kept) > len(calibrated.kept) else calibrated.kept
    kept = [(f, o) for f, o in zip(pool, calibrated.float_outputs) if id(f) not in held]
    feeds = list(calibrated.holdout) + [f for f, _ in kept]
    return find_stream(feeds, list(calibrated.holdout_outputs) + [o for _, o in kept], candidates), feeds


def judged_stream(calibrated: Calibrated) -> tuple[Stream, list[dict[str, np.ndarray]], str] | None:
    """``(stream, feeds, words)``: the stream the held-out feeds sit in (analysis/streams.py) over the held-out feeds
    then the calibration feeds with float outputs (``feeds``: the held-out ones first, by their index), and how it is
    judged in the summary's words; None where no held-out feed is in a chain of two calls or more. Found once per
    set of held-out feeds; the state outputs are then judged through what they feed (``readings["carried"]``:
    analysis/streams.py, ``carried_outputs``), and the floor's bounds count the held-out calls' chains, not the calls
    (``readings["chains"]``: analysis/streams.py ``held_out_chains``, analysis/evidence.py "Chains of calls"), for the
    set judged last.

    Where the held-out feeds are a stream and calibration held a reserve (``calibrate.reserve_stream``: every third
    feed after the first ``3n``), the reserve joins them at once (``Calibrated.look_again``): the first held-out
    calls are the stream's first ``3n`` calls alone (decibri's enhancer: its first 0.4 s, the silence before
    the speech), too early for a drift through the states to show."""
    key = (len(calibrated.holdout), len(calibrated.float_outputs))
    if key in calibrated.streams:
        found = calibrated.streams[key]
        _set_chains(calibrated, found)
        return found
    found = None
    candidates = state_pairs(calibrated.prepared) if not calibrated.holdout_reused and calibrated.holdout else []
    stream, feeds = _find(calibrated, candidates) if candidates else (None, [])
    if stream is not None and calibrated.reserve and not calibrated.looked_again:
        calibrated.look_again()
        log.debug("accuracy floor: the held-out feeds are a stream: the reserve judged with them (%d)", len(calibrated.holdout))
        stream, feeds = _find(calibrated, candidates)
    n = len(calibrated.holdout)
    judged = sorted(k for chain in (stream.chains if stream else ()) for k in chain[1:] if k < n)
    if stream is not None and judged:
        names = list(calibrated.holdout_outputs[0]) if calibrated.holdout_outputs else []
        carried = carried_outputs(stream, names)
        calibrated.readings["carried"] = carried
        chains = held_out_chains(stream, n)
        words = (f"{len(judged)} of the {n} held-out calls run after the calls before them in the calibration stream, "
                 f"the held-out calls in {clips(chains.clips)} (chains of calls; the floor's bounds count them, "
                 f"not the calls: analysis/evidence.py), "
                 f"each call fed the quantized model's own previous state ({', '.join(f'{i} ← {o}' for i, o in stream.pairs)})"
                 + (f"; the states {', '.join(sorted(carried))} judged through the outputs they feed" if carried else ""))
        found = (stream, feeds, words)
        log.debug("accuracy floor: %s", words)
    calibrated.streams[key] = calibrated.streams[(len(calibrated.holdout), len(calibrated.float_outputs))] = found
    _set_chains(calibrated, found)
    return found


def _set_chains(calibrated: Calibrated, found: tuple[Stream, list[dict[str, np.ndarray]], str] | None) -> None:
    """The floor's ``chains`` reading (floor.measure) for the held-out feeds judged now: their chains where they are a
    stream, else none at all (a model that holds no stream is judged with the readings it always was)."""
    if found is None:
        calibrated.readings.pop("chains", None)
    else:
        calibrated.readings["chains"] = held_out_chains(found[0], len(calibrated.holdout))


def settle_stream(calibrated: Calibrated, reads: int, eval_samples: int) -> None:
    """At the end of calibration, where it kept calls for a stream (``calibrate.stream_feeds``): the stream found
    (:func:`judged_stream`, the reserve joined where there is one), or the calls let go where the data holds none
    (a model whose input and output merely share a shape: an image restorer with a strength input), so that
    nothing but the stream's judgement pays for them: ``reads_kept`` and the float outputs back to the ``reads``
    the reads judgement asked for (``calibrate.reads_feeds``)."""
    if judged_stream(calibrated) is not None:
        return
    calibrated.reads_kept = calibrated.reads_kept[:reads] if reads > eval_samples else []
    del calibrated.float_outputs[max(eval_samples, reads, len(calibrated.kept)):]


def held_out_outputs(session: Any, names: Sequence[str], calibrated: Calibrated,
                     keys: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """``(outputs, words)``: the candidate's outputs ``names`` (keyed ``keys``, default ``names``) on the held-out
    feeds, those in a stream run streamed (module docstring), and the summary's words on it (None: every call
    run as fed, as before)."""
    keys = list(keys or names)
    found = judged_stream(calibrated)
    if found is None:
        return [dict(zip(keys, out)) for out in run_feeds(session, names, calibrated.holdout)], None
    stream, feeds, words = found
    n = len(calibrated.holdout)
    states = [o for _, o in stream.pairs if o not in names]
    asked = list(names) + states
    to_key = dict(zip(names, keys))

    def run(feed: dict[str, Any]) -> dict[str, Any]:
        return dict(zip(asked, run_feeds(session, asked, [feed])[0]))

    streamed = streamed_outputs(run, feeds, stream, wanted=lambda k: k < n)
    rest = [k for k in range(n) if k not in streamed]
    per_call = dict(zip(rest, run_feeds(session, names, [feeds[k] for k in rest])))
    got = [{to_key[m]: streamed[k][m] for m in names} if k in streamed else dict(zip(keys, per_call[k])) for k in range(n)]
    return got, words
