"""Decisions a graph takes inside itself, found by structure and judged where they are taken.

Why: the accuracy floor compared graph *outputs*, and a model that decides inside its graph hides
the decision from it. trueocr's CTC reader ends in ``ArgMax`` → an int64 ``ids`` output: the floor
saw integers, judged nothing, and A8W8 / MXFP8_E4M3 / BFP16 changed 6–12 % of its strings with no
word said. isbnx's end-to-end YOLO chooses its 300 output rows with ``TopK`` over per-candidate
scores: 299 of them are background candidates whose order and class ids shuffle under any rounding,
so the floor broke on rows nobody reads and repair kept every node float (bench/RESULTS.md,
"Models outside the zoo" and "Decisions made inside the graph").

**Found by structure** (:func:`find_decisions`), in the main graph, for decision nodes whose result
reaches a graph output:

* ``ArgMax``/``ArgMin``: its data input, judged as per-position class scores along its ``axis``
  (:func:`onnxptq.analysis.class_scores.judge_positions`: the decision positions, float's near-ties
  left out, reads estimated from margins) — an ``ArgMin`` on the negated values; an ``ArgMax`` whose
  indices only place a window of the same scores for a soft arg-max (a pitch tracker's decode,
  :mod:`onnxptq.analysis.ordinal_bins`) is kind ``"bins"``, judged by the share of positions whose
  arg-max stays within the window's half-width of float's;
* ``TopK``: its scores input; ``NonMaxSuppression``: its ``scores`` input with its own
  ``score_threshold`` input where that is a constant;
* a comparison (``Greater``, ``GreaterOrEqual``, ``Less``, ``LessOrEqual``) of a tensor with a
  constant: the compared tensor (the same comparisons as ``pipeline/plan/thresholds.py``). Not a
  comparison read only through ``And`` with ``IsInf``/``IsNaN`` of the same tensor: that is the sign
  test of ``torch.nan_to_num`` as exported (``Where(IsInf(x) & (x > 0), finfo.max, x)``), whose outcome
  reaches nothing while the tensor is finite; judged as a decision, a ReLU'd tensor's tiny positives
  rounding to 0 broke the floor with the outputs' agreement at 0.9997 (pymupdf-layout's graph convs:
  repair kept 58-99 nodes; bench/RESULTS.md, layout19).

A decision tensor that is itself a graph output is left to the output's own judgement, except a
comparison's: a float output's cosine says nothing of which side of a threshold its values fall on.
export_fuzz's ``count = (y > 0).sum(-1)`` beside ``y`` (fuzz22, ef_s36 m001 and efb_s35 m004 under
MXFP8_E4M3): ``y`` held at cosine 0.998 while ``count`` kept float's value on 0.76 / 0.90 of its
elements, and the verdict said "holds" with that figure printed above it. The comparison is judged
as any other (its decision positions, ties left out), so an integer or bool output counted or masked
from a float output is judged by the floor.

**A residual added to the model's input** (:func:`residual_decisions`): a graph output computed as
``Add(graph input, r)`` (or ``Sub``) passes its input through and changes it by ``r``; the user reads
what ``r`` did, and the output's cosine is the input's. RivaGAN's watermark encoder (invisible-watermark)
writes ``output = frame + 0.016 · tanh(…)``: under MXFP8_E4M3 the marked image's cosine was 0.99994 and
its field cosines 0.9999 while the residual — the mark — kept cosine 0.92 of float's, and the float
decoder read 2 payload bits fewer than from float's mark on 2 of 32 images (A8W8: residual 0.9925, 16-bit
and block presets 0.996-0.999; bench/RESULTS.md, "Round 19's silent rows"). The residual is captured
like a decision's tensor and held against the cosine floor. Among 312 zoo and outside files only that
encoder has such an output.

**Captured on the evaluation copies only** (:func:`with_decision_outputs`, :func:`capture`): the
floor's float and quantized held-out runs add the decision tensors as extra graph outputs of a
copy (the quantized model's: of the bytes finish's session reads, which returns them beside the
graph's outputs, pipeline/finish.py); the delivered model is not changed. In the quantized model the tensor is found as the same
input of the node of the same name (quantizers inserted before it are then included: the decision
sees what the node sees).

**Judged** (:func:`judge_decisions`):

* an arg-max as reads (the rule of class-score outputs of rank ≥ 3), against the top-1 floor;
* a selection (``TopK``/NMS scores) on the candidates that *matter* only: those float or the
  quantized model scores at least :func:`relevance` — the graph's own score threshold where it has
  one, else :data:`RELEVANT` of the way from the scores' median to their largest value over the
  held-out feeds (a detector's detections at 0.3–0.95 matter, its thousands of background
  candidates under 0.001 do not). Their scores' cosine is held against the cosine floor;
* a comparison with a constant by its outcome: the share of *decision positions* (where float or
  the quantized model is on the minority side; the majority side is the background) whose outcome
  agrees, against the top-1 floor, values within :data:`TIE` of the threshold left out.

**Outputs that are a selection** (rows a ``TopK`` chose, :mod:`.selection`): judged on their
leading rows only — a sorted ``TopK`` puts the candidates that matter first, and as many rows as
float or the quantized model has candidates that matter (:func:`judge_selected`) are compared,
each float row with its nearest quantized row among the leading ones, field by field. The
background rows are not compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from ..graph.walk import dataflow, upstream_nodes
from .class_scores import UNSURE, judge_positions
from .ordinal_bins import bin_agreement, soft_argmax_windows
from ..sessions import open_session
from .metrics import cosine_similarity

__all__ = ["KEY", "RELEVANT", "TIE", "Decision", "capture", "find_decisions", "judge_decisions", "judge_selected",
           "decision_tensors", "judging", "relevance", "selection_rows", "strings_advisory", "with_decision_outputs"]

#: extra outputs carrying a decision tensor are keyed ``KEY + node name`` in the floor's feeds' dicts
KEY = "decision:"
#: a candidate matters when its score is at least this share of the way from the median score to the largest
RELEVANT = 0.1
#: a compared value within this share of the threshold's magnitude (at least 2⁻¹⁰ absolute) is a tie
TIE = 2.0 ** -10

_COMPARISONS = frozenset("Greater GreaterOrEqual Less LessOrEqual".split())
_DECIDERS = frozenset(("ArgMax", "ArgMin", "TopK", "NonMaxSuppression")) | _COMPARISONS


@dataclass(frozen=True)
class Decision:
    """One decision node of the graph and the tensor it decides on."""

    #: the node's name (the key of its captured tensor: ``KEY + node``) and op type
    node: str
    op: str
    #: which input of the node is the decided tensor, and its name in the model it was found in
    index: int
    tensor: str
    #: "argmax", "bins" (a soft arg-max's window: analysis/ordinal_bins.py), "select", "threshold" or "residual"
    #: (added to a graph input to make a graph output)
    kind: str
    axis: int = -1
    #: TopK's k where constant; a soft arg-max window's half-width in bins; a comparison's or NMS's threshold where constant
    k: int | None = None
    threshold: float | None = None
    #: ArgMin / TopK(largest=0): the decision is on the negated values
    negate: bool = False

    @property
    def key(self) -> str:
        return KEY + self.node

    def describe(self) -> str:
        return f"{self.op} {self.node!r} on {self.tensor!r}"


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: t for t in model.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for name, t in values.items():
        if t.data_location != onnx.TensorProto.EXTERNAL and math.prod(t.dims) <= 16:
            out[name] = onnx.numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.t is not None and math.prod(a.t.dims) <= 16:
                    out[n.output[0]] = onnx.numpy_helper.to_array(a.t)
    return out


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _live(model: onnx.ModelProto) -> set[str]:
    """The main graph's tensors some graph output depends on."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    live: set[str] = set()
    stack = [o.name for o in model.graph.output]
    while stack:
        t = stack.pop()
        if t in live:
            continue
        live.add(t)
        node = producer.get(t)
        if node is not None:
            stack.extend(i for i in node.input if i)
            for a in node.attribute:  # a subgraph's outer-scope reads keep their producers alive
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.extend(_outer_reads(a.g))
    return live


