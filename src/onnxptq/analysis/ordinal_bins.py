"""Ordinal bin axes: scores whose arg-max the graph decodes by a soft arg-max in a window around it.

Why: an ``ArgMax`` consumer made its scores "class scores" (analysis/class_scores.py, rule 2) and an
in-graph ``ArgMax`` a class decision (analysis/decisions.py), both judged as *reads*: every position's
arg-max must be float's exactly. A pitch tracker's posteriorgram is no class output: its 384 bins
are ordered pitches (PESTO: 3 a semitone), a posterior is a smooth bump over neighbouring bins, and
its graph reads it by the *argmax-local weighted average* (PESTO's ``reduce_activations(.., "alwa")``,
CREPE's ``to_local_average_cents``): the arg-max only places a window of bins whose scores weight
their bins' values. Any 16-bit rounding moves that arg-max by one bin on some frames, so PESTO's
``activations`` broke the floor under every preset (BF16: per position 0.983-0.992, "reads"
0.03-0.20) and repair kept the whole graph float, while plain BF16 kept 0.993 of the frames' decoded
pitch within 50 cents (bench/RESULTS.md, newmodels31, section 4; bench/round31_alwa_floor.py).

**Found by structure** (:func:`soft_argmax_windows`): an ``ArgMax`` whose indices are read only
as positions into a tensor (the index input of ``Gather``/``GatherElements``/``GatherND``, the
``starts``/``ends`` of a ``Slice``; or as the values averaged: a ``Cast`` to float, a heat-map soft arg-max's
``Σ w·i / Σ w``) through integer index arithmetic — an ``Add``/``Sub`` of a
constant (the window's offsets), a clamp (``Clip``, ``Max``/``Min``), ``Cast`` and data movement
(``Unsqueeze``, ``Reshape``, ``Expand``, ``Concat`` ...) — where

* the offsets span a window of at least two bins (PESTO's ``Add [-1, 0, 1]``; CREPE's
  ``Slice(c − 4, c + 5)``), and
* at least one of those reads takes the *same scores* the ``ArgMax`` decided on (through data
  movement, and through maps that keep the order along the arg-max's axis: ``Sigmoid``/``Exp``/``Tanh``/``Softplus``,
  a ``Softmax``/``LogSoftmax`` over that axis — an arg-max of the logits with a window of their Softmax as the
  weights, fuzz22's ``soft_argmax_softmax_weights``): the window's scores become the weights of a local average.

An ``ArgMax`` whose index is an output, a ``Gather`` of a label table by the index alone, or any
other use of it is a class decision, as before. Nothing here reads names.

**Judged by distance in bins** (:func:`bin_agreement`): per position, the quantized arg-max is
within the window's half-width ``h`` of float's (``|a_q − a_f| ≤ h``: float's centre bin is then inside the
quantized model's window, so the decoded value moves by a fraction of a bin: PESTO's one-bin
moves shifted the decoded pitch by 17 cents median), the share of positions held against the
family's top-1 floor beside the scores' cosine. A position whose float scores hold a near-tie
between bins outside each other's window (a multimodal posterior: an unvoiced frame) is left out:
no format decides it, as class_scores leaves out float's near-ties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import onnx

from ..graph.external import constant_tensors, tensor_values
from ..graph.ops import RELAYOUTS
from ..graph.walk import dataflow

__all__ = ["BinAgreement", "TIE_TOLERANCE", "bin_agreement", "ordinal_outputs", "soft_argmax_windows"]

#: float's top score and its best score outside the window around its arg-max within this fraction of
#: the larger: a near-tie between distant bins, left out (class_scores.TIE_TOLERANCE's rounding argument)
TIE_TOLERANCE = 2.0 ** -10

#: ops an index passes through unchanged in kind (a clamp keeps it a bin index)
_INDEX_STEPS = RELAYOUTS | frozenset(("Cast", "Clip", "Max", "Min", "Expand", "Concat", "Identity"))
#: the readers of a window: op type → the input slots that take positions
_POSITION_READERS = {"Gather": (1,), "GatherElements": (1,), "GatherND": (1,), "Slice": (1, 2)}
_MOVES = RELAYOUTS | frozenset(("Cast", "Identity"))
#: a ``Cast`` of the window's positions to these reads the bin numbers themselves as the values the weights average
_FLOATS = frozenset((onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE))


#: elementwise maps that keep every row's order (strictly increasing): an arg-max of their output is the input's
_MONOTONE = frozenset(("Sigmoid", "Exp", "Tanh", "Softplus"))
#: row maps that keep the order along their ``axis`` (default -1 from opset 13; ArgMax's axis must be the same)
_ROW_MONOTONE = frozenset(("Softmax", "LogSoftmax"))


def _root(tensor: str, producer: dict[str, onnx.NodeProto], axis: int | None = None) -> str:
    """``tensor`` walked back through data movement: the scores a gather and an arg-max share. With ``axis`` (the
    arg-max's), also through maps that keep the order along it (:data:`_MONOTONE`, a Softmax/LogSoftmax over that
    axis): an arg-max of the logits and a window of their Softmax weights read one posterior (module docstring)."""
    for _ in range(16):
        node = producer.get(tensor)
        if node is None or not node.input:
            return tensor
        kept = node.op_type in _MOVES or (axis is not None and (node.op_type in _MONOTONE or (
            node.op_type in _ROW_MONOTONE and next((a.i for a in node.attribute if a.name == "axis"), -1) == axis)))
        if not kept:
            return tensor
        tensor = node.input[0]
    return tensor


def _window(argmax: onnx.NodeProto, producer: dict[str, onnx.NodeProto], readers: dict[str, list[onnx.NodeProto]],
            consts: dict[str, onnx.TensorProto], outputs: set[str]) -> int | None:
    """The half-width of the window ``argmax``'s indices place (module docstring), None where they are no window."""
    axis = next((a.i for a in argmax.attribute if a.name == "axis"), 0)
    scores = _root(argmax.input[0], producer, axis)
    lo_all, hi_all, same = 0, 0, False
    stack: list[tuple[str, int, int]] = [(argmax.output[0], 0, 0)]
    visited = 0
    while stack:
        tensor, lo, hi = stack.pop()
        visited += 1
        if tensor in outputs or not readers.get(tensor) or visited > 64:
            return None  # an index the user reads, a dead end, or a walk no decode needs
        for node in readers[tensor]:
            slots = [i for i, t in enumerate(node.input) if t == tensor]
            if node.op_type in _POSITION_READERS:
                if not set(slots) <= set(_POSITION_READERS[node.op_type]):
                    return None
                end = node.op_type == "Slice" and slots == [2]  # an exclusive end: its last bin is one before
                lo_all, hi_all = min(lo_all, lo - end), max(hi_all, hi - end)
                same = same or _root(node.input[0], producer, axis) == scores
            elif node.op_type == "Cast" and next((a.i for a in node.attribute if a.name == "to"), 0) in _FLOATS:
                lo_all, hi_all = min(lo_all, lo), max(hi_all, hi)  # the window's bin numbers as the values averaged
            elif node.op_type in ("Add", "Sub") and len(node.input) == 2:
                other = node.input[1 - slots[0]]
                c = tensor_values(consts[other]) if other in consts else None
                if c is None or len(slots) != 1 or not np.issubdtype(c.dtype, np.integer) or (node.op_type == "Sub" and slots[0] != 0):
                    return None
                step = (int(c.min()), int(c.max())) if node.op_type == "Add" else (-int(c.max()), -int(c.min()))
                stack.append((node.output[0], lo + step[0], hi + step[1]))
            elif node.op_type in _INDEX_STEPS and (node.op_type in ("Concat", "Max", "Min") or slots == [0]):
                stack.append((node.output[0], lo, hi))
            else:
                return None
    half = max(-lo_all, hi_all)
    return half if same and hi_all - lo_all >= 1 else None


