"""Round 26's rows with repair off: what each preset does to the task before repair steps nodes up.

bench/newmodels.py judges the delivered file (repair on). DeepSort's embedder broke the floor under every preset but FP16
(output cosine 0.63-0.99 on the floor's 8 held-out feeds) and repair stepped 1-50 of its 99 nodes up; BlazeFace broke on
a keypoint field under four presets. This quantizes with ``repair=False`` (defaults otherwise, the bench's 40
calibration feeds, seed 1) and reads the bench's 48 held-out feeds (seed 1000) with the bench's own reading, beside
the output's cosine: whether repair was needed for the task, or was over-repair.

    NEWMODELS26_SRC=/work/cache/newmodels26/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/round26_norepair.py \
        --models dsr_embedder --presets A8W8,BFP16,MX9 --out /work/cache/newmodels26/norepair
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    import newmodels as nm
    import onnxptq
    from onnxptq.config.presets import resolve_config
    from testkit import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="dsr_embedder")
    ap.add_argument("--presets", default="A8W8,BFP16,MX9")
    ap.add_argument("--calib", type=int, default=40)
    ap.add_argument("--held", type=int, default=48)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for name in a.models.split(","):
        rel, make, metric_name, metric = nm.MODELS[name]
        calib, held = make(a.calib, 1), make(a.held, 1000)
        ref = nm._memo(zoo.session_runner(Path(rel)), held)
        for preset in a.presets.split(","):
            path = a.out / f"{name}.{preset}.norepair.onnx"
            t0 = time.process_time()
            onnxptq.quantize(rel, resolve_config(preset).replace(repair=False), data=list(calib), output=str(path))
            test = nm._memo(zoo.session_runner(path), held)
            row = {"model": name, "preset": preset, "repair": False, "cpu_s": round(time.process_time() - t0, 1),
                   "metric": metric_name, "agreement": round(float(metric(ref, test, held, None)), 4),
                   "cosine": round(float(zoo.output_cosine(ref, test, held)), 5)}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
