"""A detector's one-class score vector beside its box output (analysis/anchor_scores.py), judged on recorded outputs.

Why a script: the floor's judgement of BlazeFace's ``scores`` must be read beside the task metric on the very
outputs the pipeline judged. Reads the records of ``bench/floor_verdicts.py record`` (repair off) and prints,
per (model, preset), the task metric, this tree's verdict and its ``scores`` check (objects' F1, decisions, the
calibration feeds pooled, the cosine of the anchors that matter), and, for the threshold a reader sets
(``--at``, the package's 0.7), the anchors' objects lost/invented at that one threshold on the same feeds.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/anchor_scores.py /work/cache/facescores/rec
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("records", nargs="+")
    ap.add_argument("--at", type=float, default=0.7)
    a = ap.parse_args()
    import floor_verdicts as fv
    from onnxptq.analysis.anchor_scores import anchor_probabilities
    from onnxptq.analysis.floor import measure
    from onnxptq.analysis.maps import region_counts

    for out_dir in map(Path, a.records):
        for pkl in sorted(out_dir.glob("*.pkl")):
            rec = pickle.loads(pkl.read_bytes())
            row = json.loads(pkl.with_suffix(".json").read_text())
            args, kwargs = rec["args"], dict(rec["kwargs"])
            seen = kwargs.pop("seen", None)
            kwargs.update(fv._newer_readings(pkl, kwargs, {"anchor_scores"}))
            found = kwargs.get("anchor_scores") or {}
            c0 = time.process_time()
            verdict = measure(*args, **kwargs)
            if seen is not None and verdict.wants_calibration_feeds:
                verdict = measure(*args, seen=seen, **kwargs)
            cpu = time.process_time() - c0
            text = []
            for name, info in found.items():
                check = verdict.outputs.get(name)
                if check is None or check.thresholded is None:
                    continue
                decisions, f1, bound = check.thresholded
                # the one threshold the package sets, on the held-out and calibration feeds the floor saw
                pairs = list(zip(args[0], args[1])) + (list(zip(*seen)) if seen else [])
                objs = lost = inv = 0
                for ref, got in pairs:
                    boxes = next(s for s in info.siblings if np.asarray(ref[s]).ndim == 3)
                    r = anchor_probabilities(ref[name], ref[boxes], info.logits)
                    g = anchor_probabilities(got[name], ref[boxes], info.logits, check=False)
                    o, l, i = region_counts(r[:, 0] >= a.at, g[:, 0] >= a.at, min_region=1, iou=0.0)
                    objs, lost, inv = objs + o, lost + l, inv + i
                text.append(f"{name}: F1 {f1 if f1 is None else round(f1, 4)} of {decisions} decisions "
                            f"(bound {bound:.4f}, calib feeds {check.seen_feeds}, unjudged {check.top1_unjudged}), "
                            f"cosine {check.cosine:.4f}; at {a.at}: {objs} objects, {lost} lost, {inv} invented")
            print(f"{row['model']} {row['preset']}: task {row['agreement']:.3f} (floor {row['task_floor']}), "
                  f"verdict {'ok' if verdict.ok else 'BROKEN'}{' (unjudged ' + ','.join(verdict.unjudged) + ')' if verdict.unjudged else ''}, "
                  f"{cpu:.2f} CPU s; " + "; ".join(text))


if __name__ == "__main__":
    main()