def soft_argmax_windows(model: onnx.ModelProto) -> dict[str, int]:
    """``{ArgMax node name (or its output): the window's half-width in bins}`` for every ``ArgMax`` of the
    main graph whose indices only place a window of its own scores (module docstring)."""
    nodes = list(model.graph.node)
    if not any(n.op_type == "ArgMax" for n in nodes):
        return {}
    producer, readers = dataflow(nodes)
    consts = constant_tensors(model.graph)
    outputs = {o.name for o in model.graph.output}
    found = {}
    for node in nodes:
        if node.op_type == "ArgMax" and node.input and node.output and node.output[0]:
            half = _window(node, producer, readers, consts, outputs)
            if half is not None:
                found[node.name or node.output[0]] = half
    return found


def ordinal_outputs(model: onnx.ModelProto) -> dict[str, int]:
    """``{graph output: half-width}`` for outputs a soft arg-max window decodes: the ``ArgMax`` reads the
    output or a tensor it is read from through data movement (class_scores' rule-2 walk) or an order-keeping map
    along the last axis (the posterior a Softmax of the arg-max's logits gives)."""
    windows = soft_argmax_windows(model)
    if not windows:
        return {}
    producer, _ = dataflow(list(model.graph.node))
    by_scores: dict[str, int] = {}
    for node in model.graph.node:
        half = windows.get(node.name or (node.output[0] if node.output else ""))
        if half is not None and _last_axis(node):
            by_scores[node.input[0]] = max(half, by_scores.get(node.input[0], 0))
    found = {}
    for out in model.graph.output:
        tensor = out.name
        for _ in range(8):
            if tensor in by_scores:
                found[out.name] = by_scores[tensor]
                break
            node = producer.get(tensor)
            if node is None or not node.input or _root(tensor, {tensor: node}, -1) == tensor:
                break  # neither data movement nor an order-keeping map along the last axis (_root's one step)
            tensor = node.input[0]
    return found


