"""Streamed models judged as they are used: each call's state inputs its own previous call's state outputs.

Why: a streaming model (a speech enhancer fed 256-sample hops, a VAD fed 32 ms windows) returns, beside
what its user reads, the caches its next call takes back. Judged one call at a time, every call gets
the caches FLOAT carried into it, so the candidate's error never accumulates as it does for the user:
decibri's FastEnhancer-T under A16W8 kept every held-out chunk within 20 dB SNR of float's per call,
0.967 of them streamed with its own caches, and MX9 1.000 → 0.966 (bench/RESULTS.md, newmodels21).

**What carries state** (:func:`state_pairs`, then :func:`find_stream`; no name is read):

- by structure, the candidates: a float graph input and a float graph output of the same element type
  and the same shape (every axis fixed and equal, or the same symbolic name; an output's axis that shape
  inference left unresolved, a symbol no input declares, agrees with any), in a model with an input
  besides them (the new data of each call: a model whose every input is such is an image restorer);
- by the data, the pairs: the feeds hold a stream where a feed's input of a candidate pair equals, within
  :data:`RTOL`, the output of the pair that float returned on another feed (the calibration data recorded as
  the user's loop runs). A pair must link at least :data:`MIN_LINKS` feeds by values that are not all zero
  (a stream's first call takes zero states, which any zero output would match); an input that more than
  one output of its shape matches keeps the output with the most links.

A feed's predecessor is the feed whose outputs every carried pair links it to (pairs whose input is all
zero on that feed — a reset — say nothing); the chains of feeds so linked are the streams the data holds.

**The judgement** (:func:`streamed_outputs`): the candidate runs over each chain in order, the first call
as fed, every later call with the state inputs replaced by the candidate's own previous outputs of the
pairs. Float streamed needs no run: the feeds ARE float's stream (each link was checked against its
outputs), so float's per-call outputs on them are its streamed outputs. The state outputs themselves are
not judged where the model has other float outputs (:func:`carried_outputs`): their error is judged
through what they feed, the outputs the user reads, as the user meets it.

**What the judgement counts** (:func:`held_out_chains`): the held-out calls of one chain are one clip's, not
independent draws; the floor's bounds count the chains (analysis/evidence.py, "Chains of calls").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

import numpy as np
import onnx

from ..graph.ops import FLOATING
from .decisions import KEY as DECISION_KEY
from .evidence import Chains

__all__ = ["MIN_LINKS", "RTOL", "Stream", "carried_outputs", "find_stream", "held_out_chains", "state_pairs", "streamed_outputs"]

#: a state input equals a previous output within this relative tolerance (of the output's largest magnitude):
#: float's own loop feeds its outputs back bit for bit, but the floor's float is the prepared model, whose fused
#: kernels differ: hama's G2P decoder under the FP16 preset's preparation returned its GRU state 1e-4 of its
#: range off the one its loop fed (bench/RESULTS.md, fastenh); no two unrelated states agree to 0.1 % everywhere
RTOL = 1e-3
#: links (feeds whose state input is a previous feed's output) a pair needs to be called a carried state
MIN_LINKS = 2


def _signature(value_info: onnx.ValueInfoProto) -> tuple | None:
    """(element type, dims) of a float tensor with a shape, each dim its value, its symbolic name or None (not
    known); None where it is not such a tensor."""
    t = value_info.type.tensor_type
    if t.elem_type not in FLOATING or not t.HasField("shape") or not t.shape.dim:
        return None
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return t.elem_type, dims


def _alike(state: tuple | None, out: tuple | None, declared: set[str]) -> bool:
    """An input's and an output's signatures say the same shape: every axis equal, the output's axis a symbol no
    input declares (shape inference's leftover: silero's ``stateN`` is ``[ConcatstateN_dim_0, batch,
    ConcatstateN_dim_2]`` beside ``state`` ``[2, batch, 128]``) or not known; at least one axis equal; the input's
    every axis known."""
    if state is None or out is None or state[0] != out[0] or len(state[1]) != len(out[1]) or None in state[1]:
        return False
    pairs = list(zip(state[1], out[1]))
    return (all(a == b or b is None or (isinstance(b, str) and b not in declared) for a, b in pairs)
            and any(a == b for a, b in pairs))


def state_pairs(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """``(input, output)`` candidates for a carried state, by structure (module docstring): a float graph input
    and output of the same element type and shape. The data decides which carry (:func:`find_stream`)."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    declared = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.dim_param}
    outputs = [(o.name, _signature(o)) for o in model.graph.output]
    pairs = []
    for i in inputs:
        sig = _signature(i)
        pairs.extend((i.name, name) for name, s in outputs if _alike(sig, s, declared))
    if {i.name for i in inputs} <= {i for i, _ in pairs}:
        return []  # every input could be a state: no new data comes in per call (an image in, the same shape out)
    return pairs


@dataclass(frozen=True)
class Stream:
    """The streams a list of feeds holds: the pairs carried and the chains of feeds (indices, in call order)."""

    #: ``(input, output)`` of each carried state
    pairs: tuple[tuple[str, str], ...]
    #: feeds linked from call to call, each chain in call order (chains of one feed are left out)
    chains: tuple[tuple[int, ...], ...]
    #: per linked feed, the inputs its predecessor's outputs gave it (a pair reset to zeros on it is not carried)
    carried: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    def describe(self) -> str:
        states = ", ".join(f"{i} ← {o}" for i, o in self.pairs)
        calls = sum(len(c) for c in self.chains)
        return f"{calls} calls in {len(self.chains)} stream(s), each call fed its own previous state ({states})"