def _outer_reads(graph: onnx.GraphProto) -> list[str]:
    inner = {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    return [i for n in graph.node for i in n.input if i and i not in inner]


def _sign_tests_of_special_values(graph: onnx.GraphProto) -> set[str]:
    """Comparison nodes (by first output) read only through ``And``/``Or`` with ``IsInf``/``IsNaN`` of
    the tensor they compare, ``Cast`` between them looked through (TorchScript casts the booleans):
    nan_to_num's sign tests (module docstring), no decision while the tensor is finite."""
    producer, readers = dataflow(graph.node)

    def uses(t: str) -> list[tuple[str, onnx.NodeProto]]:  # (the input it reads, the node), through Casts
        out = []
        for u in readers.get(t, []):
            out.extend(uses(u.output[0]) if u.op_type == "Cast" else [(t, u)])
        return out

    def root(t: str) -> str:  # the tensor, through Casts (nan_to_num's IsInf reads a Cast of it)
        p = producer.get(t)
        while p is not None and p.op_type == "Cast":
            t, p = p.input[0], producer.get(p.input[0])
        return t

    def special_of(t: str) -> str | None:  # the tensor an IsInf/IsNaN tests, where ``t`` is one (through Casts)
        p = producer.get(root(t))
        return root(p.input[0]) if p is not None and p.op_type in ("IsInf", "IsNaN") else None

    found = set()
    for node in graph.node:
        if node.op_type not in _COMPARISONS or not node.output or not node.output[0]:
            continue
        reads = uses(node.output[0])
        compared = {root(i) for i in node.input}
        if reads and all(u.op_type in ("And", "Or") and any(special_of(t) in compared for t in u.input if t != mine)
                         for mine, u in reads):
            found.add(node.output[0])
    return found


def find_decisions(model: onnx.ModelProto) -> list[Decision]:
    """The decisions of ``model``'s main graph (module docstring), in graph order."""
    consts = _constants(model)
    sign_tests = _sign_tests_of_special_values(model.graph)
    live = _live(model)
    outputs = {o.name for o in model.graph.output}
    inputs = {i.name for i in model.graph.input}
    windows = soft_argmax_windows(model)
    found: list[Decision] = []
    for node in model.graph.node:
        if node.op_type not in _DECIDERS or not any(o in live for o in node.output if o):
            continue
        name = node.name or node.output[0]
        if name in windows:
            found.append(Decision(name, node.op_type, 0, node.input[0], "bins", _attr(node, "axis", 0), k=windows[name]))
        elif node.op_type in ("ArgMax", "ArgMin"):
            found.append(Decision(name, node.op_type, 0, node.input[0], "argmax", _attr(node, "axis", 0),
                                  negate=node.op_type == "ArgMin"))
        elif node.op_type == "TopK":
            k = consts.get(node.input[1]) if len(node.input) > 1 else None
            found.append(Decision(name, "TopK", 0, node.input[0], "select", _attr(node, "axis", -1),
                                  k=int(np.asarray(k).reshape(-1)[0]) if k is not None and np.asarray(k).size == 1 else None,
                                  negate=_attr(node, "largest", 1) == 0))
        elif node.op_type == "NonMaxSuppression" and len(node.input) > 1:
            thr = consts.get(node.input[4]) if len(node.input) > 4 and node.input[4] else None
            found.append(Decision(name, node.op_type, 1, node.input[1], "select", -1,
                                  threshold=float(np.asarray(thr).reshape(-1)[0]) if thr is not None and np.asarray(thr).size else None))
        elif node.op_type in _COMPARISONS and len(node.input) == 2 and node.output[0] not in sign_tests:
            sides = [(i, consts.get(node.input[1 - i])) for i in (0, 1)]
            for i, c in sides:
                if c is not None and np.asarray(c).size == 1 and node.input[i] not in consts and np.issubdtype(np.asarray(c).dtype, np.floating):
                    found.append(Decision(name, node.op_type, i, node.input[i], "threshold", threshold=float(np.asarray(c).reshape(-1)[0])))
                    break
    found += residual_decisions(model, consts, inputs - set(consts))
    return [d for d in found if (d.tensor not in outputs or d.kind == "threshold")  # module docstring
            and d.tensor not in inputs and d.tensor not in consts]


def residual_decisions(model: onnx.ModelProto, consts: Mapping[str, Any], inputs: set[str]) -> list[Decision]:
    """Graph outputs written as ``Add``/``Sub`` of a graph input (``inputs``: no initializer) and a computed
    tensor: that tensor, judged by its cosine (module docstring, "A residual added to the model's input")."""
    outputs = {o.name for o in model.graph.output}
    found = []
    for node in model.graph.node:
        if node.op_type not in ("Add", "Sub") or len(node.input) != 2 or not set(node.output) & outputs:
            continue
        fed = [i for i, t in enumerate(node.input) if t in inputs]
        if len(fed) == 1 and node.input[1 - fed[0]] not in consts and node.input[1 - fed[0]] not in inputs:
            found.append(Decision(node.name or node.output[0], node.op_type, 1 - fed[0], node.input[1 - fed[0]], "residual"))
    return found


def decision_tensors(model: onnx.ModelProto, decisions: Sequence[Decision]) -> dict[str, str]:
    """``{tensor name: key}`` of ``decisions`` in ``model`` (not changed): each tensor is the same input
    of the node of the same name (a quantized model's dequantized value); decisions whose node is not
    there keep their own tensor name, and those whose tensor is not produced there are left out.
    Apart from :func:`with_decision_outputs` for finish's session, which takes the tensors as extra
    outputs of the bytes it reads, not of the model (pipeline/finish.py ``also``)."""
    if not decisions:
        return {}
    nodes = {n.name: n for n in model.graph.node if n.name}
    produced = {o for n in model.graph.node for o in n.output if o}
    names: dict[str, str] = {}
    for d in decisions:
        node = nodes.get(d.node)
        tensor = node.input[d.index] if node is not None and len(node.input) > d.index else d.tensor
        if tensor in produced and tensor not in names:
            names[tensor] = d.key
    return names


def with_decision_outputs(model: onnx.ModelProto, decisions: Sequence[Decision], *, copy: bool = True
                          ) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``(a copy of model with the decisions' tensors as extra outputs, {tensor name: key})``
    (``copy=False``: ``model`` itself gets them, for a throwaway evaluation build); the tensors are
    :func:`decision_tensors`'."""
    names = decision_tensors(model, decisions)
    present = {o.name for o in model.graph.output}
    target = model
    if copy:
        target = onnx.ModelProto()
        target.CopyFrom(model)
    for tensor in names:
        if tensor not in present:
            target.graph.output.append(onnx.helper.make_empty_tensor_value_info(tensor))
    return target, names


def capture(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]], decisions: Sequence[Decision],
            providers: Sequence[Any] | None = None) -> list[dict[str, np.ndarray]]:
    """The decision tensors of ``model`` on ``feeds``, one ``{key: values}`` per feed, from one
    session on an evaluation copy (the delivered model is not touched)."""
    return DecisionReader(model, decisions, providers)(feeds)