def _last_axis(node: onnx.NodeProto) -> bool:
    """Whether an ``ArgMax`` decides along the last axis (the bins the output judgement reads): ``axis=-1``
    (the scores' rank is not known here; another axis is judged where the decision is taken instead)."""
    return next((a.i for a in node.attribute if a.name == "axis"), 0) == -1


@dataclass
class BinAgreement:
    """Positions whose quantized arg-max is within the window of float's (module docstring)."""

    #: positions within ``half`` bins of float's arg-max, positions judged, float's distant near-ties left out
    within: int = 0
    judged: int = 0
    ties: int = 0
    half: int = 1
    #: the largest move seen, in bins
    worst: int = 0

    @property
    def share(self) -> float:
        return self.within / self.judged if self.judged else 1.0

    def describe(self) -> str:
        ties = f", {self.ties} float near-ties between distant bins left out" if self.ties else ""
        return (f"arg-max within {self.half} bin{'s' if self.half > 1 else ''} of float's (an ordered bin axis its graph "
                f"decodes by a soft arg-max: analysis/ordinal_bins.py): {self.share:.4f} of {self.judged} positions, "
                f"worst move {self.worst} bin{'' if self.worst == 1 else 's'}{ties}")


def bin_agreement(pairs: Iterable[tuple[np.ndarray, np.ndarray]], half: int, axis: int = -1) -> BinAgreement:
    """The agreement of ``pairs`` (float, quantized scores) by distance in bins along ``axis`` (module docstring)."""
    found = BinAgreement(half=half)
    for r, g in pairs:
        r = np.moveaxis(np.asarray(r, np.float64), axis, -1)
        g = np.moveaxis(np.asarray(g, np.float64), axis, -1)
        if r.ndim == 0 or r.shape[-1] < 2 or r.shape != g.shape:
            continue
        r, g = r.reshape(-1, r.shape[-1]), g.reshape(-1, g.shape[-1])
        a_r, a_g = r.argmax(-1), g.argmax(-1)
        top = r[np.arange(len(r)), a_r]
        far = np.abs(np.arange(r.shape[-1])[None, :] - a_r[:, None]) > half
        outside = np.where(far, r, -np.inf).max(-1)
        tie = (top - outside) <= TIE_TOLERANCE * np.maximum(np.abs(top), np.abs(outside))
        moved = np.abs(a_g - a_r)[~tie]
        found.ties += int(tie.sum())
        found.judged += int(moved.size)
        found.within += int((moved <= half).sum())
        found.worst = max(found.worst, int(moved.max()) if moved.size else 0)
    return found

