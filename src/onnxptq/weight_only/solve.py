"""Solve every planned weight with its method: the per-layer loop of the weight-only pipeline.

Order of work: the format of each site (lm_head rule, mixed 8-bit choice by sensitivity), then AWQ's
scales (they change weights and norm vectors before anything is rounded), then one method call per
site, each reporting its error. Errors are measured in the site's final space against its float
weight: ``weight_error = ‖ΔW‖/‖W‖`` and, with calibration statistics,
``output_error = sqrt(tr(ΔWᵀHΔW) / tr(WᵀHW))`` — the layer's relative output error on the
calibration inputs, exact from the Hessian.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ..formats.int_blocks import BlockFormat
from . import awq, gptq, hqq, rtn
from .calibrate import ActivationStats
from .options import WeightOnlyOptions
from .plan import EMBEDDING, LINEAR, LM_HEAD, Site, WeightPlan, _Constants, weight_kn

log = logging.getLogger(__name__)


@dataclass
class LayerReport:
    """What happened to one weight."""

    name: str
    weight: str
    role: str
    k: int
    n: int
    format: str
    method: str
    weight_error: float | None = None
    output_error: float | None = None
    note: str = ""


@dataclass
class Solution:
    """The solved weights (``[K, N]`` view), replaced float vectors (AWQ folds) and the reports."""

    solved: dict[str, rtn.Solved] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    reports: list[LayerReport] = field(default_factory=list)
    awq_skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


class _Weights:
    """Float weights in the ``[K, N]`` view, read when asked (not all held at once: an LLM's
    weights would be copied whole); only the ones AWQ changed are kept until they are solved."""

    def __init__(self, consts: _Constants, plan: WeightPlan) -> None:
        self._consts = consts
        self._sites = plan.by_weight()
        self._changed: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._changed:
            return self._changed[name]
        return weight_kn(self._consts, self._sites[name])

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self._changed[name] = value

    def release(self, name: str) -> None:
        self._changed.pop(name, None)


def _rel_output_error(delta: np.ndarray, w: np.ndarray, h: np.ndarray) -> float:
    h32 = np.asarray(h, dtype=np.float32)
    num = float(np.sum((h32 @ delta) * delta))
    den = float(np.sum((h32 @ w) * w)) or 1.0
    return float(np.sqrt(max(num, 0.0) / den))


def _best_gptq(w: np.ndarray, h: np.ndarray, preps: list[gptq.Prepared], fmt: BlockFormat) -> tuple[rtn.Solved, str]:
    """GPTQ in each prepared row order; the solution with the smallest output error on ``h``.

    Why more than one order: all rows by decreasing ``H_ii`` ("global") must fix every block's
    scale from the unmodified weight, and the error pushed onto a block's later rows can then
    leave its range and clip; block by block ("blocks") refits each scale on the updated rows but
    orders less. On SmolLM2-135M int4 b128 "global" wins on most layers; on inputs with no
    dominant channels (isotropic data) the clipping makes it lose even to RTN. The output error
    ``tr(ΔWᵀHΔW)`` is exact on the calibration Hessian, so the choice costs one solve per order.
    """
    best: tuple[float, rtn.Solved, str] | None = None
    for prep in preps:
        solved = gptq.solve(w, prep, fmt)
        err = _rel_output_error(solved.dequantized() - w, w, h)
        if best is None or err < best[0]:
            best = (err, solved, prep.order)
    assert best is not None
    return best[1], best[2]


def formats_for(plan: WeightPlan, opts: WeightOnlyOptions, weights: "_Weights",
                stats: ActivationStats | None) -> dict[str, BlockFormat | None]:
    """Each site's format: the lm_head rule, the main format, and the ``mixed`` 8-bit share.

    ``mixed``: the linear layers with the largest *relative* output error under RTN at the main
    format (on the calibration Hessian; relative weight error without data) are kept at 8 bits.
    Relative, not absolute: an absolute error grows with a layer's width and would pick the
    widest layers (gate/up) first, where measurement on the test Llama showed v/o/down matter more.
    """
    sens = sensitivities(plan.sites, opts, weights, stats) if opts.mixed and opts.bits < 8 else {}
    return formats_from(plan, opts, sens)


def sensitivities(sites: list[Site], opts: WeightOnlyOptions, weights: "_Weights",
                  stats: ActivationStats | None) -> dict[str, float]:
    """The ``mixed`` ranking key of each linear site in ``sites``: its relative output error under
    RTN at the main format (relative weight error where no Hessian was collected)."""
    sens: dict[str, float] = {}
    for s in sites:
        if s.role != LINEAR:
            continue
        w = weights[s.weight]
        delta = rtn.solve(w, opts.fmt).dequantized() - w
        if stats is not None and s.activation in stats.hessian:
            sens[s.weight] = _rel_output_error(delta, w, stats.mean_hessian(s.activation))
        else:
            sens[s.weight] = float(np.linalg.norm(delta) / (np.linalg.norm(w) or 1.0))
    return sens


def formats_from(plan: WeightPlan, opts: WeightOnlyOptions, sens: dict[str, float]) -> dict[str, BlockFormat | None]:
    """Each site's format from the lm_head rule, the main format and (``mixed``) the ranking ``sens``."""
    out: dict[str, BlockFormat | None] = {}
    for s in plan.sites:
        out[s.weight] = opts.lm_head_fmt() if s.role == LM_HEAD else opts.fmt
    if opts.mixed and opts.bits < 8:
        linear = [s for s in plan.sites if s.role == LINEAR]
        count = int(round(float(opts.mixed) * len(linear)))
        for name in sorted(sens, key=sens.get, reverse=True)[:count]:
            out[name] = BlockFormat(8, opts.block_size, opts.symmetric)
        log.info("mixed: %d of %d layers kept at 8 bits", count, len(linear))
    return out


