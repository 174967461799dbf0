"""Does the delivered file depend on the machine's load? (issue 27 item 2; repair's stopping rule)

``python bench/repair_determinism.py MODEL PRESET TREE [--feeds N] [--busy K] [--clock R]`` quantizes MODEL (a zoo
name, testkit/zoo.py: its package's feeds, the zoo's calibration seed; or ``sbcls``: PP-OCR cls on same_bytes' 32
rendered lines) with PRESET at its defaults (floor and repair on), once, in a fresh process on TREE's ``src/``, and
prints one JSON line: the file's sha256 (16 hex digits), the repair record's builds, ``capped``, the kept/stepped
set (its size and a hash of the sorted names), the budget fields, the call's CPU s and the load average.

* ``--busy K``: K busy-loop processes run beside the quantization (the load a shared machine puts on it; on a
  2-core machine with SMT, CPU seconds of the same work move 20-50 % with it);
* ``--clock R``: ``time.process_time`` and ``time.perf_counter`` in the child run R times as fast (a machine R times
  slower, or a loaded one, as far as any clock-based rule can tell), the whole quantization included.

Two runs whose files differ under different ``--busy``/``--clock`` show a stopping rule that depends on the load.

    PYTHONPATH=src:.:bench python bench/repair_determinism.py ddddocr_det A8W8 /work/wt/determ21 --feeds 32 --clock 1.6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r'''
import dataclasses, hashlib, json, logging, os, sys, tempfile, time
sys.path[:0] = [{root!r} + "/src", {bench!r}, {repo!r}]
rate = {clock!r}
if rate != 1.0:  # every clock of the process runs ``rate`` times as fast, from now on
    pt, pc = time.process_time, time.perf_counter
    pt0, pc0 = pt(), pc()
    time.process_time = lambda: pt0 + (pt() - pt0) * rate
    time.perf_counter = lambda: pc0 + (pc() - pc0) * rate
import onnxptq
assert onnxptq.__file__.startswith({root!r}), onnxptq.__file__
from onnxptq import quantize
from onnxptq.config.presets import get_preset
logging.disable(logging.WARNING)
model, n = {model!r}, {feeds}
if model == "sbcls":
    from testkit import ocr
    from testkit.models import model_path
    calib, _ = ocr.render_cls(32, seed=1)
    path, data = str(model_path("cls")), [{{"x": calib[i:i + 1]}} for i in range(len(calib))]
else:
    from testkit import zoo
    member = [z for z in zoo.ZOO if z.name == model][0]
    path, data = str(member.path()), member.make(member.root(), n, zoo.CALIBRATION_SEED)
out = os.path.join(tempfile.mkdtemp(prefix="determ_"), "q.onnx")
cfg = get_preset({preset!r})
cfg = cfg.replace(calibration=dataclasses.replace(cfg.calibration, progress=False))
t = time.process_time()
result = quantize(path, cfg, data, out)
cpu = time.process_time() - t
rep = result.repair or {{}}
held = sorted(rep.get("stepped_up") or {{}}) + sorted(rep.get("kept_float") or {{}})
print(json.dumps({{"model": model, "preset": {preset!r}, "clock": rate, "sha": hashlib.sha256(open(out, "rb").read()).hexdigest()[:16],
                  "evaluations": rep.get("evaluations"), "capped": rep.get("capped"), "held": len(held),
                  "held_hash": hashlib.sha256("\n".join(held).encode()).hexdigest()[:12],
                  "budget": {{k: rep.get(k) for k in ("budget_units", "budget_units", "build_units", "plain_units",
                                                     "spent_units") if k in rep}},
                  "cpu": round(cpu / rate, 2), "plain_cpu": round(rep.get("plain_cpu_seconds", 0) / rate, 2),
                  "repair_cpu": round(rep.get("cpu_seconds", 0) / rate, 2), "note": rep.get("note"),
                  "load": round(os.getloadavg()[0], 1)}}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("preset")
    ap.add_argument("tree")
    ap.add_argument("--feeds", type=int, default=32)
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--clock", type=float, default=1.0)
    args = ap.parse_args()
    root = os.path.abspath(args.tree)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        code = CHILD.format(root=root, bench=HERE, repo=os.path.dirname(HERE), model=args.model, preset=args.preset,
                            feeds=args.feeds, clock=args.clock)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        started = time.time()
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr[-4000:])
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row.update(busy=args.busy, wall=round(time.time() - started, 1), tree=root)
        print(json.dumps(row), flush=True)
    finally:
        _stop(busy)


def _stop(procs: list[subprocess.Popen]) -> None:
    """End the busy loops this script started (by their own handles, nothing else)."""
    for proc in procs:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
