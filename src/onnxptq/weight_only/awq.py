"""AWQ (Lin et al., 2023): per-input-channel scales that protect the weights of salient inputs.

For the MatMuls sharing one input ``X`` (q/k/v; gate/up; down), ``W ← diag(s) · W`` and
``X ← X · diag(1/s)`` leave the product unchanged, but rounding ``diag(s) · W`` then costs less on
the rows of channels with large activations. ``s = mean|x|^α`` (normalised to geometric mean 1),
``α`` searched on a grid per group. The objective is the layers' output error on the calibration
data, computed exactly from the streamed Hessian ``H = XᵀX`` instead of stored activations:
``Σ_layers tr(ΔWᵀ H ΔW)`` with ``ΔW = diag(1/s) Q(diag(s) W) − W``. ``α = 0`` (``s = 1``) is on the
grid, so AWQ never does worse than RTN on that objective.

``1/s`` has to be folded into whatever produces ``X`` — exactly, or not at all:

* an RMSNorm/LayerNorm weight: ``Mul(γ, y)`` with ``γ`` a 1-D constant of length K (the decomposed
  RMSNorm exporters write), or ``LayerNormalization``/``SimplifiedLayerNormalization`` scale (and
  bias): ``γ ← γ / s``;
* a preceding linear: ``X = MatMul(·, W_prev)`` or ``X = Mul(a, MatMul(·, W_prev))`` (the gated MLP's
  ``silu(gate) · up``), where that MatMul's output feeds nothing else: ``W_prev``'s columns ``/ s``;
* anything else (attention output into o_proj, a residual stream, …) is skipped with the reason.

After the scales, each weight's clipping is searched per output column (AWQ's ``auto_clip``): the
block ranges shrunk by a common ratio in {1, 0.95, …, 0.7}, the ratio with the least output error
``ΔW[:, n]ᵀ H ΔW[:, n]`` kept (1 — plain RTN — is a candidate).

Every consumer of ``X`` must be a planned weight (else the scale would leak into an unscaled
path). Groups are handled from the last to the first, so that a linear whose columns a later group
scales is searched with its scaled weight.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx

from ..formats import int_blocks
from ..formats.int_blocks import BlockFormat
from ..graph.opsets import is_onnx_domain
from . import rtn
from .plan import Site

log = logging.getLogger(__name__)

NORM_OPS = ("LayerNormalization", "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "SkipLayerNormalization")


@dataclass
class FoldTarget:
    """Where ``1/s`` goes: a 1-D constant (``vectors``: norm weight, bias) or a site's columns."""

    kind: str  # "vector" | "columns"
    vectors: tuple[str, ...] = ()
    site: str | None = None  # the weight name of the site whose columns are scaled


def find_fold(model: onnx.ModelProto, activation: str, group: list[Site], sites: dict[str, Site],
              constants: dict[str, onnx.TensorProto]) -> FoldTarget | str:
    """The exact fold target of ``activation``'s scales, or the reason there is none."""
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    group_nodes = {c for s in group for c, _ in s.consumers}
    outsiders = [n.name for n in readers.get(activation, []) if n.name not in group_nodes]
    if outsiders or activation in {o.name for o in graph.output}:
        return f"input {activation} also feeds {outsiders[0] if outsiders else 'a graph output'}"
    k = group[0].k
    node = producers.get(activation)
    if node is None:
        return f"input {activation} is a graph input"

    def vector(name: str) -> bool:
        t = constants.get(name)
        return t is not None and list(t.dims) == [k] and t.data_type == onnx.TensorProto.FLOAT and len(readers.get(name, [])) == 1

    def linear_site(name: str) -> Site | None:
        prev = producers.get(name)
        if prev is None or prev.op_type != "MatMul" or len(readers.get(name, [])) != 1 or name in {o.name for o in graph.output}:
            return None
        return next((s for s in sites.values() if prev.name in {c for c, _ in s.consumers} and len(s.consumers) == 1
                     and not s.gathers), None)

    if is_onnx_domain(node.domain) and node.op_type == "Mul":
        for i in (0, 1):
            if vector(node.input[i]):
                return FoldTarget("vector", (node.input[i],))
        for i in (0, 1):
            site = linear_site(node.input[i])
            if site is not None:
                return FoldTarget("columns", site=site.weight)
        return f"input {activation} comes from a Mul with neither a norm weight nor a linear output"
    if node.op_type in NORM_OPS and len(node.input) > 1 and vector(node.input[1]):
        if node.op_type.startswith("Skip") and len(node.output) > 1 and any(readers.get(o) for o in node.output[1:]):
            return f"input {activation} comes from {node.op_type} whose other outputs are used"
        vecs = [node.input[1]]
        bias_index = 2 if node.op_type == "LayerNormalization" else 3 if node.op_type == "SkipLayerNormalization" else None
        if bias_index is not None and len(node.input) > bias_index and node.input[bias_index]:
            if not vector(node.input[bias_index]):
                return f"input {activation}: the norm's bias is not a constant of length {k}"
            vecs.append(node.input[bias_index])
        return FoldTarget("vector", tuple(vecs))
    if is_onnx_domain(node.domain) and node.op_type == "MatMul":
        site = linear_site(activation)
        if site is not None:
            return FoldTarget("columns", site=site.weight)
    return f"input {activation} comes from {node.op_type} ({node.name}), into which a scale cannot be folded exactly"