class DecisionReader:
    """:func:`capture` for several sets of feeds of one model: its evaluation copy and session are
    made once, on the first call that has feeds (quantize's verification reads the held-out feeds,
    then, only where the floor asks, the calibration feeds)."""

    def __init__(self, model: onnx.ModelProto, decisions: Sequence[Decision], providers: Sequence[Any] | None = None):
        self.model, self.decisions, self.providers = model, decisions, providers
        self._opened: tuple[Any, dict[str, str]] | None = None

    def __call__(self, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        if not self.decisions or not feeds:
            return [{} for _ in feeds]
        if self._opened is None:
            evaluated, names = with_decision_outputs(self.model, self.decisions)
            session = open_session(evaluated, providers=self.providers, log_severity=3, inline_functions_first=False) if names else None
            self._opened = (session, names)
        session, names = self._opened
        if session is None:
            return [{} for _ in feeds]
        fetch = list(names)
        return [dict(zip((names[t] for t in fetch), session.run(fetch, dict(feed)))) for feed in feeds]


def judging(model: onnx.ModelProto, output: str, keys: Sequence[str]) -> list[str]:
    """Which of ``keys`` (the floor's verdict names: ``KEY + node``, ``KEY + node + " indices " + output``)
    judge decisions ``output`` is computed from in ``model``'s main graph: the summary names them beside an
    integer output's share of elements equal to float's, which a count of many decisions (one flip changes
    it) keeps far below the share of decisions kept (fuzz22's ``count``: 0.76 equal, its comparison 0.959).
    Only the decisions nearest the output are named (the walk does not go up through a decision)."""
    nodes = [(key[len(KEY):].split(" indices ")[0], key) for key in keys if key.startswith(KEY)]
    if not nodes:
        return []
    deciders = {node for node, _ in nodes}
    producer, _ = dataflow(model.graph.node)
    # the walk stops at the first decisions met: those upstream of them are what they decide on, not the output
    met = {n.name or n.output[0] for n in upstream_nodes(output, producer, lambda n: (n.name or n.output[0]) not in deciders)}
    return [key for node, key in nodes if node in met]


# ----------------------------------------------------------------------------- judgements


@dataclass
class DecisionCheck:
    """One decision's figures (the floor's :class:`~onnxptq.analysis.floor.OutputCheck` is built from it)."""

    decision: Decision
    cosine: float
    top1: float | None = None
    count: int = 0
    positions: Any = None
    unjudged: bool = False
    ok: bool = True
    text: str = ""
    #: calibration feeds pooled with the held-out ones in ``positions`` (an arg-max: :func:`_judge_argmax`)
    seen: int = 0
    #: an arg-max's held-out or pooled judgement is below the floor on enough positions to say so
    broken: bool = False


def _finite_pairs(decision: Decision, reference: Sequence[Mapping[str, np.ndarray]],
                  candidate: Sequence[Mapping[str, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    pairs = []
    for ref, got in zip(reference, candidate):
        if decision.key not in ref or decision.key not in got:
            continue
        r, g = np.asarray(ref[decision.key]), np.asarray(got[decision.key])
        if r.shape != g.shape or not np.issubdtype(r.dtype, np.floating) or not np.isfinite(r).all():
            continue
        r, g = r.astype(np.float64), g.astype(np.float64)
        if decision.negate:
            r, g = -r, -g
        pairs.append((r, g))
    return pairs


def relevance(decision: Decision, references: Sequence[np.ndarray]) -> float:
    """The score from which a candidate of a selection matters (module docstring)."""
    if decision.threshold is not None:
        return decision.threshold
    pooled = np.concatenate([np.ravel(r) for r in references]) if references else np.zeros(1)
    mid, top = float(np.median(pooled)), float(np.max(pooled))
    return mid + RELEVANT * (top - mid)


def _pooled_cosine(refs: list[np.ndarray], gots: list[np.ndarray]) -> float:
    if not refs or sum(r.size for r in refs) == 0:
        return 1.0
    return cosine_similarity(np.concatenate(refs), np.concatenate(gots))


def _argmax_scores(d: Decision, pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The decided tensors of ``pairs`` with the arg-max axis last (``judge_positions``' layout)."""
    refs = [np.moveaxis(r, d.axis, -1) for r, _ in pairs if r.ndim >= 1 and r.shape[d.axis] >= 2]
    gots = [np.moveaxis(g, d.axis, -1) for r, g in pairs if r.ndim >= 1 and r.shape[d.axis] >= 2]
    return [r.reshape(1, -1) if r.ndim == 1 else r for r in refs], [g.reshape(1, -1) if g.ndim == 1 else g for g in gots]


def _judge_argmax(d: Decision, pairs: list[tuple[np.ndarray, np.ndarray]], check: DecisionCheck, floor: Any,
                  seen: list[tuple[np.ndarray, np.ndarray]] = ()) -> None:
    """An arg-max judged as reads on the held-out feeds (``pairs``) and, where calibration feeds were
    run (``seen``), on both together, as the floor judges class-score outputs read as reads
    (``floor._judge_reads``): either broken breaks, and a verdict that holds is judged on the reads of
    both (calibration keeps ``1 / (1 − top1)`` of them: ``calibrate.reads_feeds``).

    Why pooled: sudachi's tagger (an ``ArgMax`` over ALBERT's per-character logits) was judged on its
    4 held-out sentences alone, and could never hold on enough reads (bench/RESULTS.md, "More models
    outside the zoo, seventh round"). Why the held-out feeds keep their own margins' estimate (output
    reads count only their flips beside a pooled judgement): trueocr's reader under MXFP8_E4M3 changes
    9 % of its strings; its held-out lines' estimate broke the floor (0.925 on 8 lines), the pooled one
    held (0.972 on 28: the calibration lines flipped less), a
    silent miss (bench/RESULTS.md, "The floor's verdict on taggers and class maps")."""
    refs, gots = _argmax_scores(d, pairs)
    if not all(np.isfinite(g).all() for g in gots):
        check.ok, check.text = False, "not finite"
        return
    held = judge_positions(refs, gots) if refs else None
    if held is None:
        check.unjudged, check.text = True, "float does not decide (no clear arg-max): not judged"
        return
    seen_refs, seen_gots = _argmax_scores(d, [(r, g) for r, g in seen if np.isfinite(g).all()])
    pooled = judge_positions(refs + seen_refs, gots + seen_gots, strings_only=held.strings) if seen_refs else None
    broken = [p for p in (held, pooled) if p is not None and p.judged(floor.needed, floor.top1) and p.agreement < floor.top1]
    positions = broken[0] if broken else pooled if pooled is not None else held
    check.positions, check.top1, check.count = positions, positions.agreement, positions.counted
    check.seen = len(seen_refs) if positions is pooled else 0
    check.broken = bool(broken)
    where = f" on the held-out and {check.seen} calibration samples" if check.seen else ""
    check.text = "arg-max " + positions.describe() + where


def _judge_bins(d: Decision, pairs: list[tuple[np.ndarray, np.ndarray]], check: DecisionCheck) -> None:
    """A soft arg-max's window judged by distance in bins (analysis/ordinal_bins.py): the share of positions whose
    quantized arg-max is within the window's half-width of float's, against the top-1 floor (judge_decisions)."""
    if not all(np.isfinite(g).all() for _, g in pairs):
        check.ok, check.text = False, "not finite"
        return
    found = bin_agreement(pairs, int(d.k or 1), d.axis)
    check.top1, check.count, check.text = found.share, found.judged, found.describe()


def _judge_select(d: Decision, pairs: list[tuple[np.ndarray, np.ndarray]], check: DecisionCheck, cosine_floor: float) -> None:
    t = relevance(d, [r for r, _ in pairs])
    refs, gots = [], []
    for r, g in pairs:
        mask = (r >= t) | (g >= t)
        refs.append(r[mask])
        gots.append(g[mask])
    check.count = int(sum(r.size for r in refs))
    check.cosine = _pooled_cosine(refs, gots) if all(np.isfinite(g).all() for g in gots) else float("nan")
    check.ok = math.isfinite(check.cosine) and check.cosine >= cosine_floor
    check.text = f"scores of the {check.count} candidates that matter (score ≥ {t:.4g}): cosine {check.cosine:.4f}"


def _judge_threshold(d: Decision, pairs: list[tuple[np.ndarray, np.ndarray]], check: DecisionCheck) -> None:
    t = float(d.threshold or 0.0)
    tie = TIE * max(1.0, abs(t))
    sides_r = [r > t for r, _ in pairs]
    total = sum(s.size for s in sides_r)
    minority = bool(sum(int(s.sum()) for s in sides_r) * 2 <= total)  # the side most values are not on
    agree = judged = 0
    for (r, g), side in zip(pairs, sides_r):
        gs = g > t
        decision = (np.abs(r - t) > tie) & ((side == minority) | (gs == minority))
        judged += int(decision.sum())
        agree += int((decision & (side == gs)).sum())
    check.count = judged
    check.top1 = agree / judged if judged else None
    check.text = (f"outcome of the comparison with {t:g}: {agree} of {judged} decision positions agree"
                  if judged else f"comparison with {t:g}: no decision position (every value on the majority side)")


def judge_decisions(decisions: Sequence[Decision], reference: Sequence[Mapping[str, np.ndarray]],
                    candidate: Sequence[Mapping[str, np.ndarray]], floor: Any, enough: Any,
                    seen: tuple[Sequence[Mapping[str, np.ndarray]], Sequence[Mapping[str, np.ndarray]]] | None = None
                    ) -> list[DecisionCheck]:
    """Each decision's check against ``floor`` (``cosine``/``top1``); ``enough(count, floor)``: whether
    ``count`` positions can judge a top-1 floor (the floor's own rule). Decisions without captured
    float values (a tensor not produced in one of the models) are not judged. ``seen``: ``(float,
    candidate)`` values on calibration feeds, pooled with the held-out ones for an arg-max
    (:func:`_judge_argmax`); feeds without the decision's tensor are left out."""
    checks: list[DecisionCheck] = []
    for d in decisions:
        pairs = _finite_pairs(d, reference, candidate)
        if not pairs:
            continue
        refs = [r.ravel() for r, _ in pairs]
        gots = [g.ravel() for _, g in pairs]
        check = DecisionCheck(d, _pooled_cosine(refs, gots) if all(np.isfinite(g).all() for g in gots) else float("nan"))
        if d.kind == "argmax":
            _judge_argmax(d, pairs, check, floor, _finite_pairs(d, *seen) if seen is not None else [])
        elif d.kind == "bins":
            _judge_bins(d, pairs, check)
        elif d.kind == "select":
            _judge_select(d, pairs, check, floor.cosine)
        elif d.kind == "residual":
            check.ok = check.cosine >= floor.cosine  # nan (non-finite) breaks
            check.text = f"the residual it adds to its input: cosine {check.cosine:.4f} (the output's cosine is its input's)"
        else:
            _judge_threshold(d, pairs, check)
        if d.kind != "select" and check.ok and check.top1 is not None:
            if check.positions is not None:
                check.unjudged = not check.broken and not check.positions.judged(floor.needed, floor.top1)
                check.ok = not check.broken
                checks.append(check)
                continue
            else:
                flipped = check.count - round(check.top1 * check.count)
                check.unjudged = not enough(check.count, floor) and flipped < 2
            check.ok = check.unjudged or check.top1 >= floor.top1
        checks.append(check)
    return checks


# ----------------------------------------------------------------------------- outputs that are selections


def selection_rows(model: onnx.ModelProto, decisions: Sequence[Decision], selected: Sequence[str]) -> dict[str, tuple[int, list[Decision]]]:
    """For each output in ``selected`` (rows a ``TopK`` chose): ``(row axis, the TopKs it came
    from)``, the row axis being the one whose declared length is the TopK's k; outputs without one
    are left out (compared as before)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    by_node = {d.node: d for d in decisions if d.kind == "select" and d.op == "TopK"}
    declared = {o.name: [d.dim_value if d.HasField("dim_value") else None for d in o.type.tensor_type.shape.dim]
                for o in model.graph.output}
    found: dict[str, tuple[int, list[Decision]]] = {}
    for out in selected:
        tops = [by_node[key] for key in (n.name or n.output[0] for n in upstream_nodes(
            out, producer, lambda n: (n.name or n.output[0]) not in by_node)) if key in by_node]
        ks = {d.k for d in tops}
        dims = declared.get(out, [])
        if not tops or None in ks or len(ks) != 1:
            continue
        axes = [a for a, n in enumerate(dims) if n == next(iter(ks))]
        if len(axes) == 1:
            found[out] = (axes[0], tops)
    return found


def _leading(decisions: list[Decision], ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray],
             thresholds: Mapping[str, float]) -> int:
    """How many leading rows matter on one feed: the most candidates that matter in any of the
    selections, in float or the quantized model."""
    rows = 0
    for d in decisions:
        for values in (ref.get(d.key), got.get(d.key)):
            if values is not None:
                v = -np.asarray(values, np.float64) if d.negate else np.asarray(values, np.float64)
                rows = max(rows, int((v >= thresholds[d.node]).sum()))
    return rows


def _nearest(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """For each row of ``ref`` in order, the nearest row of ``got`` not yet taken (fields scaled
    by float's spread, as :func:`.selection.match_rows`)."""
    spread = np.concatenate([ref, got]).std(axis=0)
    spread[spread == 0] = 1.0
    a, b = ref / spread, got / spread
    dist = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    taken = np.zeros(len(b), dtype=bool)
    out = np.empty_like(ref)
    for i in range(len(a)):
        j = int(np.argmin(np.where(taken, np.inf, dist[i])))
        out[i], taken[j] = got[j], True
    return out


def judge_selected(name: str, axis: int, decisions: list[Decision], reference: Sequence[Mapping[str, np.ndarray]],
                   candidate: Sequence[Mapping[str, np.ndarray]]) -> tuple[float, float, tuple[int, float] | None, int] | None:
    """A selected output judged on its leading rows (module docstring): ``(cosine, per-feed
    minimum, (worst field, its cosine), rows compared)``; None when it cannot be judged so (no
    captured selection scores, shapes that differ)."""
    thresholds = {}
    for d in decisions:
        refs = [(-np.asarray(r[d.key], np.float64) if d.negate else np.asarray(r[d.key], np.float64)) for r in reference if d.key in r]
        if not refs:
            return None
        thresholds[d.node] = relevance(d, refs)
    rows_r: list[np.ndarray] = []
    rows_g: list[np.ndarray] = []
    cosines: list[float] = []
    for ref, got in zip(reference, candidate):
        r, g = np.asarray(ref[name], np.float64), np.asarray(got[name], np.float64)
        if r.shape != g.shape or not np.isfinite(r).all():
            continue
        if not np.isfinite(g).all():
            return (float("nan"), float("nan"), None, 0)
        r, g = np.moveaxis(r, axis, 0), np.moveaxis(g, axis, 0)
        r, g = r.reshape(r.shape[0], -1), g.reshape(g.shape[0], -1)
        lead = max(1, _leading(decisions, ref, got, thresholds))
        n = min(lead, r.shape[0])
        pool = min(r.shape[0], n + max(2, n // 2))  # a candidate near the line may sit just below it in one model
        matched = _nearest(r[:n], g[:pool])
        rows_r.append(r[:n])
        rows_g.append(matched)
        cosines.append(cosine_similarity(r[:n].ravel(), matched.ravel()))
    if not rows_r:
        return None
    a, b = np.concatenate(rows_r), np.concatenate(rows_g)
    pooled = cosine_similarity(a.ravel(), b.ravel())
    worst = None
    for f in range(a.shape[1]):
        xx, yy, xy = float(a[:, f] @ a[:, f]), float(b[:, f] @ b[:, f]), float(a[:, f] @ b[:, f])
        cos = (1.0 if xx == yy else 0.0) if xx == 0 or yy == 0 else xy / math.sqrt(xx * yy)
        if worst is None or cos < worst[1]:
            worst = (f, cos)
    return pooled, float(min(cosines)), worst, int(a.shape[0])


# ----------------------------------------------------------------------------- Softmax sequences: advised, not repaired


def softmax_reads_advisory(reference: list[np.ndarray], candidate: list[np.ndarray], floor: Any, enough: Any) -> str | None:
    """A warning when a Softmax sequence output (``[..., T, C]``, a CTC head's per-step
    probabilities) keeps fewer of float's reads than the top-1 floor, judged as the other
    per-position scores are (:func:`onnxptq.analysis.class_scores.judge_positions`); None when the
    reads hold, float does not decide or too few positions flipped to judge.

    Why a warning and not a broken floor: the floor judges these outputs per row (every step,
    blanks included), which on tinyocr's PP-OCRv6 rec held while BFP16 changed 4 of 32 strings
    (bench/RESULTS.md, "Models outside the zoo"); judged as reads with repair, PP-OCRv4 rec A8W8
    lost every node to float while its CER stays within float + 0.02 (commit cc01a4f, class_scores'
    docstring). A read judgement in the reader's own terms (CER) is what a repair would need; until
    then the user is told, by name, and the model is delivered as quantized (bench/RESULTS.md,
    "Decisions made inside the graph").

    The flips at positions float itself reads with a probability margin under
    ``class_scores.UNSURE`` are said apart, and not left out. Why said: g2p-id's character BERT (a
    masked-LM read only at its masked positions) predicts e or schwa at every position, padding and
    plain letters included; under A8W8, of its 31 flips on 12 batches 28 were at such positions of
    padding and letters, 3 at padding float is sure of, none at its 166 masked positions, and the
    warning now lets the user see that. Why not left out, as a CTC reader's strings leave them out: slovorez's BIES tagger
    (also a Softmax sequence) flips only at such positions too (14 of 317 under A8W8) and its
    words' tags fall to 0.896 against float, below the 0.95 floor: the margins cannot tell a
    position nobody reads from one a tagger reads, and g2p-id's graph marks no padding (no mask
    input, none computed). Which positions a caller reads is the caller's to say
    (bench/RESULTS.md, "The reads advisory on a masked-LM's unread positions")."""
    positions = judge_positions(reference, candidate, count_unsure=True)
    if positions is None:
        return None
    unjudged = not enough(positions.positions, floor) and positions.flipped < 2
    if unjudged or positions.agreement >= floor.top1:
        return None
    return f"reads below the top-1 floor {floor.top1:g} (a Softmax sequence, judged per row for the floor): " + positions.describe()


def strings_advisory(positions: Any, floor: Any) -> str | None:
    """A warning when a CTC reader's strings (``class_scores.Positions`` with ``strings``) hold the
    floor as judged but fewer than ``floor.top1`` of them are float's once the strings changed only
    where float itself is unsure are counted too (``unsure_changed``); None otherwise.

    Why a warning and not a broken floor: a string that changes only at a position float reads
    with a probability margin under ``class_scores.UNSURE`` over its best string-changing class is
    a line float cannot read stably; on PP-OCRv4 rec A8W8 (the README's quick start) 47 of the 59
    lines of 200 that change against float change only there, and CER against the truth improves
    (0.0372 → 0.0295). Repair on such changes kept every node float (bench/RESULTS.md, "Readers
    judged by their strings"). Said too where the margins' estimate with those positions counted is below
    the floor on enough decision positions: captcha_whisperer MXFP8_E4M3 changed 1 of the floor's 96
    captchas (at such a position) and 14 of 256 others."""
    if positions is None or not getattr(positions, "strings", False) or positions.symbols:
        return None  # long reads judged by their edit distance count every edit (analysis/symbol_reads.py)
    seen = positions.unsure_changed and positions.all_reads < floor.top1 and (positions.reads >= floor.needed or positions.changed >= 2)
    est = positions.estimated_all_reads
    margins = est is not None and est < floor.top1 and positions.positions_all >= floor.needed and positions.unsure
    if not (seen or margins):
        return None
    figure = (f"{positions.all_reads:.4f}: {positions.changed} of {positions.reads} reads differ, {positions.unsure_changed} only at "
              f"positions float reads with a probability margin under {UNSURE:g}" if seen else
              f"estimated {est:.4f} from the margins of all {positions.positions_all} decision positions")
    return (f"strings below the top-1 floor {floor.top1:g} counting the positions float itself is unsure of "
            f"({figure}; not repaired): " + positions.describe())
