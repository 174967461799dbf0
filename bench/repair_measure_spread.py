"""The spread of repair's measure of undecided outputs over the feeds it is taken on (issue 27 item 2, repair14).

repair's judge (algorithms/repair.py, ``_Judge.compare``) rules out a candidate that holds the floor where, on an
output the floor's reads could not decide, its measure (algorithms/repair_measure.py) is worse than the
best-measured accepted candidate's by more than the paired noise (``worse``). This script quantizes
``model:preset`` pairs (bench/newmodels.py's models and feeds: 12 calibration feeds, seed 1, as
bench/repair_rungs.py) with repair on and records every comparison ``worse`` makes: each side's per-feed
losses, the verdict, and a bootstrap over the feeds (``--boot`` resamples of the feeds, paired) of the mean
difference: its 2.5/97.5 % quantiles and the share of resamples where the candidate comes out worse.

``--by-shape``: the measure as before repair14 (every undecided output with a last axis of two or more measured
by its margins, whatever the floor read it as), to see what it ruled out and on what spread.

    NEWMODELS20_SRC=/work/cache/newmodels20/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/repair_measure_spread.py --pairs uvdoc:MX9 --by-shape --json /work/cache/repair14/spread_shape.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models and their feeds)


def bootstrap(candidate: np.ndarray, best: np.ndarray, resamples: int, seed: int = 0) -> dict:
    """The paired mean difference ``candidate − best`` over the feeds, and its bootstrap over them."""
    diff = np.asarray(candidate, np.float64) - np.asarray(best, np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diff.size, (resamples, diff.size))
    means = diff[idx].mean(axis=1)
    return {"mean_diff": float(diff.mean()), "ci95": [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))],
            "share_worse": float(np.mean(means > 0)), "feeds": int(diff.size)}


def run(pair: str, by_shape: bool, resamples: int) -> dict:
    import onnxptq
    from onnxptq.algorithms import repair
    from onnxptq.config.presets import resolve_config

    name, preset = pair.split(":")[:2]
    rel, make, _, _ = newmodels.MODELS[name]
    compared: list[dict] = []
    worse, class_reads = repair.worse, repair.class_reads

    def recorded(candidate, best):
        out = worse(candidate, best)
        compared.append({"cosine": candidate.cosine, "candidate": candidate.losses.tolist(), "best": best.losses.tolist(),
                         "candidate_mean": candidate.mean, "best_mean": best.mean, "clears": candidate.clears(),
                         "worse": bool(out), **bootstrap(candidate.losses, best.losses, resamples)})
        return out

    repair.worse = recorded
    if by_shape:
        repair.class_reads = lambda verdict, names: frozenset(names)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = onnxptq.quantize(str(newmodels.SRC / rel), resolve_config(preset), data=list(make(12, 1)),
                                      output=str(Path(tmp) / "q.onnx"))
    finally:
        repair.worse, repair.class_reads = worse, class_reads
    rep = result.repair if isinstance(result.repair, dict) else {}
    return {"pair": pair, "by_shape": by_shape, "stepped": len(rep.get("stepped_up") or {}),
            "kept": len(rep.get("kept_float") or {}), "candidates": rep.get("candidates"),
            "ruled_by_measure": rep.get("ruled_by_measure"), "compared": compared}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", required=True, help="model:preset, comma separated")
    ap.add_argument("--by-shape", action="store_true", help="the measure before repair14 (margins by shape alone)")
    ap.add_argument("--boot", type=int, default=4000, help="bootstrap resamples of the feeds")
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    rows = []
    for pair in a.pairs.split(","):
        row = run(pair, a.by_shape, a.boot)
        for c in row["compared"]:
            print(f"{pair} {'cosine' if c['cosine'] else 'margins'}: candidate {c['candidate_mean']:.4f} best "
                  f"{c['best_mean']:.4f} diff {c['mean_diff']:+.4f} CI95 [{c['ci95'][0]:+.4f}, {c['ci95'][1]:+.4f}] "
                  f"worse in {c['share_worse']:.3f} of resamples; clears {c['clears']}; ruled {c['worse']}", flush=True)
        print(f"{pair}: stepped {row['stepped']} kept {row['kept']} of {row['candidates']}", flush=True)
        rows.append(row)
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
