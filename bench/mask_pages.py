"""Probability maps judged by their pages (analysis/maps.py, "Pages"): end to end, and page by page.

Why a script: the floor's mask verdict is decided on a few pages (4 held-out, 8 calibration); whether it
holds, breaks or says "could not judge" there must be set beside the package's mask IoU on other pages,
and beside what repair then costs (ppocrv5_det_op14 BF16 kept 83 of 167 nodes float on main for a break
on 4 pages). Run it under each tree (``PYTHONPATH``) to set the two side by side.

    # the pipeline with its defaults (repair on): verdict, CPU s, nodes kept float, size, task metric on --held pages
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/mask_pages.py e2e ppocrv5_det_op14 BF16 --held 16
    # the package's mask IoU page by page (threshold 0.3) of a quantized model against float, on pages of --seed
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/mask_pages.py pages ppocrv4_det /tmp/q.onnx --held 24 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import newmodels as nm  # noqa: E402
from testkit import zoo  # noqa: E402


def e2e(model: str, preset: str, held_n: int, out: Path) -> None:
    """Quantize with the preset's defaults on the bench's 12 calibration pages (seed 1) and judge on --held (seed 1000)."""
    import onnxptq

    rel, make, metric_name, metric = nm.MODELS[model]
    path = nm.SRC / rel
    calib, held = make(12, 1), make(held_n, 1000)
    c0 = time.process_time()
    result = onnxptq.quantize(str(path), preset, data=calib, output=str(out))
    cpu = time.process_time() - c0
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    repair = result.repair or {}
    row = {"model": model, "preset": preset, "tree": os.environ.get("PYTHONPATH", ""), "verdict_ok": bool(result.floor.ok),
           "unjudged": result.floor.unjudged, "kept_float": len(repair.get("kept_float", []) or []),
           "stepped_up": len(repair.get("stepped_up", []) or []),
           "quantize_cpu_s": round(cpu, 1), "size_x": round(os.path.getsize(out) / nm._model_bytes(path), 3),
           "metric": metric_name, "agreement": round(float(metric(ref, test, held, None)), 4),
           "floor": result.floor.describe()[:400]}
    print(json.dumps(row), flush=True)


def pages(model: str, quantized: Path, held_n: int, seed: int, threshold: float) -> None:
    """Each page's mask IoU at ``threshold`` (float's mask against the quantized model's), their mean and spread."""
    rel, make, _, _ = nm.MODELS[model]
    ref, test = zoo.session_runner(nm.SRC / rel), zoo.session_runner(quantized)
    ious = []
    for feed in make(held_n, seed):
        a, b = ref(feed)[0] > threshold, test(feed)[0] > threshold
        ious.append(float((a & b).sum() / max(1, (a | b).sum())))
    x = np.asarray(ious)
    print(json.dumps({"model": model, "quantized": str(quantized), "seed": seed, "pages": len(x), "mean": round(float(x.mean()), 4),
                      "sd": round(float(x.std(ddof=1)), 4), "min": round(float(x.min()), 4), "per_page": np.round(x, 3).tolist()}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("e2e", "pages"))
    ap.add_argument("model")
    ap.add_argument("arg", help="e2e: the preset; pages: the quantized model")
    ap.add_argument("--held", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/mask_pages.onnx"))
    a = ap.parse_args()
    if a.what == "e2e":
        e2e(a.model, a.arg, a.held, a.out)
    else:
        pages(a.model, Path(a.arg), a.held, a.seed, a.threshold)


if __name__ == "__main__":
    main()
