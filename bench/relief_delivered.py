"""Delivered value-map models read as their user reads them and by the floor's relief cosine, on the bench's held-out feeds.

relief21 (issue 27): bench/newmodels.py's rows record the task metric and the first 300 characters of the floor's
warning; this reads what a repair delivered further. For one of bench/newmodels.py's models (terrain_unet: the
package's heights) and the delivered files a run wrote (``--files``), on the same held-out feeds (seed 1000): the task
metric, the pooled cosine and the relief cosine (analysis/relief.py) of each value-map output. With ``--quantize
PRESET,...`` it quantizes with the preset's defaults first (12 calibration feeds, seed 1, as bench/newmodels.py) and
prints the library's whole summary (the floor before and after repair, what repair stepped up).

    NEWMODELS8_SRC=/work/cache/newmodels8/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 python bench/relief_delivered.py \\
        terrain_unet --files /work/cache/relief21/terrain/out_a/terrain_unet.BFP16.onnx
    ... terrain_unet --quantize BFP16 --out /work/cache/relief21/terrain/summary
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import _common  # noqa: F401  (the repository root on sys.path)

import newmodels as nm
from onnxptq.analysis.relief import relief_cosine
from testkit import zoo


def _read(name: str, path: str, held: list, ref) -> str:
    """The task metric, pooled and relief cosine of every value-map output of ``path`` against float on ``held``."""
    _, _, metric_name, metric = nm.MODELS[name]
    test = nm._memo(zoo.session_runner(path), held)
    words = [f"{metric_name} {metric(ref, test, held, None):.4f}"]
    for i, r0 in enumerate(ref(held[0])):
        refs, gots = [np.asarray(ref(f)[i]) for f in held], [np.asarray(test(f)[i]) for f in held]
        found = relief_cosine(refs, gots)
        if found is None:
            continue
        x = np.concatenate([a.ravel() for a in refs]).astype(np.float64)
        y = np.concatenate([b.ravel() for b in gots]).astype(np.float64)
        words.append(f"output {i}: pooled cosine {x @ y / np.sqrt((x @ x) * (y @ y)):.5f}, relief cosine {found.cosine:.5f} "
                     f"over {found.maps} maps (worst {found.worst:.4f})")
    return "; ".join(words)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--files", nargs="*", default=[])
    ap.add_argument("--quantize", default="")
    ap.add_argument("--out", default="/tmp/relief_delivered")
    ap.add_argument("--held", type=int, default=8)
    ap.add_argument("--calib", type=int, default=12)
    args = ap.parse_args(argv)
    rel, make, _, _ = nm.MODELS[args.model]
    path = str(nm.SRC / rel)
    held = make(args.held, 1000)
    ref = nm._memo(zoo.session_runner(path), held)
    for f in args.files:
        print(f"{Path(f).name}: {_read(args.model, f, held, ref)}", flush=True)
    for preset in [p for p in args.quantize.split(",") if p]:
        import onnxptq

        Path(args.out).mkdir(parents=True, exist_ok=True)
        output = Path(args.out) / f"{args.model}.{preset}.onnx"
        c0 = time.process_time()
        result = onnxptq.quantize(path, preset, data=make(args.calib, 1), output=str(output))
        print(f"== {args.model} {preset}: quantize {time.process_time() - c0:.1f} CPU s\n{result.summary()}", flush=True)
        print(f"{output.name}: {_read(args.model, str(output), held, ref)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
