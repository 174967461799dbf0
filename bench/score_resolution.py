"""A score output read to a resolution the graph does not hold, told to the accuracy floor: one
bench/newmodels.py score model under one preset, defaults against ``QuantConfig.floor_output_agreement``
mapping the output to "every read value within RES of float's" (the package's reading), repair on
(what a user gets): the task metric on held-out feeds, the floor's verdict, nodes repair kept float
or stepped up, quantize CPU seconds; one process, the same feeds (issue 27, AECMOS MXFP8_E4M3:
bench/RESULTS.md "MXFP8 on detectors: …, branch mxfp8d").

    PYTHONPATH=src:.:bench OMP_NUM_THREADS=1 nice -n 5 python bench/score_resolution.py aecmos MXFP8_E4M3 12,48 96 --res 0.1 --values 2
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - the repository root (testkit/, bench/) on sys.path
import numpy as np

import newmodels as nm
from onnxptq import quantize
from onnxptq.config.presets import resolve_config
from testkit import zoo


def within(res: float, values: int):
    """The reader: the first ``values`` values of the output all within ``res`` of float's (1.0) or not (0.0)."""

    def agreement(ref: np.ndarray, got: np.ndarray) -> float:
        a, b = np.asarray(ref, np.float64).ravel()[:values], np.asarray(got, np.float64).ravel()[:values]
        return float(np.all(np.abs(a - b) <= res))

    return agreement


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("preset")
    ap.add_argument("calibs", help="calibration feed counts, comma-separated")
    ap.add_argument("held", type=int)
    ap.add_argument("--res", type=float, default=0.1, help="the resolution the output is read to")
    ap.add_argument("--values", type=int, default=2, help="how many leading values of the output are read")
    ap.add_argument("--output", default="output", help="the graph output read")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    path, feeds_fn, _, metric = nm.MODELS[args.model]
    held = feeds_fn(args.held, 1000)
    ref = nm._memo(zoo.session_runner(str(path)), held)
    told = {"floor_output_agreement": {args.output: within(args.res, args.values)}}
    for n_calib in (int(c) for c in args.calibs.split(",")):
        for label, changes in (("defaults", {}), (f"read to {args.res:g}", told)):
            with tempfile.TemporaryDirectory() as tmp:
                out = str(Path(tmp) / "q.onnx")
                t = time.process_time()
                r = quantize(str(path), resolve_config(args.preset).replace(**changes), data=list(feeds_fn(n_calib, 1)), output=out)
                cpu = time.process_time() - t
                test = nm._memo(zoo.session_runner(out), held)
                rep = r.repair or {}
                verdict = "none" if r.floor is None else ("holds" if r.floor.ok else "broken")
                print(f"{args.model} {args.preset} calib {n_calib} {label}: metric {metric(ref, test, held, None):.3f} "
                      f"floor {verdict} kept float {len(rep.get('kept_float') or [])} stepped up {len(rep.get('stepped_up') or [])} "
                      f"quantize CPU {cpu:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
