"""Which outputs of the outside models the floor reads as heat maps and as pictures, before and after
the picture reading (analysis/pictures.py) and the ground decided over all the feeds (maps.has_ground).

Float only: for each model of bench/newmodels.py, its float outputs on ``--feeds`` calibration feeds, and
for each output the floor's eligibility by structure (``floor.readings_of``: not a class, sigmoid,
softmax, selected, score-row, log or gated output), then:

* before: a heat map where every feed passes ``maps.heat_map_feed`` with its per-feed ground (main's rule);
* after: a heat map where ``maps.has_ground`` holds over the feeds pooled and every feed passes
  ``maps.heat_map_values``; a picture where ``pictures.picture_range`` gives a range.

An output whose reading is the same before and after is judged by the same code on the same figures,
so its verdict cannot change; the lines marked CHANGED are the ones to quantize and compare.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/picture_scan.py [--models a,b] [--feeds 4]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback

import numpy as np
import onnx

import bench.newmodels as nm
from onnxptq.analysis import maps, pictures
from onnxptq.analysis.floor import readings_of
from testkit import zoo


def _old_heat(ref: np.ndarray) -> bool:
    """main's per-feed rule: the values' range, no class-probability axis, and this feed's own ground."""
    return maps.heat_map_values(ref) and maps.has_ground([ref])


def _eligible(name: str, readings: dict) -> tuple[bool, bool]:
    """(heat-map candidate, picture candidate) by structure, as ``floor.measure`` decides them."""
    kind_known = name in readings["class_outputs"]
    others = {*readings["selected"], *readings["score_rows"], *readings["log_scales"], *readings["softmax_maps"]}
    heat = not kind_known and name not in readings["prob_maps"] and name not in others
    return heat, heat and name not in readings["spatial_gates"] and name not in readings["confidence_gates"]


def scan(name: str, count: int) -> list[str]:
    rel, make, _, _ = nm.MODELS[name]
    path = nm.SRC / rel
    model = onnx.load(str(path), load_external_data=False)
    readings = readings_of(model)
    outputs = [o.name for o in model.graph.output]
    run = zoo.session_runner(path)
    per_output: dict[str, list[np.ndarray]] = {o: [] for o in outputs}
    for feed in make(count, 1):  # the calibration seed bench/newmodels.py quantizes with
        for o, value in zip(outputs, run(feed)):
            per_output[o].append(np.asarray(value))
    lines = []
    for o, refs in per_output.items():
        floats = [r for r in refs if np.issubdtype(r.dtype, np.floating) and np.isfinite(r).all()]
        if not floats or floats[0].size < maps.MIN_POSITIONS:
            continue
        heat_ok, pic_ok = _eligible(o, readings)
        before = heat_ok and all(_old_heat(r) for r in floats)
        after = heat_ok and maps.has_ground(floats) and all(maps.heat_map_values(r) for r in floats)
        span = pictures.picture_range(floats) if pic_ok else None
        shares = [float(np.mean(r > r.min() + maps.LEVELS[0] * (r.max() - r.min()))) for r in floats]
        lo, hi = min(float(r.min()) for r in floats), max(float(r.max()) for r in floats)
        changed = before != after or span is not None
        lines.append(f"{name} {o!r} {list(floats[0].shape)} [{lo:.3g}, {hi:.3g}] above-low {min(shares):.2f}-{max(shares):.2f} "
                     f"heat {before}->{after} picture {span}" + ("  CHANGED" if changed else ""))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(nm.MODELS))
    ap.add_argument("--feeds", type=int, default=4)
    args = ap.parse_args()
    for name in args.models.split(","):
        t0 = time.process_time()
        try:
            for line in scan(name, args.feeds):
                print(line, flush=True)
            print(f"# {name}: {time.process_time() - t0:.1f} CPU s", flush=True)
        except Exception as exc:  # recorded, never fatal
            print(f"# {name} ERR {type(exc).__name__}: {str(exc)[:160]}", flush=True)
            traceback.print_exc(limit=2, file=sys.stderr)


if __name__ == "__main__":
    main()
