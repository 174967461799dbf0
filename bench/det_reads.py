"""Detectors' readings on recorded floor inputs: per-level objects, detections after NMS and their stability.

Why a script: the floor's detector judgements (analysis/det_levels.py, analysis/det_nms.py) are set against
the task metric on the very outputs the pipeline judged, recorded by ``bench/floor_verdicts.py record``
(repair off). For each record it prints the task metric, and for a model with score levels the objects'
F1 summed over the levels (held-out feeds, then with the calibration feeds); for one with score rows the
detections' F1 after NMS on the held-out feeds and pooled with the calibration feeds, with float's own
stability under the 1e-3 jitter (``Detections.stable``). ``--guard`` adds the range guard's built head
(tests/_box_score_head.py, 128², 4 feeds): its float kept set's stability per jitter draw.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 python bench/det_reads.py /work/cache/detreads/rec /work/cache/detreads/rec2 --guard
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _levels(pkl: Path, ref: list, got: list, seen) -> str:
    import newmodels as nm
    import onnx
    from onnxptq.analysis.det_levels import detector_levels, level_maps
    from onnxptq.analysis.threshold_cells import ThresholdCells

    model = pkl.stem.rsplit(".", 1)[0]
    groups = detector_levels(onnx.load(str(nm.SRC / nm.MODELS[model][0]))) if model in nm.MODELS else []
    text = []
    for levels in groups:
        heat = ThresholdCells()
        for label, feeds in (("held-out", (ref, got)), ("with calibration", seen or ((), ()))):
            for r, g in zip(*feeds):
                for lv in levels:
                    heat.add(level_maps(r[lv.output], lv), level_maps(g[lv.output], lv))
            f1, decisions, _ = heat.judge(1)
            text.append(f"{label}: objects F1 {f1:.4f} of {decisions} decisions")
    return "; ".join(text)


def _nms(ref: list, got: list, seen, rows_of: dict) -> str:
    from onnxptq.analysis.det_nms import judge_detections

    text = []
    for name, rows in rows_of.items():
        a, b = [np.asarray(f[name]) for f in ref], [np.asarray(f[name]) for f in got]
        for label, (x, y) in (("held-out", (a, b)), ("with calibration", (a + [np.asarray(f[name]) for f in (seen or ((), ()))[0]],
                                                                             b + [np.asarray(f[name]) for f in (seen or ((), ()))[1]]))):
            d = judge_detections(x, y, rows, 1)
            text.append(f"{label}: " + ("none" if d is None else
                                        f"F1 {d.f1:.4f} of {d.float_count} ({d.lost} lost, {d.invented} invented), stable {d.stable:.4f}"))
    return "; ".join(text)


def _guard() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _box_score_head import box_score_head
    from onnxptq.analysis import det_nms
    from onnxptq.analysis.score_rows import detector_score_rows
    from onnxptq.sessions import open_session

    model = box_score_head(4, 2, 128)
    rows = detector_score_rows(model)["y"]
    session, rng = open_session(model), np.random.default_rng(2)
    ref = [session.run(None, {"x": rng.uniform(0, 1, (1, 4, 128, 128)).astype(np.float32)})[0] for _ in range(4)]
    pairs = [(det_nms._split(r, rows),) * 2 for r in ref]
    for seed in range(4):
        own = det_nms._counts([(a, det_nms._jittered(*a, np.random.default_rng(seed))) for a, _ in pairs], False,
                              det_nms.THRESHOLDS[:1])
        print(json.dumps({"head": "range guard 128²", "draw": seed, "stable": round(det_nms._f1(*own[:3]), 4),
                          "float_at_0.25": own[0], "lost": own[1], "invented": own[2]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--guard", action="store_true")
    a = ap.parse_args()
    for d in a.dirs:
        for pkl in sorted(Path(d).glob("*.pkl")):
            rec = pickle.loads(pkl.read_bytes())
            ref, got = rec["args"][0], rec["args"][1]
            seen = rec["kwargs"].get("seen")
            row = json.loads(pkl.with_suffix(".json").read_text())
            print(json.dumps({"record": pkl.stem, "task": row["agreement"], "task_floor": row["task_floor"],
                              "levels": _levels(pkl, ref, got, seen),
                              "nms": _nms(ref, got, seen, rec["kwargs"].get("score_rows") or {})}), flush=True)
    if a.guard:
        _guard()


if __name__ == "__main__":
    main()
