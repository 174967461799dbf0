"""graph/passes/half_storage on a model: what restoring float16 storage changes, side by side.

Quantizes MODEL (a bench/newmodels.py key or a testkit zoo name) under each preset with defaults
twice in one process: with the restore and with it replaced by a no-op. Prints how many weights
were restored, the file size over the input's both ways, and whether the held-out outputs are
bit-identical (they must be: float16 -> float32 is exact).

    NEWMODELS7_SRC=/work/cache/newmodels7/src PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 \\
        python bench/half_storage_noop.py slovorez BF16,FP16,A16W8,A8W8,BFP16,MX9,MXINT8,MXFP8_E4M3
    python bench/half_storage_noop.py --scan   # which bench, zoo and shared models hold float16-stored tensors
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile

import numpy as np

import newmodels as nm  # bench/newmodels.py
from testkit import zoo as tz


def scan() -> None:
    """Every bench/newmodels.py model, zoo model and /work/shared/models file: how many tensors
    the source stores as float16 (only those models can change)."""
    import glob

    import onnx

    from onnxptq.graph.passes.half_storage import half_stored_names

    paths = {k: str(nm.SRC / v[0]) for k, v in nm.MODELS.items()}
    paths.update({os.path.basename(p): p for p in glob.glob("/work/shared/models/*.onnx")})
    paths.update({f"zoo:{m.name}": str(m.path()) for m in tz.ZOO})
    for key, path in sorted(paths.items()):
        names = half_stored_names(onnx.load(path, load_external_data=False))
        print(f"{key}: {len(names)} float16-stored tensor(s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("presets", nargs="?")
    ap.add_argument("--scan", action="store_true")
    a = ap.parse_args()
    if a.scan:
        scan()
        return
    import onnxptq
    from onnxptq.pipeline import complete

    logging.basicConfig(level=logging.ERROR)
    if a.model in nm.MODELS:
        rel, make, *_ = nm.MODELS[a.model]
        path, calib, held = str(nm.SRC / rel), make(12, 1), make(8, 1000)
    else:
        m = tz.BY_NAME[a.model]
        path, calib, held = str(m.path()), m.samples("calibration")[:12], m.samples("heldout")[:8]
    real, count = complete.restore_half_storage, {"n": 0}

    def counting(model, names):
        count["n"] = real(model, names)
        return count["n"]

    src = os.path.getsize(path)
    try:
        for preset in a.presets.split(","):
            outs, sizes = [], []
            for restore in (counting, lambda model, names: 0):
                complete.restore_half_storage = restore
                with tempfile.TemporaryDirectory() as d:
                    out = os.path.join(d, "q.onnx")
                    onnxptq.quantize(path, preset, data=list(calib), output=out)
                    sizes.append(os.path.getsize(out) / src)
                    run = tz.session_runner(out)
                    outs.append([run(f) for f in held])
            same = all(np.array_equal(x, y) for fa, fb in zip(*outs) for x, y in zip(fa, fb))
            print(f"{a.model} {preset}: restored {count['n']}, size x {sizes[0]:.3f} (without: {sizes[1]:.3f}), "
                  f"outputs bit-identical: {same}", flush=True)
    finally:
        complete.restore_half_storage = real


if __name__ == "__main__":
    main()