def _output_error(delta: np.ndarray, hessian: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
    """Per output column ``ΔW[:, n]ᵀ H ΔW[:, n]`` (times the column's downstream weight)."""
    per_column = np.sum((hessian @ delta) * delta, axis=0)
    return per_column if columns is None else per_column * columns


def _clipped(w: np.ndarray, fmt: BlockFormat, ratio: float) -> np.ndarray:
    """RTN of ``w`` with each block's range shrunk by ``ratio`` (values beyond it saturate)."""
    scale, zp = int_blocks.rtn_params(w, fmt)
    if ratio != 1.0:
        if fmt.symmetric:
            scale = (scale * np.float32(ratio)).astype(np.float32)
        else:  # shrink both ends around the block's zero
            scale = (scale * np.float32(ratio)).astype(np.float32)
    return int_blocks.dequantize(int_blocks.quantize(w, scale, zp, fmt), scale, zp, fmt)


def search(weights: list[np.ndarray], hessian: np.ndarray, abs_mean: np.ndarray, fmt: BlockFormat,
           *, grid: int = 20, columns: list[np.ndarray | None] | None = None) -> tuple[np.ndarray, float, float, float]:
    """The best per-channel scales for the weights ``[K, N_i]`` sharing one input.

    ``columns``: per weight, a weight per output column for its error (``s²`` of a later group's
    scale folded into these columns: their error is amplified by it downstream).
    Returns ``(s, alpha, error, rtn_error)``; errors are ``Σ tr(ΔWᵀ H ΔW)`` (float32 products).
    """
    h = np.asarray(hessian, dtype=np.float32)
    columns = columns or [None] * len(weights)
    x = np.maximum(abs_mean.astype(np.float64), 1e-8)
    best = (np.ones_like(x, dtype=np.float32), 0.0, np.inf)
    base = None
    for a in np.linspace(0.0, 1.0, grid + 1):
        s = x ** a
        s = s / np.sqrt(s.max() * s.min())
        s = np.clip(s, 1e-4, 1e4).astype(np.float32)
        err = 0.0
        for w, c in zip(weights, columns):
            scaled = w * s[:, None]
            deq = rtn.solve(scaled, fmt).dequantized() / s[:, None]
            err += float(_output_error(deq - w, h, c).sum())
        if base is None:
            base = err
        if err < best[2]:
            best = (s, float(a), err)
    return best[0], best[1], best[2], float(base)


CLIP_RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)


def clip_search(w: np.ndarray, hessian: np.ndarray, fmt: BlockFormat) -> np.ndarray:
    """Per output column, the range shrink ratio (AWQ's weight clipping) with the least output
    error ``ΔW[:, n]ᵀ H ΔW[:, n]``; ``1.0`` (plain RTN) is a candidate. Returns ``[N]`` ratios."""
    h = np.asarray(hessian, dtype=np.float32)
    errors = np.stack([_output_error(_clipped(w, fmt, r) - w, h) for r in CLIP_RATIOS])
    return np.asarray(CLIP_RATIOS, np.float32)[np.argmin(errors, axis=0)]


def solve_clipped(w: np.ndarray, hessian: np.ndarray, fmt: BlockFormat) -> rtn.Solved:
    """RTN with the per-column clip ratios of :func:`clip_search`."""
    ratio = clip_search(w, hessian, fmt)
    scale, zp = int_blocks.rtn_params(w, fmt)
    scale = (scale * ratio[None, :]).astype(np.float32)
    return rtn.Solved(int_blocks.quantize(w, scale, zp, fmt), scale, zp, fmt)
