"""tinyocr_rec (PP-OCRv6 rec tiny, round 19) under a preset with repair off: the lines whose CTC string changes, the
float probability margin at the steps that flip, and the quantized top two there. Usage: PRESET N_HELD."""
import sys, dataclasses, numpy as np, onnxruntime as ort, onnx
sys.path[:0] = ["bench", "."]
import newmodels as nm
from testkit import zoo
from onnxptq.api import quantize
from onnxptq.config.presets import resolve_config
path = "/work/cache/newmodels/src/tinyocr/assets/PP-OCRv6_rec_tiny.onnx"
model = onnx.load(path)
cal, held = nm.tinyocr_rec_feeds(12, 1), nm.tinyocr_rec_feeds(int(sys.argv[2]), 2)
s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
cfg = dataclasses.replace(resolve_config(sys.argv[1]), repair=False)
r = quantize(model, cfg, data=cal)
q = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"])
flips = 0
allm = []
for i, f in enumerate(held):
    a, b = s.run(None, f)[0][0], q.run(None, f)[0][0]
    top = np.sort(a, -1)[:, -2:]
    marg = top[:, 1] - top[:, 0]
    allm.append(marg)
    if zoo._ctc_indices(a[:, None]) != zoo._ctc_indices(b[:, None]):
        flips += 1
        d = np.nonzero(a.argmax(-1) != b.argmax(-1))[0]
        print("line", i, "steps differing", d.tolist(), "float prob margins there", np.round(marg[d], 4).tolist(), "q top", np.round(np.sort(b[d], -1)[:, -2:], 4).tolist())
m = np.concatenate(allm)
print("flips", flips, "median float margin", np.median(m), "share of steps with margin < 0.05", (m < 0.05).mean())
