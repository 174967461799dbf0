"""Index outputs (a ``TopK``'s indices, an ``ArgMax``/``ArgMin``'s) are judged by the indices they choose.

Why: the floor compares float outputs; an integer output was skipped (nothing to take a cosine of), and a
``TopK`` is judged where it is taken by its scores' cosine on the candidates that matter
(:mod:`.decisions`). A model that returns the chosen indices is read by them: fuzz18's ``topk_argmax_heads``
(``TopK`` k = 3 of 10 logits, its indices a graph output) kept the top-3 index sets of float on 0.873 of 200 fresh
feeds under MXFP4 and 0.948 under A8W8 while the floor said "decision:… cosine 0.9994" and held (bench/RESULTS.md,
fuzz18, "Looked at, left for their owners"). The user was told of other outputs, never of the index output.

**Found by structure** (:func:`index_outputs`): a graph output that is, through ``Identity``/``Cast``, the
``Indices`` output of a ``TopK`` or the output of an ``ArgMax``/``ArgMin``, with the node's axis, whether it
keeps that axis, and the tensor it chooses on. An ``ArgMax``/``ArgMin`` the floor already judges as a decision
(:func:`onnxptq.analysis.decisions.find_decisions`: its scores judged as reads, with their margins) is not judged
twice, nor one whose scores are a graph output read as class scores (``class_scores.class_like_outputs``, rule 2:
tashkeel's ``predictions``, the only index output of the 178 zoo and outside models read here besides none of a
``TopK``); any other is judged here, as a ``TopK`` is. A ``TopK``'s indices are judged so even where the rows a
constant-k ``TopK`` chose are a selection (:mod:`.selection`): a cosine of index values is no reading of them.

**Decoded inside a Loop** (:func:`_loop_decoded`): a greedy decoder exported from a scripted loop (g2p_en's
``predict``, bench/RESULTS.md round 32) takes its ``ArgMax`` inside the Loop body, appends it to a loop-carried
sequence by ``Concat`` and returns the sequence (through Identity/Cast/Slice/Squeeze/Unsqueeze/Reshape: a Slice cuts
the end token). The walk above met the Loop and stopped, so the tokens the user reads were never judged, while the
floor held on the accumulated logits' cosine (0.992) and 0.8625 of 400 words kept float's phonemes under
MXFP8_E4M3 (bench/round32_decoder_floor.py: 0.9375 of 128 sequences, the floor "holds"). Such an output is judged
per sample as a whole sequence (``decoded``): kept where its shape and every token equal float's (a length changed
by a missed end token counts as changed); float's scores stay inside the body, so no tie is forgiven.
The token may also leave as a Loop *scan output* (the body's per-step value, stacked: tf2onnx's TensorArray) or be
chosen inside an ``If`` of the body (:func:`_chosen`): on main both were unjudged (fuzz22: an If decoder's A16W8 build
held while 0.950 of 300 fresh sequences kept float's, the floor 0.97).

**Chosen per step by a Scan** (:func:`_scan_chosen`): a ``Scan`` scan output that is its body's ``ArgMax``/``ArgMin``
or ``TopK`` indices each step (a frame tagger) is judged per row as a main-graph choice, the chosen axis shifted by
the stacked steps' leading axis; float's scores stay inside the body, so no tie is forgiven.

**Judged** (:func:`judge_indices`): per row (every index of the other axes), whether the quantized model chose
the same **set** of indices as float (the order within the set is a ranking of the chosen, which a selection
does not promise: a sorted ``TopK``'s order among near-equal scores is rounding). A row whose sets differ only
by indices whose float scores lie within :data:`~onnxptq.analysis.decisions.TIE` of float's k-th chosen score
counts as kept: float itself could have chosen either (the floor's tie rule for comparisons, decisions.py).
Float's scores are the captured decision tensor (``decisions.KEY + node``) or the graph output they are; where
neither is there, no tie is forgiven. The share of rows kept is held against the family's top-1 floor, judged
on at least as many rows as the floor needs or where two rows or more changed (the decisions' rule), and
named ``decision:<node> indices <output>`` in the verdict. An index outside the scores' axis counts as changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from .class_scores import class_like_outputs
from .decisions import KEY, TIE, find_decisions

__all__ = ["IndexCheck", "IndexOutput", "index_outputs", "judge_indices"]

_CHOOSERS = frozenset(("TopK", "ArgMax", "ArgMin"))
_STEPS = frozenset(("Identity", "Cast"))


@dataclass(frozen=True)
class IndexOutput:
    """A graph output of chosen indices (module docstring)."""

    output: str
    node: str
    op: str
    axis: int
    #: the output keeps the chosen axis (TopK; ArgMax/ArgMin with ``keepdims=1``)
    keepdims: bool
    #: the tensor the node chooses on (float's copy: captured as ``KEY + node``, or a graph output)
    scores: str
    #: the choice is of the smallest values (ArgMin, ``TopK(largest=0)``)
    negate: bool
    #: the Loop whose loop-carried sequence collects the choices step by step (judged per sample as a whole
    #: sequence: _loop_decoded); "" for an index output of the main graph
    loop: str = ""

    @property
    def key(self) -> str:
        return f"{KEY}{self.node} indices {self.output}"


def _attr(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


#: steps a decoded sequence passes on its way out (the end token cut by a Slice, a batch axis added or dropped)
_SEQ_STEPS = _STEPS | {"Slice", "Squeeze", "Unsqueeze", "Reshape", "Flatten"}


def _producers(graph: onnx.GraphProto) -> dict[str, tuple[onnx.NodeProto, int]]:
    """Each tensor ``graph``'s nodes make, with its maker and the output slot (a TopK's indices are slot 1)."""
    return {o: (n, i) for n in graph.node for i, o in enumerate(n.output) if o}


def _choice(node: onnx.NodeProto, slot: int) -> bool:
    """Whether output ``slot`` of ``node`` is a choice of indices: an ``ArgMax``/``ArgMin``, or a ``TopK``'s indices."""
    return (node.op_type == "TopK" and slot == 1) or node.op_type in ("ArgMax", "ArgMin")


