"""Store a sinusoidal position table as its recipe: positions times frequencies, ``Sin`` (a cosine column's
angle turned by pi/2), and the few entries the recipe does not give bit for bit.

Why: transformer exporters write the fixed sin/cos position encoding (``pe[p, c] = sin(p * w_c)`` or
``cos(p * w_c)``, one frequency a column) into the file as a float32 constant. No format stores it
narrower, because it is not a weight: it is added to the embeddings and the sum also runs down the
float residual path. So it stays float32 under every block format, and its values are not exact in
float16 or bfloat16, with as many distinct values as elements. khmersm's ``[1, 2048, 192]`` table is 1.57 MB,
0.22 of the fp32 file. That alone keeps every block format over issue 26's goal on that model
(bench/RESULTS.md, packed18). Its values are fixed by a formula, though. Computed again from float32
arguments in double precision and cast to float32, 95 % of them come out bit-identical. The rest (the
exporter's float32 ``sin`` is not always correctly rounded) are stored as
``(index, value)`` corrections. The runtime sees the same tensor bit for bit; only the file's encoding
changes, so no output moves.

The decision is by values alone, never the tensor's name. A float32 constant whose last two axes are
(positions, channels) and whose other axes are 1, whose row 0 holds only 0 (a sine column) or 1 (a cosine
column), and whose columns each follow one frequency: read by ``asin``/``acos`` from rows 1, 2, 3 and
unwrapped down the rows (:func:`_estimate`), then the float32 neighbour that rebuilds the most entries. The form is taken when its corrections are few enough to save
:data:`constant_tables.MIN_SAVED` bytes. Each recomputed entry is checked against the stored bits, and
an entry whose double-precision value lies within :data:`MARGIN` (relative) of a float32 rounding
boundary is stored as a correction too. So any runtime whose double ``Sin`` is that accurate (far
looser than libm's or Eigen's, which onnxruntime uses) rebuilds the same float32 values. The decode reads
initializers only, and onnxruntime folds it at session creation (``Range``, ``Reshape``, ``Mul``,
``Cast``, ``Add``, ``Sin``, ``ScatterElements`` all have CPU kernels). The file step
(pipeline/lean_file.py) runs the chain in onnxruntime, folded and unfolded, and the form is dropped if a single bit
differs. With graph optimisations
disabled the chain runs on every call (about 400 K double ``Sin`` for khmersm's table). Folding keeps
each step's output until it ends: khmersm's session-creation peak rises by 15-18 MB (ten times the
table's bytes) for 1.4 MB less file, MX9 51.6 -> 67.3 MB, A8W8 15.5 -> 32.5 MB (bench/RESULTS.md,
packed19). :data:`ENABLED` off keeps the table's float32 bytes where load memory matters more than the file.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["sinusoid_form", "recipe", "decode_model", "RuntimeCheck", "ENABLED", "MARGIN", "MAX_CORRECTED"]

log = logging.getLogger(__name__)

#: Off: a sinusoid table keeps its float32 bytes (its load costs no folding; constant_tables' other forms stay).
ENABLED = True
#: An entry whose double-precision value lies within this relative distance of a float32 rounding
#: boundary is stored as a correction: a runtime's ``Sin`` off by up to ~100 double ulps still
#: rounds every other entry to the same float32.
MARGIN = 2.0 ** -45
#: Most corrected entries, as a share of the table: past it the corrections eat the saving.
MAX_CORRECTED = 0.25
#: Float32 neighbours tried each side of a column's estimated frequency, beyond its error bound.
_NEIGHBOURS = 8
#: Most neighbours tried each side: a column whose estimate is looser than this is no sinusoid.
_MAX_NEIGHBOURS = 1024
#: Rows the candidates are first scored on, and how many of the best go on to every scored row
#: (a table that is no sinusoid costs a first look at its first column, not a full search).
_ROWS_FIRST = 64
_KEPT = 4
#: Values the kept candidates are scored on at once (:func:`_best`: 8 MiB of double sines)
_CHUNK = 2 ** 20
#: Rows a column's candidate frequencies are scored on (all of them up to this many): the candidate that
#: rebuilds the most entries is taken, and each entry it misses costs 8 bytes of correction.
_ROWS_SCORED = 4096
#: Rows each column's frequency is first read from (one estimate each, unwrapped from there): a zeroed
#: padding row (fairseq's ``padding_idx``) misleads the estimate that starts on it, not the others.
_STARTS = (1, 2, 3)
#: The opset ScatterElements needs.
_MIN_OPSET = 11
_SIN, _COS = 0, 1


def _plane(values: np.ndarray) -> np.ndarray | None:
    """The [positions, channels] view of a float32 table whose other axes are 1, else None."""
    if values.dtype != np.float32 or values.ndim < 2 or any(d != 1 for d in values.shape[:-2]):
        return None
    plane = values.reshape(values.shape[-2:])
    if not 4 < plane.shape[0] < 2 ** 24 or plane.shape[1] < 1:  # float32 Range counts exactly below 2^24
        return None
    return plane


def _phases(kinds: np.ndarray) -> np.ndarray:
    """The double added to a column's angle before ``Sin``: 0 for a sine column, pi/2 for a cosine one
    (one ``Sin`` over the whole table: no ``Cos`` and ``Where`` beside it, two full-size doubles fewer to
    fold; ``sin(a + pi/2)`` in double rounds to the float32 ``cos(a)`` but where a correction says otherwise)."""
    return np.where(kinds == _SIN, 0.0, np.pi / 2)


def _rounded(args: np.ndarray, kinds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 of ``sin(a + phase)`` (per column) of float32 arguments ``a`` computed in double, the decode's
    arithmetic; and where that rounding is within :data:`MARGIN` of a boundary (a less accurate runtime
    might round the other way)."""
    exact = np.sin(args.astype(np.float64) + _phases(kinds))
    rounded = exact.astype(np.float32)
    lo = (exact * (1.0 - MARGIN)).astype(np.float32)
    hi = (exact * (1.0 + MARGIN)).astype(np.float32)
    return rounded, (lo != rounded) | (hi != rounded)


