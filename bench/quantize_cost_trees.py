"""Quantize CPU seconds of one zoo model under two source trees (git archive of each into a folder), alternating fresh processes, 48 calibration feeds.

Usage: python bench/quantize_cost_trees.py MODEL PRESET[,PRESET] (trees: /work/cache/base7d, /work/cache/head5: edit ROOTS)."""
import json, subprocess, sys
model, presets = sys.argv[1], sys.argv[2].split(",")
code = r'''
import sys, time, json
sys.path[:0] = [ROOT + "/src", ROOT]
from testkit import zoo
from onnxptq.api import quantize
m = zoo.get(MODEL)
calib = m.make(m.root(), 48, zoo.CALIBRATION_SEED)
t = time.process_time()
r = quantize(str(m.path()), PRESET, data=calib)
print(json.dumps({"cpu": time.process_time() - t, "kept": len((r.repair or {}).get("kept_float") or []), "ok": r.floor.ok if r.floor else None,
                  "unjudged": r.floor.unjudged if r.floor is not None and hasattr(r.floor, "unjudged") else None}))
'''
for p in presets:
    for rnd in range(2):
        for root in ("/work/cache/base7d", "/work/cache/head5"):
            src = code.replace("ROOT", repr(root)).replace("MODEL", repr(model)).replace("PRESET", repr(p))
            out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, cwd=root)
            line = (out.stdout.strip().splitlines() or [out.stderr[-300:]])[-1]
            print(model, p, root.split("/")[-1], rnd, line, flush=True)
