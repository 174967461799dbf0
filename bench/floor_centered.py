"""Regression heads judged by an uncentered cosine, beside centered measures (issue 27 item 5, branch floor16).

Why: a landmark head's coordinates sit far from 0 (the iris points at 20-45 px of a 64 crop), so the output's
cosine with float's is near 1 whatever the error (mp_iris_landmark MXFP8_E4M3: cosine 0.9995, the package's
reading 0.333; bench/RESULTS.md, newmodels25). This script prints, for each graph output
``curves.regression_heads`` names, on ``--fresh`` feeds (seed 1000) after a quantize with repair off on ``--calib``
feeds (seed 1): the pooled cosine the floor takes; the cosine with float's per-feed mean taken off both
(``centered/feed``); with float's per-element mean over the feeds taken off both (``centered/elements``); the RMS
error over float's standard deviation over every value (``rms/spread``); the task metric; and ``centered/elements``
on 200 random subsets of 4 and of 8 of the fresh feeds (the floor's held-out counts), their 10th percentile and median. A measurement for the
rule, not the rule: a centered measure would have to keep every floor that holds on the zoo's and the newmodels
rounds' regression-head rows, which this does not yet show. With each subset (repair18): its jackknife bound
(:func:`centered_bound`, as the floor bounds a pooled cosine) against the family's cosine floor, counted as the
verdict a bounded reading would give (broken: the high end below; holds: the low end above; else straddles).

    NEWMODELS25_SRC=/work/cache/newmodels25/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/floor_centered.py --pairs mp_iris_landmark:MXFP8_E4M3,mp_iris_landmark:A8W8
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402
from floor_after import _named_outputs, emit_row, pair_options  # noqa: E402
from testkit import zoo  # noqa: E402


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    den = float(np.sqrt((a @ a) * (b @ b)))
    return float(a @ b / den) if den > 0 else float("nan")


def measures(refs: list[np.ndarray], gots: list[np.ndarray]) -> dict[str, float]:
    """The four figures of the module docstring over the feeds' values of one output."""
    r = np.stack([np.asarray(x, np.float64).ravel() for x in refs])
    g = np.stack([np.asarray(x, np.float64).ravel() for x in gots])
    per_feed = r.mean(axis=1, keepdims=True)
    per_element = r.mean(axis=0, keepdims=True)
    spread = float(r.std())
    return {"cosine": round(_cos(r.ravel(), g.ravel()), 5),
            "centered/feed": round(_cos((r - per_feed).ravel(), (g - per_feed).ravel()), 5),
            "centered/elements": round(_cos((r - per_element).ravel(), (g - per_element).ravel()), 5),
            "rms/spread": round(float(np.sqrt(np.mean((g - r) ** 2))) / spread if spread > 0 else float("nan"), 5),
            "mean|offset|/spread": round(float(np.abs(r).mean()) / spread if spread > 0 else float("nan"), 3)}


def centered(r: np.ndarray, g: np.ndarray) -> float:
    """The cosine with float's per-element mean over the feeds (the rows of ``r``) taken off both."""
    mean = r.mean(axis=0, keepdims=True)
    return _cos((r - mean).ravel(), (g - mean).ravel())


def centered_bound(refs: list[np.ndarray], gots: list[np.ndarray], level: float = 0.9) -> tuple[float, float, float]:
    """``centered/elements`` with a jackknife bound over the feeds, as analysis/floor.py's ``_cosine_bound`` bounds a
    pooled cosine: the measure left one feed out at a time (float's per-element mean taken again over the rest), the
    jackknife's standard error, Student's t at ``level`` on ``n - 1`` degrees of freedom each side: (figure, low, high)."""
    from onnxptq.analysis.maps import t_quantile

    r = np.stack([np.asarray(x, np.float64).ravel() for x in refs])
    g = np.stack([np.asarray(x, np.float64).ravel() for x in gots])
    n = r.shape[0]
    est = centered(r, g)
    if n < 3:
        return est, -np.inf, np.inf
    keep = np.ones(n, bool)
    left = []
    for i in range(n):
        keep[i] = False
        left.append(centered(r[keep], g[keep]))
        keep[i] = True
    left = np.asarray(left)
    se = float(np.sqrt((n - 1) / n * ((left - left.mean()) ** 2).sum()))
    t = t_quantile(level, n - 1)
    return est, est - t * se, est + t * se


def one(name: str, preset: str, calib_n: int, fresh_n: int, out_dir: Path) -> dict[str, Any]:
    import onnx

    import onnxptq
    from onnxptq.analysis.curves import regression_heads
    from onnxptq.config.presets import resolve_config

    rel, make, metric_name, metric = newmodels.MODELS[name]
    path = Path(rel) if Path(rel).is_absolute() else newmodels.SRC / rel
    calib, fresh = make(calib_n, 1), make(fresh_n, 1000)
    out = out_dir / f"{name}.{preset}.norepair.onnx"
    result = onnxptq.quantize(str(path), resolve_config(preset).replace(repair=False), data=list(calib), output=str(out))
    cos_floor = result.floor.floor.cosine if result.floor is not None else 0.98
    heads = sorted(regression_heads(onnx.load(str(path), load_external_data=False)))
    floats, gots = _named_outputs(path, fresh), _named_outputs(out, fresh)
    rows = {h: measures([f[h] for f in floats], [g[h] for g in gots]) for h in heads if h in floats[0]}
    rng = np.random.default_rng(0)
    for h, row in rows.items():  # at the floor's counts of held-out feeds: random subsets of the fresh ones
        for k in (4, 8):
            picks = [rng.choice(len(floats), k, replace=False) for _ in range(200)]
            got = sorted(measures([floats[i][h] for i in p], [gots[i][h] for i in p])["centered/elements"] for p in picks)
            row[f"centered/elements on {k}: p10, median"] = (round(got[20], 5), round(got[100], 5))
            # the jackknife bound on each subset against the family's cosine floor: the verdict a bounded reading gives
            verdicts = {"broken": 0, "holds": 0, "straddles": 0}
            for p in picks:
                _, low, high = centered_bound([floats[i][h] for i in p], [gots[i][h] for i in p])
                verdicts["broken" if high < cos_floor else "holds" if low >= cos_floor else "straddles"] += 1
            row[f"bounded on {k} (of 200 subsets)"] = verdicts
        est, low, high = centered_bound([f[h] for f in floats], [g[h] for g in gots])
        row[f"bounded on {len(floats)}"] = (round(est, 5), round(low, 5), round(high, 5))
    ref, test = zoo.session_runner(path), zoo.session_runner(out)
    return {"model": name, "preset": preset, "fresh": fresh_n, "metric": metric_name,
            "task": round(float(metric(ref, test, fresh, None)), 4), "heads": rows}


def main() -> None:
    args = pair_options(__doc__).parse_args()
    logging.basicConfig(level=logging.ERROR)
    out_dir = Path(tempfile.mkdtemp(prefix="floor_centered_"))
    for pair in args.pairs.split(","):
        name, preset = pair.split(":")
        emit_row(one(name, preset, args.calib, args.fresh, out_dir), args.json)


if __name__ == "__main__":
    main()
