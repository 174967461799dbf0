"""Detectors judged at their users' thresholds: the floor's worst threshold beside the task metric at each threshold.

Why a script: a user reads *one* threshold we do not know (analysis/threshold_cells.py, "One threshold at a
time"), and the bench's task metric reads the package's one (BlazeFace: 0.7). Reads the records of
``bench/floor_verdicts.py record`` (repair off) and prints, per (model, preset), this tree's verdict of each
threshold-read output with its worst threshold, and, for the models whose reader's threshold can be moved
(:data:`SHIFTABLE`: BlazeFace's package decode, the score shifted so the package's own 0.7 test reads another
threshold), the task metric at each of ``--thresholds`` on ``--held`` held-out images (the first 32 are the
bench's), with the saved quantized model.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/threshold_reads.py /work/cache/facethresh/rec --held 96
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: models whose decode reads one score threshold the script can move: name → (the package's threshold, decode(version))
SHIFTABLE = {"mp_face_short": (0.7, "short"), "mp_face_long": (0.7, "long")}


def task_at(name: str, onnx_path: Path, held: int, thresholds: list[float]) -> dict[float, tuple[float, int, int, int]]:
    """``threshold → (box F1, float's faces, lost, invented)`` of the package's decode at that threshold."""
    import newmodels as nm
    from testkit import zoo

    package, version = SHIFTABLE[name]
    rel, make, _, _ = nm.MODELS[name]
    feeds = make(held, 1000)
    ref, test = zoo.session_runner(nm.SRC / rel), zoo.session_runner(onnx_path)
    outs = [(ref(f), test(f)) for f in feeds]
    found = {}
    for t in thresholds:
        tp = n_ref = n_test = 0
        for r, g in outs:
            a = nm._mp_decode(version, [np.asarray(r[0]) - t + package, np.asarray(r[1])])[1]
            b = nm._mp_decode(version, [np.asarray(g[0]) - t + package, np.asarray(g[1])])[1]
            n_ref, n_test, tp = n_ref + len(a), n_test + len(b), tp + zoo._matched(a, b, 0.5)
        found[t] = (2 * tp / max(1, n_ref + n_test), n_ref, n_ref - tp, n_test - tp)
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("records", nargs="+")
    ap.add_argument("--held", type=int, default=96)
    ap.add_argument("--thresholds", default="0.3,0.4,0.5,0.6,0.65,0.7,0.725,0.75,0.8")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    import floor_verdicts as fv

    thresholds = [float(t) for t in a.thresholds.split(",")]
    rows = []
    for out_dir in map(Path, a.records):
        for pkl in sorted(out_dir.glob("*.pkl")):
            task = json.loads(pkl.with_suffix(".json").read_text())
            verdict, cpu = fv.remeasure(pkl)  # as complete.py judges (a reused verdict is not judged again with seen)
            model, preset = pkl.stem.rsplit(".", 1)
            row = {"model": model, "preset": preset, "task": task.get("agreement"), "task_floor": task.get("task_floor"),
                   "ok": verdict.ok, "unjudged": verdict.unjudged, "judge_cpu_s": round(cpu, 2), "outputs": {}}
            for name, c in verdict.outputs.items():
                if c.thresholded is None:
                    continue
                w = c.threshold
                row["outputs"][name] = {"ok": c.ok, "band": c.thresholded, "worst": None if w is None else w._asdict()}
            if model in SHIFTABLE and pkl.with_suffix(".onnx").exists():
                row["task_at"] = {str(t): v for t, v in task_at(model, pkl.with_suffix(".onnx"), a.held, thresholds).items()}
            rows.append(row)
            worst = "; ".join(f"{n}: band {o['band'][1]:.4f}/{o['band'][0]}" + (
                "" if o["worst"] is None else f", worst {o['worst']['threshold']:.3g}: F1 {o['worst']['f1']:.3f} of "
                f"{o['worst']['decisions']} (p {o['worst']['chance']:.3f}{', breaks' if o['worst']['breaks'] else ''})")
                for n, o in row["outputs"].items() if o["band"][1] is not None)
            at = " ".join(f"{t}:{v[0]:.3f}({v[2]}/{v[3]})" for t, v in row.get("task_at", {}).items())
            print(f"{model} {preset}: task {row['task']} (floor {row['task_floor']}), verdict {'holds' if verdict.ok else 'BROKEN'}"
                  f"{' unjudged ' + ','.join(verdict.unjudged) if verdict.unjudged else ''} | {worst}" + (f"\n    task at: {at}" if at else ""),
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1, default=float))


if __name__ == "__main__":
    main()
