"""Prefixes of an output judged by its cosine: the judged figure, its bound, and the figure on fresh feeds
(issue 27 item 2, branch repair17).

For each ``--presets`` entry of ``MODEL``: repair's own judge (the rung the search runs on, found with a large
``repair_budget``) on the graph's prefix of each length of ``--lengths``; per length, the floor's pooled cosine on
its held-out feeds, the jackknife's low end of it (``floor._cosine_bound`` at the confirm level and at the level
of a choice among 4), and the pooled cosine of the same candidate on ``--fresh`` other feeds (seed 1000).

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/repair_cosine_scan.py sscd_distilled \\
        --presets MXINT8,A8W8 --lengths 12,21,33,45,56,62,69,80 --fresh 48
    PYTHONPATH=<tree>/src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/repair_cosine_scan.py sscd_distilled \
        --presets MXINT8,A8W8 --deliver --fresh 48 --seed 1 --json out.jsonl --out-dir DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds)


def scan(name: str, presets: list[str], lengths: list[int], calib_n: int, fresh_n: int, seed: int, out: Path | None) -> None:
    import onnxptq
    from onnxptq.algorithms import repair
    from onnxptq.analysis.evidence import CONFIDENT, chosen_level
    from onnxptq.analysis.floor import _cosine_bound
    from onnxptq.config.presets import resolve_config
    from onnxptq.sessions import open_session

    rel, make, _, _ = newmodels.MODELS[name]
    calib, fresh = make(calib_n, seed), make(fresh_n, 1000)
    float_session = open_session(str(newmodels.SRC / rel) if not Path(rel).is_absolute() else rel, threads=1)
    names = [o.name for o in float_session.get_outputs()]
    floats = [float_session.run(names, f) for f in fresh]
    built: dict[str, object] = {}
    original_run = repair._Judge.run

    def run(self, model, delivered=None):  # the candidate's model kept for the fresh feeds
        built["model"] = model
        return original_run(self, model, delivered)

    def fresh_cosine(model) -> list[float]:
        s = open_session(model, threads=1)
        got = [s.run(names, f) for f in fresh]
        out = []
        for i in range(len(names)):
            r = np.concatenate([np.ravel(f[i]).astype(np.float64) for f in floats])
            g = np.concatenate([np.ravel(f[i]).astype(np.float64) for f in got])
            out.append(float(r @ g / (np.linalg.norm(r) * np.linalg.norm(g))))
        return out

    rows = []

    def judged(judge, candidates, allowance, *, rung=None, **_):  # in place of the search: every length judged
        print(f"rung {rung.describe() if rung else 'float'}, {len(candidates)} candidates", flush=True)
        for k in [0] + lengths + [len(candidates)]:
            v = judge(frozenset(candidates[:k]), rung) if k else judge.cache[(None, frozenset(), frozenset())]
            model = built.pop("model", None) if k else None
            fr = fresh_cosine(model) if model is not None else [float("nan")]
            for out_name, check in (v.outputs.items() if v is not None else []):
                b1 = _cosine_bound(check, judge.floor.cosine, CONFIDENT)
                b4 = _cosine_bound(check, judge.floor.cosine, chosen_level(CONFIDENT, 4))
                row = {"preset": preset, "k": k, "n": len(candidates), "output": out_name, "held": check.ok,
                       "cosine": round(check.cosine, 5), "low": round(b1.low, 5) if b1 else None,
                       "low4": round(b4.low, 5) if b4 else None, "feeds": len(check.cosine_sums),
                       "fresh": round(fr[names.index(out_name)], 5) if out_name in names and k else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
        return frozenset(candidates), True

    repair._search = judged
    repair._Judge.run = run
    for preset in presets:
        print("==", name, preset, flush=True)
        onnxptq.quantize(str(newmodels.SRC / rel), resolve_config(preset).replace(repair_budget=50), data=list(calib),
                         output=f"/tmp/repair_cosine_scan_{name}_{preset}.onnx")
    if out is not None:
        with out.open("a") as fh:
            for row in rows:
                fh.write(json.dumps({"model": name, "seed": seed, **row}) + "\n")


def deliver(name: str, presets: list[str], calib_n: int, fresh_n: int, seed: int, out: Path | None, out_dir: Path) -> None:
    """Each preset quantized with repair on (defaults): what the search delivered, its verdict, and the pooled cosine
    of every output against float's on ``fresh_n`` fresh feeds (seed 1000), with the per-feed minimum."""
    import hashlib
    import time

    import onnxptq
    from onnxptq.config.presets import resolve_config
    from onnxptq.sessions import open_session

    rel, make, _, _ = newmodels.MODELS[name]
    path = str(newmodels.SRC / rel)
    calib, fresh = make(calib_n, seed), make(fresh_n, 1000)
    ref = open_session(path, threads=1)
    names = [o.name for o in ref.get_outputs()]
    floats = [ref.run(names, f) for f in fresh]
    for preset in presets:
        target = out_dir / f"{name}.{preset}.s{seed}.onnx"
        cpu = time.process_time()
        result = onnxptq.quantize(path, resolve_config(preset), data=list(calib), output=str(target))
        cpu = time.process_time() - cpu
        s = open_session(str(target), threads=1)
        got = [s.run(names, f) for f in fresh]
        rec = result.repair or {}
        row = {"model": name, "preset": preset, "seed": seed, "stepped": len(rec.get("stepped_up", {})),
               "kept_float": len(rec.get("kept_float", {})), "candidates": rec.get("candidates"),
               "builds": rec.get("evaluations"), "prefixes": rec.get("order", {}).get("prefixes"),
               "ruled_by_bound": rec.get("ruled_by_bound"), "ruled_by_measure": rec.get("ruled_by_measure"),
               "after": result.floor.describe()[:160] if result.floor is not None else None,
               "sha": hashlib.sha256(target.read_bytes()).hexdigest()[:8],
               "size_x": round(target.stat().st_size / Path(path).stat().st_size, 3), "cpu_s": round(cpu, 1)}
        for i, out_name in enumerate(names):
            r = np.concatenate([np.ravel(f[i]).astype(np.float64) for f in floats])
            g = np.concatenate([np.ravel(f[i]).astype(np.float64) for f in got])
            row[f"fresh_{out_name}"] = round(float(r @ g / (np.linalg.norm(r) * np.linalg.norm(g))), 5)
        print(json.dumps(row), flush=True)
        if out is not None:
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--presets", required=True)
    ap.add_argument("--lengths", help="prefix lengths, comma separated (the scan)")
    ap.add_argument("--deliver", action="store_true", help="quantize with repair on and read the delivered file fresh")
    ap.add_argument("--out-dir", type=Path, default=Path("/tmp/repair_cosine_scan"))
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--fresh", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1, help="the calibration feeds' seed")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if a.deliver:
        a.out_dir.mkdir(parents=True, exist_ok=True)
        deliver(a.model, a.presets.split(","), a.calib, a.fresh, a.seed, a.json, a.out_dir)
    else:
        scan(a.model, a.presets.split(","), [int(k) for k in a.lengths.split(",")], a.calib, a.fresh, a.seed, a.json)


if __name__ == "__main__":
    main()
