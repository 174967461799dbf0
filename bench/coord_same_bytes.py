"""sha256 of bench models quantized with repair off (the plan's own bytes), for a before/after comparison; and the
coordinate rule's decisions in the plan (guard rule 'coordinates')."""
import sys, hashlib, dataclasses, onnx
sys.path[:0] = ["bench", "."]
import newmodels as nm
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
for key in sys.argv[1].split(","):
    path, feeds_of = nm.MODELS[key][0], nm.MODELS[key][1]
    for preset in sys.argv[2].split(","):
        r = quantize(path, dataclasses.replace(resolve_config(preset), repair=False), data=feeds_of(8, 1))
        coords = sorted(n for n, g in r.plan.guard.items() if g.get("rule") == "coordinates")
        print(key, preset, hashlib.sha256(r.model.SerializeToString()).hexdigest()[:16], coords, flush=True)
