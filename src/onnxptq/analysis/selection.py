"""Outputs a graph selects with ``TopK`` are compared as sets of rows, not position by position.

Why: an end-to-end detector (isbnx's YOLO: per-candidate scores → ``TopK(300)`` → ``GatherElements``
of the boxes) returns its chosen rows in score order, and most of the 300 are background
candidates whose scores are near-equal: any rounding reorders them. Compared position by position
the output's cosine fell to 0.80–0.84 under every preset while the detections' F1 against float was
0.97–0.985, and repair, chasing that, kept every node float (bench/RESULTS.md, "Models outside the
zoo"). What a user reads is the set of rows, so the floor pairs each float row with its nearest
quantized row before it compares (:func:`match_rows`). On isbnx that lifts the figure (A8W8 cosine
0.80 → 0.963, BF16 0.989) but not to the floor: its background rows' class ids flip between
near-equal classes (class field 0.88–0.95), which no user reads below the score threshold. So
where the selecting ``TopK``'s k fixes the output's row axis, the floor compares only the leading
rows that matter (:func:`onnxptq.analysis.decisions.judge_selected`: as many as the selection has
candidates that matter); :func:`match_rows` remains for the other selected outputs (bench/RESULTS.md,
"Decisions made inside the graph": isbnx A8W8 keeps 23 of 366 nodes float instead of all).

Which outputs (:func:`selected_outputs`): those reached, walking back from the graph output through
data movement, gathers, concatenation and elementwise arithmetic, from an output of a ``TopK`` (its
values or its indices). A sort-free path to the output is compared as before.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..graph.walk import upstream_nodes

__all__ = ["MAX_ROWS", "match_rows", "selected_outputs"]

#: ops a selection's order passes through unchanged in meaning (rows stay rows)
_THROUGH = frozenset(
    "Identity Reshape Transpose Squeeze Unsqueeze Flatten Cast Slice Concat Expand Tile Gather GatherElements "
    "GatherND Add Sub Mul Div Sigmoid Clip Max Min Round Floor Ceil Neg Abs".split())
_SELECTORS = frozenset(("TopK",))
#: outputs of more rows than this are compared position by position (the matching is quadratic)
MAX_ROWS = 4096
#: rows of at most this many values (a detection's fields) are matched as rows; wider outputs as values
_ROW_WIDTH = 16


def selected_outputs(model: onnx.ModelProto) -> set[str]:
    """The main graph's outputs whose rows come out of a ``TopK`` (module docstring)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    found: set[str] = set()
    for out in model.graph.output:
        for node in upstream_nodes(out.name, producer, lambda n: n.op_type in _THROUGH and n.op_type not in _SELECTORS):
            if node.op_type in _SELECTORS:
                found.add(out.name)
                break
    return found


def _rows(values: np.ndarray) -> np.ndarray:
    if values.ndim >= 2 and values.shape[-1] <= _ROW_WIDTH:
        return values.reshape(-1, values.shape[-1])
    return values.reshape(-1, 1)


def match_rows(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """``candidate`` with its rows reordered so that each of ``reference``'s rows, in order (a
    selection's best first), faces the nearest candidate row not yet taken; distances are taken
    on fields scaled by float's spread, so a box in pixels does not drown a score. Unchanged where
    the shapes differ, the values are not finite or there are more than :data:`MAX_ROWS` rows."""
    if reference.shape != candidate.shape or not np.isfinite(candidate).all() or not np.isfinite(reference).all():
        return candidate
    ref, got = _rows(np.asarray(reference, np.float64)), _rows(np.asarray(candidate, np.float64))
    if ref.shape[0] > MAX_ROWS or ref.shape[0] < 2:
        return candidate
    spread = ref.std(axis=0)
    spread[spread == 0] = 1.0
    a, b = ref / spread, got / spread
    dist = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * np.einsum("if,jf->ij", a, b)
    taken = np.zeros(len(b), dtype=bool)
    order = np.empty(len(a), dtype=np.int64)
    for i in range(len(a)):
        row = np.where(taken, np.inf, dist[i])
        j = int(np.argmin(row))
        order[i], taken[j] = j, True
    return got[order].reshape(candidate.shape).astype(candidate.dtype)