def _close(x: np.ndarray, y: np.ndarray) -> bool:
    if x.shape != y.shape:
        return False
    scale = float(np.max(np.abs(y))) if y.size else 0.0
    return bool(np.all(np.abs(x.astype(np.float64) - y) <= RTOL * max(scale, 1e-30)))


def _links(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None]) -> dict[int, int]:
    """``{b: a}``: feed ``b``'s (non-zero) input equals feed ``a``'s output. A sum and an absolute sum first, for
    all outputs at once, so that most pairs of feeds are told apart without comparing their whole values."""
    known = [(a, y) for a, y in enumerate(outs) if y is not None and y.size and np.all(np.isfinite(y))]
    if not known:
        return {}
    keys = np.array([[float(np.sum(y, dtype=np.float64)), float(np.sum(np.abs(y), dtype=np.float64))] for _, y in known])
    slack = 4 * RTOL * np.maximum(keys[:, 1], 1e-30)
    found: dict[int, int] = {}
    for b, x in enumerate(ins):
        if x is None or not np.any(x):
            continue
        kx = np.array([float(np.sum(x, dtype=np.float64)), float(np.sum(np.abs(x), dtype=np.float64))])
        for j in np.flatnonzero(np.all(np.abs(keys - kx) <= slack[:, None], axis=1)):
            a, y = known[j]
            if a != b and _close(x, y):
                found[b] = a
                break
    return found


def find_stream(feeds: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any] | None],
                candidates: Sequence[tuple[str, str]]) -> Stream | None:
    """The streams ``feeds`` hold (module docstring), ``outputs[k]`` float's outputs on ``feeds[k]`` (None, or an
    output missing or not an array: not known, so no link from that feed); None where no pair carries."""
    def value(d: Mapping[str, Any] | None, name: str) -> np.ndarray | None:
        v = d.get(name) if d is not None else None
        return v if isinstance(v, np.ndarray) else None

    by_input: dict[str, tuple[str, dict[int, int]]] = {}
    for i, o in candidates:
        links = _links([value(f, i) for f in feeds], [value(out, o) for out in outputs])
        if len(links) >= MIN_LINKS and len(links) > len(by_input.get(i, ("", {}))[1]):
            by_input[i] = (o, links)
    if not by_input:
        return None
    pred: dict[int, int] = {}
    carried: dict[int, tuple[str, ...]] = {}
    for b, f in enumerate(feeds):
        said = {i: links.get(b) for i, (_, links) in by_input.items() if (x := value(f, i)) is not None and np.any(x)}
        sources = set(said.values())
        if said and len(sources) == 1 and None not in sources:
            pred[b], carried[b] = sources.pop(), tuple(said)
    succ: dict[int, int] = {}
    for b, a in sorted(pred.items()):
        succ.setdefault(a, b)
    chains = []
    for root in range(len(feeds)):
        if root in pred and pred[root] in succ and succ[pred[root]] == root:
            continue  # not a chain's first call
        chain, seen, k = [root], {root}, root
        while k in succ and succ[k] not in seen:
            k = succ[k]
            chain.append(k)
            seen.add(k)
        if len(chain) > 1:
            chains.append(tuple(chain))
    if not chains:
        return None
    return Stream(tuple((i, o) for i, (o, _) in by_input.items()), tuple(chains), carried)


def streamed_outputs(run: Callable[[dict[str, Any]], dict[str, Any]], feeds: Sequence[Mapping[str, Any]],
                     stream: Stream, wanted: Callable[[int], bool] = lambda k: True) -> dict[int, dict[str, Any]]:
    """``{feed index: outputs}`` of a candidate run over ``stream``'s chains in order (module docstring): ``run(feed)``
    gives one call's outputs by name, the state outputs among them. A chain is run up to its last feed ``wanted``
    (those after it would judge nothing); chains with none are not run."""
    outs = dict(stream.pairs)
    got: dict[int, dict[str, Any]] = {}
    for chain in stream.chains:
        last = max((n for n, k in enumerate(chain) if wanted(k)), default=-1)
        previous: dict[str, Any] | None = None
        for k in chain[:last + 1]:
            feed = dict(feeds[k])
            if previous is not None:
                for i in stream.carried.get(k, ()):
                    feed[i] = previous[outs[i]]
            previous = got[k] = run(feed)
    return got


def carried_outputs(stream: Stream, names: Collection[str]) -> frozenset[str]:
    """The state outputs of ``stream`` not judged themselves (module docstring): all of them where ``names``
    (the outputs compared) hold another; none where the states are all the model returns. The graph's inner
    decisions (``decision:`` keys, analysis/decisions.py) are no output the model returns."""
    states = frozenset(o for _, o in stream.pairs)
    return states if any(n not in states and not n.startswith(DECISION_KEY) for n in names) else frozenset()


def held_out_chains(stream: Stream, held: int) -> Chains:
    """How the held-out feeds (the first ``held`` of the feeds ``stream`` was found on) hang together: the held-out
    calls of each of its chains that holds any, in all ``held`` (module docstring, "What the judgement counts"). A
    chain's first call, run as fed, is of its clip too; a held-out feed in no chain is independent."""
    return Chains(tuple(n for n in (sum(1 for k in chain if k < held) for chain in stream.chains) if n), held)
