"""PP-OCRv4 det A8W8 (issue 27, detsilent): which part of the quantized graph moves the cream pages' DB masks.

A8W8 with repair off, calibrated on the bench's 12 pages (seed 1, 0-11), with node sets kept float; each page's
mask IoU (p > 0.3, float vs quantized) on ``--held`` pages of ``--seed``, by background (white / cream).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/detsilent_diag.py variants --held 16 --seed 1000
    # the floor's mask rule on random draws of 4 held-out + 8 pooled pages of 64 fresh ones: how often it says "holds"
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/detsilent_diag.py subsets --held 64 --seed 2000 --size 4 --draws 2000
    # whole-model changes (activation calibration, equalization, bias correction), repair off
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/detsilent_diag.py configs --held 16 --seed 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import newmodels as nm  # noqa: E402
from silent19_diag import _page_attributes  # noqa: E402
from testkit import zoo  # noqa: E402

#: node sets kept float (names of PP-OCRv4 det's graph)
VARIANTS = {
    "none": (),
    "sigmoid input (last ConvTranspose + Add)": ("p2o.ConvTranspose.2", "p2o.Add.280", "p2o.Sigmoid.0"),
    "head from the second ConvTranspose's input": ("p2o.Relu.11", "p2o.BatchNormalization.2", "p2o.ConvTranspose.2",
                                                   "p2o.Add.280", "p2o.Sigmoid.0"),
    "first Conv (the image input unquantized)": ("p2o.Conv.0",),
    "the first pointwise Conv (its 0-92 input unquantized)": ("p2o.Conv.2",),
    "the first two pointwise Convs read from a 0-90 range": ("p2o.Conv.2", "p2o.Conv.6"),
    "whole DB head": ("p2o.Conv.61", "p2o.BatchNormalization.1", "p2o.Relu.10", "p2o.ConvTranspose.0", "p2o.Add.278",
                      "p2o.BatchNormalization.2", "p2o.Relu.11", "p2o.ConvTranspose.2", "p2o.Add.280", "p2o.Sigmoid.0"),
}


def se_branches(model_path: str, with_mul: bool = False) -> tuple[str, ...]:
    """The nodes of every squeeze-and-excitation branch: ``GlobalAveragePool`` through single-reader nodes to the
    gate (a ``HardSigmoid``/``Sigmoid``), and with ``with_mul`` the ``Mul`` that scales the feature map by it."""
    import onnx

    m = onnx.load(model_path)
    readers: dict[str, list] = {}
    for n in m.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    out: list[str] = []
    for n in m.graph.node:
        if n.op_type != "GlobalAveragePool":
            continue
        chain, t = [n], n.output[0]
        for _ in range(8):
            nxt = readers.get(t, [])
            if len(nxt) != 1:
                break
            chain.append(nxt[0])
            t = nxt[0].output[0]
            if nxt[0].op_type in ("HardSigmoid", "Sigmoid"):
                mul = [r for r in readers.get(t, []) if r.op_type == "Mul"]
                out += [c.name for c in chain] + ([r.name for r in mul] if with_mul else [])
                break
    return tuple(out)


def _first_nodes(model_path: str, convs: int) -> tuple[str, ...]:
    """Every node of the graph (in its order) before its ``convs``-th Conv: the backbone's first stages kept float."""
    import onnx

    out, seen = [], 0
    for n in onnx.load(model_path).graph.node:
        seen += n.op_type == "Conv"
        if seen >= convs:
            break
        if n.op_type != "Constant":
            out.append(n.name)
    return tuple(out)


def _ious(ref, test, feeds, threshold: float = 0.3) -> np.ndarray:
    out = []
    for f in feeds:
        a, b = ref(f)[0] > threshold, test(f)[0] > threshold
        out.append(float((a & b).sum() / max(1, (a | b).sum())))
    return np.asarray(out)


def _config_variants(preset: str) -> dict:
    """Whole-model changes of the preset (calibration, equalization, bias correction), repair off."""
    from onnxptq.config.presets import get_preset

    base = dataclasses.replace(get_preset(preset), repair=False)
    act = base.activation
    return {"minmax ranges": dataclasses.replace(base, activation=dataclasses.replace(act, calibration="minmax")),
            "percentile 99.99": dataclasses.replace(base, activation=dataclasses.replace(act, percentile=99.99)),
            "entropy ranges": dataclasses.replace(base, activation=dataclasses.replace(act, calibration="entropy")),
            "equalize": dataclasses.replace(base, equalize=True),
            "bias correction": dataclasses.replace(base, bias_correction=True)}