def _back(tensor: str, producer: Mapping[str, tuple[onnx.NodeProto, int]], through: frozenset | set,
          steps: int = 4) -> tuple[onnx.NodeProto | None, int]:
    """The first node up from ``tensor`` that is not one of ``through`` (with its output slot), at most ``steps``."""
    node, slot = None, 0
    for _ in range(steps):
        node, slot = producer.get(tensor, (None, 0))
        if node is None or node.op_type not in through or not node.input:
            return node, slot
        tensor = node.input[0]
    return node, slot


def _chosen(tensor: str, producer: Mapping[str, tuple[onnx.NodeProto, int]], loop: onnx.NodeProto,
            output: str) -> IndexOutput | None:
    """The ``ArgMax``/``ArgMin`` or ``TopK``'s indices ``tensor`` is (through _SEQ_STEPS) inside ``loop``'s body, as the
    decoded sequence ``output``; an ``If`` whose branch outputs such a choice (a first step masked otherwise) passes it on."""
    node, out_slot = _back(tensor, producer, _SEQ_STEPS)
    if node is None or not node.input:
        return None
    name = node.name or node.output[0]
    if node.op_type == "TopK" and out_slot == 1:
        return IndexOutput(output, name, "TopK", _attr(node, "axis", -1), True, node.input[0],
                           _attr(node, "largest", 1) == 0, loop.name or loop.output[0])
    if node.op_type in ("ArgMax", "ArgMin"):
        return IndexOutput(output, name, node.op_type, _attr(node, "axis", 0), bool(_attr(node, "keepdims", 1)),
                           node.input[0], node.op_type == "ArgMin", loop.name or loop.output[0])
    if node.op_type == "If":
        for branch in (a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH):
            inner = _producers(branch)
            found = _chosen(branch.output[out_slot].name, inner, loop, output) if out_slot < len(branch.output) else None
            if found is not None:
                return found
    return None


