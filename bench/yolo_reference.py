"""YOLOv8n (nudenet 320n) under the reference tool's A8W8 recipe: box F1 vs float and the floor's word.

Why: with the reference recipe (MinMax, symmetric int8 activations, per-tensor weights:
testkit/reference.py) box F1 vs float is 0.87-0.85 without repair and 0.91-0.93 with it, under the
0.95 floor (bench/RESULTS.md, "Per-tensor integer presets, second round"). This prints, per run,
the box F1 on ``--held`` held-out images (seed 1000, bench/newmodels.py's builder and metric), the
quantize CPU s, and every WARNING the library logged (what the floor said to the user).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/yolo_reference.py --held 96 --repair both --out-dir /tmp/yref
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--held", type=int, default=96)
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--repair", choices=("on", "off", "both"), default="both")
    ap.add_argument("--out-dir", required=True)
    a = ap.parse_args()

    import newmodels as nm
    from testkit import zoo
    from testkit.log_capture import capture_warnings
    from testkit.reference import quantize_reference

    rel, make, metric_name, metric = nm.MODELS["nudenet"]
    path = nm.SRC / rel
    calib, held = make(a.calib, 1), make(a.held, 1000)
    ref = nm._memo(zoo.session_runner(path), held)
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    warnings = capture_warnings(600)
    for repair in ((True, False) if a.repair == "both" else (a.repair == "on",)):
        warnings.clear()
        output = out_dir / f"nudenet.reference_A8W8.repair_{'on' if repair else 'off'}.onnx"
        c0 = time.process_time()
        quantize_reference(path, output, calib, "A8W8", repair=repair)
        cpu = time.process_time() - c0
        test = nm._memo(zoo.session_runner(output), held)
        print(json.dumps({"run": f"reference A8W8, repair {'on' if repair else 'off'}", "metric": metric_name,
                          "agreement": round(float(metric(ref, test, held, None)), 4), "held": len(held), "calib": len(calib),
                          "quantize_cpu_s": round(cpu, 1), "warnings": list(warnings)}), flush=True)


if __name__ == "__main__":
    main()
