"""What judging a classifier's rows on as many calibration feeds as its bound needs would cost (issue 27, item 3).

A verdict on rows a sample (a batch-1 classifier) pools the held-out rows with the first calibration feeds'
(``calibrate.reads_feeds``: ``1 / (1 − top-1 floor)``, 34 at 0.97). Every row kept, 8 + 34 = 42 rows leave
the Wilson bound at 0.962, below 0.97: "could not confirm" even where the user gave 100 samples
(analysis/evidence.py). Confirming needs ``reads_to_confirm(1.0, floor)`` rows (54 at 0.97, 32 at 0.95).
The library keeps that count now (``Floor.reads_wanted``); this script quantizes on ``--samples`` samples
twice: as the library does, and with ``reads_feeds`` cut to ``Floor.needed`` (the rule before, a patch
here), and prints each run's CPU seconds and verdict state: the added CPU and the verdicts it confirms
(``--repair``: with repair on, whose candidates are judged on the same feeds).

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/floor_confirm_reads.py --models ppocr_cls_op10,ppocrv5_server_cls \
        --presets A8W8,A16W8,BF16 --samples 100
    # repair_uncertain=True against the defaults, the task metric on 32 other samples:
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/floor_confirm_reads.py --uncertain --models anr_fa_decoder,mp_face_short \
        --presets MXFP8_E4M3,A16W8 --samples 12 --held 32
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(models: list[str], presets: list[str], samples: int, repair: bool = False) -> list[dict]:
    import newmodels as nm
    import onnxptq
    from onnxptq.analysis.floor import floor_for
    from onnxptq.config.presets import get_preset
    from onnxptq.pipeline import calibrate

    library = calibrate.reads_feeds

    def judging(prepared, cfg):  # the rule before: as many as judge a verdict (Floor.needed), where the library keeps any
        return min(library(prepared, cfg), floor_for(cfg).needed)

    rows = []
    for name in models:
        rel, make, _, _ = nm.MODELS[name]
        data = list(make(samples, 1))
        for preset in presets:
            cfg = dataclasses.replace(get_preset(preset), repair=repair)
            for rule, fn in (("Floor.needed (before)", judging), ("Floor.reads_wanted (library)", library)):
                calibrate.reads_feeds = fn
                c0 = time.process_time()
                result = onnxptq.quantize(str(nm.SRC / rel), cfg, data=data)
                cpu = time.process_time() - c0
                v = result.floor
                checks = {n: (round(c.top1, 4) if c.top1 is not None else None, c.rows, c.seen_feeds) for n, c in v.outputs.items()
                          if c.top1 is not None}
                kept = {**(result.repair or {}).get("kept_float", {}), **(result.repair or {}).get("stepped_up", {})}
                row = {"model": name, "preset": preset, "rule": rule, "cpu_s": round(cpu, 2), "ok": v.ok, "repaired": len(kept),
                       "unconfirmed": v.unconfirmed, "unjudged": v.unjudged, "top1 (share, rows, calibration feeds)": checks}
                rows.append(row)
                print(json.dumps(row), flush=True)
    calibrate.reads_feeds = library
    return rows


def uncertain(models: list[str], presets: list[str], calib: int, held: int) -> list[dict]:
    """What ``repair_uncertain=True`` costs and buys: each (model, preset) quantized with the defaults and with
    it, on ``calib`` samples; the task metric (bench/newmodels.py) on ``held`` other samples, CPU seconds, the
    verdict state and the nodes repair kept float or stepped up."""
    import newmodels as nm
    import onnxptq
    from onnxptq.config.presets import get_preset
    from testkit import zoo

    rows = []
    for name in models:
        rel, make, metric_name, metric = nm.MODELS[name]
        path = nm.SRC / rel
        cal, hold = list(make(calib, 1)), make(held, 1000)
        ref = nm._memo(zoo.session_runner(path), hold)
        for preset in presets:
            for asked in (False, True):
                cfg = dataclasses.replace(get_preset(preset), repair_uncertain=asked)
                out = Path(f"/tmp/floor_confirm_{name}.{preset}.{int(asked)}.onnx")
                c0 = time.process_time()
                result = onnxptq.quantize(str(path), cfg, data=cal, output=str(out))
                cpu = time.process_time() - c0
                test = nm._memo(zoo.session_runner(out), hold)
                v = result.floor
                kept = {**(result.repair or {}).get("kept_float", {}), **(result.repair or {}).get("stepped_up", {})}
                row = {"model": name, "preset": preset, "repair_uncertain": asked, "cpu_s": round(cpu, 2),
                       "task": round(float(metric(ref, test, hold, None)), 4), "task_floor": nm.floor(preset), "metric": metric_name,
                       "ok": v.ok, "unconfirmed": v.unconfirmed, "unjudged": v.unjudged, "repaired": len(kept)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--presets", default="A8W8,A16W8")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--repair", action="store_true", help="repair on (its candidates judged on the same feeds)")
    ap.add_argument("--uncertain", action="store_true", help="compare the defaults with repair_uncertain=True (:func:`uncertain`)")
    ap.add_argument("--held", type=int, default=32, help="--uncertain: samples the task metric is taken on")
    a = ap.parse_args()
    if a.uncertain:
        uncertain(a.models.split(","), a.presets.split(","), a.samples, a.held)
    else:
        run(a.models.split(","), a.presets.split(","), a.samples, a.repair)


if __name__ == "__main__":
    main()