def _loop_decoded(loop: onnx.NodeProto, slot: int, output: str) -> IndexOutput | None:
    """The choices a Loop's output ``slot`` collects step by step: a loop-carried value whose body update is a
    ``Concat`` of the carried value and (through _SEQ_STEPS) an ``ArgMax``/``ArgMin`` or a ``TopK``'s indices, or a scan
    output (the body's per-step value, stacked by the Loop: tf2onnx's TensorArray, a scripted loop's list) that is
    such a choice (module docstring)."""
    body = next((a.g for a in loop.attribute if a.name == "body"), None)
    states = len(loop.input) - 2
    if body is None or len(body.output) <= 1 + slot:
        return None
    producer = _producers(body)
    if slot >= states:  # a scan output: body output 1 + slot, one value per step
        return _chosen(body.output[1 + slot].name, producer, loop, output)
    if len(body.input) <= 2 + slot:
        return None
    carried = body.input[2 + slot].name
    concat, _ = _back(body.output[1 + slot].name, producer, _STEPS)
    if concat is None or concat.op_type != "Concat" or carried not in concat.input:
        return None
    for part in concat.input:
        if part != carried:
            found = _chosen(part, producer, loop, output)
            if found is not None:
                return found
    return None


def _scan_chosen(scan: onnx.NodeProto, slot: int, output: str) -> IndexOutput | None:
    """A Scan's scan output ``slot`` that its body's ``ArgMax``/``ArgMin`` or ``TopK``'s indices is each step (through
    _SEQ_STEPS): the steps' choices stacked along a new leading axis (``scan_output_axes`` 0, the default), judged per
    row as a main-graph choice is (module docstring, "Chosen per step by a Scan"). Other axes: left out."""
    body = next((a.g for a in scan.attribute if a.name == "body"), None)
    states = len(scan.input) - _attr(scan, "num_scan_inputs", 1)
    axes = next((list(a.ints) for a in scan.attribute if a.name == "scan_output_axes"), [])
    if body is None or slot < states or slot >= len(body.output) or any(axes[slot - states:slot - states + 1]):
        return None
    producer = _producers(body)
    node, out_slot = _back(body.output[slot].name, producer, _STEPS)
    if node is None or not node.input:
        return None
    if not _choice(node, out_slot):
        return None
    axis = _attr(node, "axis", -1 if node.op_type == "TopK" else 0)
    keepdims = node.op_type == "TopK" or bool(_attr(node, "keepdims", 1))
    return IndexOutput(output, node.name or node.output[0], node.op_type, axis + 1 if axis >= 0 else axis, keepdims,
                       node.input[0], node.op_type == "ArgMin" or (node.op_type == "TopK" and _attr(node, "largest", 1) == 0))


def index_outputs(model: onnx.ModelProto) -> dict[str, IndexOutput]:
    """Graph outputs that are a ``TopK``'s indices or an ``ArgMax``/``ArgMin``'s output, or a sequence of them a Loop
    decodes step by step (module docstring)."""
    producer = _producers(model.graph)
    decided = {d.node for d in find_decisions(model) if d.kind == "argmax"}
    scored = set(class_like_outputs(model))  # scores judged as class scores already
    found: dict[str, IndexOutput] = {}
    for out in model.graph.output:
        node, slot = _back(out.name, producer, _SEQ_STEPS)
        if node is not None and node.op_type == "Loop":
            decoded = _loop_decoded(node, slot, out.name)
            if decoded is not None:
                found[out.name] = decoded
            continue
        if node is not None and node.op_type == "Scan":
            stepped = _scan_chosen(node, slot, out.name)
            if stepped is not None:
                found[out.name] = stepped
            continue
        tensor = out.name
        for _ in range(4):
            node, slot = producer.get(tensor, (None, 0))
            if node is None or node.op_type not in _STEPS:
                break
            tensor = node.input[0]
        if node is None or node.op_type not in _CHOOSERS or not node.input:
            continue
        name = node.name or node.output[0]
        if node.op_type == "TopK" and slot == 1:
            found[out.name] = IndexOutput(out.name, name, "TopK", _attr(node, "axis", -1), True, node.input[0],
                                          _attr(node, "largest", 1) == 0)
        elif node.op_type in ("ArgMax", "ArgMin") and name not in decided and node.input[0] not in scored:
            found[out.name] = IndexOutput(out.name, name, node.op_type, _attr(node, "axis", 0), bool(_attr(node, "keepdims", 1)),
                                          node.input[0], node.op_type == "ArgMin")
    return found


