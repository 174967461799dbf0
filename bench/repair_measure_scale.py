"""Repair's margins measure against the reads a candidate really loses (issue 27 item 2, branch repair16).

Where the floor cannot decide an output's reads, repair compares candidates by their margins
(``algorithms/repair_measure.py``): the expected share of reads lost. This script asks whether that figure is
right: the graph's input-side prefixes stepped to the ladder's first rung (``repair=False``: the delivered bytes
of such a kept set, as ``bench/repair_prefixes.py --fresh`` builds them), each run on the calibration feeds (what
repair judges on: its held-out and calibration feeds, all of them calibration feeds here) and on N fresh feeds
(seed 3000); per prefix, the share of fresh reads whose arg-max moved, and the measure read both ways: in
absolute units (main's, ``_logits`` forced False) and in each read's spread (the branch's), on the calibration
feeds and on the fresh ones. One output, read as classes on its last axis.

    NEWMODELS24_SRC=/work/cache/newmodels24/src PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python \\
        bench/repair_measure_scale.py iqc_effnet_b3 --preset A8W8 --lengths 0,48,96,150,207,385 --calib 40 --fresh 240
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import newmodels  # noqa: E402  (the outside models, their feeds)
from testkit import zoo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--lengths", required=True, help="prefix lengths, comma separated (0: the plain build)")
    ap.add_argument("--calib", type=int, default=40)
    ap.add_argument("--fresh", type=int, default=240)
    ap.add_argument("--out-dir", default="/tmp/repair_measure_scale")
    args = ap.parse_args()

    import onnxptq
    from onnxptq.algorithms import repair_measure
    from onnxptq.algorithms.step_up import ladder, stepped_config
    from onnxptq.analysis.floor import floor_for
    from onnxptq.config.presets import resolve_config

    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rel, make, _, _ = newmodels.MODELS[args.model]
    path = str(newmodels.SRC / rel)
    calib, fresh = list(make(args.calib, 1)), list(make(args.fresh, 3000))
    cfg = resolve_config(args.preset).replace(repair=False)
    floor = floor_for(cfg)
    plain_path = out_dir / f"{args.model}.{args.preset}.plain.onnx"
    plain = onnxptq.quantize(path, cfg, data=calib, output=str(plain_path))
    candidates, rung = list(plain.plan.nodes), ladder(plain.plan)[0]
    ref = zoo.session_runner(path)
    r_calib, r_fresh = [ref(f)[0] for f in calib], [ref(f)[0] for f in fresh]
    scaled = repair_measure._logits

    def measured(refs: list[np.ndarray], gots: list[np.ndarray], absolute: bool) -> float:
        repair_measure._logits = (lambda pairs: False) if absolute else scaled
        try:
            m = repair_measure.measure_outputs(["o"], [{"o": r} for r in refs], [{"o": g} for g in gots], floor)["o"]
        finally:
            repair_measure._logits = scaled
        return m.mean

    print(f"{args.model} {args.preset}: {len(candidates)} candidates, rung {rung.describe()}, floor {floor.describe()}")
    print("| prefix | fresh reads lost | absolute, calibration feeds | absolute, fresh | spread, calibration feeds | spread, fresh |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k in (int(v) for v in args.lengths.split(",")):
        out = plain_path if k == 0 else out_dir / f"{args.model}.{args.preset}.p{k}.onnx"
        if k:
            onnxptq.quantize(path, stepped_config(cfg, plain.plan, rung, candidates[:k]), data=calib, output=str(out))
        q = zoo.session_runner(str(out))
        g_calib, g_fresh = [q(f)[0] for f in calib], [q(f)[0] for f in fresh]
        lost = float(np.mean([np.argmax(r) != np.argmax(g) for r, g in zip(r_fresh, g_fresh)]))
        row = [measured(r_calib, g_calib, True), measured(r_fresh, g_fresh, True),
               measured(r_calib, g_calib, False), measured(r_fresh, g_fresh, False)]
        print(f"| {k or 'plain'} | {lost:.4f} | " + " | ".join(f"{v:.4f}" for v in row) + " |", flush=True)


if __name__ == "__main__":
    main()
