"""What a bench/newmodels.py model keeps under a preset with the accuracy floor's repair off.

Where the floor breaks and repair keeps (nearly) every node float, the delivered model is the float
one and bench/newmodels.py's agreement reads 1.0; this says what the quantized model itself would
have kept, on the same held-out feeds (seed 1000) and calibration feeds (seed 1): the task metric,
the output cosine, and for the imitator taggers the share of sentences whose tags all equal
float's (the read the floor judges).

    NEWMODELS7_SRC=/work/cache/newmodels7/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/newmodels_norepair.py sudachi_pos BF16,A8W8,MX9 --out-dir /work/cache/newmodels7/norepair
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from pathlib import Path

import numpy as np

import newmodels as nm  # bench/newmodels.py (run from bench/ or with bench on sys.path)
from testkit import zoo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    ap.add_argument("--calib", type=int, default=12)
    ap.add_argument("--held", type=int, default=32)
    ap.add_argument("--out-dir", type=Path, default=Path("/work/cache/newmodels7/norepair"))
    a = ap.parse_args()
    import onnxptq
    from onnxptq.config.presets import get_preset

    logging.basicConfig(level=logging.ERROR)
    rel, make, metric_name, metric = nm.MODELS[a.model]
    path = nm.SRC / rel
    calib, held = make(a.calib, 1), make(a.held, 1000)
    ref = nm._memo(zoo.session_runner(path), held)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for preset in a.presets.split(","):
        out = a.out_dir / f"{a.model}.{preset}.norepair.onnx"
        c0 = time.process_time()
        onnxptq.quantize(str(path), dataclasses.replace(get_preset(preset), repair=False), data=list(calib), output=str(out))
        test = nm._memo(zoo.session_runner(out), held)
        extra = ""
        if "onnx::Unsqueeze_1" in held[0]:  # the imitator taggers: whole sentences
            live = [f["onnx::Unsqueeze_1"][0] > 0 for f in held]
            exact = np.mean([np.array_equal(ref(f)[0][0][m], test(f)[0][0][m]) for f, m in zip(held, live)])
            extra = f", sentences exact {exact:.3f}"
        print(f"{a.model} {preset} repair off: {metric_name} {metric(ref, test, held, None):.4f}{extra}, "
              f"cosine {zoo.output_cosine(ref, test, held):.5f} ({time.process_time() - c0:.1f} CPU s)", flush=True)


if __name__ == "__main__":
    main()