def _apply_awq(model: onnx.ModelProto, plan: WeightPlan, opts: WeightOnlyOptions, weights: _Weights,
               hessians: dict[str, np.ndarray], stats: ActivationStats, consts: _Constants, formats: dict,
               solution: Solution, todo: list[Site], columns: dict[str, np.ndarray]) -> dict[str, str]:
    """Search and fold AWQ scales group by group, last group first (see :mod:`awq`), for the sites
    in ``todo``. Updates ``weights`` and ``hessians`` (per site) in place, and ``columns`` (the
    column weights a fold leaves on an earlier linear, kept across calls); returns a note per
    scaled site."""
    sites = plan.by_weight()
    groups: dict[str, list[Site]] = {}
    for s in todo:
        if s.role == LINEAR and formats.get(s.weight) is not None and s.activation in stats.hessian:
            groups.setdefault(s.activation, []).append(s)
    notes: dict[str, str] = {}
    for activation, group in reversed(list(groups.items())):
        fold = awq.find_fold(model, activation, group, sites, consts.tensors)
        if isinstance(fold, str):
            solution.awq_skipped[activation] = fold
            notes.update({g.weight: "awq: no exact fold for a scale (clipping only)" for g in group})
            log.info("AWQ skips %s: %s", activation, fold)
            continue
        fmt = formats[group[0].weight]
        s, alpha, err, base = awq.search([weights[g.weight] for g in group], hessians[group[0].weight],
                                         stats.abs_mean[activation], fmt, grid=opts.awq_grid,
                                         columns=[columns.get(g.weight) for g in group])
        if alpha == 0.0:
            notes.update({g.weight: "awq alpha 0 (no gain)" for g in group})
            continue
        for g in group:
            weights[g.weight] = weights[g.weight] * s[:, None]
            hessians[g.weight] = hessians[g.weight] / np.outer(s, s)
            notes[g.weight] = f"awq alpha {alpha:.2f}, output error {err / max(base, 1e-30):.3f}x RTN"
        if fold.kind == "vector":
            for name in fold.vectors:
                current = solution.vectors.get(name, consts.values(name))
                solution.vectors[name] = (current / s).astype(np.float32)
        else:
            weights[fold.site] = weights[fold.site] / s[None, :]
            columns[fold.site] = columns.get(fold.site, 1.0) * (s.astype(np.float64) ** 2)
    return notes


def solve(model: onnx.ModelProto, plan: WeightPlan, opts: WeightOnlyOptions, stats: ActivationStats | None) -> Solution:
    """Quantize every site of ``plan`` with the statistics of one calibration pass (see the module doc)."""
    from tqdm.auto import tqdm

    start = time.perf_counter()
    consts = _Constants(model.graph)
    solution = Solution()
    weights = _Weights(consts, plan)
    formats = formats_for(plan, opts, weights, stats)
    with tqdm(total=len(plan.sites), desc=f"weight-only {opts.method}", unit="layer", disable=not opts.progress) as bar:
        _solve_sites(model, plan, plan.sites, opts, weights, stats, consts, formats, solution, {}, bar)
    solution.seconds = time.perf_counter() - start
    return solution


