"""testkit's GridSample grid head (testkit/grid_head.py) under every preset: the grid points' mean move in pixels of the
1024 px picture the head samples, the grid's plan format and the floor's verdict on it.

Runs against whichever ``onnxptq`` is first on PYTHONPATH (a tree without the coordinate rule reads "before"):

    PYTHONPATH=<tree>/src:. OMP_NUM_THREADS=1 nice python bench/coord_grid_head.py --json OUT.json

The floor judges 4 held-out pictures (the library's default held out of 12); the moves are measured on 32 fresh ones.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import onnxruntime as ort

from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
from testkit.grid_head import grid_head, photos

PRESETS = "A8W8,A16W8,BF16,FP16,BFP16,MX9,MXINT8,MXFP8_E4M3"
PIXEL = 2.0 / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    model = grid_head()
    fresh = photos(32, seed=11)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = [ref.run(["grid"], f)[0] for f in fresh]
    rows = []
    for preset in a.presets.split(","):
        t0 = time.process_time()
        result = quantize(model, preset, data=photos(12))
        cpu = time.process_time() - t0
        got = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
        moves = np.array([np.linalg.norm(w - got.run(["grid"], f)[0], axis=1).mean() for w, f in zip(want, fresh)]) / PIXEL
        check = result.floor.outputs.get("grid") if result.floor is not None else None
        grid = result.plan.tensors.get("grid")
        rows.append({"preset": preset, "grid_format": grid.quant.format if grid is not None else "float",
                     "mean_move_px": round(float(np.median(moves)), 3), "max_move_px": round(float(moves.max()), 3),
                     "within_1px": round(float((moves <= 1).mean()), 3),
                     "floor_ok": bool(result.floor.ok) if result.floor is not None else None,
                     "grid_check": check.describe() if check is not None else None,
                     "kept_float": len(result.plan.repair.get("kept_float", {})),
                     "stepped_up": len(result.plan.repair.get("stepped_up", {})), "quantize_cpu_s": round(cpu, 2)})
        print(json.dumps(rows[-1]))
    with open(a.json, "w") as fh:
        json.dump(rows, fh, indent=1)
    print("| preset | grid format | median mean move px | max px | samples within 1 px | floor | repair: kept float / stepped |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['preset']} | {r['grid_format']} | {r['mean_move_px']} | {r['max_move_px']} | {r['within_1px']} | "
              f"{'holds' if r['floor_ok'] else 'broken'} | "
              f"{r['kept_float']} / {r['stepped_up']} |")


if __name__ == "__main__":
    main()