def _arguments(length: int, freqs: np.ndarray) -> np.ndarray:
    """float32 ``p * w_c`` for positions 0..length-1: the product the exporter rounded to float32."""
    return np.arange(length, dtype=np.float32)[:, None] * freqs.astype(np.float32)[None, :]


def _estimate(plane: np.ndarray, kinds: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Each column's frequency in double and a bound on its error, unwrapped row by row: at rows
    ``start``, 2 ``start``, 4 ``start``, ... the non-negative solution of ``f(a) = v`` nearest the angle the previous estimate predicts
    gives ``a / p``, when the previous bound tells it from the other solutions. One row fixes the angle
    to ``ulp(v) / slope`` (``sqrt(2 ulp(v))`` where ``f`` is flat) plus half the float32 ulp of the angle
    (the exporter rounded ``p * w`` to float32), so the frequency to that over ``p``:
    the last bound is what the float32 search in :func:`_fit` covers."""
    length, width = plane.shape
    sine = kinds == _SIN
    freq = np.zeros(width)
    bound = np.full(width, np.inf)
    rows = sorted({*(start * 2 ** k for k in range(int(np.log2((length - 1) / start)) + 1)), length - 1})
    for p in rows:
        v = plane[p].astype(np.float64)
        base = np.where(sine, np.arcsin(v), np.arccos(v))
        other = np.where(sine, np.pi - base, -base)
        turns = np.round(p * freq / (2 * np.pi))[None, :] + np.array([-1.0, 0.0, 1.0, 2.0])[:, None]
        options = np.concatenate([base + 2 * np.pi * turns, other + 2 * np.pi * turns])  # [8, C]
        options[options < 0] = np.inf  # the frequency is not negative
        pick = np.abs(options - p * freq).argmin(axis=0)
        angle = options[pick, np.arange(width)]
        slope = np.abs(np.where(sine, np.cos(angle), np.sin(angle)))
        ulp = np.spacing(np.abs(plane[p])).astype(np.float64)
        # the exporter rounded p * w to float32 before f: half its ulp is known of the angle at best
        rounding = 0.5 * np.spacing(np.abs(angle).astype(np.float32)).astype(np.float64)
        err = (np.minimum(ulp / np.maximum(slope, 1e-300), np.sqrt(2 * ulp)) + rounding) / p
        gap = np.abs(options - angle[None, :])
        gap = np.where(np.isfinite(gap) & (gap > 0), gap, np.inf)  # the pick itself (or its repeat) is no rival
        clear = (bound == np.inf) if p == start else (p * bound + err * p < 0.5 * gap.min(axis=0))
        better = clear & np.isfinite(angle) & (err < bound)
        freq = np.where(better, angle / p, freq)
        bound = np.where(better, err, bound)
    return freq, bound


def _decoded(args: np.ndarray, phase: np.ndarray | float) -> np.ndarray:
    """float32 of ``sin(a + phase)`` of float32 arguments ``a`` computed in double, in place on one double
    copy: :func:`_rounded`'s values without its boundary test, which the candidates' scoring does not read."""
    wide = args.astype(np.float64)
    wide += phase
    return np.sin(wide, out=wide).astype(np.float32)


def _hits(plane: np.ndarray, column: int, kind: int, cand: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """How many of ``rows`` of ``column`` each candidate frequency rebuilds bit for bit."""
    got = _decoded(rows.astype(np.float32)[:, None] * cand[None, :], _phases(np.array(kind)))
    return (got.view(np.uint32) == plane[rows, column].view(np.uint32)[:, None]).sum(axis=0)


def _best(plane: np.ndarray, kinds: np.ndarray, cands: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per column, how many of ``rows`` each of its candidates ``cands[c]`` ([C, K], float32) rebuilds bit
    for bit, [C, K]: :func:`_hits` for many columns at once (one ``Sin`` over [rows, columns, K] instead of
    a Python call per column: the search was most of khmersm's lean file step, bench/RESULTS.md blockq20),
    :data:`_CHUNK` values at a time."""
    out = np.empty(cands.shape, np.int64)
    step = max(1, _CHUNK // (len(rows) * cands.shape[1]))
    for lo in range(0, cands.shape[0], step):
        hi = min(lo + step, cands.shape[0])
        args = rows.astype(np.float32)[:, None, None] * cands[None, lo:hi, :]  # float32 p * w, as _hits
        got = _decoded(args, _phases(kinds[lo:hi])[None, :, None])
        out[lo:hi] = (got.view(np.uint32) == plane[rows, lo:hi].view(np.uint32)[:, :, None]).sum(axis=0)
    return out


def _fit(plane: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Each column's kind (sine, cosine) and float32 frequency, or None when the table is no such table."""
    first = plane[0]
    if not np.all((first == 0.0) | (first == 1.0)) or np.signbit(first).any():
        return None
    if np.any(np.abs(plane) > 1.0) or not np.all(np.isfinite(plane)):
        return None
    kinds = np.where(first == 0.0, _SIN, _COS)
    with np.errstate(invalid="ignore", divide="ignore"):
        seeds = [_estimate(plane, kinds, start) for start in _STARTS if start < plane.shape[0] - 1]
    rows = np.unique(np.linspace(1, plane.shape[0] - 1, min(plane.shape[0] - 1, _ROWS_SCORED)).astype(np.int64))
    width = plane.shape[1]
    kept = np.empty((width, _KEPT), np.float32)
    for c in range(width):
        found = []
        for freq, bound in seeds:
            if not (np.isfinite(freq[c]) and bound[c] < 1.0):
                continue
            centre = np.float32(freq[c])
            ulps = int(min(np.ceil(bound[c] / max(float(np.spacing(centre)), 1e-45)) + _NEIGHBOURS, _MAX_NEIGHBOURS))
            steps = np.arange(-ulps, ulps + 1, dtype=np.int64)
            found.append((np.int64(centre.view(np.int32)) + steps).astype(np.int32).view(np.float32))
        if not found:
            return None
        cand = np.unique(np.concatenate(found))
        # a first look on a few rows (a column that is no sinusoid stops the search here), then the
        # few best candidates on every scored row
        hits = _hits(plane, c, kinds[c], cand, rows[:: max(1, len(rows) // _ROWS_FIRST)])
        if hits.max() < 0.5 * len(rows[:: max(1, len(rows) // _ROWS_FIRST)]):
            return None
        best = cand[np.argsort(-hits, kind="stable")[:_KEPT]]
        kept[c] = np.resize(best, _KEPT)  # fewer than _KEPT: repeated in turn; argmax takes the first of equals
    hits = _best(plane, kinds, kept, rows)
    if (hits.max(axis=1) < 0.5 * len(rows)).any():
        return None
    return kinds, kept[np.arange(width), hits.argmax(axis=1)]


def recipe(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(kinds, frequencies, corrected flat indices, their values) that rebuild ``values`` bit for bit,
    or None when it is not a sinusoid table or more than :data:`MAX_CORRECTED` of it needs correcting."""
    plane = _plane(values)
    if plane is None:
        return None
    fitted = _fit(plane)
    if fitted is None:
        return None
    kinds, freqs = fitted
    got, unsure = _rounded(_arguments(plane.shape[0], freqs), kinds[None, :])
    wrong = (got.view(np.uint32) != plane.view(np.uint32)) | unsure
    if wrong.mean() > MAX_CORRECTED:
        return None
    where = np.flatnonzero(wrong.reshape(-1))
    return kinds, freqs, where, plane.reshape(-1)[where]


def _form(name: str, shape: tuple[int, ...], kinds: np.ndarray, freqs: np.ndarray, where: np.ndarray,
          fixes: np.ndarray) -> tuple[list[TensorProto], list[onnx.NodeProto]]:
    """The stored tensors and the decode nodes (into ``name``) of a table of ``shape``: positions
    ``[L, 1]`` (``Range``, ``Reshape``) times frequencies ``[C]`` in float32, the phases added in double,
    ``Sin``, float32, the corrections scattered into the flat table, its shape back. Each full-size step
    is a copy onnxruntime keeps until folding ends (about 5.5x the table at load), so there are as few
    as the arithmetic allows."""
    length = shape[-2]
    index_type = np.int32 if length * len(freqs) < 2 ** 31 else np.int64
    stored = [numpy_helper.from_array(np.array(0, np.float32), f"{name}__start"),
              numpy_helper.from_array(np.array(length, np.float32), f"{name}__limit"),
              numpy_helper.from_array(np.array(1, np.float32), f"{name}__delta"),
              numpy_helper.from_array(np.array([-1, 1], np.int64), f"{name}__column"),
              numpy_helper.from_array(freqs.astype(np.float32), f"{name}__freqs"),
              numpy_helper.from_array(_phases(kinds), f"{name}__phases"),
              numpy_helper.from_array(np.array([-1], np.int64), f"{name}__flat"),
              numpy_helper.from_array(where.astype(index_type), f"{name}__at"),
              numpy_helper.from_array(fixes.astype(np.float32), f"{name}__fixes"),
              numpy_helper.from_array(np.array(shape, np.int64), f"{name}__shape")]
    t = [f"{name}__{k}" for k in ("range", "pos", "arg", "wide", "turned", "sin", "back", "flat_v", "fixed")]
    s = [x.name for x in stored]
    nodes = [helper.make_node("Range", [s[0], s[1], s[2]], [t[0]]),
             helper.make_node("Reshape", [t[0], s[3]], [t[1]]),
             helper.make_node("Mul", [t[1], s[4]], [t[2]]),  # the exporter's float32 p * w
             helper.make_node("Cast", [t[2]], [t[3]], to=TensorProto.DOUBLE),
             helper.make_node("Add", [t[3], s[5]], [t[4]]),
             helper.make_node("Sin", [t[4]], [t[5]]),
             helper.make_node("Cast", [t[5]], [t[6]], to=TensorProto.FLOAT),
             helper.make_node("Reshape", [t[6], s[6]], [t[7]]),
             helper.make_node("ScatterElements", [t[7], s[7], s[8]], [t[8]], axis=0),
             helper.make_node("Reshape", [t[8], s[9]], [name])]
    return stored, nodes


#: (values, stored tensors, decode nodes, name) -> whether a runtime rebuilds ``values`` bit for bit
#: from the stored form: the caller's check (graph passes open no sessions; pipeline/lean_file.py's runs
#: onnxruntime folded and unfolded).
RuntimeCheck = Callable[[np.ndarray, list[TensorProto], list[onnx.NodeProto], str], bool]


def decode_model(stored: list[TensorProto], nodes: list[onnx.NodeProto], name: str) -> onnx.ModelProto:
    """A model of the decode alone (no inputs, ``name`` its output), for a runtime to check the form on."""
    graph = helper.make_graph(nodes, "decode", [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)],
                              initializer=stored)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def sinusoid_form(tensor: TensorProto, values: np.ndarray, opset: int, check: RuntimeCheck | None = None
                  ) -> tuple[int, Callable[[], tuple[list[TensorProto], list[onnx.NodeProto]]]] | None:
    """(stored bytes, the maker of the stored tensors and decode nodes) of ``tensor``'s sinusoid form,
    or None when ``values`` is not such a table, the opset lacks ``ScatterElements`` or ``check`` (a
    runtime's verdict, :data:`RuntimeCheck`) says the runtime does not rebuild it bit for bit."""
    if not ENABLED or opset < _MIN_OPSET or tensor.data_type != TensorProto.FLOAT:
        return None
    found = recipe(values)
    if found is None:
        return None
    kinds, freqs, where, fixes = found
    stored, nodes = _form(tensor.name, tuple(values.shape), kinds, freqs, where, fixes)
    if check is not None and not check(values, stored, nodes, tensor.name):
        log.info("%s: a sinusoid table, but the runtime does not rebuild it bit for bit; kept as it is", tensor.name)
        return None
    cost = sum(numpy_helper.to_array(t).nbytes for t in stored)
    log.debug("%s %s: sinusoid recipe, %d of %d entries corrected", tensor.name, list(values.shape), len(where),
              values.size)
    return cost, lambda: (stored, nodes)