def solve_in_chunks(model: onnx.ModelProto, plan: WeightPlan, opts: WeightOnlyOptions,
                    collect: Callable[[list[str]], ActivationStats], chunks: list[list[str]]) -> Solution:
    """Quantize every site of ``plan``, collecting the statistics of one chunk of inputs at a time.

    Why: the Hessians of every layer at once are O(Σ K²) — for a 7B model tens of GB, more than
    its weights. Here only one chunk's Hessians (sized by :func:`calibrate.chunk_inputs` to a
    memory budget) are alive: ``collect(tensors)`` runs a calibration pass for them, their sites
    are solved, and they are dropped before the next pass. Chunks go last first, so AWQ can fold
    a later group's scale into an earlier linear before that linear is solved (as the one-pass
    order does); ``mixed`` needs every layer's sensitivity before any format is fixed, so it costs
    one more pass per chunk. Reports come back in plan order.
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    consts = _Constants(model.graph)
    solution = Solution()
    weights = _Weights(consts, plan)
    sens: dict[str, float] = {}
    if opts.mixed and opts.bits < 8:
        for chunk in chunks:
            wanted = set(chunk)
            stats = collect(chunk)
            sens.update(sensitivities([s for s in plan.sites if s.activation in wanted], opts, weights, stats))
            del stats
        sens.update(sensitivities([s for s in plan.sites if s.weight not in sens], opts, weights, None))
    formats = formats_from(plan, opts, sens)
    columns: dict[str, np.ndarray] = {}
    covered = {t for chunk in chunks for t in chunk}
    with tqdm(total=len(plan.sites), desc=f"weight-only {opts.method}", unit="layer", disable=not opts.progress) as bar:
        for chunk in reversed(chunks):
            wanted = set(chunk)
            todo = [s for s in plan.sites if s.activation in wanted]
            stats = collect(chunk)
            _solve_sites(model, plan, todo, opts, weights, stats, consts, formats, solution, columns, bar)
            del stats
        rest = [s for s in plan.sites if s.activation not in covered]
        _solve_sites(model, plan, rest, opts, weights, None, consts, formats, solution, columns, bar)
    order = {s.weight: i for i, s in enumerate(plan.sites)}
    solution.reports.sort(key=lambda r: order[r.weight])
    solution.seconds = time.perf_counter() - start
    return solution


def _solve_sites(model: onnx.ModelProto, plan: WeightPlan, todo: list[Site], opts: WeightOnlyOptions, weights: _Weights,
                 stats: ActivationStats | None, consts: _Constants, formats: dict[str, BlockFormat | None],
                 solution: Solution, columns: dict[str, np.ndarray], bar: Any) -> None:
    """Solve the sites ``todo`` with the statistics ``stats`` (AWQ scales first), into ``solution``."""
    hessians = {s.weight: stats.mean_hessian(s.activation) for s in todo
                if stats is not None and s.activation in stats.hessian}
    notes: dict[str, str] = {}
    if opts.method == "awq" and stats is not None:
        notes = _apply_awq(model, plan, opts, weights, hessians, stats, consts, formats, solution, todo, columns)
    prepared: dict[int, list[gptq.Prepared]] = {}
    for site in todo:
        bar.update(1)
        fmt = formats[site.weight]
        w = weights[site.weight]
        if fmt is None:
            solution.reports.append(LayerReport(site.name, site.weight, site.role, site.k, site.n, "float", "-", note="lm_head rule"))
            continue
        h = hessians.get(site.weight)
        method = opts.method
        if site.tied:
            # the table is the embedding too: GPTQ/AWQ would trade its rows' accuracy (which the
            # Gather reads, and no Hessian sees) for the lm_head's outputs. Round to nearest.
            method = "rtn"
        if method == "gptq" and h is not None:
            key = id(h)  # sites reading one input share one Hessian array, hence one factorisation
            damp = gptq.effective_damp(opts.damp, site.k, stats.samples.get(site.activation, 0) if stats else 0)
            if key not in prepared:
                prepared.clear()  # sites of one input are consecutive: keep its factors alive
                orders = gptq.ACT_ORDERS if opts.act_order else ("none",)
                prepared[key] = [gptq.prepare(h, damp=damp, order=o, block_size=opts.block_size) for o in orders]
            solved, order = _best_gptq(w, h, prepared[key], fmt)
            said = [f"gptq order {order}"] if len(prepared[key]) > 1 else []
            if damp > opts.damp:
                said.append(f"gptq damp {damp:.3f} ({stats.samples.get(site.activation, 0)} calibration vectors for K={site.k})")
            if said:
                notes[site.weight] = "; ".join(said)
        elif method == "hqq" or (method == "gptq" and h is None and site.role == EMBEDDING):
            solved = hqq.solve(w, fmt, importance=None if h is None else np.diag(h))
            method = "hqq"
        elif method == "awq" and h is not None:
            solved = awq.solve_clipped(w, h, fmt)
        else:
            solved = rtn.solve(w, fmt)
            method = "rtn"
        delta = solved.dequantized() - w
        report = LayerReport(site.name, site.weight, site.role, site.k, site.n, fmt.label(), method,
                             weight_error=float(np.linalg.norm(delta) / (np.linalg.norm(w) or 1.0)),
                             output_error=None if h is None else _rel_output_error(delta, w, h),
                             note=notes.get(site.weight, "tied embedding stored once" if site.tied else ""))
        solution.reports.append(report)
        solution.solved[site.weight] = solved.compact()
        weights.release(site.weight)