def configs(held_n: int, seed: int, only: list[str], preset: str) -> None:
    import onnxptq

    path = str(nm.SRC / nm.MODELS["ppocrv4_det"][0])
    calib, held = nm.ppocr_det_feeds(12, 1), nm.ppocr_det_feeds(held_n, seed)
    cream = np.array([a[0] == "cream" for a in _page_attributes(held_n, seed)])
    ref = zoo.session_runner(path)
    for label, cfg in _config_variants(preset).items():
        if only and label not in only:
            continue
        c0 = time.process_time()
        try:
            r = onnxptq.quantize(path, cfg, data=calib, output="/tmp/detsilent_v4det_cfg.onnx")
        except Exception as exc:  # noqa: BLE001  (a variant the library refuses is reported, not fatal)
            print(json.dumps({"variant": label, "error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            continue
        cpu = time.process_time() - c0
        x = _ious(ref, zoo.session_runner("/tmp/detsilent_v4det_cfg.onnx"), held)
        print(json.dumps({"variant": label, "floor_ok": bool(r.floor.ok), "cpu_s": round(cpu, 1), "mean": round(float(x.mean()), 4),
                          "cream": round(float(x[cream].mean()), 4), "white": round(float(x[~cream].mean()), 4),
                          "n_cream": int(cream.sum()), "min": round(float(x.min()), 4)}), flush=True)


def variants(held_n: int, seed: int, only: list[str], preset: str) -> None:
    import onnxptq
    from onnxptq.config.presets import get_preset

    path = str(nm.SRC / nm.MODELS["ppocrv4_det"][0])
    calib, held = nm.ppocr_det_feeds(12, 1), nm.ppocr_det_feeds(held_n, seed)
    cream = np.array([a[0] == "cream" for a in _page_attributes(held_n, seed)])
    ref = zoo.session_runner(path)
    variants = {**VARIANTS, **{f"every node before the {k}th Conv": _first_nodes(path, k) for k in (2, 3, 4, 6, 8, 12, 16, 32, 48)},
                "SE branches (pool to gate)": se_branches(path),
                "SE branches and their Mul": se_branches(path, with_mul=True)}
    for label, nodes in variants.items():
        if only and label not in only:
            continue
        cfg = dataclasses.replace(get_preset(preset), repair=False, nodes_to_exclude=tuple(nodes))
        c0 = time.process_time()
        r = onnxptq.quantize(path, cfg, data=calib, output="/tmp/detsilent_v4det.onnx")
        cpu = time.process_time() - c0
        x = _ious(ref, zoo.session_runner("/tmp/detsilent_v4det.onnx"), held)
        print(json.dumps({"variant": label, "floor_ok": bool(r.floor.ok), "cpu_s": round(cpu, 1), "mean": round(float(x.mean()), 4),
                          "cream": round(float(x[cream].mean()), 4), "white": round(float(x[~cream].mean()), 4),
                          "n_cream": int(cream.sum()), "min": round(float(x.min()), 4)}), flush=True)


def subsets(quantized: str, pages_n: int, seed: int, size: int, draws: int) -> None:
    """The floor's mask rule (analysis/maps.py: each judged level's mean page IoU with its t-bound, 90 % each side)
    on random draws of ``pages_n`` fresh pages: ``size`` held out and 8 more pooled with them (the calibration
    pages), as floor._judge_masks reads a bench row of 12 pages. ``p_hold``: the share of draws on which it says
    "holds" (the held-out pages' bound and the pooled one both clear 0.95); ``held_only``: the held-out bound alone.
    Beside the mean over all pages; a ``p_hold`` at or under 0.1 where the mean is below the floor is the bound's
    own confidence, not a reading that misses."""
    import math

    from onnxptq.analysis.maps import MaskAgreement, t_quantile

    path = str(nm.SRC / nm.MODELS["ppocrv4_det"][0])
    ref, test = zoo.session_runner(path), zoo.session_runner(quantized)
    whole = MaskAgreement()
    for f in nm.ppocr_det_feeds(pages_n, seed):
        whole.add(ref(f)[0], test(f)[0])
    levels = whole._judged()
    ious = {k: np.array([i / u for i, u in whole.pages[k]]) for k in levels}
    n = min(len(v) for v in ious.values())

    def low(x: np.ndarray) -> float:
        return float(x.mean() - t_quantile(0.9, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))

    rng = np.random.default_rng(0)
    holds = held_only = 0
    for _ in range(draws):
        idx = rng.choice(n, size + 8, replace=False)
        held = all(low(ious[k][idx[:size]]) >= 0.95 for k in levels)
        held_only += held
        holds += held and all(low(ious[k][idx]) >= 0.95 for k in levels)
    b = whole.judge(0.95)
    print(json.dumps({"quantized": quantized, "pages": n, "seed": seed, "all pages": b.describe(0.95) if b else None,
                      "held_out": size, "pooled": size + 8, "draws": draws, "p_hold": round(holds / draws, 3),
                      "held_only": round(held_only / draws, 3)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("variants", "configs", "subsets"))
    ap.add_argument("--model", default="/work/cache/detsilent/v4det_a8w8_norepair.onnx", help="subsets: the quantized model")
    ap.add_argument("--size", type=int, default=4, help="subsets: pages a subset holds (the floor's held-out pages)")
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--held", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--only", nargs="*", default=[])
    a = ap.parse_args()
    if a.mode == "subsets":
        subsets(a.model, a.held, a.seed, a.size, a.draws)
    else:
        (variants if a.mode == "variants" else configs)(a.held, a.seed, a.only, a.preset)


if __name__ == "__main__":
    main()