@dataclass
class IndexCheck:
    """One index output's figures (the floor's ``OutputCheck`` is built from it)."""

    item: IndexOutput
    #: rows whose chosen set is float's (ties forgiven), rows judged, rows kept only by a forgiven tie
    kept: int = 0
    rows: int = 0
    ties: int = 0
    #: float's scores were there to forgive ties with
    scored: bool = False
    #: calibration samples judged beside the held-out ones (a decoded sequence only: judge_indices' ``seen``)
    seen: int = 0

    @property
    def share(self) -> float:
        return self.kept / self.rows if self.rows else 1.0

    def describe(self) -> str:
        if self.item.loop:
            return (f"the sequence {self.item.output!r} that Loop {self.item.loop!r} decodes by {self.item.op} "
                    f"{self.item.node!r} step by step: float's whole sequence kept on {self.kept} of {self.rows} samples "
                    f"({self.share:.4f})")
        ties = (f", {self.ties} of them by a tie within {TIE:g} of float's k-th score" if self.ties else "")
        told = "" if self.scored else " (float's scores not captured: no tie forgiven)"
        return (f"{self.item.op} {self.item.node!r}'s chosen indices {self.item.output!r}: the set float chose kept on "
                f"{self.kept} of {self.rows} rows ({self.share:.4f}){ties}{told}")


def _rows(indices: np.ndarray, item: IndexOutput, ndim: int) -> np.ndarray:
    """``indices`` as ``[rows, k]`` with the chosen axis last (``ndim``: the scores' rank)."""
    x = np.asarray(indices, np.int64)
    axis = item.axis % ndim
    if not item.keepdims:
        x = np.expand_dims(x, axis)
    return np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])


def _feed(item: IndexOutput, ref: Mapping[str, Any], got: Mapping[str, Any], check: IndexCheck) -> None:
    a, b = np.asarray(ref[item.output]), np.asarray(got[item.output])
    if item.loop:  # a decoded sequence: one sample, kept only whole
        check.rows += 1
        check.kept += int(a.shape == b.shape and np.array_equal(a, b))
        return
    if a.shape != b.shape:
        return
    scores = ref.get(f"{KEY}{item.node}", ref.get(item.scores))
    s = np.asarray(scores, np.float64) if scores is not None else None
    ndim = s.ndim if s is not None and s.ndim else a.ndim + (0 if item.keepdims else 1)
    if s is not None and (s.ndim != ndim or not np.isfinite(s).all()):
        s = None
    ra, rb = _rows(a, item, ndim), _rows(b, item, ndim)
    flat = np.moveaxis(-s if item.negate else s, item.axis % ndim, -1).reshape(ra.shape[0], -1) if s is not None else None
    check.scored = check.scored or flat is not None
    for i in range(ra.shape[0]):
        fa, fb = set(ra[i].tolist()), set(rb[i].tolist())
        check.rows += 1
        if fa == fb:
            check.kept += 1
            continue
        if flat is None or any(j < 0 or j >= flat.shape[1] for j in fa | fb):
            continue
        kth = min(flat[i, j] for j in fa)  # float's k-th chosen score
        if all(abs(flat[i, j] - kth) <= TIE for j in fa ^ fb):
            check.kept += 1
            check.ties += 1


def judge_indices(items: Mapping[str, IndexOutput], reference: Sequence[Mapping[str, Any]],
                  candidate: Sequence[Mapping[str, Any]],
                  seen: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None = None) -> list[IndexCheck]:
    """Each index output's rows kept over the feeds (module docstring); outputs absent from a feed are skipped.
    ``seen``: ``(float, candidate)`` outputs on calibration feeds, pooled with the held-out ones for a decoded
    sequence (one read a sample, as the floor pools a tagger's reads: 8 held-out samples never judge a top-1 floor)."""
    checks = []
    for name, item in items.items():
        check = IndexCheck(item)
        for ref, got in zip(reference, candidate):
            if name in ref and name in got:
                _feed(item, ref, got, check)
        if item.loop and seen is not None:
            rows = check.rows
            for ref, got in zip(*seen):
                if name in ref and name in got:
                    _feed(item, ref, got, check)
            check.seen = check.rows - rows
        if check.rows:
            checks.append(check)
    return checks
